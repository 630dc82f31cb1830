package runtime

import (
	"context"
	"io"
	"io/fs"
	goruntime "runtime"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// Instances prepared ahead of their call.
//
// Starting a call of a snapshotted reactor (snapshot.go) costs an
// instantiation — mostly wazero filling the function table, one element
// at a time — before the guest runs, and closing it costs resetting its
// memory for reuse. Neither depends on the call's input, so neither need
// be on the call's path: when a call starts from a snapshot, the runtime
// instantiates the next instance for the same snapshot in the background
// (restored and ready, but not run), and when the call has its result,
// its instance is closed in the background (Run returns first; the
// instance keeps its slot among MaxInstances until closed). On a machine
// with an idle CPU a call then costs about what its guest and wazero's
// entry do; on a saturated one the work is the same, only moved.
//
// A prepared instance is fresh: no guest code has run in it. What an
// instance binds when it is made — stdin, stdout, stderr, the sleep
// function, the mounts' file systems, the memory limit callback — a
// prepared one gets through indirections (late*) that its call fills in
// before calling agrun_call. Its argv and mount guest paths are the
// snapshot's (the snapshot key), its memory limit the one it was made
// for: a call with another limit does not use it.
//
// Both are skipped when as many calls run as there are CPUs (GOMAXPROCS):
// they would then only take CPU from them. At most one
// instance is prepared per snapshot, and at most MaxInstances in the
// whole Runtime; they hold a memory each (the snapshot image, resident)
// besides the MaxInstances live ones. Config.DisablePrepare turns both
// off.

// prepared is a fresh instance of a snapshotted reactor, restored and
// waiting for its call.
type prepared struct {
	mod   api.Module
	limit uint64                    // the memory limit it was made with
	mem   experimental.LinearMemory // its memory, as memAllocator made it

	stdin          lateIn
	stdout, stderr lateOut
	fs             []*lateFS
	sleepCtx       context.Context // set by bind
	onExceed       func()          // set by bind
	held           func() uint64   // set by bind: see memAllocator.held
}

// bind gives the instance its call's input, outputs, mounts, context and
// memory-limit callback. The guest has not run yet, so nothing read them.
func (p *prepared) bind(stdin io.Reader, stdout, stderr io.Writer, fss []experimentalsys.FS, ctx context.Context, onExceed func(), held func() uint64) {
	p.stdin.r, p.stdout.w, p.stderr.w = stdin, stdout, stderr
	for i, f := range fss {
		p.fs[i].fs = f
	}
	p.sleepCtx, p.onExceed, p.held = ctx, onExceed, held
}

func (p *prepared) heldBytes() uint64 {
	if p.held == nil {
		return 0
	}
	return p.held()
}

func (p *prepared) sleep(ns int64) { sleeper(p.sleepCtx)(ns) }

func (p *prepared) memoryExceeded() {
	if p.onExceed != nil {
		p.onExceed()
	}
}

// prepare makes a fresh instance from a snapshot, for a call with the
// given argv, mount guest paths and memory limit.
func (r *Runtime) prepare(c *compiled, snap *snapshot, args, paths []string, limit uint64) (*prepared, error) {
	p := &prepared{limit: limit, fs: make([]*lateFS, len(paths))}
	for i := range p.fs {
		p.fs[i] = &lateFS{}
	}
	cfg := r.modCfg.
		WithStartFunctions().
		WithStdin(&p.stdin).
		WithStdout(&p.stdout).
		WithStderr(&p.stderr).
		WithArgs(args...).
		WithNanosleep(p.sleep)
	if fsCfg := fsConfig(paths, p.fs); fsCfg != nil {
		cfg = cfg.WithFSConfig(fsCfg)
	}
	alloc := &memAllocator{pool: r.pool, limit: limit, image: snap.mem, onExceed: p.memoryExceeded, held: p.heldBytes}
	ctx := experimental.WithMemoryAllocator(context.Background(), alloc)
	mod, err := r.wz.InstantiateModule(ctx, c.cm, cfg)
	if err != nil {
		return nil, err
	}
	if err := restore(mod, c.info.snap, snap); err != nil {
		mod.Close(ctx)
		return nil, err
	}
	p.mod, p.mem = mod, alloc.made
	return p, nil
}

// unbind drops what bind gave the instance: nothing of its call stays
// reachable from it.
func (p *prepared) unbind() {
	p.bind(nil, nil, nil, nil, nil, nil, nil)
	for _, f := range p.fs {
		f.fs = nil
	}
}

// takePrepared returns an instance of e ready for a call with memory
// limit limit, or nil. When none is ready but a clean instance is being
// reset for reuse (see recycle), it waits for that, which is shorter
// than making one, unless ctx ends first.
func (r *Runtime) takePrepared(ctx context.Context, e *snapEntry, limit uint64) *prepared {
	p, wait := e.pop()
	if p == nil && wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
		p, _ = e.pop()
	}
	if p == nil {
		return nil
	}
	r.prepared.Add(-1)
	if p.limit != limit {
		p.mod.Close(context.Background())
		return nil
	}
	return p
}

// pop takes e's most recently readied instance; if there is none, it
// returns a channel closed when an instance being recycled is done, or
// nil if none is.
func (e *snapEntry) pop() (*prepared, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := len(e.ready); n > 0 {
		p := e.ready[n-1]
		e.ready[n-1] = nil
		e.ready = e.ready[:n-1]
		return p, nil
	}
	if e.recycling == 0 {
		return nil, nil
	}
	if e.wake == nil {
		e.wake = make(chan struct{})
	}
	return nil, e.wake
}

// hasReady says whether an instance of e is ready for a call.
func (e *snapEntry) hasReady() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ready) > 0
}

// stocked says whether an instance of e is ready or being recycled.
func (e *snapEntry) stocked() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ready)+e.recycling > 0
}

// push makes p ready for a call of e, if the runtime's count of such
// instances (r.prepared, at most MaxInstances) and e's (at most
// GOMAXPROCS: more could not run at once) leave room; false if not,
// and then p is the caller's to close.
func (r *Runtime) push(e *snapEntry, p *prepared) bool {
	if r.prepared.Add(1) > int64(r.cfg.MaxInstances) {
		r.prepared.Add(-1)
		return false
	}
	e.mu.Lock()
	ok := len(e.ready) < goruntime.GOMAXPROCS(0)
	if ok {
		e.ready = append(e.ready, p)
	}
	e.mu.Unlock()
	if !ok {
		r.prepared.Add(-1)
	}
	return ok
}

// prepareAhead starts making e's next instance in the background, unless
// preparing is disabled, every CPU already runs a call (then it would only
// compete with them), one is being made, ready or being reset for reuse
// (reuse.go), or MaxInstances are prepared already. args and paths must
// not change afterwards.
func (r *Runtime) prepareAhead(m *Module, e *snapEntry, snap *snapshot, args, paths []string, limit uint64) {
	if r.cfg.DisablePrepare || r.cpusBusy() {
		return
	}
	if e.stocked() || r.prepared.Load() >= int64(r.cfg.MaxInstances) || !e.preparing.CompareAndSwap(false, true) {
		return
	}
	r.mu.Lock()
	if r.closed || m.c.refs == 0 {
		r.mu.Unlock()
		e.preparing.Store(false)
		return
	}
	m.c.refs++ // released when done: the compiled code outlives the goroutine
	r.inflight.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.inflight.Done()
		defer r.release(m.sum, m.c)
		defer e.preparing.Store(false)
		p, err := r.prepare(m.c, snap, args, paths, limit)
		if err != nil {
			return
		}
		if !r.push(e, p) {
			p.mod.Close(context.Background())
		}
	}()
}

// closeAhead says whether a finished call's instance should be closed in
// the background, under the same conditions as preparing: not disabled,
// the runtime not closing, and a CPU idle. If so, it counts the instance
// as closed behind its call; the call's release ends the count.
func (r *Runtime) closeAhead() bool {
	if r.cfg.DisablePrepare || r.cpusBusy() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.closingBehind.Add(1)
	return true
}

// cpusBusy says whether as many calls run as there are CPUs: instance
// slots held, less those held by instances being closed behind their call.
func (r *Runtime) cpusBusy() bool {
	return int64(len(r.sem))-r.closingBehind.Load() >= int64(goruntime.GOMAXPROCS(0))
}

// dropPrepared closes the instances prepared for a compiled module that is
// being released.
func (r *Runtime) dropPrepared(s *snapshotter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		for {
			p, _ := e.pop()
			if p == nil {
				break
			}
			p.mod.Close(context.Background())
			r.prepared.Add(-1)
		}
	}
}

// lateIn is a prepared instance's stdin: its call's, once bound.
type lateIn struct{ r io.Reader }

func (l *lateIn) Read(b []byte) (int, error) {
	if l.r == nil {
		return 0, io.EOF
	}
	return l.r.Read(b)
}

// lateOut is a prepared instance's stdout or stderr: its call's, once
// bound.
type lateOut struct{ w io.Writer }

func (l *lateOut) Write(b []byte) (int, error) {
	if l.w == nil {
		return 0, errOutputCap
	}
	return l.w.Write(b)
}

// lateFS is a prepared instance's mount: its call's file system, once
// bound (ENOSYS before).
type lateFS struct{ fs experimentalsys.FS }

func (l *lateFS) target() experimentalsys.FS {
	if l.fs == nil {
		return experimentalsys.UnimplementedFS{}
	}
	return l.fs
}

func (l *lateFS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	return l.target().OpenFile(path, flag, perm)
}
func (l *lateFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	return l.target().Lstat(path)
}
func (l *lateFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	return l.target().Stat(path)
}
func (l *lateFS) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	return l.target().Mkdir(path, perm)
}
func (l *lateFS) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	return l.target().Chmod(path, perm)
}
func (l *lateFS) Rename(from, to string) experimentalsys.Errno {
	return l.target().Rename(from, to)
}
func (l *lateFS) Rmdir(path string) experimentalsys.Errno  { return l.target().Rmdir(path) }
func (l *lateFS) Unlink(path string) experimentalsys.Errno { return l.target().Unlink(path) }
func (l *lateFS) Link(oldPath, newPath string) experimentalsys.Errno {
	return l.target().Link(oldPath, newPath)
}
func (l *lateFS) Symlink(oldPath, linkName string) experimentalsys.Errno {
	return l.target().Symlink(oldPath, linkName)
}
func (l *lateFS) Readlink(path string) (string, experimentalsys.Errno) {
	return l.target().Readlink(path)
}
func (l *lateFS) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	return l.target().Utimens(path, atim, mtim)
}
