package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// The guest meters itself: Compile rewrites every module (see
// wasmbin.Instrument) so that it charges a fuel counter before each
// stretch of straight-line code and calls the host's refill function
// when the counter runs out, and raises a stack-depth counter at each
// function entry. That is how every call ends at its deadline whatever
// the shape of its code — wazero's own interruption (WithCloseOnContextDone)
// checks only at loop headers, so an exponential tree of calls without a
// loop ran for ever — and how the call stack, which wazero grows on the Go
// heap up to 400 MB, is bounded. docs/RATIONALE.md has the reasons for
// this design.

// meterModule is the import module of the metering functions. Guests
// cannot import it themselves: Compile refuses every import module but
// wasi_snapshot_preview1 and agrun.
const meterModule = "agrun:sandbox"

// fuelQuantum is how much fuel one refill hands out when no fuel limit
// is nearer: about a millisecond of guest code, so a call whose deadline
// passed or whose context ended stops within about that much more.
const fuelQuantum = 1 << 20

// DefaultMaxStackBytes is the default of Config.MaxStackBytes.
const DefaultMaxStackBytes = 16 << 20

// maxStackBytes bounds Config.MaxStackBytes (the counter is an i32).
const maxStackBytes = 1 << 30

// ErrFuelExhausted: the call used up its fuel (Limits.Fuel). It wraps
// ErrTimeout: fuel is a deterministic CPU-time budget.
var ErrFuelExhausted = fmt.Errorf("%w: fuel exhausted", ErrTimeout)

// errStackExhausted is the cause a call's context ends with when the
// guest's estimated call stack passed Config.MaxStackBytes.
var errStackExhausted = errors.New("call stack exhausted")

// instrument rewrites a module for metering.
func (r *Runtime) instrument(wasm []byte) ([]byte, error) {
	return wasmbin.Instrument(wasm, r.meterOptions())
}

func (r *Runtime) meterOptions() wasmbin.MeterOptions {
	return wasmbin.MeterOptions{ImportModule: meterModule, MaxStack: uint32(r.cfg.MaxStackBytes)}
}

// What Compile lets wazero compile, measured on the metered code before
// anything is built (wasmbin.MeasureMeter), besides
// Config.MaxMeteredCodeBytes. wazero 1.12's compiler needs, per function,
// about 7.5 KB per block of the metered body and 80 bytes per byte of it
// while it compiles it, and time in the square of its blocks (about 40 ns
// per block squared; a loop counts 3): a body of 12,500 calls, 25 KB as
// written and 337 KB metered, took 5.5 s and 190 MB. docs/SECURITY.md
// ("Compiling") has the figures.
const (
	// maxMeteredBody bounds a metered function body: 80 MB to compile
	// straight-line code. Go's largest are about 60 KB, Haskell's 160 KB.
	maxMeteredBody = 1 << 20
	// maxMeteredBlocks bounds a metered function's blocks: 75 MB and
	// about 4 s (loops: 6 s) to compile. Go's most are 1,685, GHC's 5,119.
	maxMeteredBlocks = 10_000
)

// blockBudget is the compile cost a module of size bytes may reach in
// the square of its functions' metered blocks (wasmbin.MeterSize.BlockCost):
// 64 per byte and one function at maxMeteredBlocks, so that the
// superlinear part of compiling stays within about 2.5 µs per byte and
// 4 s. A Go module scores 8 per byte, a Haskell one 27.
func blockBudget(size int) int64 { return 64*int64(size) + maxMeteredBlocks*maxMeteredBlocks }

// checkMetered refuses m if its metered code would cost more to compile
// than the limits above, Config.MaxMeteredCodeBytes or compileBudget
// allow; it builds nothing.
func (r *Runtime) checkMetered(m *wasmbin.Module) error {
	_, err := wasmbin.MeasureMeter(m, r.meterOptions(), wasmbin.MeterLimits{
		Body:      maxMeteredBody,
		Code:      r.cfg.MaxMeteredCodeBytes,
		Blocks:    maxMeteredBlocks,
		BlockCost: blockBudget(m.Size),
		// The budget again, on what wazero will compile: each charge
		// adds a block, and a body with many calls and many locals but
		// no blocks of its own costs nothing as written and minutes
		// once metered.
		CompileCost: compileBudget(m.Size),
	})
	var e *wasmbin.MeterLimitError
	if errors.As(err, &e) {
		return refuse("the code is too costly to compile once metered: %v", err)
	}
	return err
}

// instantiateMeter registers the metering functions.
func (r *Runtime) instantiateMeter(ctx context.Context) error {
	i64 := api.ValueTypeI64
	b := r.wz.NewHostModuleBuilder(meterModule)
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostRefill), []api.ValueType{i64}, []api.ValueType{i64}).
		WithParameterNames("fuel").
		Export(wasmbin.MeterRefill)
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostStack), nil, nil).
		Export(wasmbin.MeterStack)
	_, err := b.Instantiate(ctx)
	return err
}

// stopGuest ends the guest's call at once: the exit error passes through
// wazero untouched, and Run's classify reads why from the call state and
// the contexts.
func stopGuest(ctx context.Context) {
	code := sys.ExitCodeContextCanceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = sys.ExitCodeDeadlineExceeded
	}
	panic(sys.NewExitError(code))
}

// hostRefill implements refill(fuel i64) -> i64: the guest's counter
// (zero or below) ran out. It ends the call if the call's context ended
// (the deadline, a limit crossed elsewhere, the caller, the runtime
// closing) or its fuel is spent; otherwise it returns the new counter.
func hostRefill(ctx context.Context, _ api.Module, stack []uint64) {
	if ctx.Err() != nil {
		stopGuest(ctx)
	}
	n := int64(fuelQuantum)
	if st := stateOf(ctx); st != nil {
		var ok bool
		if n, ok = st.refuel(int64(stack[0])); !ok {
			st.fuelOut.Store(true)
			st.cancel(ErrFuelExhausted)
			stopGuest(ctx)
		}
	}
	stack[0] = uint64(n)
}

// refuel accounts for a refill: fuel is what the guest's counter holds
// (zero or below: what it spent beyond the last grant). It returns the
// new counter, or false if the call's fuel limit is spent. Host functions
// run on the guest's goroutine: no locking.
func (st *callState) refuel(fuel int64) (int64, bool) {
	used := st.fuelGranted - fuel
	n := int64(fuelQuantum)
	if st.fuelLimit > 0 {
		if used > st.fuelLimit {
			return 0, false
		}
		n = min(n, st.fuelLimit-used)
	}
	st.fuelGranted = used + n
	return n, true
}

// fuelUsed returns what the guest of instance mod spent: the fuel granted
// less what its counter still holds.
func (st *callState) fuelUsed(mod api.Module) int64 {
	g := mod.ExportedGlobal(wasmbin.MeterFuelExport)
	if g == nil {
		return 0
	}
	return st.fuelGranted - int64(g.Get())
}

// hostStack implements stack(): the guest's estimated call stack passed
// the limit. It ends the call (ErrTrap, as a stack overflow in wazero
// would).
func hostStack(ctx context.Context, _ api.Module, _ []uint64) {
	if st := stateOf(ctx); st != nil {
		st.stackOut.Store(true)
		st.cancel(errStackExhausted)
	}
	stopGuest(ctx)
}
