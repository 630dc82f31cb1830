package textsafe

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting CleanJSON walks (encoding/json itself
// refuses documents nested deeper than 10000).
const maxJSONDepth = 10000

// CleanJSON returns the JSON document b with every string in it, object
// keys included, passed through Clean (no cap): whether the unsafe rune is
// raw or written as a \u escape, it is dropped, and invalid UTF-8 becomes
// U+FFFD. Numbers are kept as written and the result is valid JSON. When
// nothing needs cleaning b itself is returned, byte for byte; otherwise the
// document is encoded again (compact, object keys sorted, no HTML
// escaping). Keys that become equal once cleaned keep the value of the
// first in sorted order of the original keys, so the result does not
// depend on map order. The document is decoded only when a non-ASCII byte
// or a \u escape could hide an unsafe rune. An error means b is not one JSON value.
func CleanJSON(b []byte) ([]byte, error) {
	if !json.Valid(b) {
		return nil, errors.New("not a JSON value")
	}
	if !needsJSONClean(b) {
		return b, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	changed := !utf8.Valid(b) // the decoder replaced invalid bytes
	v = cleanValue(v, 0, &changed)
	if !changed {
		return b, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// needsJSONClean reports whether a valid JSON document may hold an unsafe
// rune or invalid UTF-8 in a string: a raw DEL, a non-ASCII byte that is
// not a safe rune, a \u escape (which may spell any rune) or \b, \f, \r.
// Other C0 controls cannot appear raw in valid JSON.
func needsJSONClean(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c == '\\' && i+1 < len(b) {
			switch b[i+1] {
			case 'u', 'b', 'f', 'r': // may spell an unsafe rune
				return true
			}
		}
		if c == 0x7f { // DEL is allowed raw in a JSON string
			return true
		}
		if c < utf8.RuneSelf {
			i++
			if c == '\\' {
				i++ // skip the escaped character (maybe a backslash)
			}
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 || IsUnsafe(r) {
			return true
		}
		i += n
	}
	return false
}

// cleanValue cleans the strings of a decoded document in place, setting
// *changed when one of them changes.
func cleanValue(v any, depth int, changed *bool) any {
	if depth > maxJSONDepth {
		return v
	}
	switch x := v.(type) {
	case string:
		c := Clean(x, 0)
		if c != x {
			*changed = true
		}
		return c
	case []any:
		for i, e := range x {
			x[i] = cleanValue(e, depth+1, changed)
		}
		return x
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		m := make(map[string]any, len(x))
		for _, k := range keys {
			ck := Clean(k, 0)
			if ck != k {
				*changed = true
			}
			if _, dup := m[ck]; !dup {
				m[ck] = cleanValue(x[k], depth+1, changed)
			}
		}
		return m
	}
	return v
}
