package wasmbin

import (
	"bytes"
	"fmt"
)

// Limits of Parse. They follow the limits JavaScript engines apply
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
	maxValues         = 1_000 // parameters, and results, of a function type
	maxLocals         = 50_000
	maxFunctionBody   = 7_654_321
	maxCustomSections = 10_000
)

// sectionOrder gives each non-custom section Parse knows its required
// position.
var sectionOrder = map[byte]int{
	SecType: 1, SecImport: 2, SecFunction: 3, SecTable: 4, SecMemory: 5,
	SecGlobal: 6, SecExport: 7, SecStart: 8, SecElement: 9, SecDataCount: 10,
	SecCode: 11, SecData: 12,
}

// FuncType is a function signature; each byte is a value type.
type FuncType struct {
	Params, Results []byte
}

// Equal reports whether t and o are the same signature.
func (t FuncType) Equal(o FuncType) bool {
	return bytes.Equal(t.Params, o.Params) && bytes.Equal(t.Results, o.Results)
}

// String renders t as "func(i32, i32) (i32)".
func (t FuncType) String() string {
	return fmt.Sprintf("func(%s) (%s)", ValTypeList(t.Params), ValTypeList(t.Results))
}

// ValTypeList renders value types as "i32, i64".
func ValTypeList(ts []byte) string {
	var b bytes.Buffer
	for i, v := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(ValTypeName(v))
	}
	return b.String()
}

// Import is one entry of the import section.
type Import struct {
	Module, Name string
	Kind         byte     // KindFunc, KindTable, KindMemory or KindGlobal
	Type         FuncType // for functions
}

// Export is one entry of the export section.
type Export struct {
	Name  string
	Kind  byte // KindFunc, KindTable, KindMemory or KindGlobal
	Index uint32
}

// Global is one global defined by the module (imported ones are not
// listed).
type Global struct {
	Type    byte // ValI32, ValI64, ValF32, ValF64, ValV128, ValFuncref or ValExternref
	Mutable bool
}

// Custom is a custom section.
type Custom struct {
	Name string
	Data []byte // the payload after the name
}

// DataSegment is one entry of the data section.
type DataSegment struct {
	// Mergeable: the segment is active on memory 0 with an i32.const
	// offset, so where it writes is known without running anything.
	Mergeable bool
	Offset    uint32 // for mergeable segments
	Init      []byte // the bytes the segment writes
	Raw       []byte // the whole encoded segment
}

// Code is what decoding the instructions of a code section learns.
type Code struct {
	// GrownTables holds the index of every table named by a table.grow or
	// table.fill instruction (nil if there are none).
	GrownTables map[uint32]bool
	// UsesDataIndex: memory.init or data.drop appears somewhere, so data
	// segments are referred to by index.
	UsesDataIndex bool
	// MutatesTables: table.set, table.grow, table.fill, table.copy,
	// table.init or elem.drop appears somewhere, so a table's contents may
	// change after instantiation.
	MutatesTables bool
	// CompileCost estimates the work of compiling the code beyond what is
	// linear in its size: wazero's compiler is superlinear in the nesting
	// depth of blocks (much more so for loops) and in the number of locals
	// times the number of blocks of a function. Measured on wazero 1.12: a
	// function of 16,000 nested loops (48 KB) takes 13 s to compile, one of
	// 10,000 locals read after 1,000 blocks (43 KB) 2 s. One unit is about
	// 15 ns of compile time on the development machine; Go modules score
	// about 2.3 units per byte.
	CompileCost int64
}

// Module is what Parse learns about a module. Its slices alias the bytes
// given to Parse.
type Module struct {
	Types    []FuncType
	Imports  []Import
	Tables   []Limits // defined tables, after imported ones in the index space
	Memories []Limits // defined memories
	Globals  []Global // defined globals
	Exports  []Export
	Customs  []Custom
	Data     []DataSegment
	Sections []Section // every section, in order

	FuncTypes     []uint32 // type index of each defined function
	HasDataCount  bool     // a data count section is present
	HasStart      bool     // a start section is present
	GlobalImports int      // imported globals, before Globals in the index space
	Size          int      // bytes of the module

	Code // from the instructions of the code section
}

// CustomSection returns the payload (after the name) of the first custom
// section named name, or nil.
func (m *Module) CustomSection(name string) []byte {
	for _, c := range m.Customs {
		if c.Name == name {
			return c.Data
		}
	}
	return nil
}

// Parse reads and checks the structure of a module: everything
// ReadSections checks, section order, and the contents of every section
// except globals, decoding every instruction. It refuses anything outside
// WebAssembly 2.0 (the features the sandbox enables in wazero), shared
// memories, more than one memory, and counts beyond its limits (such as
// 2^32 locals in one function). It does not check the types of
// instructions (wazero validates them); it guarantees bounded work and
// that everything the sandbox's checks rely on was seen. Errors are
// *Error values.
func Parse(b []byte) (*Module, error) {
	secs, err := ReadSections(b)
	if err != nil {
		return nil, err
	}
	m := &Module{Size: len(b), Sections: secs}
	last := 0
	var numFuncs, numFuncImports int
	for _, s := range secs {
		sr := s.Reader()
		id := s.ID
		if id == SecCustom {
			if len(m.Customs) >= maxCustomSections {
				return nil, sr.Failf("more than %d custom sections", maxCustomSections)
			}
			m.Customs = append(m.Customs, Custom{Name: s.Name, Data: s.Body})
			continue
		}
		pos, ok := sectionOrder[id]
		if !ok {
			return nil, sr.Failf("unknown section id %d", id)
		}
		if pos <= last {
			return nil, sr.Failf("section %d is out of order or duplicated", id)
		}
		last = pos
		switch id {
		case SecType:
			err = m.parseTypes(sr)
		case SecImport:
			numFuncImports, err = m.parseImports(sr)
		case SecFunction:
			numFuncs, err = sr.Count("functions", maxFunctions, 1)
			if err == nil {
				m.FuncTypes = make([]uint32, numFuncs)
				for i := 0; i < numFuncs && err == nil; i++ {
					var ti uint32
					if ti, err = sr.U32(); err == nil && int(ti) >= len(m.Types) {
						err = sr.Failf("function type index %d out of range", ti)
					}
					m.FuncTypes[i] = ti
				}
			}
		case SecTable:
			err = m.parseTables(sr)
		case SecMemory:
			var n int
			if n, err = sr.Count("memories", 1, 2); err == nil && n == 1 {
				var l Limits
				if l, err = memoryLimits(sr); err == nil {
					if l.Min > 65536 || (l.HasMax && l.Max > 65536) {
						err = sr.Failf("memory limits exceed 65536 pages")
					}
					m.Memories = append(m.Memories, l)
				}
			}
		case SecGlobal:
			err = m.parseGlobals(sr)
		case SecExport:
			err = m.parseExports(sr)
		case SecStart:
			m.HasStart = true
			_, err = sr.U32()
		case SecElement:
			err = parseElements(sr)
		case SecDataCount:
			m.HasDataCount = true
			var n uint32
			if n, err = sr.U32(); err == nil && n > maxDataSegments {
				err = sr.Failf("data count %d exceeds the limit of %d", n, maxDataSegments)
			}
		case SecCode:
			err = m.Code.scanSection(sr, numFuncs, func(i int) int {
				return len(m.Types[m.FuncTypes[i]].Params)
			})
		case SecData:
			err = m.parseData(sr)
		}
		if err != nil {
			return nil, err
		}
		if !sr.EOF() {
			return nil, sr.Failf("section %d has %d unread bytes", id, sr.Remaining())
		}
	}
	if numFuncImports+numFuncs > maxFunctions {
		return nil, &Error{Offset: len(b), Reason: "too many functions"}
	}
	return m, nil
}

// memoryLimits reads a memory's limits and refuses a shared memory.
func memoryLimits(r *Reader) (Limits, error) {
	l, err := r.MemoryLimits()
	if err == nil && l.Shared {
		err = r.Failf("shared memory is not supported")
	}
	return l, err
}

func (m *Module) parseTypes(r *Reader) error {
	n, err := r.Count("types", maxTypes, 3)
	if err != nil {
		return err
	}
	m.Types = make([]FuncType, 0, n)
	for i := 0; i < n; i++ {
		t, err := r.FuncType(maxValues)
		if err != nil {
			return err
		}
		m.Types = append(m.Types, t)
	}
	return nil
}

func (m *Module) parseImports(r *Reader) (funcs int, err error) {
	n, err := r.Count("imports", maxImports, 4)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		var im Import
		if im.Module, err = r.Name(); err != nil {
			return 0, err
		}
		if im.Name, err = r.Name(); err != nil {
			return 0, err
		}
		if im.Kind, err = r.Byte(); err != nil {
			return 0, err
		}
		switch im.Kind {
		case KindFunc:
			ti, err := r.U32()
			if err != nil {
				return 0, err
			}
			if int(ti) >= len(m.Types) {
				return 0, r.Failf("import %s.%s: type index %d out of range", im.Module, im.Name, ti)
			}
			im.Type = m.Types[ti]
			funcs++
		case KindTable:
			if _, err = r.RefType(); err == nil {
				_, err = r.TableLimits()
			}
		case KindMemory:
			_, err = memoryLimits(r)
		case KindGlobal:
			if _, err = r.ValType(); err == nil {
				_, err = r.Byte()
			}
			m.GlobalImports++
		default:
			return 0, r.Failf("import %s.%s: unknown import kind 0x%02x", im.Module, im.Name, im.Kind)
		}
		if err != nil {
			return 0, err
		}
		m.Imports = append(m.Imports, im)
	}
	return funcs, nil
}

func (m *Module) parseTables(r *Reader) error {
	n, err := r.Count("tables", maxTables, 3)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if _, err := r.RefType(); err != nil {
			return err
		}
		l, err := r.TableLimits()
		if err != nil {
			return err
		}
		m.Tables = append(m.Tables, l)
	}
	return nil
}

func (m *Module) parseGlobals(r *Reader) error {
	n, err := r.Count("globals", maxGlobals, 3)
	if err != nil {
		return err
	}
	m.Globals = make([]Global, 0, n)
	for i := 0; i < n; i++ {
		var g Global
		if g.Type, err = r.ValType(); err != nil {
			return err
		}
		mut, err := r.Byte()
		if err != nil {
			return err
		}
		if mut > 1 {
			return r.Failf("global %d: invalid mutability 0x%02x", i, mut)
		}
		g.Mutable = mut == 1
		if _, _, err := constExpr(r); err != nil {
			return err
		}
		m.Globals = append(m.Globals, g)
	}
	return nil
}

func (m *Module) parseExports(r *Reader) error {
	n, err := r.Count("exports", maxExports, 3)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		var e Export
		if e.Name, err = r.Name(); err != nil {
			return err
		}
		if e.Kind, err = r.Byte(); err != nil {
			return err
		}
		if e.Kind > KindGlobal {
			return r.Failf("export %q: unknown kind 0x%02x", e.Name, e.Kind)
		}
		if e.Index, err = r.U32(); err != nil {
			return err
		}
		m.Exports = append(m.Exports, e)
	}
	return nil
}

// constExpr skips a constant expression (WebAssembly 2.0: one of the const
// instructions, global.get, ref.null or ref.func, then end).
func constExpr(r *Reader) (i32 int64, isI32Const bool, err error) {
	op, err := r.Byte()
	if err != nil {
		return 0, false, err
	}
	switch op {
	case 0x41: // i32.const
		if i32, err = r.Signed(32); err != nil {
			return 0, false, err
		}
		isI32Const = true
	case 0x42: // i64.const
		_, err = r.Signed(64)
	case 0x43:
		err = r.Skip(4)
	case 0x44:
		err = r.Skip(8)
	case 0x23, 0xd2: // global.get, ref.func
		_, err = r.U32()
	case 0xd0: // ref.null
		_, err = r.RefType()
	case 0xfd: // v128.const
		var sub uint32
		if sub, err = r.U32(); err == nil {
			if sub != 12 {
				err = r.Failf("unsupported constant expression")
			} else {
				err = r.Skip(16)
			}
		}
	default:
		return 0, false, r.Failf("unsupported constant expression opcode 0x%02x", op)
	}
	if err != nil {
		return 0, false, err
	}
	end, err := r.Byte()
	if err != nil {
		return 0, false, err
	}
	if end != 0x0b {
		return 0, false, r.Failf("constant expression is not a single instruction")
	}
	return i32, isI32Const, nil
}

func parseElements(r *Reader) error {
	n, err := r.Count("element segments", maxElemSegments, 1)
	if err != nil {
		return err
	}
	total := 0
	for i := 0; i < n; i++ {
		flags, err := r.U32()
		if err != nil {
			return err
		}
		if flags > 7 {
			return r.Failf("unknown element segment flags %d", flags)
		}
		active := flags&1 == 0
		explicitTable := flags&2 != 0
		exprs := flags&4 != 0
		if active && explicitTable {
			if _, err := r.U32(); err != nil {
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
				_, err = r.RefType()
			} else {
				var k byte
				if k, err = r.Byte(); err == nil && k != 0 {
					err = r.Failf("unknown element kind 0x%02x", k)
				}
			}
			if err != nil {
				return err
			}
		}
		k, err := r.Count("element entries", maxElemEntries-total, 1)
		if err != nil {
			return err
		}
		total += k
		for j := 0; j < k; j++ {
			if exprs {
				_, _, err = constExpr(r)
			} else {
				_, err = r.U32()
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *Module) parseData(r *Reader) error {
	n, err := r.Count("data segments", maxDataSegments, 2)
	if err != nil {
		return err
	}
	m.Data = make([]DataSegment, 0, n)
	for i := 0; i < n; i++ {
		start := r.off
		flags, err := r.U32()
		if err != nil {
			return err
		}
		var seg DataSegment
		switch flags {
		case 0, 2:
			mem := uint32(0)
			if flags == 2 {
				if mem, err = r.U32(); err != nil {
					return err
				}
			}
			off, isConst, err := constExpr(r)
			if err != nil {
				return err
			}
			seg.Mergeable = mem == 0 && isConst
			seg.Offset = uint32(off)
		case 1:
		default:
			return r.Failf("unknown data segment flags %d", flags)
		}
		k, err := r.Count("data bytes", 1<<30, 1)
		if err != nil {
			return err
		}
		if seg.Init, err = r.Bytes(k); err != nil {
			return err
		}
		seg.Raw = r.b[start:r.off:r.off]
		m.Data = append(m.Data, seg)
	}
	return nil
}
