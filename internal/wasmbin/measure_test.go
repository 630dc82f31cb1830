package wasmbin

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// meteredCode reads the code section of an instrumented module: its
// payload's size, the size and function index of its largest body, and
// its blocks (as ScanCode counts them) and its CompileCost (as Parse
// finds it), as MeasureMeter reports them.
func meteredCode(tb testing.TB, out []byte, nImpFuncs int) MeterSize {
	tb.Helper()
	secs, err := ReadSections(out)
	if err != nil {
		tb.Fatalf("instrumented module: %v", err)
	}
	var ms MeterSize
	ms.CompileCost = -1 // Parse refuses a body metered past 50,000 locals
	if m, err := Parse(out); err == nil {
		ms.CompileCost = m.CompileCost
	}
	for _, s := range secs {
		if s.ID != SecCode {
			continue
		}
		ms.Code = int64(len(s.Payload))
		ms.Blocks = -1 // ScanCode refuses a body metered past 50,000 locals
		if c, err := ScanCode(s); err == nil {
			ms.Blocks = c.blocks
		}
		r := s.Reader()
		n, _ := r.U32()
		for i := 0; i < int(n); i++ {
			size, _ := r.U32()
			if _, err := r.Bytes(int(size)); err != nil {
				tb.Fatalf("instrumented code: %v", err)
			}
			if int64(size) > ms.MaxBody {
				ms.MaxBody, ms.MaxFunc = int64(size), nImpFuncs+i
			}
		}
	}
	return ms
}

// checkMeasure checks MeasureMeter against what Instrument built from b:
// the same code size and largest body, a refusal naming that body one
// byte under either limit, and none at the limits. It says whether
// Instrument accepted b.
func checkMeasure(t *testing.T, b []byte, opt MeterOptions) bool {
	t.Helper()
	out, ierr := Instrument(b, opt)
	m, err := Parse(b)
	if err != nil {
		if ierr == nil {
			t.Fatalf("Instrument accepts what Parse refuses: %v", err)
		}
		return false
	}
	ms, merr := MeasureMeter(m, opt, MeterLimits{})
	// MeasureMeter reads the code alone: Instrument may refuse a module
	// for its other sections.
	if ierr == nil && merr != nil {
		t.Fatalf("Instrument accepts, MeasureMeter refuses: %v", merr)
	}
	if ierr != nil {
		return false
	}
	imp := 0
	for _, im := range m.Imports {
		if im.Kind == KindFunc {
			imp++
		}
	}
	got := meteredCode(t, out, imp)
	if ms.Code != got.Code || ms.MaxBody != got.MaxBody || (ms.MaxBody > 0 && ms.MaxFunc != got.MaxFunc) || (got.Blocks >= 0 && ms.Blocks != got.Blocks) ||
		(got.CompileCost >= 0 && ms.CompileCost != got.CompileCost) ||
		(got.Blocks >= 0 && len(m.FuncTypes) == 1 && (ms.MaxBlocks != got.Blocks || ms.BlockCost != got.Blocks*got.Blocks)) {
		t.Fatalf("MeasureMeter = %+v; Instrument built %+v", ms, got)
	}
	if ms.Code == 0 {
		return true // no code section
	}
	if _, err := MeasureMeter(m, opt, MeterLimits{Body: ms.MaxBody, Code: ms.Code, Blocks: ms.MaxBlocks, BlockCost: ms.BlockCost, CompileCost: ms.CompileCost}); err != nil {
		t.Fatalf("refused at its own sizes: %v", err)
	}
	for _, c := range []struct {
		lim  MeterLimits
		name string
		max  int64
	}{
		{MeterLimits{Body: ms.MaxBody - 1}, "Body", ms.MaxBody - 1},
		{MeterLimits{Code: ms.Code - 1}, "Code", ms.Code - 1},
		{MeterLimits{Blocks: ms.MaxBlocks - 1}, "Blocks", ms.MaxBlocks - 1},
		{MeterLimits{BlockCost: ms.BlockCost - 1}, "BlockCost", ms.BlockCost - 1},
		{MeterLimits{CompileCost: ms.CompileCost - 1}, "CompileCost", ms.CompileCost - 1},
	} {
		if c.max <= 0 {
			continue
		}
		var e *MeterLimitError
		if _, err := MeasureMeter(m, opt, c.lim); !errors.As(err, &e) || e.Limit != c.name || e.Max != c.max || e.Got <= e.Max {
			t.Fatalf("one under its %s (%+v): %v", c.name, ms, err)
		}
	}
	return true
}

// FuzzMeasureMeter: for any module, MeasureMeter measures exactly what
// Instrument builds, and refuses it just under its sizes.
func FuzzMeasureMeter(f *testing.F) {
	for _, file := range watFiles(f) {
		f.Add(testguest.WAT(f, file), uint32(1<<20))
	}
	for seed := uint64(0); seed < 8; seed++ {
		f.Add(genModule(rand.New(rand.NewPCG(seed, 1))), uint32(seed%2)<<16)
	}
	f.Fuzz(func(t *testing.T, b []byte, maxStack uint32) {
		checkMeasure(t, b, MeterOptions{ImportModule: "meter", MaxStack: maxStack % (1<<30 + 1)})
	})
}

// TestMeasureMeterShapes is the property over generated module shapes:
// bodies of random runs of calls (to imports and defined functions),
// call_indirect, nested blocks, loops and ifs with else, memory.grow,
// bulk memory and table instructions, br_table, with index spaces wide
// enough that every renumbered or added index takes more LEB bytes.
func TestMeasureMeterShapes(t *testing.T) {
	accepted, maxGrowth := 0, 0.0
	for seed := uint64(0); seed < 400; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		b := genModule(rng)
		for _, stack := range []uint32{0, 1 << 20} {
			t.Run(fmt.Sprintf("seed %d stack %d", seed, stack), func(t *testing.T) {
				if _, err := Parse(b); err != nil {
					t.Fatalf("generated module does not parse: %v", err)
				}
				opt := MeterOptions{ImportModule: "agrun:sandbox", MaxStack: stack}
				if checkMeasure(t, b, opt) {
					accepted++
					m, _ := Parse(b)
					ms, _ := MeasureMeter(m, opt, MeterLimits{})
					maxGrowth = max(maxGrowth, float64(ms.MaxBody)/float64(ms.MaxFuncBody))
					out, _ := Instrument(b, opt)
					m2, err := Parse(out)
					if err != nil {
						t.Fatalf("the metered module: %v", err)
					}
					if m2.CompileCost != ms.CompileCost || ms.CompileCost <= 0 {
						t.Fatalf("the metered module's CompileCost is %d; measured %d", m2.CompileCost, ms.CompileCost)
					}
				}
			})
		}
	}
	if accepted < 700 {
		t.Errorf("Instrument accepted %d of 800 generated modules: the property holds of too few", accepted)
	}
	t.Logf("%d modules measured; largest body growth %.1fx", accepted, maxGrowth)
}

// TestMeasureMeterStopsEarly: the amplification cases, a body of calls
// near the body limit and one of ifs past the block limits, are refused
// after measuring about the limit's worth of them, and the error names
// the function and both sizes.
func TestMeasureMeterStopsEarly(t *testing.T) {
	body := append([]byte{0}, bytes.Repeat([]byte{0x10, 0x00}, 3_000_000)...)
	b := genEncode(t, 1, 0, 0, [][]byte{append(body, 0x0b), {0, 0x0b}})
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	_, err = MeasureMeter(m, MeterOptions{ImportModule: "meter", MaxStack: 1 << 20}, MeterLimits{Body: 1 << 20})
	var e *MeterLimitError
	if !errors.As(err, &e) || e.Func != 0 || e.Limit != "Body" || e.Body != int64(len(body)+1) || e.Got <= 1<<20 || e.Got > 1<<20+64 {
		t.Fatalf("err = %v (%+v)", err, e)
	}
	t.Log(err)
	_, err = MeasureMeter(m, MeterOptions{ImportModule: "meter"}, MeterLimits{Body: 64 << 20, Code: 1 << 20})
	if !errors.As(err, &e) || e.Limit != "Code" || e.Max != 1<<20 {
		t.Fatalf("code limit: err = %v", err)
	}
	t.Log(err)
	// Calls add no blocks (their code stays in one stretch): the block
	// limits are met by a body of ifs.
	ifs := append([]byte{0}, bytes.Repeat([]byte{0x41, 0, 0x04, 0x40, 0x0b}, 20_000)...)
	if m, err = Parse(genEncode(t, 1, 0, 0, [][]byte{append(ifs, 0x0b), {0, 0x0b}})); err != nil {
		t.Fatal(err)
	}
	_, err = MeasureMeter(m, MeterOptions{ImportModule: "meter"}, MeterLimits{Blocks: 10_000})
	if !errors.As(err, &e) || e.Limit != "Blocks" || e.Got != 10_001 {
		t.Fatalf("blocks limit: err = %v", err)
	}
	t.Log(err)
	_, err = MeasureMeter(m, MeterOptions{ImportModule: "meter"}, MeterLimits{BlockCost: 10_000 * 10_000})
	if !errors.As(err, &e) || e.Limit != "BlockCost" || e.Got > 10_002*10_002 {
		t.Fatalf("block cost limit: err = %v", err)
	}
	t.Log(err)
}

// genEncode encodes a module: nTypes function types (type i takes i i32s
// and returns one i32 for odd i; type 0 is () -> ()), nImports imported
// functions of type 0, nGlobals i32 globals, one function of type 0 per
// body (each body begins with its local groups),
// a table of 10 funcrefs with a maximum, a memory, and exports.
func genEncode(tb testing.TB, nTypes, nImports, nGlobals int, bodies [][]byte) []byte {
	sec := func(out []byte, id byte, payload []byte) []byte {
		out = append(out, id)
		out = AppendU32(out, uint32(len(payload)))
		return append(out, payload...)
	}
	out := []byte(Header)
	p := AppendU32(nil, uint32(nTypes))
	for i := 0; i < nTypes; i++ {
		p = append(p, 0x60)
		p = AppendU32(p, uint32(i%4))
		for j := 0; j < i%4; j++ {
			p = append(p, ValI32)
		}
		if i%2 == 1 {
			p = append(p, 1, ValI32)
		} else {
			p = append(p, 0)
		}
	}
	out = sec(out, SecType, p)
	if nImports > 0 {
		p = AppendU32(nil, uint32(nImports))
		for i := 0; i < nImports; i++ {
			p = appendName(p, "env")
			p = appendName(p, fmt.Sprint("f", i))
			p = append(p, KindFunc, 0)
		}
		out = sec(out, SecImport, p)
	}
	p = AppendU32(nil, uint32(len(bodies)))
	for range bodies {
		p = append(p, 0)
	}
	out = sec(out, SecFunction, p)
	out = sec(out, SecTable, []byte{1, ValFuncref, 1, 10, 10})
	out = sec(out, SecMemory, []byte{1, 0, 1})
	if nGlobals > 0 {
		p = AppendU32(nil, uint32(nGlobals))
		for i := 0; i < nGlobals; i++ {
			p = append(p, ValI32, 1, 0x41, 0, 0x0b)
		}
		out = sec(out, SecGlobal, p)
	}
	p = append(AppendU32(nil, 2), appendName(nil, "memory")...)
	p = append(p, KindMemory, 0)
	p = appendName(p, "_start")
	p = append(p, KindFunc)
	p = AppendU32(p, uint32(nImports))
	out = sec(out, SecExport, p)
	out = sec(out, SecDataCount, []byte{1})
	p = AppendU32(nil, uint32(len(bodies)))
	for _, b := range bodies {
		p = AppendU32(p, uint32(len(b)))
		p = append(p, b...)
	}
	out = sec(out, SecCode, p)
	return sec(out, SecData, []byte{1, 1, 0})
}

// genModule generates a module of random shape (see TestMeasureMeterShapes).
func genModule(rng *rand.Rand) []byte {
	wide := func(small, big int) int { // an index space crossing a LEB width or not
		if rng.IntN(2) == 0 {
			return small
		}
		return big
	}
	nTypes := 1 + rng.IntN(4)
	nImports := wide(rng.IntN(3), 120+rng.IntN(20))
	nGlobals := wide(rng.IntN(3), 120+rng.IntN(20))
	nBodies := 1 + rng.IntN(4)
	var bodies [][]byte
	for i := 0; i < nBodies; i++ {
		nLocals := wide(rng.IntN(4), 16_370+rng.IntN(30))
		b := []byte{}
		if nLocals > 0 {
			b = append(b, 1)
			b = AppendU32(b, uint32(nLocals))
			b = append(b, ValI32)
		} else {
			b = append(b, 0)
		}
		b = genCode(rng, b, nImports+nBodies, nImports, nTypes, nGlobals, nLocals, 0)
		bodies = append(bodies, append(b, 0x0b))
	}
	return genEncode(nil, nTypes, nImports, nGlobals, bodies)
}

// genCode appends random instructions, balanced, up to depth 6. The
// operands are not type-correct: metering counts stack heights, it
// validates nothing.
func genCode(rng *rand.Rand, b []byte, nFuncs, nImports, nTypes, nGlobals, nLocals, depth int) []byte {
	n := rng.IntN(40 >> depth)
	if depth == 0 && rng.IntN(8) == 0 {
		n = 300 + rng.IntN(2000) // a long run: stretch costs over one LEB byte
	}
	for i := 0; i < n && len(b) < 64<<10; i++ {
		switch k := rng.IntN(22); {
		case k < 3:
			b = append(b, 0x10)
			b = AppendU32(b, uint32(rng.IntN(nFuncs)))
		case k == 3 && nImports > 0:
			b = append(b, 0x10)
			b = AppendU32(b, uint32(rng.IntN(nImports)))
		case k == 4:
			b = append(b, 0x41, 0)
			b = append(b, 0x11)
			b = AppendU32(b, uint32(rng.IntN(nTypes)))
			b = append(b, 0)
		case k <= 7 && depth < 6:
			op := []byte{0x02, 0x03, 0x04}[rng.IntN(3)]
			if op == 0x04 {
				b = append(b, 0x41, 1)
			}
			b = append(b, op, []byte{0x40, ValI32, 0}[rng.IntN(3)])
			b = genCode(rng, b, nFuncs, nImports, nTypes, nGlobals, nLocals, depth+1)
			if op == 0x04 && rng.IntN(2) == 0 {
				b = append(b, 0x05)
				b = genCode(rng, b, nFuncs, nImports, nTypes, nGlobals, nLocals, depth+1)
			}
			b = append(b, 0x0b)
		case k == 8:
			b = append(b, 0x41, 1, 0x40, 0, 0x1a) // memory.grow, drop
		case k == 9:
			b = append(b, 0x41, 0, 0x41, 0, 0x41, 0, 0xfc, []byte{10, 11, 8}[rng.IntN(3)])
			switch b[len(b)-1] {
			case 10:
				b = append(b, 0, 0)
			case 11:
				b = append(b, 0)
			case 8:
				b = append(b, 0, 0)
			}
		case k == 10:
			b = append(b, 0xd0, ValFuncref, 0x41, 1, 0xfc, 15, 0, 0x1a) // table.grow, drop
		case k == 11:
			b = append(b, 0x41, 0, 0xd0, ValFuncref, 0x41, 1, 0xfc, 17, 0) // table.fill
		case k == 12:
			b = append(b, 0x41, 0, 0x0e)
			t := rng.IntN(4)
			b = AppendU32(b, uint32(t))
			for j := 0; j <= t; j++ {
				b = AppendU32(b, uint32(rng.IntN(depth+1)))
			}
		case k == 13:
			b = append(b, 0x41, 0, 0x0d)
			b = AppendU32(b, uint32(rng.IntN(depth+1)))
		case k == 14 && nLocals > 0:
			b = append(b, 0x20)
			b = AppendU32(b, uint32(rng.IntN(nLocals)))
			b = append(b, 0x1a)
		case k == 15 && nGlobals > 0:
			b = append(b, 0x23)
			b = AppendU32(b, uint32(rng.IntN(nGlobals)))
			b = append(b, 0x1a)
		case k == 16:
			b = append(b, 0x42)
			b = appendS64(b, rng.Int64())
			b = append(b, 0x1a)
		case k == 17:
			b = append(b, 0xd2)
			b = AppendU32(b, uint32(rng.IntN(nFuncs)))
			b = append(b, 0x1a)
		case k == 18 && rng.IntN(10) == 0:
			b = append(b, 0x0c, byte(rng.IntN(depth+1))) // br: the rest is dead code
		case k == 19:
			b = append(b, 0x41, 0, 0x41, 0, 0x6a, 0x1a) // i32.add
		default:
			b = append(b, 0x01) // nop
		}
	}
	return b
}
