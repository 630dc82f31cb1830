package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/textsafe"
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
// bool, nil), with encoding/json's semantics for what it accepts (RFC 8259
// syntax; invalid UTF-8 and lone surrogates in strings become U+FFFD).
// Unlike encoding/json it refuses duplicate object keys, nesting deeper
// than MaxDepth, numbers with absurd text, and trailing data. Errors name
// the JSON pointer where the problem is.
//
// It is a single pass over data that allocates only the values it
// returns: arguments are decoded on every call, and encoding/json's token
// API costs several times as much (it scans every value twice and
// allocates errors it then discards).
func decodeStrict(data []byte) (any, error) {
	p := parser{data: data}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i < len(p.data) {
		return nil, errors.New("not JSON: unexpected data after the value")
	}
	return v, nil
}

// parser is decodeStrict's state: the input, the read position and the
// path to the value being read (rendered only for errors).
type parser struct {
	data []byte
	i    int
	path []pathElem
}

// pathElem is an object key, or an array index when isIndex.
type pathElem struct {
	key     string
	index   int
	isIndex bool
}

func (p *parser) pointer() string {
	path := make([]string, len(p.path))
	for i, e := range p.path {
		if e.isIndex {
			path[i] = strconv.Itoa(e.index)
		} else {
			path[i] = e.key
		}
	}
	return pointer(path)
}

func (p *parser) skipSpace() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// syntaxError describes the byte at the read position.
func (p *parser) syntaxError(context string) error {
	if p.i >= len(p.data) {
		return errors.New("not JSON: unexpected end of input")
	}
	return fmt.Errorf("not JSON: invalid character %s %s (offset %d)", quoteByte(p.data[p.i]), context, p.i)
}

func quoteByte(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	if c < 0x20 || c >= 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return "'" + string(c) + "'"
}

func (p *parser) value(depth int) (any, error) {
	p.skipSpace()
	if p.i >= len(p.data) {
		return nil, p.syntaxError("")
	}
	switch c := p.data[p.i]; {
	case c == '{' || c == '[':
		if depth >= MaxDepth {
			return nil, fmt.Errorf("%s: nesting deeper than %d", p.pointer(), MaxDepth)
		}
		p.i++
		if c == '{' {
			return p.object(depth)
		}
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, p.syntaxError("looking for the beginning of a value")
}

// object reads the members of an object whose '{' was consumed.
func (p *parser) object(depth int) (any, error) {
	obj := map[string]any{}
	p.skipSpace()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		return obj, nil
	}
	for {
		p.skipSpace()
		if p.i >= len(p.data) || p.data[p.i] != '"' {
			return nil, p.syntaxError("looking for the beginning of an object key")
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[key]; dup {
			return nil, fmt.Errorf("%s: duplicate key %q", p.pointer(), textsafe.Truncate(key, 64))
		}
		p.skipSpace()
		if p.i >= len(p.data) || p.data[p.i] != ':' {
			return nil, p.syntaxError("after an object key")
		}
		p.i++
		p.path = append(p.path, pathElem{key: key})
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		obj[key] = v
		p.skipSpace()
		if p.i < len(p.data) {
			switch p.data[p.i] {
			case ',':
				p.i++
				continue
			case '}':
				p.i++
				return obj, nil
			}
		}
		return nil, p.syntaxError("after an object member")
	}
}

// array reads the elements of an array whose '[' was consumed.
func (p *parser) array(depth int) (any, error) {
	arr := []any{}
	p.skipSpace()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return arr, nil
	}
	for n := 0; ; n++ {
		p.path = append(p.path, pathElem{index: n, isIndex: true})
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		arr = append(arr, v)
		p.skipSpace()
		if p.i < len(p.data) {
			switch p.data[p.i] {
			case ',':
				p.i++
				continue
			case ']':
				p.i++
				return arr, nil
			}
		}
		return nil, p.syntaxError("after an array element")
	}
}

func (p *parser) literal(word string) error {
	if !bytes.HasPrefix(p.data[p.i:], []byte(word)) {
		for k := 0; k < len(word); k++ { // point at the first wrong byte
			if p.i >= len(p.data) || p.data[p.i] != word[k] {
				return p.syntaxError("in literal " + word)
			}
			p.i++
		}
	}
	p.i += len(word)
	return nil
}

// number reads a number (RFC 8259 grammar) as a json.Number, then checks
// its size with checkNumber.
func (p *parser) number() (any, error) {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.data[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.data) && p.data[p.i] == '0':
		p.i++
	case digits() == 0:
		return nil, p.syntaxError("in a number")
	}
	if p.i < len(p.data) && p.data[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, p.syntaxError("after the decimal point of a number")
		}
	}
	if p.i < len(p.data) && (p.data[p.i] == 'e' || p.data[p.i] == 'E') {
		p.i++
		if p.i < len(p.data) && (p.data[p.i] == '+' || p.data[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.syntaxError("in the exponent of a number")
		}
	}
	s := string(p.data[start:p.i])
	if err := checkNumber(s); err != nil {
		return nil, fmt.Errorf("%s: %w", p.pointer(), err)
	}
	return json.Number(s), nil
}

// str reads a string whose opening quote is at the read position. Like
// encoding/json, it turns invalid UTF-8 and lone surrogates into U+FFFD and
// refuses control characters and unknown escapes.
func (p *parser) str() (string, error) {
	p.i++ // '"'
	start := p.i
	var b []byte // the string so far, once it differs from the input
	copied := false
	for {
		// A run of plain bytes, copied in bulk.
		j := p.i
		for j < len(p.data) {
			if c := p.data[j]; c == '"' || c == '\\' || c < 0x20 {
				break
			}
			j++
		}
		run := p.data[p.i:j]
		valid := utf8.Valid(run)
		if !copied && !valid {
			b, copied = p.startCopy(start), true
		}
		if copied {
			if valid {
				b = append(b, run...)
			} else {
				for len(run) > 0 {
					r, n := utf8.DecodeRune(run) // U+FFFD for each invalid byte
					b = utf8.AppendRune(b, r)
					run = run[n:]
				}
			}
		}
		p.i = j
		if p.i >= len(p.data) {
			return "", p.syntaxError("")
		}
		switch c := p.data[p.i]; {
		case c == '"':
			p.i++
			if !copied {
				return string(p.data[start : p.i-1]), nil
			}
			return string(b), nil
		case c < 0x20:
			return "", p.syntaxError("in a string")
		}
		// An escape.
		if !copied {
			b, copied = p.startCopy(start), true
		}
		p.i++
		if p.i >= len(p.data) {
			return "", p.syntaxError("")
		}
		e := p.data[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				// A valid pair is consumed whole; otherwise the first
				// half becomes U+FFFD and the next escape is read on its own.
				if p.i+1 < len(p.data) && p.data[p.i] == '\\' && p.data[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					r2, err := p.hex4()
					if err != nil {
						return "", err
					}
					if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
						b = utf8.AppendRune(b, d)
						continue
					}
					p.i = save
				}
				r = unicode.ReplacementChar
			}
			b = utf8.AppendRune(b, r)
		default:
			p.i--
			return "", p.syntaxError("in a string escape")
		}
	}
}

// startCopy returns a buffer holding the string's bytes from start to the
// read position, with room for the rest: up to the closing quote, which
// is the decoded length unless escapes shrink it or invalid bytes grow it.
func (p *parser) startCopy(start int) []byte {
	end := len(p.data)
	for j := p.i; j < len(p.data); j++ {
		if c := p.data[j]; c == '\\' {
			j++
		} else if c == '"' {
			end = j
			break
		}
	}
	return append(make([]byte, 0, end-start), p.data[start:p.i]...)
}

// hex4 reads the four hex digits of a \u escape.
func (p *parser) hex4() (rune, error) {
	var r rune
	for k := 0; k < 4; k++ {
		if p.i >= len(p.data) {
			return 0, p.syntaxError("")
		}
		c := p.data[p.i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, p.syntaxError("in a \\u escape")
		}
		r = r<<4 | rune(c)
		p.i++
	}
	return r, nil
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
			return fmt.Errorf("number %s out of range", textsafe.Truncate(s, 32))
		}
		exp = e
	}
	// The exponent of the leading digit: digits before the point minus one.
	intPart, _, _ := strings.Cut(strings.TrimLeft(mant, "-"), ".")
	intPart = strings.TrimLeft(intPart, "0")
	if n := exp + len(intPart); n > maxExponent || n < -maxExponent {
		return fmt.Errorf("number %s out of range (magnitude beyond 1e%d)", textsafe.Truncate(s, 32), maxExponent)
	}
	return nil
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
	return textsafe.Truncate(b.String(), 200)
}
