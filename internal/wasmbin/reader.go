// Package wasmbin reads and writes the WebAssembly binary format, strictly
// and in bounded time and memory, for the sandbox (runtime) and the tool
// packager (wasmtools). It imports only the standard library.
//
// One parser, in two modes, serves two kinds of caller:
//
//   - [Parse] is the runtime's reader: it checks section order, decodes
//     every section the sandbox relies on, refuses absurd counts cheaply,
//     and decodes every function body's instructions (exactly WebAssembly
//     2.0) to learn which tables table.grow and table.fill name, whether
//     data segments are used by index, and what compiling the code will
//     cost.
//   - [ParseLenient] reads any well-formed module for a description of it
//     (wasmtools.Inspect): imports, exports, tables and memories, also of
//     modules the sandbox refuses.
//
// Both start from [ReadSections], which splits a module into its sections
// and checks only the outer structure (header, section bounds, custom
// section names, no section twice); tools that repackage any module
// (wasmtools.Pack) use it alone. [ScanCode] runs the instruction scan on
// one code section.
//
// Writing: [AppendU32], [AppendS32], [AppendCustomSection],
// [StripSections] and [MergeData] (merging active data segments).
//
//	secs, err := wasmbin.ReadSections(wasm)      // any well-formed module
//	d, err := wasmbin.ParseLenient(wasm)         // its imports, exports, limits
//	m, err := wasmbin.Parse(wasm)                // what the runtime accepts
//	if m.GrownTables[0] { ... }                  // table 0 may grow
//
// Every count is checked against the bytes that remain before anything is
// allocated, so no input makes a reader allocate more than a small multiple
// of its size. Errors describing the bytes are *[Error] values wrapping
// [ErrMalformed]. Functions and values of this package are safe for
// concurrent use; a [Reader] is not.
package wasmbin

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// ErrMalformed is wrapped by every *Error: the bytes are not a module the
// reader accepts.
var ErrMalformed = errors.New("malformed module")

// Error reports bytes a reader refuses.
type Error struct {
	// Offset is the position in the module (from its first byte) where
	// reading failed.
	Offset int
	// Reason says what is wrong, in lower case.
	Reason string
}

// Error renders the error as "malformed module at byte N: reason".
func (e *Error) Error() string {
	return fmt.Sprintf("malformed module at byte %d: %s", e.Offset, e.Reason)
}

// Unwrap returns ErrMalformed.
func (e *Error) Unwrap() error { return ErrMalformed }

// annotate appends a note in parentheses to the reason of an *Error.
func annotate(err error, note string) error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Offset: e.Offset, Reason: e.Reason + " (" + note + ")"}
	}
	return err
}

// NoLimit, as the limit of Reader.Count or Reader.FuncType, bounds a count
// only by the bytes left.
const NoLimit = math.MaxInt

// maxNameLen bounds import, export and custom section names.
const maxNameLen = 100_000

// Value types (one byte each in the binary format).
const (
	ValI32       = 0x7f
	ValI64       = 0x7e
	ValF32       = 0x7d
	ValF64       = 0x7c
	ValV128      = 0x7b
	ValFuncref   = 0x70
	ValExternref = 0x6f
)

// ValTypeName names a value type as the text format does ("i32",
// "funcref"), or "0x55" for a byte that is not one.
func ValTypeName(v byte) string {
	switch v {
	case ValI32:
		return "i32"
	case ValI64:
		return "i64"
	case ValF32:
		return "f32"
	case ValF64:
		return "f64"
	case ValV128:
		return "v128"
	case ValFuncref:
		return "funcref"
	case ValExternref:
		return "externref"
	}
	return fmt.Sprintf("0x%02x", v)
}

// External kinds of imports and exports.
const (
	KindFunc   = 0
	KindTable  = 1
	KindMemory = 2
	KindGlobal = 3
	KindTag    = 4 // exception-handling proposal; Parse refuses it
)

var kindNames = [...]string{"function", "table", "memory", "global", "tag"}

// KindName names an external kind in prose ("function", "memory"), or
// "kind 0x09" for an unknown one.
func KindName(k byte) string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind 0x%02x", k)
}

// Reader reads the binary format from a byte slice. Every method checks
// bounds and returns an *Error, with the offset in the module, for bytes
// it cannot read. A Reader is not safe for concurrent use.
type Reader struct {
	b    []byte
	off  int // position in b
	base int // offset of b[0] in the module, for messages
}

// NewReader returns a Reader on b, which starts base bytes into the module
// (base only affects the offsets errors report).
func NewReader(b []byte, base int) *Reader { return &Reader{b: b, base: base} }

// Failf returns an *Error at the reader's position.
func (r *Reader) Failf(format string, args ...any) error {
	return &Error{Offset: r.base + r.off, Reason: fmt.Sprintf(format, args...)}
}

// EOF reports whether every byte was read.
func (r *Reader) EOF() bool { return r.off >= len(r.b) }

// Remaining returns the number of bytes left.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

// End returns an error if bytes are left after the section named what
// ("type", "import", ...) was read.
func (r *Reader) End(what string) error {
	if !r.EOF() {
		return r.Failf("%d unexpected bytes at the end of the %s section", r.Remaining(), what)
	}
	return nil
}

// Byte reads one byte.
func (r *Reader) Byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.Failf("unexpected end")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// Bytes reads n bytes. The result aliases the reader's slice, with its
// capacity capped so that appending to it copies.
func (r *Reader) Bytes(n int) ([]byte, error) {
	if n < 0 || n > r.Remaining() {
		return nil, r.Failf("length %d exceeds the %d bytes left", n, r.Remaining())
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s, nil
}

// Skip skips n bytes.
func (r *Reader) Skip(n int) error {
	_, err := r.Bytes(n)
	return err
}

// U32 reads an unsigned LEB128 number of at most 32 bits (5 bytes).
func (r *Reader) U32() (uint32, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		c, err := r.Byte()
		if err != nil {
			return 0, err
		}
		if i == 4 && c&0xf0 != 0 {
			return 0, r.Failf("integer too large")
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.Failf("integer representation too long")
}

// Signed reads a signed LEB128 number of at most bits bits (33 for block
// types, 64 at most) and returns its value; the unused bits of a
// maximal-length encoding must be a sign extension.
func (r *Reader) Signed(bits int) (int64, error) {
	var v int64
	maxBytes := (bits + 6) / 7
	for i := 0; i < maxBytes; i++ {
		c, err := r.Byte()
		if err != nil {
			return 0, err
		}
		if i < 9 {
			v |= int64(c&0x7f) << (7 * i)
		} else {
			v |= int64(c&0x7f) << 63
		}
		if c&0x80 == 0 {
			if i == maxBytes-1 {
				// The unused bits of the last byte must be a sign extension.
				used := bits - 7*i
				rest := c & 0x7f >> (used - 1)
				if rest != 0 && rest != 0x7f>>(used-1) {
					return 0, r.Failf("integer too large")
				}
			}
			if 7*(i+1) < 64 && c&0x40 != 0 {
				v |= -1 << (7 * (i + 1))
			}
			return v, nil
		}
	}
	return 0, r.Failf("integer representation too long")
}

// Count reads a vector length and checks it against limit (NoLimit for
// none) and against the bytes left, each element taking at least minSize
// bytes. what names the elements in messages ("imports").
func (r *Reader) Count(what string, limit, minSize int) (int, error) {
	n, err := r.U32()
	if err != nil {
		return 0, err
	}
	if int64(n) > int64(limit) {
		return 0, r.Failf("%d %s exceed the limit of %d", n, what, limit)
	}
	if int64(n)*int64(minSize) > int64(r.Remaining()) {
		return 0, r.Failf("%d %s cannot fit in the %d bytes left", n, what, r.Remaining())
	}
	return int(n), nil
}

// Name reads a name: a length, then that many bytes of valid UTF-8, at
// most 100,000.
func (r *Reader) Name() (string, error) {
	n, err := r.Count("name bytes", maxNameLen, 1)
	if err != nil {
		return "", err
	}
	b, err := r.Bytes(n)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", r.Failf("name is not valid UTF-8")
	}
	return string(b), nil
}

// ValType reads a value type (a number, vector or reference type).
func (r *Reader) ValType() (byte, error) {
	v, err := r.Byte()
	if err != nil {
		return 0, err
	}
	switch v {
	case ValI32, ValI64, ValF32, ValF64, ValV128, ValFuncref, ValExternref:
		return v, nil
	}
	return 0, r.Failf("unknown value type 0x%02x", v)
}

// RefType reads a reference type (funcref or externref).
func (r *Reader) RefType() (byte, error) {
	v, err := r.Byte()
	if err != nil {
		return 0, err
	}
	if v != ValFuncref && v != ValExternref {
		return 0, r.Failf("unknown reference type 0x%02x", v)
	}
	return v, nil
}

// FuncType reads a function type: 0x60, then the parameter and the result
// types, at most limit of each (NoLimit for none).
func (r *Reader) FuncType(limit int) (FuncType, error) {
	form, err := r.Byte()
	if err != nil {
		return FuncType{}, err
	}
	if form != 0x60 {
		return FuncType{}, r.Failf("unsupported type form 0x%02x (only function types)", form)
	}
	var t FuncType
	for _, p := range []struct {
		dst  *[]byte
		what string
	}{{&t.Params, "parameters"}, {&t.Results, "results"}} {
		k, err := r.Count(p.what, limit, 1)
		if err != nil {
			return FuncType{}, err
		}
		*p.dst = make([]byte, k)
		for j := range *p.dst {
			if (*p.dst)[j], err = r.ValType(); err != nil {
				return FuncType{}, err
			}
		}
	}
	return t, nil
}

// Limits are the limits of a table (in elements) or a memory (in 64 KiB
// pages).
type Limits struct {
	Min, Max uint32
	HasMax   bool // Max is declared
	Shared   bool // a shared memory (threads proposal)
}

// TableLimits reads the limits of a table.
func (r *Reader) TableLimits() (Limits, error) { return r.limits("table") }

// MemoryLimits reads the limits of a memory. A shared memory (flags 2 and
// 3, threads proposal) is read with Shared set; 64-bit memories are
// refused.
func (r *Reader) MemoryLimits() (Limits, error) { return r.limits("memory") }

func (r *Reader) limits(what string) (Limits, error) {
	flag, err := r.Byte()
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	switch flag {
	case 0x00, 0x01:
	case 0x02, 0x03:
		if what != "memory" {
			return l, r.Failf("unsupported %s limits flag 0x%02x", what, flag)
		}
		l.Shared = true
	default:
		return l, r.Failf("unsupported %s limits flag 0x%02x (64-bit memories and tables are not supported)", what, flag)
	}
	l.HasMax = flag&1 != 0
	if l.Min, err = r.U32(); err != nil {
		return l, err
	}
	if l.HasMax {
		if l.Max, err = r.U32(); err != nil {
			return l, err
		}
		if l.Max < l.Min {
			return l, r.Failf("%s maximum %d is below its minimum %d", what, l.Max, l.Min)
		}
	}
	return l, nil
}

// AppendU32 appends v as unsigned LEB128.
func AppendU32(b []byte, v uint32) []byte {
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

// AppendS32 appends v as signed LEB128.
func AppendS32(b []byte, v int32) []byte {
	x := int64(v)
	for {
		c := byte(x & 0x7f)
		x >>= 7
		if (x == 0 && c&0x40 == 0) || (x == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
