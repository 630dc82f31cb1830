package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Runtime compiles and runs untrusted WebAssembly modules. It is safe for
// concurrent use. Close it to release compiled code and wait for the calls
// in flight to end.
type Runtime struct {
	cfg   Config
	wz    wazero.Runtime
	cache wazero.CompilationCache
	// preparedDir keeps prepared modules (prepared.go) beside wazero's
	// cache; empty without the disk cache.
	preparedDir string
	// preparedHits counts the modules compiled from a prepared file;
	// compiles and compileHits the successful Compile calls and those an
	// already compiled module answered (Stats).
	preparedHits          atomic.Int64
	compiles, compileHits atomic.Int64
	// compileWorkers sums the goroutines wazero compiled on, over the
	// compiles that reached wazero (borrowCompileSlots).
	compileWorkers atomic.Int64
	wasiSigs       map[string]wasmbin.FuncType
	modCfg         wazero.ModuleConfig
	sem            chan struct{}
	compileSem     chan struct{} // a slot per compile (Config.MaxCompiles)
	pool           *memPool      // guest memories kept for reuse

	closing context.Context // done when Close starts
	stop    context.CancelFunc

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup // calls, and instances being prepared or closed
	modules  map[[32]byte]*compiled

	prepared      atomic.Int64 // instances prepared ahead of their call (prepare.go)
	closingBehind atomic.Int64 // instances being closed after their call returned
	snapshotBytes atomic.Int64 // kept by all snapshots (snapshot.go)
	reused        atomic.Int64 // instances reset and kept after a clean call (reuse.go)
}

// compiled is one compiled module, shared by every Module with its bytes.
type compiled struct {
	done chan struct{} // closed when cm/err are set
	cm   wazero.CompiledModule
	info *moduleInfo
	err  error
	refs int // Module handles and calls in flight; guarded by Runtime.mu
	// abandoned: err is the context error of the caller that compiled
	// it, not the module's; set before done is closed.
	abandoned bool
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
	// funcs is the number of functions the module defines, set by
	// prepareModule (not kept with a prepared module): a compile borrows
	// no more workers than there are functions to compile.
	funcs int
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
	if cfg.MaxMeteredCodeBytes <= 0 {
		cfg.MaxMeteredCodeBytes = DefaultMaxMeteredCodeBytes
	}
	if cfg.MaxCompiles <= 0 {
		cfg.MaxCompiles = min(goruntime.GOMAXPROCS(0), 4)
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
		compileSem: make(chan struct{}, cfg.MaxCompiles),
		pool:       &memPool{max: cfg.MaxInstances}}
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
				return nil, fmt.Errorf("compilation cache: %w", err)
			}
			r.cache = c
			rc = rc.WithCompilationCache(c)
			r.preparedDir = filepath.Join(dir, preparedDirName)
		}
	}
	r.wz = wazero.NewRuntimeWithConfig(ctx, rc)
	if err := r.instantiateWASI(ctx); err != nil {
		r.wz.Close(ctx)
		return nil, fmt.Errorf("instantiating WASI: %w", err)
	}
	r.wasiSigs = map[string]wasmbin.FuncType{}
	for name, d := range r.wz.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions() {
		r.wasiSigs[name] = wasmbin.FuncType{Params: d.ParamTypes(), Results: d.ResultTypes()}
	}
	if err := r.instantiateMeter(ctx); err != nil {
		r.wz.Close(ctx)
		return nil, fmt.Errorf("instantiating the meter: %w", err)
	}
	if err := r.instantiateHost(ctx); err != nil {
		r.wz.Close(ctx)
		return nil, fmt.Errorf("instantiating host functions: %w", err)
	}
	if err := r.instantiateExtism(ctx); err != nil {
		r.wz.Close(ctx)
		return nil, fmt.Errorf("instantiating Extism's host functions: %w", err)
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

// InitialMemory is the size in bytes of the module's linear memory when an
// instance starts: a call whose memory limit is below it fails at once
// (ErrMemoryLimit), so a grant below it is useless.
func (m *Module) InitialMemory() int64 { return int64(m.c.info.Memories[0].Min) * 65536 }

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
