package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// One JSON style for every command: snake_case keys (the types' tags), [] for
// an empty list rather than null, durations in seconds, and no zero timestamps
// (omitzero on the types). writeJSON indents one document; writeJSONLine writes
// one compact object per line (NDJSON) for streams such as --wait --json.

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(emptyLists(v))
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(emptyLists(v))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// emptyLists returns a copy of v in which every nil slice reachable through
// structs, pointers and slices is an empty one, so it encodes as [].
func emptyLists(v any) any {
	if v == nil {
		return v
	}
	cp := reflect.New(reflect.TypeOf(v)).Elem()
	cp.Set(reflect.ValueOf(v))
	fillSlices(cp)
	return cp.Interface()
}

func fillSlices(v reflect.Value) {
	switch v.Kind() {
	case reflect.Slice:
		if v.IsNil() {
			if v.CanSet() && v.Type().Elem().Kind() != reflect.Uint8 { // []byte encodes as a string
				v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			}
			return
		}
		// Copy before filling: the caller's slice must not change.
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := 0; i < c.Len(); i++ {
			fillSlices(c.Index(i))
		}
		if v.CanSet() {
			v.Set(c)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				fillSlices(f)
			}
		}
	case reflect.Pointer:
		if !v.IsNil() && v.CanSet() {
			c := reflect.New(v.Type().Elem())
			c.Elem().Set(v.Elem())
			fillSlices(c.Elem())
			v.Set(c)
		}
	}
}

// cell makes text fit one table cell on one line: line breaks, tabs and other
// control characters are shown escaped (\n, \t, \x1b), and the result is cut
// to n characters with an ellipsis (n <= 0: no cut).
func cell(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	out := b.String()
	if r := []rune(out); n > 0 && len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return out
}

// tableTime is how tables show a time: the date too, in local time.
func tableTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

// writeList prints rows as JSON (asJSON) or as a table: the header (columns
// separated by tabs), then line's text for each row.
func writeList[T any](w io.Writer, asJSON bool, rows []T, header string, line func(r T) string) error {
	if asJSON {
		return writeJSON(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, line(r))
	}
	return tw.Flush()
}
