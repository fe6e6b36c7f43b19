package stages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FileFormat is the format a file's extension names: "json" for .json,
// "yaml" for .yaml and .yml.
func FileFormat(name string) (string, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return "json", nil
	case ".yaml", ".yml":
		return "yaml", nil
	}
	return "", fmt.Errorf("%s: the file name must end in .yaml, .yml or .json", name)
}

// Decode reads src, the whole of a file in format "yaml" or "json", into v as
// every file stageq reads is read: plan files, and schedule files, which hold
// a plan. It refuses invalid UTF-8 (encoding/json would replace the bad bytes
// with U+FFFD and a task would run other text), unknown fields, an empty file,
// anything after the first JSON object or YAML document (each file holds one
// of what), a 0 written where 0 would silently mean the default
// (max_attempts), and, in YAML, fractions where a whole number is wanted
// (which the decoder would truncate). what names the file's content in its messages
// ("plan", "schedule"); its errors wrap no sentinel, so that each caller wraps
// its own (ErrInvalidPlan, ErrInvalidSchedule).
func Decode(src []byte, format, what string, v any) error {
	if err := checkUTF8(src); err != nil {
		return err
	}
	switch format {
	case "json":
		return decodeJSON(src, what, v)
	case "yaml":
		return decodeYAML(src, what, v)
	}
	return fmt.Errorf("unknown format %q (yaml or json)", format)
}

// decodeJSON refuses unknown fields, anything after the object, and a 0 that
// would mean the default.
func decodeJSON(src []byte, what string, v any) error {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Only the end of the input may follow (dec.More would let a stray
	// closing brace or bracket through).
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the %s object: give one %s per file", what, what)
	}
	return checkJSONZeros(src)
}

// decodeYAML refuses unknown fields, an empty file, a second document,
// fractions where a whole number is wanted, and a 0 that would mean the
// default.
func decodeYAML(src []byte, what string, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the file is empty")
		}
		return err
	}
	if err := checkYAMLOneDocument(dec, what); err != nil {
		return err
	}
	return checkYAMLNumbers(src)
}

// checkYAMLOneDocument refuses a document after the first (after a ---): the
// decoder reads one, and what the others hold would be dropped without a
// word. An empty document (nothing, or only comments, after a trailing ---)
// drops nothing and is let through.
func checkYAMLOneDocument(dec *yaml.Decoder, what string) error {
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		case !emptyYAMLDocument(&doc):
			return fmt.Errorf("line %d: a second YAML document: give one %s per file", doc.Line, what)
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
