package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Package defaults. A zero field in [Config] or [Limits] means the default.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMemoryBytes      = 64 << 20
	DefaultMaxStdout        = 1 << 20
	DefaultMaxStderr        = 64 << 10
	DefaultMaxStdin         = 1 << 20
	DefaultMaxWriteBytes    = 64 << 20
	DefaultMaxModuleBytes   = 64 << 20
	DefaultMaxTableElements = 100_000
)

// maxMemoryBytes is the most a wasm32 memory can hold (65536 pages).
const maxMemoryBytes = 1 << 32

// Config configures a [Runtime]. The zero value is ready to use and safe.
type Config struct {
	// CacheDir is the directory of the on-disk compilation cache, shared by
	// every process that uses it. If empty, it is os.UserCacheDir()+"/agrun";
	// if that cannot be determined, no disk cache is used.
	CacheDir string
	// DisableCache turns the on-disk compilation cache off: every process
	// compiles modules again. Modules are still compiled once per process.
	DisableCache bool
	// DisablePrepare turns off the background work around calls of a
	// snapshotted reactor tool (see Run): preparing the next instance
	// while a call runs, and closing a call's instance after Run returned.
	// Each call then makes and closes its own instance on its caller's
	// goroutine. The background work takes about 40 % off a Go tool's call
	// when a CPU is idle, and is skipped when every CPU already runs a
	// call; it keeps one more instance (its memory) per tool in use.
	DisablePrepare bool
	// Limits are the defaults for every call; a zero field means the package
	// default (see [Limits]).
	Limits Limits
	// MaxInstances bounds the guest instances running at once. Run calls
	// beyond it wait for a slot, or for their context to end. Instances
	// prepared ahead of their call (see DisablePrepare), which have not run
	// yet, are bounded separately by the same number. If zero,
	// 2*GOMAXPROCS.
	MaxInstances int
	// MaxModuleBytes refuses larger modules at Compile. If zero, 64 MiB.
	MaxModuleBytes int64
	// MaxTableElements is the largest table a module may declare as its
	// maximum (or, for a table without a maximum or with a larger one, as its
	// minimum, and then the code must contain no table.grow or table.fill).
	// If zero, 100,000.
	MaxTableElements uint32
	// MaxStackBytes bounds a call's guest call stack, estimated from the
	// frames of the functions it is in (parameters, locals and the deepest
	// operand stack of each, plus a fixed part; an upper bound of what
	// wazero keeps). A call going deeper ends with ErrTrap. The stack is
	// host memory outside Limits.MemoryBytes. If zero, 16 MiB; at most
	// 1 GiB. It is compiled into the module's code.
	MaxStackBytes int64
	// Logger receives what guests write with the agrun.log host function.
	// If nil, slog.Default().
	Logger *slog.Logger
}

// Limits bound one call. A zero field means the Runtime's default, whose
// zero fields mean the package defaults: 10 s, 64 MiB, 1 MiB, 64 KiB,
// 1 MiB and 64 MiB.
type Limits struct {
	// Timeout ends the call with ErrTimeout wherever the guest is, host
	// functions included.
	Timeout time.Duration
	// MemoryBytes caps the guest's linear memory (rounded down to whole
	// 64 KiB pages, at most 4 GiB). Growing past it ends the call with
	// ErrMemoryLimit.
	MemoryBytes int64
	// MaxStdout and MaxStderr cap what the guest writes; crossing a cap
	// ends the call with ErrOutputLimit at once.
	MaxStdout, MaxStderr int64
	// MaxStdin refuses larger inputs with ErrInputLimit before anything runs.
	MaxStdin int64
	// Fuel, if positive, is the call's deterministic CPU budget: the
	// guest is charged one unit per WebAssembly instruction it runs (in
	// stretches of straight-line code, paid before they run; bulk memory
	// and table instructions one more unit per 16 bytes or per element).
	// A call that needs more ends with ErrFuelExhausted (which wraps
	// ErrTimeout). The same call on the same input spends the same fuel,
	// whatever the machine's load. Zero means no fuel limit (Timeout
	// still applies).
	Fuel int64
	// MaxWriteBytes caps the bytes one call writes through its mounts, in
	// total across all of its writable mounts (data written, plus growth by
	// truncate; not freed by deleting or shrinking). Writes beyond it fail
	// in the guest with EIO (WASI preview 1 has no ENOSPC through wazero);
	// the call itself goes on.
	MaxWriteBytes int64
}

// withDefaults returns l with each zero field taken from d.
func (l Limits) withDefaults(d Limits) Limits {
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.MemoryBytes > maxMemoryBytes {
		l.MemoryBytes = maxMemoryBytes
	}
	if l.MaxStdout <= 0 {
		l.MaxStdout = d.MaxStdout
	}
	if l.MaxStderr <= 0 {
		l.MaxStderr = d.MaxStderr
	}
	if l.MaxStdin <= 0 {
		l.MaxStdin = d.MaxStdin
	}
	if l.MaxWriteBytes <= 0 {
		l.MaxWriteBytes = d.MaxWriteBytes
	}
	if l.Fuel <= 0 {
		l.Fuel = d.Fuel
	}
	return l
}

var packageLimits = Limits{
	Timeout:       DefaultTimeout,
	MemoryBytes:   DefaultMemoryBytes,
	MaxStdout:     DefaultMaxStdout,
	MaxStderr:     DefaultMaxStderr,
	MaxStdin:      DefaultMaxStdin,
	MaxWriteBytes: DefaultMaxWriteBytes,
}

// Runtime compiles and runs untrusted WebAssembly modules. It is safe for
// concurrent use. Close it to release compiled code and wait for the calls
// in flight to end.
type Runtime struct {
	cfg      Config
	wz       wazero.Runtime
	cache    wazero.CompilationCache
	wasiSigs map[string]wasmbin.FuncType
	modCfg   wazero.ModuleConfig
	sem      chan struct{}
	pool     *memPool // guest memories kept for reuse

	closing context.Context // done when Close starts
	stop    context.CancelFunc

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup // calls, and instances being prepared or closed
	modules  map[[32]byte]*compiled

	prepared      atomic.Int64 // instances prepared ahead of their call (prepare.go)
	closingBehind atomic.Int64 // instances being closed after their call returned
	snapshotBytes atomic.Int64 // kept by all snapshots (snapshot.go)
}

// compiled is one compiled module, shared by every Module with its bytes.
type compiled struct {
	done chan struct{} // closed when cm/err are set
	cm   wazero.CompiledModule
	info *moduleInfo
	err  error
	refs int // Module handles and calls in flight; guarded by Runtime.mu
}

// moduleInfo is what a compiled module keeps of its parse: its imports,
// exports, memories and custom sections (copied: the caller owns the
// bytes), its memory image (see image.go), if any, and how it is entered.
type moduleInfo struct {
	*wasmbin.Module
	image *memImage
	// reactor: the module exports _initialize and agrun_call (see
	// snapshot.go) and is run through them rather than _start.
	reactor bool
	// snap is non-nil when a reactor's instances can start from a snapshot
	// taken after _initialize (snapshot.go).
	snap *snapshotter
}

// New returns a Runtime. It fails only if the wazero runtime or the
// compilation cache directory cannot be set up.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg.Limits = cfg.Limits.withDefaults(packageLimits)
	if cfg.MaxInstances <= 0 {
		cfg.MaxInstances = 2 * goruntime.GOMAXPROCS(0)
	}
	if cfg.MaxModuleBytes <= 0 {
		cfg.MaxModuleBytes = DefaultMaxModuleBytes
	}
	if cfg.MaxTableElements == 0 {
		cfg.MaxTableElements = DefaultMaxTableElements
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxStackBytes <= 0 {
		cfg.MaxStackBytes = DefaultMaxStackBytes
	}
	if cfg.MaxStackBytes > maxStackBytes {
		cfg.MaxStackBytes = maxStackBytes
	}
	// No WithCloseOnContextDone: guests meter themselves (meter.go), which
	// also stops code without loops and costs less than wazero's exit to
	// Go at every loop iteration.
	rc := wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2)
	r := &Runtime{cfg: cfg, modules: map[[32]byte]*compiled{}, sem: make(chan struct{}, cfg.MaxInstances),
		pool: &memPool{max: cfg.MaxInstances}}
	if !cfg.DisableCache {
		dir := cfg.CacheDir
		if dir == "" {
			if uc, err := os.UserCacheDir(); err == nil {
				dir = filepath.Join(uc, "agrun")
			}
		}
		if dir != "" {
			c, err := wazero.NewCompilationCacheWithDir(dir)
			if err != nil {
				return nil, fmt.Errorf("runtime: compilation cache: %w", err)
			}
			r.cache = c
			rc = rc.WithCompilationCache(c)
		}
	}
	r.wz = wazero.NewRuntimeWithConfig(ctx, rc)
	if err := r.instantiateWASI(ctx); err != nil {
		r.wz.Close(ctx)
		return nil, fmt.Errorf("runtime: instantiating WASI: %w", err)
	}
	r.wasiSigs = map[string]wasmbin.FuncType{}
	for name, d := range r.wz.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions() {
		r.wasiSigs[name] = wasmbin.FuncType{Params: d.ParamTypes(), Results: d.ResultTypes()}
	}
	if err := r.instantiateMeter(ctx); err != nil {
		r.wz.Close(ctx)
		return nil, fmt.Errorf("runtime: instantiating the meter: %w", err)
	}
	if err := r.instantiateHost(ctx); err != nil {
		r.wz.Close(ctx)
		return nil, fmt.Errorf("runtime: instantiating host functions: %w", err)
	}
	r.modCfg = wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions("_start").
		WithRandSource(randReader).
		WithSysWalltime().
		WithSysNanotime()
	r.closing, r.stop = context.WithCancel(context.Background())
	return r, nil
}

// Close ends every call in flight (they return ErrClosed), waits for them,
// and releases all compiled code. Modules compiled by r cannot be used
// afterwards. Close is idempotent.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.stop()
	r.inflight.Wait()
	err := r.wz.Close(ctx)
	r.pool.drain()
	if r.cache != nil {
		if e := r.cache.Close(ctx); err == nil {
			err = e
		}
	}
	return err
}

// Module is a validated, compiled module. It is safe for concurrent use:
// any number of Run calls may share it. Close it when it is no longer
// needed; the compiled code is released when the last Module with the same
// bytes is closed and no call is using it.
type Module struct {
	r      *Runtime
	c      *compiled
	sha    string
	sum    [32]byte
	mu     sync.Mutex
	closed bool
}

// Compile validates wasm and compiles it, once per content per process
// (and, with the disk cache, once per content across processes).
//
// It refuses, with an error wrapping ErrCompile that names the reason:
// modules over MaxModuleBytes; malformed modules; imports other than
// wasi_snapshot_preview1 functions and the agrun functions of the guest
// ABI, with exactly their signatures; imported memories, tables and
// globals; a memory whose minimum exceeds the default memory limit; a
// table whose minimum exceeds MaxTableElements, or whose maximum does
// (or is absent) while the code applies table.grow or table.fill to it;
// code whose estimated compile cost is out of proportion to its size
// (deeply nested blocks, many locals times many blocks: see
// compileBudget); modules that do not export "memory"; and modules that
// export neither "_start" (a WASI command) nor both "_initialize" and
// "agrun_call" (a reactor, see [Runtime.Run]), or export a reactor entry
// point that is imported or whose type is not func() ().
//
// Imports of the WASI socket functions (sock_accept, sock_recv,
// sock_send, sock_shutdown) are allowed, as the guest ABI allows every
// wasi_snapshot_preview1 import (Go's syscall package imports them when a
// program uses net.FileListener), but no socket is ever preopened, so they
// can only fail (EBADF, ENOTSOCK): the network is agrun.http_request only.
func (r *Runtime) Compile(ctx context.Context, wasm []byte) (*Module, error) {
	if int64(len(wasm)) > r.cfg.MaxModuleBytes {
		return nil, fmt.Errorf("%w: module is %d bytes, over the limit of %d", ErrCompile, len(wasm), r.cfg.MaxModuleBytes)
	}
	sum := sha256.Sum256(wasm)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	c, ok := r.modules[sum]
	if !ok {
		c = &compiled{done: make(chan struct{})}
		r.modules[sum] = c
	}
	c.refs++
	r.mu.Unlock()

	if !ok {
		c.info, c.cm, c.err = r.compile(ctx, wasm)
		close(c.done)
	} else {
		select {
		case <-c.done:
		case <-ctx.Done():
			r.release(sum, c)
			return nil, ctx.Err()
		}
	}
	if c.err != nil {
		err := c.err
		r.release(sum, c)
		return nil, err
	}
	return &Module{r: r, c: c, sha: hex.EncodeToString(sum[:]), sum: sum}, nil
}

func (r *Runtime) compile(ctx context.Context, wasm []byte) (*moduleInfo, wazero.CompiledModule, error) {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	if err := r.validate(m); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	// Make instances cheap: a memory image (see image.go), else merged
	// data segments (see wasmbin.MergeData); for a reactor whose state can
	// be snapshotted after _initialize, also export its mutable globals
	// (see snapshot.go).
	info := &moduleInfo{reactor: isReactor(m)}
	image, hasImage := buildImage(m)
	if hasImage {
		info.image = dataImage(image)
	}
	bin := wasm
	switch {
	case info.reactor && (hasImage || len(m.Data) == 0):
		if snap, exported, ok := newSnapshotter(wasm, m); ok {
			info.snap, bin = snap, exported
		}
		if hasImage {
			secs, err := wasmbin.ReadSections(bin)
			if err != nil { // cannot happen: AddExports keeps the sections
				info.snap, bin, secs = nil, wasm, m.Sections
			}
			bin = wasmbin.StripSections(bin, secs, wasmbin.SecData)
		}
	case hasImage:
		bin = wasmbin.StripSections(wasm, m.Sections, wasmbin.SecData)
	default:
		if merged, err := wasmbin.MergeData(wasm, m); err == nil {
			bin = merged
		}
	}
	// Last, so that nothing above sees the meter's globals and imports.
	bin, err = r.instrument(bin)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	cm, err := r.wz.CompileModule(ctx, bin)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	// Keep only what Module reports, copied: the caller owns wasm.
	info.Module = &wasmbin.Module{Imports: m.Imports, Exports: m.Exports, Memories: m.Memories}
	for _, c := range m.Customs {
		info.Customs = append(info.Customs, wasmbin.Custom{Name: c.Name, Data: append([]byte(nil), c.Data...)})
	}
	return info, cm, nil
}

// compileBudget is the compile-cost estimate (wasmbin.Code.CompileCost) a
// module of size bytes may reach: 64 units per byte (Go modules score
// about 2.4, a small C module 7) plus a fixed allowance for small modules.
// At about 15 ns per unit, that keeps the superlinear part of compiling a
// hostile module to about 1 µs per byte, the order of what compiling an
// ordinary module costs per byte anyway.
func compileBudget(size int) int64 { return 64*int64(size) + 4_000_000 }

// agrunSigs are the host functions of the guest ABI and their signatures.
var agrunSigs = map[string]wasmbin.FuncType{
	"log":           {Params: []byte{wasmbin.ValI32, wasmbin.ValI32, wasmbin.ValI32}},
	"http_request":  {Params: []byte{wasmbin.ValI32, wasmbin.ValI32}, Results: []byte{wasmbin.ValI32}},
	"http_response": {Params: []byte{wasmbin.ValI32, wasmbin.ValI32}, Results: []byte{wasmbin.ValI32}},
}

// ValidationError describes why Compile refused a module. It is always
// wrapped together with ErrCompile.
type ValidationError struct {
	Reason string
}

// Error implements error: the reason alone.
func (e *ValidationError) Error() string { return e.Reason }

func refuse(format string, args ...any) error {
	return &ValidationError{Reason: fmt.Sprintf(format, args...)}
}

func (r *Runtime) validate(m *wasmbin.Module) error {
	for _, im := range m.Imports {
		if im.Kind != wasmbin.KindFunc {
			return refuse("import %s.%s: importing a %s is not allowed", im.Module, im.Name, wasmbin.KindName(im.Kind))
		}
		var sigs map[string]wasmbin.FuncType
		switch im.Module {
		case wasi_snapshot_preview1.ModuleName:
			sigs = r.wasiSigs
		case "agrun":
			sigs = agrunSigs
		default:
			return refuse("import %s.%s: module %q is not provided (only wasi_snapshot_preview1 and agrun)", im.Module, im.Name, im.Module)
		}
		want, ok := sigs[im.Name]
		if !ok {
			return refuse("import %s.%s: no such function", im.Module, im.Name)
		}
		if !want.Equal(im.Type) {
			return refuse("import %s.%s: signature %v, want %v", im.Module, im.Name, im.Type, want)
		}
	}
	if len(m.Memories) == 0 {
		return refuse("module defines no memory")
	}
	if min := int64(m.Memories[0].Min) * 65536; min > r.cfg.Limits.MemoryBytes {
		return refuse("initial memory of %d bytes exceeds the memory limit of %d", min, r.cfg.Limits.MemoryBytes)
	}
	if budget := compileBudget(m.Size); m.CompileCost > budget {
		return refuse("the code is too costly to compile (nesting of blocks and loops, locals times blocks): cost %d, budget %d for a module of %d bytes", m.CompileCost, budget, m.Size)
	}
	limit := r.cfg.MaxTableElements
	for i, t := range m.Tables {
		if t.Min > limit {
			return refuse("table %d: initial size %d exceeds the limit of %d elements", i, t.Min, limit)
		}
		if (!t.HasMax || t.Max > limit) && m.GrownTables[uint32(i)] {
			max := "no maximum"
			if t.HasMax {
				max = fmt.Sprintf("maximum %d", t.Max)
			}
			return refuse("table %d: %s (limit %d elements) and the code contains table.grow or table.fill: the table could grow without bound", i, max, limit)
		}
	}
	if _, ok := exported(m, "memory", wasmbin.KindMemory); !ok {
		return refuse("module exports no memory named \"memory\"")
	}
	_, hasStart := exported(m, "_start", wasmbin.KindFunc)
	_, hasInit := exported(m, "_initialize", wasmbin.KindFunc)
	_, hasCall := exported(m, "agrun_call", wasmbin.KindFunc)
	switch {
	case hasInit && hasCall:
		for _, name := range []string{"_initialize", "agrun_call"} {
			if err := checkEntry(m, name); err != nil {
				return err
			}
		}
	case hasStart:
	case hasInit:
		return refuse("module exports _initialize but no agrun_call function: a reactor tool must export both (or be a WASI command with _start)")
	default:
		return refuse("module exports no _start function: a tool is a WASI command (_start) or a reactor exporting _initialize and agrun_call")
	}
	return nil
}

// exported returns the index of the export called name of kind kind.
func exported(m *wasmbin.Module, name string, kind byte) (uint32, bool) {
	for _, e := range m.Exports {
		if e.Name == name && e.Kind == kind {
			return e.Index, true
		}
	}
	return 0, false
}

// isReactor says whether a (validated) module is run as a reactor.
func isReactor(m *wasmbin.Module) bool {
	_, init := exported(m, "_initialize", wasmbin.KindFunc)
	_, call := exported(m, "agrun_call", wasmbin.KindFunc)
	return init && call
}

// checkEntry checks that the exported function name is defined by the
// module (not a re-exported import) and takes and returns nothing.
func checkEntry(m *wasmbin.Module, name string) error {
	idx, _ := exported(m, name, wasmbin.KindFunc)
	imported := 0
	for _, im := range m.Imports {
		if im.Kind == wasmbin.KindFunc {
			imported++
		}
	}
	if int(idx) < imported {
		return refuse("export %s: an imported function cannot be a tool's entry point", name)
	}
	if d := int(idx) - imported; d >= len(m.FuncTypes) {
		return refuse("export %s: function index %d out of range", name, idx)
	} else if t := m.Types[m.FuncTypes[d]]; len(t.Params) != 0 || len(t.Results) != 0 {
		return refuse("export %s: signature %v, want func() ()", name, t)
	}
	return nil
}

// release drops one reference to c and closes its code after the last.
func (r *Runtime) release(sum [32]byte, c *compiled) {
	r.mu.Lock()
	c.refs--
	last := c.refs == 0
	if last && r.modules[sum] == c {
		delete(r.modules, sum)
	}
	r.mu.Unlock()
	if last && c.info != nil && c.info.snap != nil {
		r.dropPrepared(c.info.snap)
		r.releaseSnapshots(c.info.snap)
	}
	if last && c.cm != nil {
		c.cm.Close(context.Background())
	}
}

// acquire adds a reference for a call; false if the module is closed.
func (m *Module) acquire() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.r.mu.Lock()
	m.c.refs++
	m.r.mu.Unlock()
	return true
}

// Close releases the module. Calls in flight finish normally; later calls
// return ErrClosed. Close is idempotent and always returns nil; the context
// is accepted for symmetry with Runtime.Close.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.r.release(m.sum, m.c)
	return nil
}

// SHA256 returns the lowercase hex SHA-256 of the module's bytes as given
// to Compile.
func (m *Module) SHA256() string { return m.sha }

// CustomSection returns the payload of the first custom section with the
// given name, or nil if there is none. The caller must not modify it.
func (m *Module) CustomSection(name string) []byte { return m.c.info.CustomSection(name) }

// Imports returns the module's imports as "module.name", in module order.
func (m *Module) Imports() []string {
	out := make([]string, len(m.c.info.Imports))
	for i, im := range m.c.info.Imports {
		out[i] = im.Module + "." + im.Name
	}
	return out
}

// Exports returns the names of the module's exports, in module order.
func (m *Module) Exports() []string {
	out := make([]string, len(m.c.info.Exports))
	for i, e := range m.c.info.Exports {
		out[i] = e.Name
	}
	return out
}
