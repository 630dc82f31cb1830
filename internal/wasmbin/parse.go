package wasmbin

import (
	"bytes"
	"fmt"
	"slices"
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
	Kind         byte     // KindFunc, KindTable, KindMemory, KindGlobal, or KindTag (ParseLenient only)
	Type         FuncType // for functions and tags
	ElemType     byte     // for tables: ValFuncref or ValExternref
	Limits       Limits   // for tables and memories
	Global       Global   // for globals
}

// Table is one table defined by the module.
type Table struct {
	ElemType byte // ValFuncref or ValExternref
	Limits
}

// Export is one entry of the export section.
type Export struct {
	Name  string
	Kind  byte // KindFunc, KindTable, KindMemory, KindGlobal, or KindTag (ParseLenient only)
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
	// blocks counts blocks and ifs once, loops loopBlocks times, as
	// MeasureMeter does (tests compare the two).
	blocks int64
}

// Module is what Parse learns about a module. Its slices alias the bytes
// given to Parse.
type Module struct {
	Types    []FuncType
	Imports  []Import
	Tables   []Table  // defined tables, after imported ones in the index space
	Memories []Limits // defined memories, after imported ones
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

// numFuncs is the number of functions of the index space read so far.
func (m *Module) numFuncs() int {
	n := len(m.FuncTypes)
	for _, im := range m.Imports {
		if im.Kind == KindFunc {
			n++
		}
	}
	return n
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
func Parse(b []byte) (*Module, error) { return parse(b, strict) }

// ParseLenient reads a module as a description of it needs: every section
// in the order it appears, the type, import, function, table, memory and
// export sections decoded and checked as Parse checks them, but without
// Parse's count limits and accepting what only the sandbox refuses
// (sections out of order, several or shared memories, memories over 4 GiB,
// tags). It skips the other sections, and decodes the code section as
// Parse does to fill Code, leaving Code zero if it cannot, rather than
// failing. Work and memory are bounded by the module's size. Errors are
// *Error values.
func ParseLenient(b []byte) (*Module, error) { return parse(b, lenient) }

// ParseImports is ParseLenient without the code section: Code stays zero
// and everything else is as ParseLenient returns it (which never fails on
// the code), at a fraction of the work for a large module. For a caller
// that needs only the imports, exports, memories or custom sections.
func ParseImports(b []byte) (*Module, error) {
	secs, err := ReadSections(b)
	if err != nil {
		return nil, err
	}
	m, err := parseSections(b, slices.DeleteFunc(slices.Clone(secs), func(s Section) bool { return s.ID == SecCode }), lenient)
	if err != nil {
		return nil, err
	}
	m.Sections = secs
	return m, nil
}

// mode is how strictly parse reads.
type mode bool

const (
	strict  mode = false
	lenient mode = true
)

// max returns the limit of a count: limit when strict, NoLimit when
// lenient.
func (o mode) max(limit int) int {
	if o == lenient {
		return NoLimit
	}
	return limit
}

// sectionNames names the sections for error messages.
var sectionNames = map[byte]string{
	SecType: "type", SecImport: "import", SecFunction: "function", SecTable: "table",
	SecMemory: "memory", SecGlobal: "global", SecExport: "export", SecStart: "start",
	SecElement: "element", SecDataCount: "data count", SecCode: "code", SecData: "data",
}

func parse(b []byte, o mode) (*Module, error) {
	secs, err := ReadSections(b)
	if err != nil {
		return nil, err
	}
	return parseSections(b, secs, o)
}

// parseSections is parse of b's sections secs.
func parseSections(b []byte, secs []Section, o mode) (*Module, error) {
	m := &Module{Size: len(b), Sections: secs}
	var err error
	last := 0
	for _, s := range secs {
		sr := s.Reader()
		id := s.ID
		if id == SecCustom {
			if len(m.Customs) >= o.max(maxCustomSections) {
				return nil, sr.Failf("more than %d custom sections", maxCustomSections)
			}
			m.Customs = append(m.Customs, Custom{Name: s.Name, Data: s.Body})
			continue
		}
		if o == strict {
			pos, ok := sectionOrder[id]
			if !ok {
				return nil, sr.Failf("unknown section id %d", id)
			}
			if pos <= last {
				return nil, sr.Failf("section %d is out of order or duplicated", id)
			}
			last = pos
		}
		switch id {
		case SecType:
			err = m.parseTypes(sr, o)
		case SecImport:
			err = m.parseImports(sr, o)
		case SecFunction:
			err = m.parseFunctions(sr, o)
		case SecTable:
			err = m.parseTables(sr, o)
		case SecMemory:
			err = m.parseMemories(sr, o)
		case SecExport:
			err = m.parseExports(sr, o)
		case SecCode:
			if o == lenient {
				// What the code says only refines a description
				// (Code.GrownTables), so code this reader cannot follow
				// leaves Code zero instead of failing.
				if c, err := ScanCode(s); err == nil {
					m.Code = c
				}
				continue
			}
			err = m.Code.scanSection(sr, len(m.FuncTypes), func(i int) int {
				return len(m.Types[m.FuncTypes[i]].Params)
			})
		default:
			if o == lenient {
				continue
			}
			err = m.parseOther(sr, id)
		}
		if err == nil {
			err = sr.End(sectionNames[id])
		}
		if err != nil {
			return nil, err
		}
	}
	if o == strict && m.numFuncs() > maxFunctions {
		return nil, &Error{Offset: len(b), Reason: "too many functions"}
	}
	return m, nil
}

// parseOther reads the sections only Parse decodes.
func (m *Module) parseOther(r *Reader, id byte) error {
	switch id {
	case SecGlobal:
		return m.parseGlobals(r)
	case SecStart:
		m.HasStart = true
		_, err := r.U32()
		return err
	case SecElement:
		return parseElements(r)
	case SecDataCount:
		m.HasDataCount = true
		n, err := r.U32()
		if err == nil && n > maxDataSegments {
			err = r.Failf("data count %d exceeds the limit of %d", n, maxDataSegments)
		}
		return err
	case SecData:
		return m.parseData(r)
	}
	return nil
}

func (m *Module) parseFunctions(r *Reader, o mode) error {
	n, err := r.Count("functions", o.max(maxFunctions), 1)
	if err != nil {
		return err
	}
	m.FuncTypes = make([]uint32, n)
	for i := range m.FuncTypes {
		ti, err := r.U32()
		if err != nil {
			return err
		}
		if int64(ti) >= int64(len(m.Types)) {
			return r.Failf("function type index %d out of range (%d types)", ti, len(m.Types))
		}
		m.FuncTypes[i] = ti
	}
	return nil
}

func (m *Module) parseMemories(r *Reader, o mode) error {
	n, err := r.Count("memories", o.max(1), 2)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		l, err := memoryLimits(r, o)
		if err != nil {
			return err
		}
		if o == strict && (l.Min > 65536 || (l.HasMax && l.Max > 65536)) {
			return r.Failf("memory limits exceed 65536 pages")
		}
		m.Memories = append(m.Memories, l)
	}
	return nil
}

// memoryLimits reads a memory's limits; Parse refuses a shared memory.
func memoryLimits(r *Reader, o mode) (Limits, error) {
	l, err := r.MemoryLimits()
	if err == nil && l.Shared && o == strict {
		err = r.Failf("shared memory is not supported")
	}
	return l, err
}

func (m *Module) parseTypes(r *Reader, o mode) error {
	n, err := r.Count("types", o.max(maxTypes), 3)
	if err != nil {
		return err
	}
	m.Types = make([]FuncType, 0, n)
	for i := 0; i < n; i++ {
		t, err := r.FuncType(o.max(maxValues))
		if err != nil {
			return err
		}
		m.Types = append(m.Types, t)
	}
	return nil
}

func (m *Module) parseImports(r *Reader, o mode) error {
	n, err := r.Count("imports", o.max(maxImports), 4)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		im, err := m.parseImport(r, o)
		if err != nil {
			return err
		}
		m.Imports = append(m.Imports, im)
	}
	return nil
}

func (m *Module) parseImport(r *Reader, o mode) (Import, error) {
	var im Import
	var err error
	if im.Module, err = r.Name(); err != nil {
		return im, err
	}
	if im.Name, err = r.Name(); err != nil {
		return im, err
	}
	if im.Kind, err = r.Byte(); err != nil {
		return im, err
	}
	typeOf := func() (FuncType, error) {
		ti, err := r.U32()
		if err != nil {
			return FuncType{}, err
		}
		if int64(ti) >= int64(len(m.Types)) {
			return FuncType{}, r.Failf("import %s.%s: type index %d out of range (%d types)", im.Module, im.Name, ti, len(m.Types))
		}
		return m.Types[ti], nil
	}
	switch {
	case im.Kind == KindFunc:
		im.Type, err = typeOf()
	case im.Kind == KindTable:
		if im.ElemType, err = r.RefType(); err == nil {
			im.Limits, err = r.TableLimits()
		}
	case im.Kind == KindMemory:
		im.Limits, err = memoryLimits(r, o)
	case im.Kind == KindGlobal:
		im.Global, err = globalType(r)
		m.GlobalImports++
	case im.Kind == KindTag && o == lenient:
		var attr byte
		if attr, err = r.Byte(); err == nil && attr != 0 {
			err = r.Failf("import %s.%s: bad tag attribute %d", im.Module, im.Name, attr)
		}
		if err == nil {
			im.Type, err = typeOf()
		}
	default:
		return im, r.Failf("import %s.%s: unknown kind 0x%02x", im.Module, im.Name, im.Kind)
	}
	return im, err
}

// globalType reads a global's value type and mutability.
func globalType(r *Reader) (Global, error) {
	var g Global
	var err error
	if g.Type, err = r.ValType(); err != nil {
		return g, err
	}
	mut, err := r.Byte()
	if err != nil {
		return g, err
	}
	if mut > 1 {
		return g, r.Failf("bad global mutability 0x%02x", mut)
	}
	g.Mutable = mut == 1
	return g, nil
}

func (m *Module) parseTables(r *Reader, o mode) error {
	n, err := r.Count("tables", o.max(maxTables), 3)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		var t Table
		if t.ElemType, err = r.RefType(); err != nil {
			return err
		}
		if t.Limits, err = r.TableLimits(); err != nil {
			return err
		}
		m.Tables = append(m.Tables, t)
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
		g, err := globalType(r)
		if err != nil {
			return annotate(err, fmt.Sprintf("global %d", i))
		}
		if _, _, err := constExpr(r); err != nil {
			return err
		}
		m.Globals = append(m.Globals, g)
	}
	return nil
}

func (m *Module) parseExports(r *Reader, o mode) error {
	n, err := r.Count("exports", o.max(maxExports), 3)
	if err != nil {
		return err
	}
	funcs := m.numFuncs()
	for i := 0; i < n; i++ {
		var e Export
		if e.Name, err = r.Name(); err != nil {
			return err
		}
		if e.Kind, err = r.Byte(); err != nil {
			return err
		}
		if e.Kind > KindGlobal && !(e.Kind == KindTag && o == lenient) {
			return r.Failf("export %q: unknown export kind 0x%02x", e.Name, e.Kind)
		}
		if e.Index, err = r.U32(); err != nil {
			return err
		}
		if e.Kind == KindFunc && int64(e.Index) >= int64(funcs) {
			return r.Failf("export %q: function index %d out of range", e.Name, e.Index)
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
