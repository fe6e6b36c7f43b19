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
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the plan object", ErrInvalidPlan)
	}
	return nil
}

// decodeYAML refuses unknown fields, an empty file, and fractions where a
// whole number is wanted (which the decoder would truncate).
func decodeYAML(src []byte, p *Plan) error {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(p); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: the file is empty", ErrInvalidPlan)
		}
		return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
	}
	return checkYAMLWholeNumbers(src)
}
