package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits of the hardened JSON decoder shared by argument validation and
// schema registration.
const (
	// DefaultMaxArgsBytes is the default cap on one call's arguments.
	DefaultMaxArgsBytes = 1 << 20
	// MaxDepth is the deepest nesting of arrays and objects accepted.
	MaxDepth = 128
	// maxNumberLen caps the text of one JSON number.
	maxNumberLen = 128
	// maxExponent caps the decimal exponent of a JSON number, after
	// normalisation: 1e400 passes, 1e10000000 does not.
	maxExponent = 400
)

// decodeStrict decodes one JSON value from data into the generic form the
// schema validator expects (map[string]any, []any, string, json.Number,
// bool, nil). Unlike encoding/json it refuses duplicate object keys, nesting
// deeper than MaxDepth, numbers with absurd text, and trailing data. Errors
// name the JSON pointer where the problem is.
func decodeStrict(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d, nil, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("not JSON: unexpected data after the value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder, path []string, depth int) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, syntaxErr(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return nil, fmt.Errorf("%s: nesting deeper than %d", pointer(path), MaxDepth)
		}
		switch t {
		case '{':
			obj := map[string]any{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, syntaxErr(err)
				}
				key, ok := kt.(string)
				if !ok {
					return nil, errors.New("not JSON: object key is not a string")
				}
				if _, dup := obj[key]; dup {
					return nil, fmt.Errorf("%s: duplicate key %q", pointer(path), truncate(key, 64))
				}
				v, err := decodeValue(d, append(path, key), depth+1)
				if err != nil {
					return nil, err
				}
				obj[key] = v
			}
			if _, err := d.Token(); err != nil { // '}'
				return nil, syntaxErr(err)
			}
			return obj, nil
		case '[':
			arr := []any{}
			for i := 0; d.More(); i++ {
				v, err := decodeValue(d, append(path, strconv.Itoa(i)), depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := d.Token(); err != nil { // ']'
				return nil, syntaxErr(err)
			}
			return arr, nil
		}
		return nil, errors.New("not JSON: unexpected delimiter")
	case json.Number:
		if err := checkNumber(string(t)); err != nil {
			return nil, fmt.Errorf("%s: %w", pointer(path), err)
		}
		return t, nil
	default: // string, bool, nil
		return t, nil
	}
}

// checkNumber refuses number literals that are too long or whose magnitude
// is absurd. The validator does exact arithmetic (math/big) on numbers and
// crashes or stalls on exponents such as 1e10000000.
func checkNumber(s string) error {
	if len(s) > maxNumberLen {
		return fmt.Errorf("number too long (%d characters, at most %d)", len(s), maxNumberLen)
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > maxExponent*2 || e < -maxExponent*2 {
			return fmt.Errorf("number %s out of range", truncate(s, 32))
		}
		exp = e
	}
	// The exponent of the leading digit: digits before the point minus one.
	intPart, _, _ := strings.Cut(strings.TrimLeft(mant, "-"), ".")
	intPart = strings.TrimLeft(intPart, "0")
	if n := exp + len(intPart); n > maxExponent || n < -maxExponent {
		return fmt.Errorf("number %s out of range (magnitude beyond 1e%d)", truncate(s, 32), maxExponent)
	}
	return nil
}

func syntaxErr(err error) error {
	if err == io.EOF {
		return errors.New("not JSON: unexpected end of input")
	}
	return fmt.Errorf("not JSON: %w", err)
}

// pointer renders path as a JSON pointer ("/a/0/b"), or "/" for the root.
func pointer(path []string) string {
	if len(path) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, p := range path {
		b.WriteByte('/')
		p = strings.ReplaceAll(p, "~", "~0")
		b.WriteString(strings.ReplaceAll(p, "/", "~1"))
	}
	return truncate(b.String(), 200)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
