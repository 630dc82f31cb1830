package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	goruntime "runtime"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Compile validates wasm and compiles it, once per content per process
// (and, with the disk cache, once per content across processes).
//
// It refuses, with an error wrapping ErrCompile that names the reason:
// modules over MaxModuleBytes; malformed modules; imports other than
// wasi_snapshot_preview1 functions, the agrun functions of the guest
// ABI and Extism's host functions (extism.go), with exactly their signatures; imported memories, tables and
// globals; a memory whose minimum exceeds the default memory limit; a
// table whose minimum exceeds MaxTableElements, or whose maximum does
// (or is absent) while the code applies table.grow or table.fill to it;
// code whose estimated compile cost is out of proportion to its size
// (deeply nested blocks, many locals times many blocks) or, measured on
// what metering would make of it before it is made, too large or costly
// to compile (a metered function body over 1 MiB or 10,000 blocks, the
// metered code over Config.MaxMeteredCodeBytes, the square of each
// function's blocks summed over 64 per byte of the module plus 10^8);
// modules that do not export "memory"; and modules that
// export neither "_start" (a WASI command) nor both "_initialize" and
// "agrun_call" (a reactor, see [Runtime.Run]), or export a reactor entry
// point that is imported or whose type is not func() (). A module that
// imports extism:host/env is an Extism plug-in and needs neither entry
// point: a call names its function (see [Plugin]).
//
// Imports of the WASI socket functions (sock_accept, sock_recv,
// sock_send, sock_shutdown) are allowed, as the guest ABI allows every
// wasi_snapshot_preview1 import (Go's syscall package imports them when a
// program uses net.FileListener), but no socket is ever preopened, so they
// can only fail (EBADF, ENOTSOCK): the network is agrun.http_request only.
//
// Compiling a module takes one of Config.MaxCompiles slots, from its
// checks to wazero's compile; Compile waits for one, or returns ctx's
// error when ctx ends first (a Compile of the same module waiting for
// that one then compiles it itself). A module refused by its checks is refused
// before anything of the metered module or wazero's compile is built.
func (r *Runtime) Compile(ctx context.Context, wasm []byte) (*Module, error) {
	if int64(len(wasm)) > r.cfg.MaxModuleBytes {
		return nil, fmt.Errorf("%w: module is %d bytes, over the limit of %d", ErrCompile, len(wasm), r.cfg.MaxModuleBytes)
	}
	sum := sha256.Sum256(wasm)
	for {
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
			c.info, c.cm, c.err = r.compile(ctx, wasm, sum)
			if c.err != nil && ctx.Err() != nil {
				// This caller's context ended the compile (or the wait for
				// a slot): the next Compile of the module starts afresh.
				c.abandoned = true
				r.mu.Lock()
				if r.modules[sum] == c {
					delete(r.modules, sum)
				}
				r.mu.Unlock()
			}
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
			if ok && c.abandoned && ctx.Err() == nil {
				continue // another caller's context ended its compile: compile it ourselves
			}
			return nil, err
		}
		r.compiles.Add(1)
		if ok {
			r.compileHits.Add(1)
		}
		return &Module{r: r, c: c, sha: hex.EncodeToString(sum[:]), sum: sum}, nil
	}
}

// oneCompileSlot is the context key of WithOneCompileSlot.
type oneCompileSlot struct{}

// WithOneCompileSlot returns ctx for a Compile that takes one compile slot
// and compiles on one goroutine, borrowing no idle slot: for a server
// whose clients share the slots fairly (a compile that borrowed every
// idle slot would make another client's compile wait for it to end).
func WithOneCompileSlot(ctx context.Context) context.Context {
	return context.WithValue(ctx, oneCompileSlot{}, true)
}

// borrowCompileSlots takes the compile slots free now, at most limit and
// up to GOMAXPROCS in all with the one held, without waiting, and returns
// how many it took.
func (r *Runtime) borrowCompileSlots(limit int) int {
	n := 0
	for n < limit && n+1 < goruntime.GOMAXPROCS(0) {
		select {
		case r.compileSem <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func (r *Runtime) compile(ctx context.Context, wasm []byte, sum [32]byte) (*moduleInfo, wazero.CompiledModule, error) {
	select {
	case r.compileSem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-r.compileSem }()
	var key string
	if r.preparedDir != "" {
		key = r.preparedKey(sum)
		if info, bin, ok := r.loadPrepared(key); ok {
			if cm, err := r.wz.CompileModule(ctx, bin); err == nil {
				r.preparedHits.Add(1)
				return info, cm, nil
			} else if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("%w: %w", ErrCompile, err)
			}
			// wazero refused what an earlier process prepared: prepare it again.
		}
	}
	info, bin, image, err := r.prepareModule(wasm)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	// Idle compile slots lend their cores to this compile: wazero compiles
	// the module's functions on that many goroutines (its experimental
	// compilation workers), so a cold compile alone on the machine uses
	// every core a compile may, not one (docs/PERFORMANCE.md, "Cold first
	// call"). Borrowed only around wazero's compile (agrun's own steps
	// above are serial) and held to its end, so compiles still use at
	// most MaxCompiles cores at once; a server's clients' compiles borrow
	// none (WithOneCompileSlot). wazero's serial compile never looked at
	// ctx; its parallel one does, and on cancellation leaves memory it
	// mapped unreleased, so it gets ctx without its cancellation.
	extra := 0
	if ctx.Value(oneCompileSlot{}) == nil {
		// A worker beyond the functions to compile would hold its slot
		// idle to the compile's end.
		extra = r.borrowCompileSlots(min(goruntime.GOMAXPROCS(0), info.funcs) - 1)
	}
	r.compileWorkers.Add(int64(1 + extra))
	cm, err := r.wz.CompileModule(experimental.WithCompilationWorkers(context.WithoutCancel(ctx), 1+extra), bin)
	for range extra {
		<-r.compileSem
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	if key != "" {
		r.storePrepared(key, info, bin, image)
	}
	return info, cm, nil
}

// prepareModule is agrun's part of compiling wasm: parse and validate it, and
// make what wazero will compile (bin) and what instances start from (the
// memory image, the snapshot exports). Its result depends only on wasm and
// on what preparedKey covers (see prepared.go).
func (r *Runtime) prepareModule(wasm []byte) (info *moduleInfo, bin, image []byte, err error) {
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := r.validate(m); err != nil {
		return nil, nil, nil, err
	}
	// Make instances cheap: a memory image (see image.go), else merged
	// data segments (see wasmbin.MergeData); for a reactor whose state can
	// be snapshotted after _initialize, also export its mutable globals
	// (see snapshot.go).
	info = &moduleInfo{reactor: isReactor(m), funcs: len(m.FuncTypes)}
	image, hasImage := buildImage(m)
	if hasImage {
		info.image = dataImage(image)
	}
	bin = wasm
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
		return nil, nil, nil, err
	}
	// Keep only what Module reports, copied: the caller owns wasm.
	info.Module = &wasmbin.Module{Imports: m.Imports, Exports: m.Exports, Memories: m.Memories}
	for _, c := range m.Customs {
		info.Customs = append(info.Customs, wasmbin.Custom{Name: c.Name, Data: append([]byte(nil), c.Data...)})
	}
	if !hasImage {
		image = nil
	}
	return info, bin, image, nil
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
		case ExtismModule:
			sigs = extismSigs
		default:
			return refuse("import %s.%s: module %q is not provided (only wasi_snapshot_preview1, agrun and %s)", im.Module, im.Name, im.Module, ExtismModule)
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
	if err := r.checkMetered(m); err != nil {
		return err
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
	case isPlugin(m):
		// An Extism plug-in is entered through the function a call names
		// (Module.PluginFunction checks it), after _initialize if it has one.
		if hasInit {
			if err := checkEntry(m, "_initialize"); err != nil {
				return err
			}
		}
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

// isReactor says whether a (validated) module is run as a reactor: its
// _initialize runs first (once, for a snapshot), then agrun_call, or, for
// an Extism plug-in, the function the call names.
func isReactor(m *wasmbin.Module) bool {
	_, init := exported(m, "_initialize", wasmbin.KindFunc)
	_, call := exported(m, "agrun_call", wasmbin.KindFunc)
	return init && (call || isPlugin(m))
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
