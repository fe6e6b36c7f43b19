package stages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// decoders turn a plan file's source, read whole and checked to be UTF-8, into
// a plan, one per format Parse takes.
var decoders = map[string]func(src []byte, p *Plan) error{"json": decodeJSON, "yaml": decodeYAML}

// decodeJSON refuses unknown fields and anything after the plan object.
func decodeJSON(src []byte, p *Plan) error {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
	}
	// Only the end of the input may follow (dec.More would let a stray
	// closing brace or bracket through).
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: trailing data after the plan object: give one plan per file", ErrInvalidPlan)
	}
	return nil
}

// decodeYAML refuses unknown fields, an empty file, a second document, and
// fractions where a whole number is wanted (which the decoder would truncate).
func decodeYAML(src []byte, p *Plan) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(p); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: the file is empty", ErrInvalidPlan)
		}
		return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
	}
	if err := checkYAMLOneDocument(dec); err != nil {
		return err
	}
	return checkYAMLWholeNumbers(src)
}

// checkYAMLOneDocument refuses a document after the first (after a ---): the
// decoder reads one, and the plans of the others would be dropped without a
// word. An empty document (nothing, or only comments, after a trailing ---)
// drops nothing and is let through.
func checkYAMLOneDocument(dec *yaml.Decoder) error {
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
		case !emptyYAMLDocument(&doc):
			return fmt.Errorf("%w: line %d: a second YAML document: give one plan per file", ErrInvalidPlan, doc.Line)
		}
	}
}

// emptyYAMLDocument is a document holding nothing: no node but an empty null.
func emptyYAMLDocument(doc *yaml.Node) bool {
	for _, n := range doc.Content {
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!null" || n.Value != "" {
			return false
		}
	}
	return true
}
