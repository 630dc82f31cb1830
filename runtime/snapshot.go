package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/agcore/agrun/internal/wasmbin"
	seek "github.com/agcore/agrun/runtime/internal/sandboxfs/_seek"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// Reactor tools and their snapshots.
//
// A tool is either a WASI command (it exports _start, which runs the whole
// program) or a reactor: it exports _initialize, which sets the program up
// (for Go: the runtime's start-up and every package's init), and
// agrun_call, which handles one call (reads stdin, writes stdout, returns
// or exits). A Go program built with -buildmode=c-shared against the guest
// SDK is such a reactor. A fresh instance of a reactor runs _initialize,
// then agrun_call; for a Go tool about two thirds of that is the start-up,
// and it is the same in every call.
//
// So the runtime runs _initialize once, in an instance of its own, and
// keeps the result: the memory's contents (its non-zero pages) and the
// values of the mutable globals. Each call then gets a fresh instance whose
// memory starts as that image (copied in, as the data image is for a
// command) and whose mutable globals are set to those values, and calls
// agrun_call. Nothing of one call reaches another: the snapshot is taken
// before any call's input exists, and every call starts from it again.
//
// wazero lets the host set only exported globals, so Compile adds an export
// for each mutable global (named snapshotGlobalPrefix + its index among
// the module's globals). A snapshot is only exact when nothing else holds
// state across the two steps, so a module is snapshotted only when
//   - it has no start function (it would run again in every instance, on
//     top of the image);
//   - its code cannot change a table (table.set, table.grow, table.fill,
//     table.copy, table.init, elem.drop): tables are rebuilt from the
//     element segments in each instance, so a change _initialize made to
//     one would be lost;
//   - its mutable globals are numbers (no v128, no references);
//   - its data can be applied as an image (image.go), or it has none.
// and a snapshot is kept only when _initialize had no effect outside its
// instance's memory and globals: it did not read stdin, wrote nothing to
// stdout or stderr, called no agrun function, and did not touch a mount (while snapshotting,
// each mount is replaced by a stand-in that records any use and fails).
// Otherwise, and when _initialize fails, each call runs _initialize in
// its own instance: slower, same results.
//
// What the guest sees at _initialize is what it would see in a call except
// stdin (empty) and the mounts' contents: the same argv, environment (none)
// and preopened directory names. The snapshot is therefore per argv and
// mount set (guest paths and modes), of which a module keeps at most
// maxSnapshots. What differs from running _initialize in every call, and is
// documented for tool authors in guest-sdk/ABI.md: values computed during
// initialisation are computed once per process, random ones included (Go's
// runtime seeds math/rand's global functions and map iteration order
// there, so those repeat from call to call; crypto/rand and the clocks are
// live in every call).

// snapshotGlobalPrefix starts the names of the exports Compile adds for a
// reactor's mutable globals.
const snapshotGlobalPrefix = "agrun.snapshot.global."

// maxSnapshots bounds the snapshots one module keeps (one per argv and
// mount set); calls with further configurations run _initialize.
const maxSnapshots = 16

// snapshotter holds a compiled reactor's snapshots.
type snapshotter struct {
	globals []string // the exports of the mutable globals, in order

	mu      sync.Mutex
	entries map[string]*snapEntry
}

// snapEntry is the snapshot of one configuration (argv and mounts).
type snapEntry struct {
	lock  chan struct{}            // held (one element in) while a snapshot is taken
	snap  atomic.Pointer[snapshot] // set once taken
	never atomic.Bool              // this configuration is not snapshotted

	preparing atomic.Bool // an instance is being made ahead (prepare.go)

	// Instances ready for a call (prepare.go): made ahead, or reused
	// after a clean call; recycling counts clean instances being reset,
	// and wake, if not nil, is closed when one of them is done.
	mu        sync.Mutex
	ready     []*prepared
	recycling int
	wake      chan struct{}
}

// snapshot is an instance's state right after _initialize.
type snapshot struct {
	mem     *memImage
	globals []uint64 // in snapshotter.globals order
}

// newSnapshotter returns a snapshotter and the module to compile instead
// of wasm (its mutable globals exported), or false if instances of m
// cannot start from a snapshot (see above; the data is checked by the
// caller).
func newSnapshotter(wasm []byte, m *wasmbin.Module) (*snapshotter, []byte, bool) {
	if m.HasStart || m.MutatesTables || m.UsesDataIndex {
		return nil, nil, false
	}
	var exps []wasmbin.Export
	s := &snapshotter{entries: map[string]*snapEntry{}}
	for i, g := range m.Globals {
		if !g.Mutable {
			continue
		}
		switch g.Type {
		case wasmbin.ValI32, wasmbin.ValI64, wasmbin.ValF32, wasmbin.ValF64:
		default:
			return nil, nil, false
		}
		name := snapshotGlobalPrefix + strconv.Itoa(i)
		exps = append(exps, wasmbin.Export{Name: name, Kind: wasmbin.KindGlobal, Index: uint32(m.GlobalImports + i)})
		s.globals = append(s.globals, name)
	}
	out, err := wasmbin.AddExports(wasm, m, exps)
	if err != nil {
		return nil, nil, false
	}
	return s, out, true
}

// snapshotKey identifies what a reactor's _initialize can see of a call.
func snapshotKey(in Input) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%q", in.Args)
	for _, m := range in.Mounts {
		fmt.Fprintf(&b, " %q:%t:%t", m.Guest, m.Writable, m.AllowDelete)
	}
	return b.String()
}

// get returns the snapshot for the call's configuration and its entry,
// taking it first if need be with take (which returns nil, and whether
// that verdict is final, when there is none). It returns a nil snapshot
// when the call must run _initialize itself, and the context's error if
// ctx ends while another call is taking the snapshot.
func (s *snapshotter) get(ctx context.Context, key string, take func() (snap *snapshot, final bool)) (*snapshot, *snapEntry, error) {
	s.mu.Lock()
	e := s.entries[key]
	if e == nil {
		if len(s.entries) >= maxSnapshots {
			s.mu.Unlock()
			return nil, nil, nil
		}
		e = &snapEntry{lock: make(chan struct{}, 1)}
		s.entries[key] = e
	}
	s.mu.Unlock()
	if snap := e.snap.Load(); snap != nil || e.never.Load() {
		return snap, e, nil
	}
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-e.lock }()
	if snap := e.snap.Load(); snap != nil || e.never.Load() {
		return snap, e, nil
	}
	snap, final := take()
	if snap != nil {
		e.snap.Store(snap)
	} else if final {
		e.never.Store(true)
	}
	return snap, e, nil
}

// errSideEffect ends a snapshot's _initialize that reached outside its
// instance.
var errSideEffect = errors.New("_initialize had an effect outside its instance")

// whileSnapshotting reports whether st belongs to a snapshot being taken;
// if so the host function called is a side effect: the snapshot is
// abandoned (the guest is stopped), and stack[0], if given, gets EFAULT.
func (st *callState) whileSnapshotting(stack []uint64) bool {
	if st == nil || !st.snapshotting {
		return false
	}
	st.sideEffect()
	if len(stack) > 0 {
		stack[0] = api.EncodeI32(codeFault)
	}
	return true
}

func (st *callState) sideEffect() {
	st.touched.Store(true)
	st.cancel(errSideEffect)
}

// takeSnapshot runs the reactor's _initialize in an instance of its own,
// with the call's argv and limits, empty stdin, no network, and stand-ins
// for the mounts, and returns the instance's state, or nil and whether
// that is final (a side effect, or _initialize trapped or exited: every
// call would do the same). When the time or memory limit, the caller's
// context or the runtime's closing ended _initialize, it is not final and
// failure is the call's error: running _initialize again in the call
// would only end the same way, at twice the cost.
func (r *Runtime) takeSnapshot(ctx context.Context, m *Module, in Input, lim Limits) (snap *snapshot, final bool, failure error) {
	info := m.c.info
	timeoutCtx, callCtx, cancel, done := r.callContexts(ctx, lim.Timeout)
	defer done()

	st := newCallState(r, m, nil, cancel)
	st.snapshotting = true
	st.name, st.lim = in.Name, lim // the limits an error names
	st.fuelLimit = lim.Fuel
	defer st.close()
	out := &capWriter{max: 0, onExceed: st.sideEffect}
	cfg := r.modCfg.
		WithStartFunctions().
		WithStdin(stdinProbe{st.sideEffect}).
		WithStdout(out).
		WithStderr(out).
		WithArgs(in.Args...).
		WithNanosleep(sleeper(callCtx))
	if len(in.Mounts) > 0 {
		probes := make([]probeFS, len(in.Mounts))
		for i := range probes {
			probes[i] = newProbeFS(st.sideEffect)
		}
		cfg = cfg.WithFSConfig(fsConfig(guestPaths(in.Mounts), probes))
	}
	runCtx := context.WithValue(callCtx, callStateKey{}, st)
	mem := &memAllocator{pool: r.pool, limit: uint64(lim.MemoryBytes) &^ 0xffff, image: info.image, onExceed: st.memoryExceeded}
	runCtx = experimental.WithMemoryAllocator(runCtx, mem)

	mod, err := r.wz.InstantiateModule(runCtx, m.c.cm, cfg)
	if err != nil {
		return nil, false, nil // the call's own instantiation reports it
	}
	defer mod.Close(context.Background())
	_, err = mod.ExportedFunction("_initialize").Call(runCtx)
	expired := errors.Is(timeoutCtx.Err(), context.DeadlineExceeded)
	switch {
	case st.touched.Load():
		return nil, true, nil
	case callCtx.Err() != nil || st.memExceeded.Load() || st.hostErr.Load() != nil:
		return nil, false, st.classify(ctx, timeoutCtx, callCtx, expired, err, &Output{})
	case err != nil:
		return nil, true, nil // a trap or an exit: every call would do the same
	}
	snap = &snapshot{globals: make([]uint64, len(info.snap.globals))}
	for i, name := range info.snap.globals {
		g := mod.ExportedGlobal(name)
		if g == nil {
			return nil, true, nil
		}
		snap.globals[i] = g.Get()
	}
	memory := mod.Memory()
	pages, _ := memory.Grow(0) // Size() wraps to 0 at 4 GiB; the page count does not
	size := uint64(pages) * 65536
	if size >= 1<<32 {
		return nil, true, nil // Read cannot take it in one piece; not worth two
	}
	buf, ok := memory.Read(0, uint32(size))
	if !ok {
		return nil, true, nil
	}
	snap.mem = imageOf(buf)
	if !r.reserveSnapshot(snap.mem) {
		return nil, true, nil
	}
	return snap, true, nil
}

// maxSnapshotBytes bounds the memory all of a Runtime's snapshots keep
// (their non-zero pages): a hostile _initialize can fill its memory up to
// the limit, and a module keeps up to maxSnapshots snapshots. A snapshot
// beyond the budget is not kept (its configuration runs _initialize in
// every call); modules released give their share back.
var maxSnapshotBytes int64 = 256 << 20 // a variable for the tests

// reserveSnapshot claims im's bytes from the budget; false if they do not
// fit.
func (r *Runtime) reserveSnapshot(im *memImage) bool {
	n := im.bytes()
	if r.snapshotBytes.Add(n) > maxSnapshotBytes {
		r.snapshotBytes.Add(-n)
		return false
	}
	return true
}

// releaseSnapshots gives the bytes of a released module's snapshots back
// to the budget.
func (r *Runtime) releaseSnapshots(s *snapshotter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if snap := e.snap.Load(); snap != nil {
			r.snapshotBytes.Add(-snap.mem.bytes())
		}
	}
}

// imageOf records memory contents as runs of non-zero pages (4 KiB), copied.
func imageOf(buf []byte) *memImage {
	const page = 4096
	var zero [page]byte
	im := &memImage{size: uint64(len(buf))}
	start := -1                                      // start of the current run of non-zero pages
	for off := 0; off < len(buf)+page; off += page { // one step past the end closes the last run
		nonZero := false
		if off < len(buf) {
			end := min(off+page, len(buf))
			nonZero = !bytes.Equal(buf[off:end], zero[:end-off])
		}
		switch {
		case nonZero && start < 0:
			start = off
		case !nonZero && start >= 0:
			end := min(off, len(buf))
			im.runs = append(im.runs, imageRun{off: uint64(start), data: bytes.Clone(buf[start:end])})
			start = -1
		}
	}
	return im
}

// restore makes a fresh instance of a snapshotted reactor what the
// snapshot recorded: its memory holds the image already (the allocator
// copied it in); grow it to the snapshot's size and set the globals.
func restore(mod api.Module, s *snapshotter, snap *snapshot) error {
	memory := mod.Memory()
	if cur := uint64(memory.Size()); cur < snap.mem.size {
		if _, ok := memory.Grow(uint32((snap.mem.size - cur) / 65536)); !ok {
			return fmt.Errorf("%w: restoring the snapshot's memory of %d bytes failed", ErrMemoryLimit, snap.mem.size)
		}
	}
	for i, name := range s.globals {
		g, ok := mod.ExportedGlobal(name).(api.MutableGlobal)
		if !ok { // cannot happen: Compile exported them
			return fmt.Errorf("snapshot: global %s is not exported", name)
		}
		g.Set(snap.globals[i])
	}
	return nil
}

// stdinProbe is a snapshot's stdin: reading it is a side effect (in a
// call, _initialize would read the call's input).
type stdinProbe struct{ touch func() }

func (p stdinProbe) Read([]byte) (int, error) { p.touch(); return 0, io.EOF }

// probeFS stands in for a mount while a snapshot is taken: the guest sees
// the directory preopened under the same name, and any use of it is a side
// effect that abandons the snapshot (and fails with ENOSYS). Opening the
// root read-only once is not a use: wazero does it (lazily, the first time
// the preopen is looked at) to answer fd_prestat_get — is it a directory?
// — which Go's start-up calls for every preopen; the result is a probeDir.
// Any further open, the guest's own open of the root included, is a use:
// it would give the guest a descriptor that a call's fresh instance does
// not have. (Closing a preopen the guest never used is not seen: wazero
// has not opened it yet. The call's instance then has the preopen again,
// which only the guest's own bookkeeping can notice.)
type probeFS struct {
	touch  func()
	opened *bool // the root was opened once
}

func newProbeFS(touch func()) probeFS { return probeFS{touch: touch, opened: new(bool)} }

func (p probeFS) fail() experimentalsys.Errno { p.touch(); return experimentalsys.ENOSYS }

func (p probeFS) OpenFile(path string, flag experimentalsys.Oflag, _ fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	if path == "." && flag == experimentalsys.O_RDONLY && !*p.opened {
		*p.opened = true
		d := &probeDir{touch: p.touch}
		d.Fn = func(int64, int) (int64, experimentalsys.Errno) { return 0, d.fail() }
		return d, 0
	}
	return nil, p.fail()
}

// probeDir is a probeFS's root directory: it says it is a directory;
// anything else, closing it included (the guest closing its preopen), is a
// side effect. (The instance's own close comes after the verdict.)
type probeDir struct {
	seek.Adapter // Seek, through Fn (see package seek); wazero's defaults
	touch        func()
}

func (d *probeDir) fail() experimentalsys.Errno { d.touch(); return experimentalsys.ENOSYS }

func (d *probeDir) IsDir() (bool, experimentalsys.Errno)           { return true, 0 }
func (d *probeDir) Close() experimentalsys.Errno                   { d.touch(); return 0 }
func (p probeFS) Lstat(string) (sys.Stat_t, experimentalsys.Errno) { return sys.Stat_t{}, p.fail() }
func (p probeFS) Stat(string) (sys.Stat_t, experimentalsys.Errno)  { return sys.Stat_t{}, p.fail() }
func (p probeFS) Mkdir(string, fs.FileMode) experimentalsys.Errno  { return p.fail() }
func (p probeFS) Chmod(string, fs.FileMode) experimentalsys.Errno  { return p.fail() }
func (p probeFS) Rename(string, string) experimentalsys.Errno      { return p.fail() }
func (p probeFS) Rmdir(string) experimentalsys.Errno               { return p.fail() }
func (p probeFS) Unlink(string) experimentalsys.Errno              { return p.fail() }
func (p probeFS) Link(string, string) experimentalsys.Errno        { return p.fail() }
func (p probeFS) Symlink(string, string) experimentalsys.Errno     { return p.fail() }
func (p probeFS) Readlink(string) (string, experimentalsys.Errno)  { return "", p.fail() }
func (p probeFS) Utimens(string, int64, int64) experimentalsys.Errno {
	return p.fail()
}
