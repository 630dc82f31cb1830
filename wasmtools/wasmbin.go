package wasmtools

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// This file is a small, strictly bounded reader and writer of the
// WebAssembly binary format's outer structure: the header, the sections,
// custom section names, and the few sections Inspect describes (types,
// imports, functions, tables, memories, exports). It never allocates in
// proportion to a count the module declares without first checking that
// the bytes left can hold that many entries. Instruction bodies are not
// decoded; the runtime validates the whole module before it runs.

// ErrMalformed is wrapped by Pack and Inspect for bytes that are not a
// well-formed WebAssembly module.
var ErrMalformed = errors.New("wasmtools: malformed module")

// wasmHeader is the magic number and version 1 of the binary format.
var wasmHeader = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// manifestName is the custom section holding the manifest.
const manifestName = "agrun.manifest"

// Section ids.
const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secTable    = 4
	secMemory   = 5
	secExport   = 7
	maxSecID    = 13 // the tag section of the exception-handling proposal
)

// maxName bounds import, export and custom section names.
const maxName = 1 << 16

// section is one section of a module: its id, its bytes in the module
// (header included) and its payload.
type section struct {
	id         byte
	start, end int    // the whole section, id byte included
	payload    []byte // the section's contents
	name       string // custom sections only
	body       []byte // custom sections only: the payload after the name
}

// binReader reads from a byte slice; every read is bounds-checked.
type binReader struct {
	b   []byte
	off int
	at  int // offset of b[0] in the module, for messages
}

func (r *binReader) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrMalformed, r.at+r.off, fmt.Sprintf(format, args...))
}

func (r *binReader) left() int { return len(r.b) - r.off }

func (r *binReader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errorf("unexpected end")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *binReader) bytes(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, r.errorf("length %d exceeds the %d bytes left", n, r.left())
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s, nil
}

// u32 reads an unsigned LEB128 integer of at most 32 bits.
func (r *binReader) u32() (uint32, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if i == 4 && c&0xf0 != 0 {
			return 0, r.errorf("integer too large")
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.errorf("integer representation too long")
}

// count reads a vector length and checks that the bytes left can hold that
// many entries of at least minSize bytes each.
func (r *binReader) count(what string, minSize int) (int, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if int64(n)*int64(minSize) > int64(r.left()) {
		return 0, r.errorf("%d %s cannot fit in the %d bytes left", n, what, r.left())
	}
	return int(n), nil
}

// name reads a UTF-8 name.
func (r *binReader) name() (string, error) {
	n, err := r.count("name bytes", 1)
	if err != nil {
		return "", err
	}
	if n > maxName {
		return "", r.errorf("name of %d bytes, at most %d", n, maxName)
	}
	b, err := r.bytes(n)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", r.errorf("name is not valid UTF-8")
	}
	return string(b), nil
}

// readSections splits a module into its sections. It checks the header,
// that every section lies within the module, that custom sections have a
// valid name, and that no other section appears twice.
func readSections(b []byte) ([]section, error) {
	if len(b) < len(wasmHeader) || !bytes.Equal(b[:4], wasmHeader[:4]) {
		return nil, fmt.Errorf("%w: not a WebAssembly module (bad magic number)", ErrMalformed)
	}
	if !bytes.Equal(b[4:8], wasmHeader[4:]) {
		return nil, fmt.Errorf("%w: unsupported binary format version (want 1)", ErrMalformed)
	}
	r := &binReader{b: b, off: len(wasmHeader)}
	var secs []section
	var seen [maxSecID + 1]bool
	for r.left() > 0 {
		start := r.off
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		if id > maxSecID {
			return nil, r.errorf("unknown section id %d", id)
		}
		if id != secCustom {
			if seen[id] {
				return nil, r.errorf("section %d appears twice", id)
			}
			seen[id] = true
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		payload, err := r.bytes(int(size))
		if err != nil {
			return nil, fmt.Errorf("%w (section %d declares %d bytes)", err, id, size)
		}
		s := section{id: id, start: start, end: r.off, payload: payload}
		if id == secCustom {
			pr := &binReader{b: payload, at: r.off - len(payload)}
			if s.name, err = pr.name(); err != nil {
				return nil, fmt.Errorf("%w (custom section name)", err)
			}
			s.body = payload[pr.off:]
		}
		secs = append(secs, s)
	}
	return secs, nil
}

// appendU32 appends v as unsigned LEB128.
func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// appendCustomSection appends a custom section with the given name and
// body.
func appendCustomSection(b []byte, name string, body []byte) []byte {
	payload := appendU32(nil, uint32(len(name)))
	payload = append(payload, name...)
	b = append(b, secCustom)
	b = appendU32(b, uint32(len(payload)+len(body)))
	b = append(b, payload...)
	return append(b, body...)
}

// manifestSection returns the body of the module's agrun.manifest custom
// section, or nil if there is none. A malformed module, or one with more
// than one manifest section, is an error.
func manifestSection(wasm []byte) ([]byte, error) {
	secs, err := readSections(wasm)
	if err != nil {
		return nil, err
	}
	return findManifest(secs)
}

// findManifest is manifestSection on sections already read. An empty body
// is returned as a non-nil empty slice, which ParseManifest refuses.
func findManifest(secs []section) ([]byte, error) {
	var body []byte
	found := false
	for _, s := range secs {
		if s.id != secCustom || s.name != manifestName {
			continue
		}
		if found {
			return nil, &ManifestError{Err: fmt.Errorf("the module has more than one %s section", manifestName)}
		}
		found = true
		body = s.body
		if body == nil {
			body = []byte{}
		}
	}
	return body, nil
}

// Value types, for signatures.
func valTypeName(v byte) (string, bool) {
	switch v {
	case 0x7f:
		return "i32", true
	case 0x7e:
		return "i64", true
	case 0x7d:
		return "f32", true
	case 0x7c:
		return "f64", true
	case 0x7b:
		return "v128", true
	case 0x70:
		return "funcref", true
	case 0x6f:
		return "externref", true
	}
	return "", false
}

func (r *binReader) valType() (string, error) {
	c, err := r.byte()
	if err != nil {
		return "", err
	}
	name, ok := valTypeName(c)
	if !ok {
		return "", r.errorf("unknown value type 0x%02x", c)
	}
	return name, nil
}

func (r *binReader) refType() (string, error) {
	c, err := r.byte()
	if err != nil {
		return "", err
	}
	if c != 0x70 && c != 0x6f {
		return "", r.errorf("unknown reference type 0x%02x", c)
	}
	name, _ := valTypeName(c)
	return name, nil
}

// funcSig reads a function type (0x60 params results) and renders it as
// "(i32, i32) -> i32"; a function without results is "(i32, i32)".
func (r *binReader) funcSig() (string, error) {
	form, err := r.byte()
	if err != nil {
		return "", err
	}
	if form != 0x60 {
		return "", r.errorf("unsupported type form 0x%02x (only function types)", form)
	}
	list := func() (string, error) {
		n, err := r.count("value types", 1)
		if err != nil {
			return "", err
		}
		ts := make([]string, 0, n)
		for i := 0; i < n; i++ {
			t, err := r.valType()
			if err != nil {
				return "", err
			}
			ts = append(ts, t)
		}
		return strings.Join(ts, ", "), nil
	}
	params, err := list()
	if err != nil {
		return "", err
	}
	results, err := list()
	if err != nil {
		return "", err
	}
	sig := "(" + params + ")"
	switch {
	case results == "":
	case strings.Contains(results, ","):
		sig += " -> (" + results + ")"
	default:
		sig += " -> " + results
	}
	return sig, nil
}

// limits reads memory or table limits.
func (r *binReader) limits(what string) (Limits, error) {
	flag, err := r.byte()
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	switch flag {
	case 0x00, 0x01:
	case 0x02, 0x03:
		if what != "memory" {
			return l, r.errorf("unsupported %s limits flag 0x%02x", what, flag)
		}
		l.Shared = true
	default:
		return l, r.errorf("unsupported %s limits flag 0x%02x (64-bit memories and tables are not supported)", what, flag)
	}
	if l.Min, err = r.u32(); err != nil {
		return l, err
	}
	if flag&1 != 0 {
		m, err := r.u32()
		if err != nil {
			return l, err
		}
		if m < l.Min {
			return l, r.errorf("%s maximum %d is below its minimum %d", what, m, l.Min)
		}
		l.Max = &m
	}
	return l, nil
}

// String renders limits as "min 1, max 10" or "min 1, no max".
func (l Limits) String() string {
	s := fmt.Sprintf("min %d, ", l.Min)
	if l.Max == nil {
		s += "no max"
	} else {
		s += fmt.Sprintf("max %d", *l.Max)
	}
	if l.Shared {
		s += ", shared"
	}
	return s
}

// globalType reads a global's type and renders it as "i32" or "mut i32".
func (r *binReader) globalType() (string, error) {
	t, err := r.valType()
	if err != nil {
		return "", err
	}
	mut, err := r.byte()
	if err != nil {
		return "", err
	}
	switch mut {
	case 0:
		return t, nil
	case 1:
		return "mut " + t, nil
	}
	return "", r.errorf("bad global mutability 0x%02x", mut)
}

// end checks that a section's reader consumed the whole payload.
func (r *binReader) end(what string) error {
	if r.left() != 0 {
		return r.errorf("%d unexpected bytes at the end of the %s section", r.left(), what)
	}
	return nil
}
