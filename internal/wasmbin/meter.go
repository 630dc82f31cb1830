package wasmbin

import (
	"errors"
	"fmt"
	"math"
)

// Metering: the sandbox's way to stop any guest code within its deadline,
// whatever its shape, and to bound its call stack.
//
// wazero can interrupt a guest only at loop headers (WithCloseOnContextDone,
// through an exit to Go at every iteration), so code without loops — an
// exponential tree of calls, a very long straight-line body — ran past
// every deadline. [Instrument] rewrites a module so that the guest meters
// itself, as Substrate's wasm-instrument gas metering and Wasmtime's fuel
// do:
//
//   - A mutable i64 global, the fuel counter, is charged before each piece
//     of straight-line code with the number of instructions in it; when it
//     drops below zero the guest calls the host's refill function (the
//     first import added, (i64) -> i64), which may end the call (deadline
//     passed, fuel budget spent) or return the new counter. Bulk memory
//     and table instructions are charged by their length too.
//   - A mutable i32 global, the stack depth, is raised at each function's
//     entry by an estimate of its frame's size in bytes and restored by the
//     caller after the call returns; past the limit the guest calls the
//     host's stack function (the second import added, () -> ()), which
//     ends the call.
//
// Where the charges go. A metering point stands at a function's entry,
// at the start of each loop body, after the end of every block, if or
// loop that contains a metering point, and at the start of an else branch
// whose then branch contains one; and, for precision, after the end (or
// at the else) of a construct that contains a call but no metering point
// once it costs more than callMerge. Each charges the instructions from
// it to the next point in code order. Control can enter such a stretch of
// code only at its start (forward branches land after the end of a
// construct, and such an end is a metering point whenever the branch
// could come from another stretch; backward branches land at loop
// headers; a call returns into the stretch that made it), so every
// instruction executed has been paid for first: the counter is never
// behind the instructions run, and a guest stops before it runs more than
// its fuel. A stretch runs on past calls (of defined functions and
// call_indirect; a host call is charged hostCallCost in its stretch):
// the code after a call is paid for with the code before it, one charge
// where there were two, which is most of what the meter added to a Go
// module (Go's code is a call every few instructions). What that costs in
// precision is overcharge, never undercharge: a frame suspended in a call
// holds the rest of its stretch paid for and not yet run (at most its
// body, per frame on the stack), lost if the callee does not return; a
// forward branch past the rest of a stretch leaves it unrun as before.
// Across the runtime's test modules the meter charges 1.13 times what
// they run (TestMeterCoversEveryInstruction, against an Exact meter), and
// the host is asked at least once per refill quantum of charges.
//
// The rewritten module's function indices shift by two after the imports
// (the two added imports come last among them); every reference is
// renumbered (calls, ref.func, exports, the start function, element
// segments, global initialisers). Custom sections are dropped: wazero
// would name the frames of a trap's stack trace after the `name`
// section, which the guest writes, and nothing else in them is needed to
// run the module.
//
// What the rewrite makes of a module can be measured before it is made:
// [MeasureMeter] walks the original bodies through the same rewrite in a
// mode that builds nothing and counts the bytes, blocks and compile cost
// it would emit, so that a caller can refuse a module that metering would
// amplify (a run of memory.grow grows about 20 times) before any of it is
// built.

// MeterOptions configure [Instrument].
type MeterOptions struct {
	// ImportModule is the module name of the two imports added: "refill"
	// (i64) -> i64 and "stack" () -> (). Required.
	ImportModule string
	// MaxStack is the largest estimated call stack, in bytes, before the
	// stack import is called (at most 1 GiB). Zero leaves the stack
	// unmetered.
	MaxStack uint32
	// Exact, for tests only, charges every instruction just before it
	// runs and never calls refill: the fuel counter then falls from zero
	// by exactly the units of what ran (instructions, with host calls and
	// bulk lengths weighed as usual), which is what the stretches of the
	// ordinary rewrite must cover. The code is several times larger and
	// slower.
	Exact bool
}

// MeterImports are the names of the functions Instrument imports from
// MeterOptions.ImportModule.
const (
	MeterRefill = "refill"
	MeterStack  = "stack"
)

// MeterFuelExport is the name under which Instrument exports the fuel
// counter, so that the host can read what a call spent; MeterDepthExport
// the stack-depth counter, so that a host reusing an instance can set
// both back to their initial zero. A module that exports either name
// itself cannot be instrumented.
const (
	MeterFuelExport  = "agrun:fuel"
	MeterDepthExport = "agrun:depth"
)

// ErrMetering is returned by Instrument for a module it cannot rewrite
// (one Parse accepts always can; the error reports a bug or a module
// rewritten twice).
var ErrMetering = errors.New("cannot meter module")

// Cost weights of bulk instructions, charged on top of their one unit
// from the length (or page count) on top of the stack: one unit per 16
// bytes of memory, per table element, and per 16 bytes of a grown page.
const (
	memShift  = 4  // bytes >> 4
	pageShift = 12 // pages << 12 (65536 >> 4)
)

// hostCallCost is what a call of an imported (host) function is charged:
// host functions do more than one instruction's work, and they check the
// call's context themselves.
const hostCallCost = 64

// Frame size estimate (bytes): a fixed part, 8 bytes per parameter,
// local and value on the operand stack at the deepest point, 8 more per
// v128 local.
const (
	frameFixed = 64
	frameValue = 8
)

// Instrument returns module b, which Parse accepts, rewritten to meter its
// own execution (see the package notes above and MeterOptions). The result
// behaves exactly as b does, except that it calls the two imported host
// functions and that custom sections are gone.
func Instrument(b []byte, opt MeterOptions) ([]byte, error) {
	if opt.ImportModule == "" || opt.MaxStack > 1<<30 {
		return nil, fmt.Errorf("%w: bad options", ErrMetering)
	}
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	ins := newInstrumenter(m, opt)
	out := make([]byte, 0, len(b)+len(b)/4+64)
	out = append(out, Header...)
	put := func(id byte, payload []byte) {
		out = append(out, id)
		out = AppendU32(out, uint32(len(payload)))
		out = append(out, payload...)
	}
	seen := map[byte]bool{}
	// Sections this rewrite must have even if the module has none, in
	// the place the section order gives them.
	need := []byte{SecType, SecImport, SecGlobal, SecExport}
	emitMissing := func(before byte) error { // 0: all that are missing
		for _, id := range need {
			if seen[id] || (before != 0 && sectionOrder[id] >= sectionOrder[before]) {
				continue
			}
			seen[id] = true
			p, err := ins.section(Section{ID: id})
			if err != nil {
				return err
			}
			put(id, p)
		}
		return nil
	}
	for _, s := range m.Sections {
		if s.ID == SecCustom {
			continue
		}
		if err := emitMissing(s.ID); err != nil {
			return nil, err
		}
		seen[s.ID] = true
		p, err := ins.section(s)
		if err != nil {
			return nil, err
		}
		put(s.ID, p)
	}
	if err := emitMissing(0); err != nil {
		return nil, err
	}
	return out, nil
}

func newInstrumenter(m *Module, opt MeterOptions) *instrumenter {
	ins := &instrumenter{m: m, opt: opt}
	for _, im := range m.Imports {
		if im.Kind == KindFunc {
			ins.nImpFuncs++
			ins.impTypes = append(ins.impTypes, im.Type)
		}
	}
	ins.refillType = uint32(len(m.Types))
	ins.stackType = ins.refillType + 1
	ins.refill = uint32(ins.nImpFuncs)
	ins.stack = ins.refill + 1
	ins.fuel = uint32(m.GlobalImports + len(m.Globals))
	ins.depth = ins.fuel + 1
	return ins
}

// MeterLimits bound what Instrument makes of a module's code, for
// MeasureMeter. A zero field is no limit.
type MeterLimits struct {
	// Body bounds each metered function body (its locals and
	// instructions, without the size in front of it), in bytes.
	Body int64
	// Code bounds the metered code section's payload, in bytes.
	Code int64
	// Blocks bounds each metered function's blocks (see MeterSize).
	Blocks int64
	// BlockCost bounds the sum, over the functions, of the square of
	// their metered blocks.
	BlockCost int64
	// CompileCost bounds the metered module's Code.CompileCost (what
	// Parse would find in Instrument's output).
	CompileCost int64
}

// MeterSize is the size of what Instrument makes of a module's code.
//
// A function's blocks count each block and if of its metered body once
// and each loop three times (the ifs of the charges included): wazero's
// compile time grows with their square, loops weighing most (measured on
// wazero 1.12: a function of 12,500 ifs, 62 KB, takes 6 s to compile, one
// of 2,500 empty loops, metered into 7,500 blocks and loops, 3 s).
type MeterSize struct {
	// Code is the size of the metered code section's payload, in bytes.
	Code int64
	// MaxBody is the size of the largest metered function body (as
	// MeterLimits.Body counts it), MaxFunc its function's index in the
	// function index space (imports first) and MaxFuncBody the size of
	// its original body.
	MaxBody     int64
	MaxFunc     int
	MaxFuncBody int64
	// Blocks is the sum of every metered function's blocks, MaxBlocks
	// the most of one function, BlockCost the sum of their squares.
	Blocks    int64
	MaxBlocks int64
	BlockCost int64
	// CompileCost is the metered module's Code.CompileCost, exactly.
	CompileCost int64
}

// MeterLimitError is MeasureMeter's refusal of a module whose metered
// code would pass one of its MeterLimits.
type MeterLimitError struct {
	// Func is the index (in the function index space) of the body that
	// passed the limit, Body its original size in bytes.
	Func int
	Body int64
	// Limit names the limit passed: "Body", "Code", "Blocks",
	// "BlockCost" or "CompileCost", as the fields of MeterLimits; Max is
	// its value.
	Limit string
	Max   int64
	// Got is what the walk reached, over Max: the body's size or blocks,
	// or the code's size or block cost up to and with that body. The
	// walk stops past the limit: the whole would be more.
	Got int64
}

// Error implements error, naming the function, the measure and the limit.
func (e *MeterLimitError) Error() string {
	switch e.Limit {
	case "Code":
		return fmt.Sprintf("function %d (body of %d bytes): the module's code metered up to it is at least %d bytes, over the limit of %d bytes of metered code per module", e.Func, e.Body, e.Got, e.Max)
	case "Blocks":
		return fmt.Sprintf("function %d: body of %d bytes, metered at least %d blocks (blocks and ifs, loops counting 3), over the limit of %d per function: compiling a function takes time in the square of its blocks", e.Func, e.Body, e.Got, e.Max)
	case "CompileCost":
		return fmt.Sprintf("function %d (body of %d bytes): the metered module's compile cost up to it (nesting of blocks and loops, locals times blocks) is at least %d, over the budget of %d", e.Func, e.Body, e.Got, e.Max)
	case "BlockCost":
		return fmt.Sprintf("function %d (body of %d bytes): the module's compile cost up to it (each function's metered blocks squared, summed) is at least %d, over the limit of %d per module", e.Func, e.Body, e.Got, e.Max)
	}
	return fmt.Sprintf("function %d: body of %d bytes, metered at least %d bytes, over the limit of %d bytes per metered function body", e.Func, e.Body, e.Got, e.Max)
}

// MeasureMeter returns the size of what Instrument makes of the code of
// m (a module Parse returned: Instrument's input, or any module with the
// same code, types, imports and globals), without building it: one walk
// over the original bodies, in memory independent of their size beyond
// a function's locals and nesting. The sizes are exact: what Instrument
// emits, byte for byte. With lim, it stops in the first body that passes
// a limit and returns a *MeterLimitError.
//
// A body grows by up to about 24 times its size once metered (a run of
// memory.grow or of bulk instructions, each followed by its charge; a
// run of "call 0" by 4 bytes a call, restoring the stack depth), and by
// nothing for code without calls, loops and bulk instructions: bound the
// metered sizes, not the original ones.
func MeasureMeter(m *Module, opt MeterOptions, lim MeterLimits) (MeterSize, error) {
	if opt.ImportModule == "" || opt.MaxStack > 1<<30 {
		return MeterSize{}, fmt.Errorf("%w: bad options", ErrMetering)
	}
	ins := newInstrumenter(m, opt)
	var ms MeterSize
	for _, s := range m.Sections {
		if s.ID == SecCode {
			if _, err := ins.code(s.Reader(), &ms, lim); err != nil {
				return MeterSize{}, err
			}
		}
	}
	return ms, nil
}

// walk is what a measuring walk of one body learns, and where it stops.
type walk struct {
	size, blocks   int64 // of the metered body
	opens, nesting int64 // its blocks, ifs and loops, and their nesting (CompileCost)
	locals         int64 // its parameters and locals
	// Past these, errOverLimit (0: never).
	stopSize, stopBlocks, stopCost int64
}

// cost is the body's share of the metered module's CompileCost.
func (wk *walk) cost() int64 { return wk.nesting + localsWeight*wk.locals*wk.opens }

// over says whether the walk passed one of its stops, with pending bytes
// not yet counted.
func (wk *walk) over(pending int) bool {
	return (wk.stopSize > 0 && wk.size+int64(pending) > wk.stopSize) ||
		(wk.stopBlocks > 0 && wk.blocks > wk.stopBlocks) ||
		(wk.stopCost > 0 && wk.cost() > wk.stopCost)
}

// loopBlocks is what a loop counts in a function's blocks (see MeterSize).
const loopBlocks = 3

type instrumenter struct {
	m   *Module
	opt MeterOptions

	nImpFuncs             int
	impTypes              []FuncType // of the imported functions
	refillType, stackType uint32
	refill, stack         uint32 // function indices of the imports
	fuel, depth           uint32 // global indices
}

// nFuncs is the size of the module's own function index space.
func (ins *instrumenter) nFuncs() int { return ins.nImpFuncs + len(ins.m.FuncTypes) }

// fn renumbers a function index.
func (ins *instrumenter) fn(i uint32) uint32 {
	if int(i) >= ins.nImpFuncs {
		return i + 2
	}
	return i
}

// section returns the rewritten payload of s (s.Payload is empty for a
// section the module lacks).
// grow returns the payload of the vector section s with its count raised
// by extra, ready for extra entries to be appended (an empty payload is a
// vector of none).
func grow(s Section, extra uint32) ([]byte, error) {
	if len(s.Payload) == 0 {
		return AppendU32(nil, extra), nil
	}
	r := s.Reader()
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	return append(AppendU32(nil, n+extra), s.Payload[r.off:]...), nil
}

func (ins *instrumenter) section(s Section) ([]byte, error) {
	r := s.Reader()
	switch s.ID {
	case SecType:
		p, err := grow(s, 2)
		if err != nil {
			return nil, err
		}
		p = append(p, 0x60, 1, ValI64, 1, ValI64) // refill: (i64) -> i64
		p = append(p, 0x60, 0, 0)                 // stack: () -> ()
		return p, nil
	case SecImport:
		p, err := grow(s, 2)
		if err != nil {
			return nil, err
		}
		for _, f := range []struct {
			name string
			typ  uint32
		}{{MeterRefill, ins.refillType}, {MeterStack, ins.stackType}} {
			p = appendName(p, ins.opt.ImportModule)
			p = appendName(p, f.name)
			p = append(p, KindFunc)
			p = AppendU32(p, f.typ)
		}
		return p, nil
	case SecGlobal:
		n := 0
		if len(s.Payload) > 0 {
			c, err := r.U32()
			if err != nil {
				return nil, err
			}
			n = int(c)
		}
		p := AppendU32(nil, uint32(n+2))
		for i := 0; i < n; i++ {
			t, err := r.Bytes(2) // value type, mutability
			if err != nil {
				return nil, err
			}
			p = append(p, t...)
			if p, err = ins.constExpr(p, r); err != nil {
				return nil, err
			}
		}
		p = append(p, ValI64, 1, 0x42, 0, 0x0b) // fuel: mut i64 = 0
		p = append(p, ValI32, 1, 0x41, 0, 0x0b) // depth: mut i32 = 0
		return p, r.End("global")
	case SecExport:
		var n uint32
		if len(s.Payload) > 0 {
			var err error
			if n, err = r.U32(); err != nil {
				return nil, err
			}
		}
		p := AppendU32(nil, n+2)
		for i := uint32(0); i < n; i++ {
			name, err := r.Name()
			if name == MeterFuelExport || name == MeterDepthExport {
				return nil, fmt.Errorf("%w: the module exports %q itself", ErrMetering, name)
			}
			if err != nil {
				return nil, err
			}
			kind, err := r.Byte()
			if err != nil {
				return nil, err
			}
			idx, err := r.U32()
			if err != nil {
				return nil, err
			}
			switch {
			case kind == KindFunc && int(idx) >= ins.nFuncs():
				return nil, r.Failf("export %q: function %d out of range", name, idx)
			case kind == KindGlobal && idx >= ins.fuel:
				return nil, r.Failf("export %q: global %d out of range", name, idx)
			case kind == KindFunc:
				idx = ins.fn(idx)
			}
			p = append(appendName(p, name), kind)
			p = AppendU32(p, idx)
		}
		p = append(appendName(p, MeterFuelExport), KindGlobal)
		p = AppendU32(p, ins.fuel)
		p = append(appendName(p, MeterDepthExport), KindGlobal)
		p = AppendU32(p, ins.depth)
		return p, r.End("export")
	case SecStart:
		idx, err := r.U32()
		if err != nil {
			return nil, err
		}
		if int(idx) >= ins.nFuncs() {
			return nil, r.Failf("start function %d out of range", idx)
		}
		return AppendU32(nil, ins.fn(idx)), r.End("start")
	case SecElement:
		return ins.elements(r)
	case SecCode:
		return ins.code(r, nil, MeterLimits{})
	}
	return s.Payload, nil
}

func appendName(b []byte, s string) []byte {
	b = AppendU32(b, uint32(len(s)))
	return append(b, s...)
}

// constExpr copies one constant expression from r to p, renumbering
// ref.func.
func (ins *instrumenter) constExpr(p []byte, r *Reader) ([]byte, error) {
	start := r.off
	op, err := r.Byte()
	if err != nil {
		return nil, err
	}
	if op == 0xd2 {
		idx, err := r.U32()
		if err != nil {
			return nil, err
		}
		if int(idx) >= ins.nFuncs() {
			return nil, r.Failf("ref.func %d out of range", idx)
		}
		p = append(p, 0xd2)
		p = AppendU32(p, ins.fn(idx))
		end, err := r.Byte()
		if err != nil || end != 0x0b {
			return nil, fmt.Errorf("%w: constant expression", ErrMetering)
		}
		return append(p, 0x0b), nil
	}
	if op == 0x23 { // global.get: never one of the meter's globals
		idx, err := r.U32()
		if err != nil {
			return nil, err
		}
		if idx >= ins.fuel {
			return nil, r.Failf("global %d out of range", idx)
		}
	}
	r.off = start
	if _, _, err := constExpr(r); err != nil {
		return nil, err
	}
	return append(p, r.b[start:r.off]...), nil
}

// elements copies the element section, renumbering function indices.
func (ins *instrumenter) elements(r *Reader) ([]byte, error) {
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	p := AppendU32(nil, n)
	for i := uint32(0); i < n; i++ {
		flags, err := r.U32()
		if err != nil {
			return nil, err
		}
		p = AppendU32(p, flags)
		active, explicit, exprs := flags&1 == 0, flags&2 != 0, flags&4 != 0
		if active && explicit {
			t, err := r.U32()
			if err != nil {
				return nil, err
			}
			p = AppendU32(p, t)
		}
		if active {
			if p, err = ins.constExpr(p, r); err != nil {
				return nil, err
			}
		}
		if flags&3 != 0 {
			k, err := r.Byte() // elemkind or reftype
			if err != nil {
				return nil, err
			}
			p = append(p, k)
		}
		k, err := r.U32()
		if err != nil {
			return nil, err
		}
		p = AppendU32(p, k)
		for j := uint32(0); j < k; j++ {
			if exprs {
				p, err = ins.constExpr(p, r)
			} else {
				var idx uint32
				if idx, err = r.U32(); err == nil {
					if int(idx) >= ins.nFuncs() {
						return nil, r.Failf("element: function %d out of range", idx)
					}
					p = AppendU32(p, ins.fn(idx))
				}
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return p, r.End("element")
}

// code rewrites every function body; with ms, it builds nothing and
// measures instead (see MeasureMeter), stopping at lim.
func (ins *instrumenter) code(r *Reader, ms *MeterSize, lim MeterLimits) ([]byte, error) {
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	p := AppendU32(nil, n)
	if ms != nil {
		ms.Code = int64(len(p))
		p = p[:0]
	}
	var body []byte
	for i := 0; i < int(n); i++ {
		size, err := r.U32()
		if err != nil {
			return nil, err
		}
		raw, err := r.Bytes(int(size))
		if err != nil {
			return nil, err
		}
		if i >= len(ins.m.FuncTypes) {
			return nil, fmt.Errorf("%w: more bodies than functions", ErrMetering)
		}
		typ := ins.m.Types[ins.m.FuncTypes[i]]
		br := NewReader(raw, r.base+r.off-len(raw))
		if ms == nil {
			if body, err = ins.function(body[:0], br, typ, nil); err != nil {
				return nil, err
			}
			p = AppendU32(p, uint32(len(body)))
			p = append(p, body...)
			continue
		}
		// Stop as soon as the body passes a limit: its own, or what is
		// left of the module's.
		wk := walk{stopSize: lim.Body, stopBlocks: lim.Blocks}
		if left := lim.Code - ms.Code; lim.Code > 0 && (wk.stopSize <= 0 || left < wk.stopSize) {
			wk.stopSize = max(left, 1)
		}
		if lim.CompileCost > 0 {
			wk.stopCost = max(lim.CompileCost-ms.CompileCost, 1)
		}
		if lim.BlockCost > 0 {
			left := int64(math.Sqrt(float64(lim.BlockCost-ms.BlockCost))) + 1
			if wk.stopBlocks <= 0 || left < wk.stopBlocks {
				wk.stopBlocks = max(left, 1)
			}
		}
		fn := ins.nImpFuncs + i
		body, err = ins.function(body[:0], br, typ, &wk)
		if err != nil && !errors.Is(err, errOverLimit) {
			return nil, err
		}
		code := ms.Code + int64(len(AppendU32(p[:0], uint32(wk.size)))) + wk.size
		cost := ms.BlockCost + wk.blocks*wk.blocks
		ccost := ms.CompileCost + wk.cost()
		e := &MeterLimitError{Func: fn, Body: int64(size)}
		switch {
		case lim.Body > 0 && wk.size > lim.Body:
			e.Limit, e.Max, e.Got = "Body", lim.Body, wk.size
		case lim.Code > 0 && code > lim.Code:
			e.Limit, e.Max, e.Got = "Code", lim.Code, code
		case lim.Blocks > 0 && wk.blocks > lim.Blocks:
			e.Limit, e.Max, e.Got = "Blocks", lim.Blocks, wk.blocks
		case lim.BlockCost > 0 && cost > lim.BlockCost:
			e.Limit, e.Max, e.Got = "BlockCost", lim.BlockCost, cost
		case lim.CompileCost > 0 && ccost > lim.CompileCost:
			e.Limit, e.Max, e.Got = "CompileCost", lim.CompileCost, ccost
		default:
			if err != nil { // a walk stops only past a limit
				return nil, fmt.Errorf("%w: measuring function %d", ErrMetering, fn)
			}
			e = nil
		}
		if e != nil {
			return nil, e
		}
		ms.Code, ms.BlockCost, ms.CompileCost = code, cost, ccost
		ms.Blocks += wk.blocks
		ms.MaxBlocks = max(ms.MaxBlocks, wk.blocks)
		if wk.size > ms.MaxBody {
			ms.MaxBody, ms.MaxFunc, ms.MaxFuncBody = wk.size, fn, int64(size)
		}
	}
	if ms != nil {
		return nil, r.End("code")
	}
	return p, r.End("code")
}

// A piece of a rewritten body: bytes, or the metering code of one stretch.
type piece struct {
	raw     []byte
	stretch int // index into fnWriter.costs, when raw is nil
}

// construct is an open block, loop or if during the rewrite.
type construct struct {
	loop    bool
	metered bool // contains a metering point
	// calls: contains a call (of a defined function, or call_indirect)
	// but no metering point; openCost is the current stretch's cost when
	// it opened (see callMerge).
	calls    bool
	openCost int64
	entry    int // operand stack height below the construct's parameters
	params   int
	results  int
	deadCode bool // after an unconditional branch
}

type fnWriter struct {
	ins *instrumenter
	// wk, when measuring: build nothing, only count what the body would
	// be, and stop with errOverLimit past wk's stops.
	wk      *walk
	scratch []byte
	// at is the nesting depth of the metering code being appended (the
	// function's body is 1), pointDepth that of the current stretch's
	// charge: what the walk counts of the blocks the meter adds.
	at, pointDepth int
	pieces         []piece
	buf            []byte // raw bytes not yet in pieces
	costs          []int64
	cur            int // current stretch
	open           []construct
	h, maxH        int
	defs           int    // values the body defines (an upper bound of its spill slots)
	locals         uint32 // parameters and locals of the original function
	sp, tmp        uint32 // the locals added; tmp2 is tmp+1
}

func (w *fnWriter) flush() {
	if w.wk != nil {
		w.wk.size += int64(len(w.buf))
		w.buf = w.buf[:0]
		return
	}
	if len(w.buf) > 0 {
		w.pieces = append(w.pieces, piece{raw: w.buf})
		w.buf = nil
	}
}

// point places a metering point here: a new stretch starts.
func (w *fnWriter) point() {
	w.flush()
	if w.wk != nil {
		// Stretches are charged in order: the current one is complete.
		if len(w.costs) == 0 {
			w.costs = append(w.costs, 0)
		}
		w.settle()
		w.costs[0] = 0
		w.pointDepth = len(w.open)
	} else {
		w.costs = append(w.costs, 0)
		w.cur = len(w.costs) - 1
		w.pieces = append(w.pieces, piece{stretch: w.cur})
	}
	if len(w.open) > 0 {
		w.open[len(w.open)-1].metered = true
	}
}

// callMerge is the most a construct that contains calls but no metering
// point may cost (its instructions, with its end) for the code after it to
// stay in the stretch before it. A larger one ends its stretch at its end
// (and at its else), as a construct with a metering point does: so that a
// forward branch past it, or a call that does not return, leaves at most
// this much paid for and not run, as the metering point after each call
// did before (see the package notes).
const callMerge = 48

// called marks the innermost open construct as containing a call: the
// code after a call stays in the stretch before it (charged before the
// call), and the construct's end may end the stretch (mergeTooBig).
func (w *fnWriter) called() {
	if len(w.open) > 1 {
		w.open[len(w.open)-1].calls = true
	}
}

// mergeTooBig says whether construct c, at its else or end, contains calls
// and costs more than callMerge: the stretch then ends there.
func (w *fnWriter) mergeTooBig(c *construct) bool {
	return c.calls && !c.metered && w.costs[w.cur]-c.openCost > callMerge
}

// settle counts the charge of the current stretch (measure mode), as
// function emits it: nothing for a stretch that costs nothing.
func (w *fnWriter) settle() {
	if c := w.costs[w.cur]; c > 0 {
		w.at = w.pointDepth
		w.scratch = w.meterCode(w.scratch[:0], c)
		w.wk.size += int64(len(w.scratch))
	}
}

func (w *fnWriter) push(n int) {
	w.h += n
	if w.h > w.maxH {
		w.maxH = w.h
	}
}

func (w *fnWriter) pop(n int) {
	w.h -= n
	if len(w.open) > 0 && w.h < w.open[len(w.open)-1].entry {
		w.h = w.open[len(w.open)-1].entry // dead code pops what it likes
	}
	if w.h < 0 {
		w.h = 0
	}
}

func (w *fnWriter) dead() {
	if len(w.open) > 0 {
		top := &w.open[len(w.open)-1]
		top.deadCode = true
		w.h = top.entry
	}
}

// opened counts, when measuring, a block, if or loop of the metered body
// opened at nesting depth d: its block units (see MeterSize) and its share
// of the body's compile cost, as Parse's CompileCost counts them.
func (w *fnWriter) opened(loop bool, d int) {
	if wk := w.wk; wk != nil {
		wk.opens++
		if loop {
			wk.blocks += loopBlocks
			wk.nesting += loopWeight * int64(d)
		} else {
			wk.blocks++
			wk.nesting += int64(d)
		}
	}
}

// meterCode appends the charge of c fuel units.
func (w *fnWriter) meterCode(b []byte, c int64) []byte {
	b = append(b, 0x23)
	b = AppendU32(b, w.ins.fuel)
	b = append(b, 0x42)
	b = appendS64(b, c)
	b = append(b, 0x7d, 0x24) // i64.sub, global.set
	b = AppendU32(b, w.ins.fuel)
	return w.refillCheck(b)
}

// refillCheck appends: if fuel < 0 { fuel = refill(fuel) } (nothing if
// the meter is Exact).
func (w *fnWriter) refillCheck(b []byte) []byte {
	if w.ins.opt.Exact {
		return b
	}
	b = append(b, 0x23)
	b = AppendU32(b, w.ins.fuel)
	w.opened(false, w.at)
	b = append(b, 0x42, 0, 0x53, 0x04, 0x40) // i64.const 0, i64.lt_s, if
	b = append(b, 0x23)
	b = AppendU32(b, w.ins.fuel)
	b = append(b, 0x10)
	b = AppendU32(b, w.ins.refill)
	b = append(b, 0x24)
	b = AppendU32(b, w.ins.fuel)
	return append(b, 0x0b)
}

// dynamic appends the charge of the length on top of the stack (an i32),
// shifted left (shift > 0) or right (shift < 0), leaving it in place.
func (w *fnWriter) dynamic(shift int) {
	w.saveLength()
	w.at = len(w.open)
	w.buf = w.chargeSaved(w.buf, shift)
}

// chargeSaved appends the charge of the length saved in tmp, shifted
// left (shift > 0) or right (shift < 0).
func (w *fnWriter) chargeSaved(b []byte, shift int) []byte {
	b = append(b, 0x23)
	b = AppendU32(b, w.ins.fuel)
	b = append(b, 0x20)
	b = AppendU32(b, w.tmp)
	b = append(b, 0xad) // i64.extend_i32_u
	if shift > 0 {
		b = append(b, 0x42)
		b = appendS64(b, int64(shift))
		b = append(b, 0x86) // i64.shl
	} else if shift < 0 {
		b = append(b, 0x42)
		b = appendS64(b, int64(-shift))
		b = append(b, 0x88) // i64.shr_u
	}
	b = append(b, 0x7d, 0x24) // i64.sub, global.set
	b = AppendU32(b, w.ins.fuel)
	return w.refillCheck(b)
}

// saveLength appends local.tee tmp: the length (or page count) on top of
// the stack, kept for chargeIfGrown.
func (w *fnWriter) saveLength() {
	w.buf = append(w.buf, 0x22)
	w.buf = AppendU32(w.buf, w.tmp)
}

// chargeIfGrown follows memory.grow or table.grow: if it succeeded (the
// result on top of the stack is not -1), it charges the length saved by
// saveLength, shifted left by shift; a failed grow costs nothing more.
func (w *fnWriter) chargeIfGrown(shift int) {
	tmp2 := w.tmp + 1
	b := w.buf
	b = append(b, 0x22) // local.tee tmp2
	b = AppendU32(b, tmp2)
	w.opened(false, len(w.open))
	b = append(b, 0x41, 0x7f, 0x47, 0x04, 0x40) // i32.const -1, i32.ne, if
	w.at = len(w.open) + 1
	b = w.chargeSaved(b, shift)
	b = append(b, 0x0b, 0x20) // end, local.get tmp2
	w.buf = AppendU32(b, tmp2)
}

// restoreDepth appends: depth = sp (after a call returned).
func (w *fnWriter) restoreDepth() {
	if w.ins.opt.MaxStack == 0 {
		return
	}
	w.buf = append(w.buf, 0x20)
	w.buf = AppendU32(w.buf, w.sp)
	w.buf = append(w.buf, 0x24)
	w.buf = AppendU32(w.buf, w.ins.depth)
}

func appendS64(b []byte, x int64) []byte {
	for {
		c := byte(x & 0x7f)
		x >>= 7
		if (x == 0 && c&0x40 == 0) || (x == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// blockArity reads a block type and returns its parameter and result
// counts.
func (ins *instrumenter) blockArity(r *Reader) (params, results int, err error) {
	if r.EOF() {
		return 0, 0, r.Failf("unexpected end")
	}
	switch c := r.b[r.off]; c {
	case 0x40:
		r.off++
		return 0, 0, nil
	case ValI32, ValI64, ValF32, ValF64, ValV128, ValFuncref, ValExternref:
		r.off++
		return 0, 1, nil
	}
	v, err := r.Signed(33)
	if err != nil {
		return 0, 0, err
	}
	if v < 0 || v >= int64(len(ins.m.Types)) {
		return 0, 0, r.Failf("invalid block type")
	}
	t := ins.m.Types[v]
	return len(t.Params), len(t.Results), nil
}

// funcType returns the type of function index f (before renumbering).
func (ins *instrumenter) funcType(f uint32) (FuncType, bool) {
	if int(f) < ins.nImpFuncs {
		return ins.impTypes[f], true
	}
	i := int(f) - ins.nImpFuncs
	if i >= len(ins.m.FuncTypes) {
		return FuncType{}, false
	}
	return ins.m.Types[ins.m.FuncTypes[i]], true
}

// errOverLimit ends a measuring walk past its stop.
var errOverLimit = errors.New("over the limit")

// function rewrites one body (locals, then instructions) onto out. With
// wk it builds nothing (out then holds only the rewritten locals and
// function entry): it counts in wk what the body would be, and ends with
// errOverLimit once it passes one of wk's stops.
func (ins *instrumenter) function(out []byte, r *Reader, typ FuncType, wk *walk) ([]byte, error) {
	groups, err := r.U32()
	if err != nil {
		return nil, err
	}
	localsStart := r.off
	nLocals, v128 := 0, 0
	for _, t := range typ.Params {
		if t == ValV128 {
			v128++
		}
	}
	for j := uint32(0); j < groups; j++ {
		k, err := r.U32()
		if err != nil {
			return nil, err
		}
		t, err := r.ValType()
		if err != nil {
			return nil, err
		}
		nLocals += int(k)
		if t == ValV128 {
			v128 += int(k)
		}
	}
	localsEnd := r.off
	w := &fnWriter{ins: ins, wk: wk}
	if wk != nil {
		wk.locals = int64(len(typ.Params)+nLocals) + 3 // sp, tmp, tmp2
	}
	w.locals = uint32(len(typ.Params) + nLocals)
	w.sp = w.locals
	w.tmp = w.sp + 1
	w.open = []construct{{results: len(typ.Results)}}
	w.point() // the entry stretch
	if err := w.body(r); err != nil {
		if wk != nil {
			wk.size += int64(len(w.buf))
		}
		return nil, err
	}
	w.flush()
	if w.wk != nil {
		w.settle()
	}

	out = AppendU32(out, groups+1)
	out = append(out, r.b[localsStart:localsEnd]...)
	out = append(out, 3, ValI32) // sp, tmp, tmp2
	if ins.opt.MaxStack > 0 {
		w.opened(false, 1)
		// wazero's compiler may give every value the body defines its
		// own spill slot: count them all, not only the deepest stack.
		frame := int64(frameFixed) + frameValue*(int64(len(typ.Params)+nLocals+v128)+int64(w.defs)+int64(w.maxH))
		if frame > int64(ins.opt.MaxStack) {
			frame = int64(ins.opt.MaxStack) + 1 // such a frame alone is over the limit
		}
		out = append(out, 0x23)
		out = AppendU32(out, ins.depth)
		out = append(out, 0x41)
		out = AppendS32(out, int32(frame))
		out = append(out, 0x6a, 0x22) // i32.add, local.tee sp
		out = AppendU32(out, w.sp)
		out = append(out, 0x24)
		out = AppendU32(out, ins.depth)
		out = append(out, 0x20)
		out = AppendU32(out, w.sp)
		out = append(out, 0x41)
		out = AppendS32(out, int32(ins.opt.MaxStack))
		out = append(out, 0x4b, 0x04, 0x40, 0x10) // i32.gt_u, if, call stack
		out = AppendU32(out, ins.stack)
		out = append(out, 0x0b)
	}
	if wk != nil {
		wk.size += int64(len(out))
		if wk.over(0) {
			return out, errOverLimit
		}
		return out, nil
	}
	for _, pc := range w.pieces {
		if pc.raw != nil {
			out = append(out, pc.raw...)
		} else if c := w.costs[pc.stretch]; c > 0 {
			out = w.meterCode(out, c)
		}
	}
	return out, nil
}

// body rewrites the instructions of one function.
func (w *fnWriter) body(r *Reader) error {
	ins := w.ins
	for len(w.open) > 0 {
		start := r.off
		op, err := r.Byte()
		if err != nil {
			return err
		}
		if ins.opt.Exact && w.costs[w.cur] > 0 {
			w.point()
		}
		w.costs[w.cur]++
		w.defs++
		copyOp := true
		after := func() {} // runs after the instruction is copied
		switch {
		case op == 0x00: // unreachable
			w.dead()
		case op == 0x01: // nop
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			w.opened(op == 0x03, len(w.open))
			if op == 0x04 {
				w.pop(1)
			}
			params, results, err := ins.blockArity(r)
			if err != nil {
				return err
			}
			c := construct{loop: op == 0x03, entry: w.h - params, params: params, results: results}
			if c.entry < 0 {
				c.entry = 0
			}
			after = func() {
				c.openCost = w.costs[w.cur]
				w.open = append(w.open, c)
				if op == 0x03 {
					w.point()
				}
			}
		case op == 0x05: // else
			top := &w.open[len(w.open)-1]
			w.h = top.entry + top.params
			top.deadCode = false
			if top.metered || w.mergeTooBig(top) {
				after = w.point
			}
		case op == 0x0b: // end
			top := w.open[len(w.open)-1]
			w.open = w.open[:len(w.open)-1]
			w.h = top.entry
			w.push(top.results)
			if len(w.open) > 0 {
				if top.metered || top.loop || w.mergeTooBig(&top) {
					after = w.point
				} else if top.calls {
					w.open[len(w.open)-1].calls = true
				}
			}
		case op == 0x0c: // br
			_, err = r.U32()
			w.dead()
		case op == 0x0d: // br_if
			_, err = r.U32()
			w.pop(1)
		case op == 0x0e: // br_table
			var k uint32
			if k, err = r.U32(); err == nil {
				if int(k) > r.Remaining() {
					return r.Failf("br_table of %d targets", k)
				}
				for j := uint32(0); j <= k && err == nil; j++ {
					_, err = r.U32()
				}
			}
			w.dead()
		case op == 0x0f: // return
			w.dead()
		case op == 0x10: // call
			var f uint32
			if f, err = r.U32(); err != nil {
				return err
			}
			t, ok := ins.funcType(f)
			if !ok {
				return r.Failf("call to function %d out of range", f)
			}
			w.pop(len(t.Params))
			w.push(len(t.Results))
			w.defs += len(t.Results)
			copyOp = false
			w.buf = append(w.buf, 0x10)
			w.buf = AppendU32(w.buf, ins.fn(f))
			if int(f) >= ins.nImpFuncs {
				w.restoreDepth()
				w.called()
			} else {
				w.costs[w.cur] += hostCallCost - 1
			}
		case op == 0x11: // call_indirect typeidx tableidx
			var ti uint32
			if ti, err = r.U32(); err == nil {
				_, err = r.U32()
			}
			if err != nil {
				return err
			}
			if int(ti) >= len(ins.m.Types) {
				return r.Failf("call_indirect type %d out of range", ti)
			}
			t := ins.m.Types[ti]
			w.pop(1 + len(t.Params))
			w.push(len(t.Results))
			w.defs += len(t.Results)
			after = func() { w.restoreDepth(); w.called() }
		case op == 0x1a: // drop
			w.pop(1)
		case op == 0x1b: // select
			w.pop(3)
			w.push(1)
		case op == 0x1c: // select t*
			var k uint32
			if k, err = r.U32(); err == nil {
				if int(k) > r.Remaining() {
					return r.Failf("select of %d types", k)
				}
				for j := uint32(0); j < k && err == nil; j++ {
					_, err = r.ValType()
				}
			}
			w.pop(3)
			w.push(1)
		case op >= 0x20 && op <= 0x24: // local.get/set/tee, global.get/set
			// The meter's locals and globals come after the module's own:
			// an index past those would reach them (wazero validates only
			// the rewritten module), so it is refused here.
			var idx uint32
			if idx, err = r.U32(); err != nil {
				return err
			}
			if op <= 0x22 && idx >= w.locals {
				return r.Failf("local %d out of range", idx)
			}
			if op >= 0x23 && idx >= ins.fuel {
				return r.Failf("global %d out of range", idx)
			}
			switch op {
			case 0x20, 0x23:
				w.push(1)
			case 0x21, 0x24:
				w.pop(1)
			}
		case op == 0x25: // table.get
			_, err = r.U32()
		case op == 0x26: // table.set
			_, err = r.U32()
			w.pop(2)
		case op >= 0x28 && op <= 0x35: // loads
			err = memArg(r)
		case op >= 0x36 && op <= 0x3e: // stores
			err = memArg(r)
			w.pop(2)
		case op == 0x3f: // memory.size
			_, err = r.U32()
			w.push(1)
		case op == 0x40: // memory.grow
			_, err = r.U32()
			w.saveLength()
			after = func() { w.chargeIfGrown(pageShift) }
		case op >= 0x41 && op <= 0x44: // consts
			switch op {
			case 0x41:
				_, err = r.Signed(32)
			case 0x42:
				_, err = r.Signed(64)
			case 0x43:
				err = r.Skip(4)
			case 0x44:
				err = r.Skip(8)
			}
			w.push(1)
		case op == 0x45 || op == 0x50 || (op >= 0x67 && op <= 0x69) || (op >= 0x79 && op <= 0x7b) ||
			(op >= 0x8b && op <= 0x91) || (op >= 0x99 && op <= 0x9f) || (op >= 0xa7 && op <= 0xc4):
			// unary: pop 1, push 1
		case op >= 0x46 && op <= 0xa6: // binary and comparisons: pop 2, push 1
			w.pop(1)
		case op == 0xd0: // ref.null
			_, err = r.RefType()
			w.push(1)
		case op == 0xd1: // ref.is_null
		case op == 0xd2: // ref.func
			var f uint32
			if f, err = r.U32(); err != nil {
				return err
			}
			if int(f) >= ins.nFuncs() {
				return r.Failf("ref.func %d out of range", f)
			}
			copyOp = false
			w.buf = append(w.buf, 0xd2)
			w.buf = AppendU32(w.buf, ins.fn(f))
			w.push(1)
		case op == 0xfc:
			var sub uint32
			if sub, err = r.U32(); err != nil {
				return err
			}
			switch sub {
			case 0, 1, 2, 3, 4, 5, 6, 7:
			case 8, 12, 14: // memory.init, table.init, table.copy: two immediates
				if _, err = r.U32(); err == nil {
					_, err = r.U32()
				}
				if sub == 8 {
					w.dynamic(-memShift)
				} else {
					w.dynamic(0)
				}
				w.pop(3)
			case 9, 13: // data.drop, elem.drop
				_, err = r.U32()
			case 10: // memory.copy
				if _, err = r.U32(); err == nil {
					_, err = r.U32()
				}
				w.dynamic(-memShift)
				w.pop(3)
			case 11: // memory.fill
				_, err = r.U32()
				w.dynamic(-memShift)
				w.pop(3)
			case 15: // table.grow
				_, err = r.U32()
				w.saveLength()
				after = func() { w.chargeIfGrown(0) }
				w.pop(1)
			case 16: // table.size
				_, err = r.U32()
				w.push(1)
			case 17: // table.fill
				_, err = r.U32()
				w.dynamic(0)
				w.pop(3)
			default:
				return r.Failf("unsupported opcode 0xfc %d", sub)
			}
		case op == 0xfd:
			var sub uint32
			if sub, err = r.U32(); err != nil {
				return err
			}
			// Every SIMD instruction but v128.const pushes at most what it
			// pops: counting them as neutral keeps the height an upper bound.
			switch {
			case sub <= 0x0b, sub == 0x5c, sub == 0x5d:
				err = memArg(r)
			case sub == 0x0c, sub == 0x0d:
				err = r.Skip(16)
				if sub == 0x0c {
					w.push(1)
				}
			case sub >= 0x15 && sub <= 0x22:
				err = r.Skip(1)
			case sub >= 0x54 && sub <= 0x5b:
				if err = memArg(r); err == nil {
					err = r.Skip(1)
				}
			case sub <= 0xff:
			default:
				return r.Failf("unsupported opcode 0xfd %d", sub)
			}
		default:
			return r.Failf("unsupported opcode 0x%02x", op)
		}
		if err != nil {
			return err
		}
		if copyOp {
			w.buf = append(w.buf, r.b[start:r.off]...)
		}
		after()
		if w.wk != nil && w.wk.over(len(w.buf)) {
			return errOverLimit
		}
	}
	if !r.EOF() {
		return r.Failf("%d bytes after the end of a function body", r.Remaining())
	}
	return nil
}
