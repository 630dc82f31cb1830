package runtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"
)

// This file is a small, strictly bounded reader of the WebAssembly binary
// format. It runs before wazero sees a module and has three jobs:
//
//   - refuse absurd modules cheaply (counts that would make a decoder
//     allocate gigabytes, such as 2^32 locals in one function);
//   - collect what validation needs (imports with their signatures, tables,
//     memories, exports, custom sections, data segments) and scan every
//     function body for table.grow, table.fill, memory.init and data.drop;
//   - rewrite the data section, merging active segments (see mergeData).
//
// It decodes exactly the instruction set of WebAssembly 2.0 (the features
// the sandbox enables in wazero) and refuses any other opcode, so a body
// it cannot follow is never passed on. Every count is checked against the
// bytes that remain before anything is allocated.

// Limits of the reader. They follow the limits JavaScript engines apply
// (https://webassembly.github.io/spec/js-api/#limits) where those exist,
// tightened where a Go wasip1 module stays far below them.
const (
	maxTypes          = 100_000
	maxFunctions      = 1_000_000
	maxImports        = 100_000
	maxExports        = 100_000
	maxGlobals        = 100_000
	maxDataSegments   = 100_000
	maxElemSegments   = 100_000
	maxElemEntries    = 1_000_000 // summed over all element segments
	maxTables         = 100
	maxParams         = 1_000
	maxResults        = 1_000
	maxLocals         = 50_000
	maxFunctionBody   = 7_654_321
	maxNameLen        = 100_000
	maxCustomSections = 10_000
)

// WebAssembly value types (one byte each in the binary format).
const (
	valI32       = 0x7f
	valI64       = 0x7e
	valF32       = 0x7d
	valF64       = 0x7c
	valV128      = 0x7b
	valFuncref   = 0x70
	valExternref = 0x6f
)

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
)

// sectionOrder gives each known non-custom section its required position.
var sectionOrder = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5,
	secGlobal: 6, secExport: 7, secStart: 8, secElement: 9, secDataCount: 10,
	secCode: 11, secData: 12,
}

// External kinds of imports and exports.
const (
	kindFunc   = 0
	kindTable  = 1
	kindMemory = 2
	kindGlobal = 3
)

var kindNames = [...]string{"function", "table", "memory", "global"}

func kindName(k byte) string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind 0x%02x", k)
}

// funcType is a function signature.
type funcType struct {
	params, results []byte
}

func (t funcType) equal(o funcType) bool {
	return bytes.Equal(t.params, o.params) && bytes.Equal(t.results, o.results)
}

func (t funcType) String() string {
	return fmt.Sprintf("func(%s) (%s)", valTypeList(t.params), valTypeList(t.results))
}

func valTypeList(ts []byte) string {
	var b bytes.Buffer
	for i, v := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(valTypeName(v))
	}
	return b.String()
}

func valTypeName(v byte) string {
	switch v {
	case valI32:
		return "i32"
	case valI64:
		return "i64"
	case valF32:
		return "f32"
	case valF64:
		return "f64"
	case valV128:
		return "v128"
	case valFuncref:
		return "funcref"
	case valExternref:
		return "externref"
	}
	return fmt.Sprintf("0x%02x", v)
}

// wasmImport is one entry of the import section.
type wasmImport struct {
	module, name string
	kind         byte
	typ          funcType // for functions
}

// wasmExport is one entry of the export section.
type wasmExport struct {
	name string
	kind byte
}

// wasmLimits are the limits of a table or a memory.
type wasmLimits struct {
	min, max uint32
	hasMax   bool
}

// dataSegment is one entry of the data section. Only segments that are
// active on memory 0 with an i32.const offset are mergeable.
type dataSegment struct {
	mergeable bool
	offset    uint32
	init      []byte
	raw       []byte // the whole encoded segment
}

// rawSection is one section of the module as it appears in the binary.
type rawSection struct {
	id         byte
	start, end int // the whole section, header included
	payload    []byte
}

// wasmModule is what parseModule learns about a module.
type wasmModule struct {
	types    []funcType
	imports  []wasmImport
	tables   []wasmLimits
	memories []wasmLimits
	exports  []wasmExport
	customs  []customSection
	data     []dataSegment
	sections []rawSection

	image []byte // set by Compile when the data lives in a memory image

	hasDataCount bool
	grownTables  map[uint32]bool // tables named by a table.grow or table.fill
	funcTypes    []uint32        // type index of each defined function
	size         int             // bytes of the module
	// compileCost estimates the work of compiling the code beyond what is
	// linear in its size: wazero's compiler is superlinear in the nesting
	// depth of blocks (much more so for loops) and in the number of locals
	// times the number of blocks of a function. Measured on wazero 1.12: a
	// function of 16,000 nested loops (48 KB) takes 13 s to compile, one of
	// 10,000 locals read after 1,000 blocks (43 KB) 2 s. One unit is about
	// 15 ns of compile time on the development machine; Go modules score
	// about 2.3 units per byte.
	compileCost   int64
	usesDataIndex bool // memory.init or data.drop somewhere in the code
}

type customSection struct {
	name string
	data []byte
}

// errMalformed reports a module the reader refuses; offsets are from the
// start of the module.
type malformedError struct {
	off int
	msg string
}

func (e *malformedError) Error() string {
	return fmt.Sprintf("malformed module at byte %d: %s", e.off, e.msg)
}

// reader reads the binary format from a byte slice. Every method checks
// bounds; the first error sticks.
type reader struct {
	b    []byte
	off  int // position in b
	base int // offset of b[0] in the module, for messages
}

func (r *reader) fail(format string, args ...any) error {
	return &malformedError{off: r.base + r.off, msg: fmt.Sprintf(format, args...)}
}

func (r *reader) eof() bool { return r.off >= len(r.b) }

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.fail("unexpected end")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, r.fail("length %d exceeds the %d bytes left", n, r.remaining())
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *reader) skip(n int) error {
	_, err := r.bytes(n)
	return err
}

// u32 reads an unsigned LEB128 number of at most 32 bits (5 bytes).
func (r *reader) u32() (uint32, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if i == 4 && c&0xf0 != 0 {
			return 0, r.fail("integer too large")
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, r.fail("integer representation too long")
}

// signed skips a signed LEB128 number of at most bits bits and returns its
// value when it fits in 64 bits.
func (r *reader) signed(bits int) (int64, error) {
	var v int64
	maxBytes := (bits + 6) / 7
	for i := 0; i < maxBytes; i++ {
		c, err := r.byte()
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
					return 0, r.fail("integer too large")
				}
			}
			if 7*(i+1) < 64 && c&0x40 != 0 {
				v |= -1 << (7 * (i + 1))
			}
			return v, nil
		}
	}
	return 0, r.fail("integer representation too long")
}

// count reads a vector length and checks it against a limit and against
// the bytes left (each element takes at least minSize bytes).
func (r *reader) count(what string, limit int, minSize int) (int, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if int64(n) > int64(limit) {
		return 0, r.fail("%d %s exceed the limit of %d", n, what, limit)
	}
	if int64(n)*int64(minSize) > int64(r.remaining()) {
		return 0, r.fail("%d %s cannot fit in the %d bytes left", n, what, r.remaining())
	}
	return int(n), nil
}

func (r *reader) name() (string, error) {
	n, err := r.count("name bytes", maxNameLen, 1)
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", r.fail("name is not valid UTF-8")
	}
	return string(b), nil
}

func (r *reader) valType() (byte, error) {
	v, err := r.byte()
	if err != nil {
		return 0, err
	}
	switch v {
	case valI32, valI64, valF32, valF64, valV128, valFuncref, valExternref:
		return v, nil
	}
	return 0, r.fail("unknown value type 0x%02x", v)
}

func (r *reader) refType() (byte, error) {
	v, err := r.byte()
	if err != nil {
		return 0, err
	}
	if v != valFuncref && v != valExternref {
		return 0, r.fail("unknown reference type 0x%02x", v)
	}
	return v, nil
}

func (r *reader) limits(what string) (wasmLimits, error) {
	flag, err := r.byte()
	if err != nil {
		return wasmLimits{}, err
	}
	var l wasmLimits
	switch flag {
	case 0x00:
	case 0x01:
		l.hasMax = true
	case 0x02, 0x03:
		return l, r.fail("shared %s is not supported", what)
	default:
		return l, r.fail("unsupported %s limits flag 0x%02x", what, flag)
	}
	if l.min, err = r.u32(); err != nil {
		return l, err
	}
	if l.hasMax {
		if l.max, err = r.u32(); err != nil {
			return l, err
		}
		if l.max < l.min {
			return l, r.fail("%s maximum %d is below its minimum %d", what, l.max, l.min)
		}
	}
	return l, nil
}

// parseModule reads and checks the structure of a module. It does not
// validate types of instructions (wazero does); it guarantees bounded work
// and that everything the sandbox's checks rely on was seen.
func parseModule(b []byte) (*wasmModule, error) {
	if len(b) < 8 || !bytes.Equal(b[:4], []byte("\x00asm")) {
		return nil, &malformedError{msg: "not a WebAssembly module (bad magic number)"}
	}
	if binary.LittleEndian.Uint32(b[4:8]) != 1 {
		return nil, &malformedError{off: 4, msg: "unsupported binary version (only version 1 is supported)"}
	}
	m := &wasmModule{size: len(b)}
	r := &reader{b: b, off: 8}
	last := 0
	var numFuncs, numFuncImports int
	for !r.eof() {
		start := r.off
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		payload, err := r.bytes(int(size))
		if err != nil {
			return nil, err
		}
		m.sections = append(m.sections, rawSection{id: id, start: start, end: r.off, payload: payload})
		sr := &reader{b: payload, base: r.off - len(payload)}
		if id == secCustom {
			if len(m.customs) >= maxCustomSections {
				return nil, sr.fail("more than %d custom sections", maxCustomSections)
			}
			name, err := sr.name()
			if err != nil {
				return nil, err
			}
			m.customs = append(m.customs, customSection{name: name, data: payload[sr.off:]})
			continue
		}
		pos, ok := sectionOrder[id]
		if !ok {
			return nil, sr.fail("unknown section id %d", id)
		}
		if pos <= last {
			return nil, sr.fail("section %d is out of order or duplicated", id)
		}
		last = pos
		switch id {
		case secType:
			err = m.parseTypes(sr)
		case secImport:
			numFuncImports, err = m.parseImports(sr)
		case secFunction:
			numFuncs, err = sr.count("functions", maxFunctions, 1)
			if err == nil {
				m.funcTypes = make([]uint32, numFuncs)
				for i := 0; i < numFuncs && err == nil; i++ {
					var ti uint32
					if ti, err = sr.u32(); err == nil && int(ti) >= len(m.types) {
						err = sr.fail("function type index %d out of range", ti)
					}
					m.funcTypes[i] = ti
				}
			}
		case secTable:
			err = m.parseTables(sr)
		case secMemory:
			var n int
			if n, err = sr.count("memories", 1, 2); err == nil && n == 1 {
				var l wasmLimits
				if l, err = sr.limits("memory"); err == nil {
					if l.min > 65536 || (l.hasMax && l.max > 65536) {
						err = sr.fail("memory limits exceed 65536 pages")
					}
					m.memories = append(m.memories, l)
				}
			}
		case secGlobal:
			_, err = sr.count("globals", maxGlobals, 3)
			sr.off = len(sr.b) // contents are left to wazero
		case secExport:
			err = m.parseExports(sr)
		case secStart:
			_, err = sr.u32()
		case secElement:
			err = parseElements(sr)
		case secDataCount:
			m.hasDataCount = true
			var n uint32
			if n, err = sr.u32(); err == nil && n > maxDataSegments {
				err = sr.fail("data count %d exceeds the limit of %d", n, maxDataSegments)
			}
		case secCode:
			err = m.parseCode(sr, numFuncs)
		case secData:
			err = m.parseData(sr)
		}
		if err != nil {
			return nil, err
		}
		if !sr.eof() {
			return nil, sr.fail("section %d has %d unread bytes", id, sr.remaining())
		}
	}
	if numFuncImports+numFuncs > maxFunctions {
		return nil, &malformedError{off: len(b), msg: "too many functions"}
	}
	return m, nil
}

func (m *wasmModule) parseTypes(r *reader) error {
	n, err := r.count("types", maxTypes, 3)
	if err != nil {
		return err
	}
	m.types = make([]funcType, 0, n)
	for i := 0; i < n; i++ {
		form, err := r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return r.fail("unsupported type form 0x%02x", form)
		}
		var t funcType
		for _, p := range []struct {
			dst   *[]byte
			what  string
			limit int
		}{{&t.params, "parameters", maxParams}, {&t.results, "results", maxResults}} {
			k, err := r.count(p.what, p.limit, 1)
			if err != nil {
				return err
			}
			*p.dst = make([]byte, k)
			for j := range *p.dst {
				if (*p.dst)[j], err = r.valType(); err != nil {
					return err
				}
			}
		}
		m.types = append(m.types, t)
	}
	return nil
}

func (m *wasmModule) parseImports(r *reader) (funcs int, err error) {
	n, err := r.count("imports", maxImports, 4)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		var im wasmImport
		if im.module, err = r.name(); err != nil {
			return 0, err
		}
		if im.name, err = r.name(); err != nil {
			return 0, err
		}
		if im.kind, err = r.byte(); err != nil {
			return 0, err
		}
		switch im.kind {
		case kindFunc:
			ti, err := r.u32()
			if err != nil {
				return 0, err
			}
			if int(ti) >= len(m.types) {
				return 0, r.fail("import %s.%s: type index %d out of range", im.module, im.name, ti)
			}
			im.typ = m.types[ti]
			funcs++
		case kindTable:
			if _, err = r.refType(); err == nil {
				_, err = r.limits("table")
			}
		case kindMemory:
			_, err = r.limits("memory")
		case kindGlobal:
			if _, err = r.valType(); err == nil {
				_, err = r.byte()
			}
		default:
			return 0, r.fail("import %s.%s: unknown import kind 0x%02x", im.module, im.name, im.kind)
		}
		if err != nil {
			return 0, err
		}
		m.imports = append(m.imports, im)
	}
	return funcs, nil
}

func (m *wasmModule) parseTables(r *reader) error {
	n, err := r.count("tables", maxTables, 3)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if _, err := r.refType(); err != nil {
			return err
		}
		l, err := r.limits("table")
		if err != nil {
			return err
		}
		m.tables = append(m.tables, l)
	}
	return nil
}

func (m *wasmModule) parseExports(r *reader) error {
	n, err := r.count("exports", maxExports, 3)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		var e wasmExport
		if e.name, err = r.name(); err != nil {
			return err
		}
		if e.kind, err = r.byte(); err != nil {
			return err
		}
		if e.kind > kindGlobal {
			return r.fail("export %q: unknown kind 0x%02x", e.name, e.kind)
		}
		if _, err = r.u32(); err != nil {
			return err
		}
		m.exports = append(m.exports, e)
	}
	return nil
}

// constExpr skips a constant expression (WebAssembly 2.0: one of the const
// instructions, global.get, ref.null or ref.func, then end).
func constExpr(r *reader) (i32 int64, isI32Const bool, err error) {
	op, err := r.byte()
	if err != nil {
		return 0, false, err
	}
	switch op {
	case 0x41: // i32.const
		if i32, err = r.signed(32); err != nil {
			return 0, false, err
		}
		isI32Const = true
	case 0x42: // i64.const
		_, err = r.signed(64)
	case 0x43:
		err = r.skip(4)
	case 0x44:
		err = r.skip(8)
	case 0x23, 0xd2: // global.get, ref.func
		_, err = r.u32()
	case 0xd0: // ref.null
		_, err = r.refType()
	case 0xfd: // v128.const
		var sub uint32
		if sub, err = r.u32(); err == nil {
			if sub != 12 {
				err = r.fail("unsupported constant expression")
			} else {
				err = r.skip(16)
			}
		}
	default:
		return 0, false, r.fail("unsupported constant expression opcode 0x%02x", op)
	}
	if err != nil {
		return 0, false, err
	}
	end, err := r.byte()
	if err != nil {
		return 0, false, err
	}
	if end != 0x0b {
		return 0, false, r.fail("constant expression is not a single instruction")
	}
	return i32, isI32Const, nil
}

func parseElements(r *reader) error {
	n, err := r.count("element segments", maxElemSegments, 1)
	if err != nil {
		return err
	}
	total := 0
	for i := 0; i < n; i++ {
		flags, err := r.u32()
		if err != nil {
			return err
		}
		if flags > 7 {
			return r.fail("unknown element segment flags %d", flags)
		}
		active := flags&1 == 0
		explicitTable := flags&2 != 0
		exprs := flags&4 != 0
		if active && explicitTable {
			if _, err := r.u32(); err != nil {
				return err
			}
		}
		if active {
			if _, _, err := constExpr(r); err != nil {
				return err
			}
		}
		if flags&3 != 0 { // elemkind or reftype present
			if exprs {
				_, err = r.refType()
			} else {
				var k byte
				if k, err = r.byte(); err == nil && k != 0 {
					err = r.fail("unknown element kind 0x%02x", k)
				}
			}
			if err != nil {
				return err
			}
		}
		k, err := r.count("element entries", maxElemEntries-total, 1)
		if err != nil {
			return err
		}
		total += k
		for j := 0; j < k; j++ {
			if exprs {
				_, _, err = constExpr(r)
			} else {
				_, err = r.u32()
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *wasmModule) parseData(r *reader) error {
	n, err := r.count("data segments", maxDataSegments, 2)
	if err != nil {
		return err
	}
	m.data = make([]dataSegment, 0, n)
	for i := 0; i < n; i++ {
		start := r.off
		flags, err := r.u32()
		if err != nil {
			return err
		}
		var seg dataSegment
		switch flags {
		case 0, 2:
			mem := uint32(0)
			if flags == 2 {
				if mem, err = r.u32(); err != nil {
					return err
				}
			}
			off, isConst, err := constExpr(r)
			if err != nil {
				return err
			}
			seg.mergeable = mem == 0 && isConst
			seg.offset = uint32(off)
		case 1:
		default:
			return r.fail("unknown data segment flags %d", flags)
		}
		k, err := r.count("data bytes", 1<<30, 1)
		if err != nil {
			return err
		}
		if seg.init, err = r.bytes(k); err != nil {
			return err
		}
		seg.raw = r.b[start:r.off]
		m.data = append(m.data, seg)
	}
	return nil
}

func (m *wasmModule) parseCode(r *reader, numFuncs int) error {
	n, err := r.count("function bodies", maxFunctions, 2)
	if err != nil {
		return err
	}
	if n != numFuncs {
		return r.fail("%d function bodies for %d functions", n, numFuncs)
	}
	for i := 0; i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return err
		}
		if size > maxFunctionBody {
			return r.fail("function body of %d bytes exceeds the limit of %d", size, maxFunctionBody)
		}
		body, err := r.bytes(int(size))
		if err != nil {
			return err
		}
		br := &reader{b: body, base: r.base + r.off - len(body)}
		groups, err := br.count("local groups", maxLocals, 2)
		if err != nil {
			return err
		}
		locals := 0
		for j := 0; j < groups; j++ {
			k, err := br.u32()
			if err != nil {
				return err
			}
			if int64(locals)+int64(k) > maxLocals {
				return br.fail("more than %d locals in function %d", maxLocals, i)
			}
			locals += int(k)
			if _, err := br.valType(); err != nil {
				return err
			}
		}
		if err := m.scanInstructions(br, int64(locals+len(m.types[m.funcTypes[i]].params))); err != nil {
			return err
		}
	}
	return nil
}

// Weights of the compile-cost estimate (see compileCost).
const (
	loopWeight   = 8  // a loop opened at depth d costs 8d, a block or if d
	localsWeight = 13 // per local (parameters included) per block opened
)

// scanInstructions walks one function body's instructions, decoding every
// immediate, and records the opcodes the sandbox cares about and the
// function's share of the compile-cost estimate. Unknown opcodes are
// refused.
func (m *wasmModule) scanInstructions(r *reader, locals int64) error {
	var opens, nesting int64
	defer func() { m.compileCost += nesting + localsWeight*locals*opens }()
	depth := 1 // the function body is a block
	for depth > 0 {

		op, err := r.byte()
		if err != nil {
			return err
		}
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			opens++
			if op == 0x03 {
				nesting += loopWeight * int64(depth)
			} else {
				nesting += int64(depth)
			}
			depth++
			err = blockType(r)
		case op == 0x0b: // end
			depth--
		case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b:
			// unreachable, nop, else, return, drop, select
		case op == 0x0c || op == 0x0d || op == 0x10: // br, br_if, call
			_, err = r.u32()
		case op == 0x0e: // br_table
			var k int
			if k, err = r.count("br_table targets", 1<<30, 1); err == nil {
				for j := 0; j <= k && err == nil; j++ {
					_, err = r.u32()
				}
			}
		case op == 0x11: // call_indirect typeidx tableidx
			if _, err = r.u32(); err == nil {
				_, err = r.u32()
			}
		case op == 0x1c: // select t*
			var k int
			if k, err = r.count("select types", 1<<30, 1); err == nil {
				for j := 0; j < k && err == nil; j++ {
					_, err = r.valType()
				}
			}
		case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
			_, err = r.u32()
		case op >= 0x28 && op <= 0x3e: // loads and stores
			err = memArg(r)
		case op == 0x3f || op == 0x40: // memory.size, memory.grow
			_, err = r.u32()
		case op == 0x41:
			_, err = r.signed(32)
		case op == 0x42:
			_, err = r.signed(64)
		case op == 0x43:
			err = r.skip(4)
		case op == 0x44:
			err = r.skip(8)
		case op >= 0x45 && op <= 0xc4: // numeric, no immediates
		case op == 0xd0:
			_, err = r.refType()
		case op == 0xd1:
		case op == 0xd2:
			_, err = r.u32()
		case op == 0xfc:
			err = m.miscOp(r)
		case op == 0xfd:
			err = simdOp(r)
		default:
			return r.fail("unsupported opcode 0x%02x", op)
		}
		if err != nil {
			return err
		}
	}
	if !r.eof() {
		return r.fail("%d bytes after the end of a function body", r.remaining())
	}
	return nil
}

func blockType(r *reader) error {
	if r.eof() {
		return r.fail("unexpected end")
	}
	switch c := r.b[r.off]; c {
	case 0x40, valI32, valI64, valF32, valF64, valV128, valFuncref, valExternref:
		r.off++
		return nil
	}
	v, err := r.signed(33)
	if err == nil && v < 0 {
		err = r.fail("invalid block type")
	}
	return err
}

func memArg(r *reader) error {
	if _, err := r.u32(); err != nil {
		return err
	}
	_, err := r.u32()
	return err
}

func (m *wasmModule) miscOp(r *reader) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch sub {
	case 0, 1, 2, 3, 4, 5, 6, 7: // saturating truncations
		return nil
	case 8: // memory.init dataidx memidx
		m.usesDataIndex = true
		if _, err = r.u32(); err == nil {
			_, err = r.u32()
		}
	case 9: // data.drop
		m.usesDataIndex = true
		_, err = r.u32()
	case 10: // memory.copy
		if _, err = r.u32(); err == nil {
			_, err = r.u32()
		}
	case 11: // memory.fill
		_, err = r.u32()
	case 12, 14: // table.init, table.copy
		if _, err = r.u32(); err == nil {
			_, err = r.u32()
		}
	case 13, 16: // elem.drop, table.size
		_, err = r.u32()
	case 15, 17: // table.grow, table.fill
		var t uint32
		if t, err = r.u32(); err == nil {
			if m.grownTables == nil {
				m.grownTables = map[uint32]bool{}
			}
			m.grownTables[t] = true
		}
	default:
		return r.fail("unsupported opcode 0xfc %d", sub)
	}
	return err
}

func simdOp(r *reader) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 0x0b, sub == 0x5c, sub == 0x5d: // loads, store
		return memArg(r)
	case sub == 0x0c, sub == 0x0d: // v128.const, i8x16.shuffle
		return r.skip(16)
	case sub >= 0x15 && sub <= 0x22: // extract/replace lane
		return r.skip(1)
	case sub >= 0x54 && sub <= 0x5b: // load/store lane
		if err := memArg(r); err != nil {
			return err
		}
		return r.skip(1)
	case sub <= 0xff:
		return nil // no immediates; wazero refuses the unassigned ones
	}
	return r.fail("unsupported opcode 0xfd %d", sub)
}

// customSection returns the payload of the first custom section named name.
func (m *wasmModule) customSection(name string) []byte {
	for _, c := range m.customs {
		if c.name == name {
			return c.data
		}
	}
	return nil
}

// maxMergeGap is the largest run of zero bytes mergeData inserts between
// two segments to join them.
const maxMergeGap = 4096

var errNotMergeable = errors.New("data segments not mergeable")

// mergeData returns the module with its active data segments merged into
// as few segments as possible, or the module unchanged when merging cannot
// be proven to preserve its meaning.
//
// wazero copies data segments into a fresh instance's memory one by one;
// a Go wasip1 module has tens of thousands of them, which dominates the
// cost of an instance. Merging is exact when
//
//   - every segment is active on memory 0 with an i32.const offset (so its
//     position is known without running anything),
//   - no two segments overlap (so the order of the copies does not matter),
//   - there is no data count section and no memory.init or data.drop (so
//     nothing refers to segments by index), and
//   - gaps are filled with zeros, which is what fresh memory holds and no
//     other segment writes there.
//
// Bounds are preserved too: the merged segments end where the originals
// ended, so a module whose segments did not fit still fails to instantiate.
func mergeData(b []byte, m *wasmModule) ([]byte, error) {
	if m.hasDataCount || m.usesDataIndex || len(m.data) < 2 {
		return b, errNotMergeable
	}
	segs := make([]dataSegment, len(m.data))
	copy(segs, m.data)
	for _, s := range segs {
		// An empty segment writes nothing but is still bounds-checked;
		// modules worth merging have none, so keep it simple.
		if !s.mergeable || len(s.init) == 0 {
			return b, errNotMergeable
		}
	}
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].offset < segs[j].offset })
	type run struct {
		start uint64
		parts []dataSegment
		end   uint64
	}
	var runs []run
	for _, s := range segs {
		start, end := uint64(s.offset), uint64(s.offset)+uint64(len(s.init))
		if n := len(runs); n > 0 && runs[n-1].end > start {
			return b, errNotMergeable // overlap
		}
		if n := len(runs); n > 0 && start-runs[n-1].end <= maxMergeGap {
			runs[n-1].parts = append(runs[n-1].parts, s)
			runs[n-1].end = end
			continue
		}
		runs = append(runs, run{start: start, end: end, parts: []dataSegment{s}})
	}
	if len(runs) == len(segs) {
		return b, errNotMergeable
	}
	// Encode the new data section.
	var sec []byte
	sec = appendU32(sec, uint32(len(runs)))
	for _, rn := range runs {
		if len(rn.parts) == 1 {
			sec = append(sec, rn.parts[0].raw...)
			continue
		}
		sec = append(sec, 0x00, 0x41)
		sec = appendS32(sec, int32(uint32(rn.start)))
		sec = append(sec, 0x0b)
		size := rn.end - rn.start
		sec = appendU32(sec, uint32(size))
		base := len(sec)
		sec = append(sec, make([]byte, size)...)
		for _, p := range rn.parts {
			copy(sec[base+int(uint64(p.offset)-rn.start):], p.init)
		}
	}
	out := make([]byte, 0, len(b)+16)
	prev := 0
	for _, s := range m.sections {
		if s.id != secData {
			continue
		}
		out = append(out, b[prev:s.start]...)
		out = append(out, secData)
		out = appendU32(out, uint32(len(sec)))
		out = append(out, sec...)
		prev = s.end
	}
	out = append(out, b[prev:]...)
	return out, nil
}

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

func appendS32(b []byte, v int32) []byte {
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
