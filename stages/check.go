package stages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// CheckText refuses text no dialect stores faithfully: a NUL byte (SQLite's
// C API ends the text there and PostgreSQL rejects it) and invalid UTF-8
// (PostgreSQL refuses it or, through some drivers, replaces it).
func CheckText(field, s string) error {
	if i := bytes.IndexByte([]byte(s), 0); i >= 0 {
		return fmt.Errorf("%s contains a NUL byte (\\x00) at byte %d", field, i)
	}
	if !utf8.ValidString(s) {
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n <= 1 {
				return fmt.Errorf("%s is not valid UTF-8 (byte %d is 0x%02x)", field, i, s[i])
			}
			i += n
		}
	}
	return nil
}

// CheckInt32 refuses a whole number outside the 32-bit range every dialect's
// int columns hold, for a field that takes any of them (a priority; others
// take CheckRange).
func CheckInt32(field string, v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return fmt.Errorf("%s %d is out of range: it must fit in 32 bits (%d to %d)", field, v, math.MinInt32, math.MaxInt32)
	}
	return nil
}

// CheckRange refuses a whole number outside lo..hi, the range a field takes
// (within the 32 bits every dialect's int columns hold), naming that range
// rather than the columns' own: an order is never negative.
func CheckRange(field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s %d is out of range: it must be a whole number from %d to %d", field, v, lo, hi)
	}
	return nil
}

// wholeNumberKeys are the plan fields that take a whole number (at any depth:
// a schedule file's plan is one level down).
var wholeNumberKeys = map[string]bool{
	"order": true, "max_attempts": true, "priority": true, "weight": true, "max_parallel": true,
}

// zeroRefusedKeys are the plan fields whose Go zero value stands for "not
// set" (the default) though 0 is no valid value, with the rule 0 breaks:
// written in a file, a 0 would become the default without a word, so it is
// refused, as --max-attempts 0 is. (Left out, the field still means the
// default.)
var zeroRefusedKeys = map[string]string{"max_attempts": "must be >= 1"}

// checkYAMLNumbers refuses a fraction where a plan wants a whole number (YAML
// decoding would silently truncate order: 1.5 to 1; JSON refuses it), and a
// 0 written for one of zeroRefusedKeys.
func checkYAMLNumbers(src []byte) error {
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return err
	}
	var walk func(n *yaml.Node) error
	walk = func(n *yaml.Node) error {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if v.Kind != yaml.ScalarNode {
					continue
				}
				if wholeNumberKeys[k.Value] && v.ShortTag() == "!!float" {
					return fmt.Errorf("line %d: %s must be a whole number, got %s", v.Line, k.Value, v.Value)
				}
				if rule, ok := zeroRefusedKeys[k.Value]; ok && v.ShortTag() == "!!int" {
					var got int64
					if v.Decode(&got) == nil && got == 0 {
						return fmt.Errorf("line %d: %s %s, got %s", v.Line, k.Value, rule, v.Value)
					}
				}
			}
		}
		for _, c := range n.Content {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(&root)
}

// zeroRuleFold finds k among zeroRefusedKeys as encoding/json matches field
// names: without regard to case ("Max_Attempts" fills MaxAttempts too).
func zeroRuleFold(k string) (string, bool) {
	for key, rule := range zeroRefusedKeys {
		if strings.EqualFold(k, key) {
			return rule, true
		}
	}
	return "", false
}

// checkJSONZeros refuses a 0 written for one of zeroRefusedKeys in a JSON
// file (already decoded once: src is one valid object), naming the field by
// its path.
func checkJSONZeros(src []byte) error {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return err
	}
	var walk func(path string, v any) error
	walk = func(path string, v any) error {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				at := k
				if path != "" {
					at = path + "." + k
				}
				if rule, ok := zeroRuleFold(k); ok {
					if n, ok := v[k].(json.Number); ok {
						if i, err := n.Int64(); err == nil && i == 0 {
							return fmt.Errorf("%s %s, got %s", at, rule, n)
						}
					}
				}
				if err := walk(at, v[k]); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range v {
				if err := walk(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk("", root)
}

// checkUTF8 refuses a file that is not valid UTF-8: encoding/json would
// replace the bad bytes with U+FFFD and a task would run other text.
func checkUTF8(src []byte) error {
	if utf8.Valid(src) {
		return nil
	}
	line := 1
	for i := 0; i < len(src); {
		r, n := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && n <= 1 {
			return fmt.Errorf("line %d: the file is not valid UTF-8 (byte 0x%02x)", line, src[i])
		}
		if r == '\n' {
			line++
		}
		i += n
	}
	return nil
}
