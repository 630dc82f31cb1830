package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// Input is what one call gives the guest.
type Input struct {
	// Stdin is the guest's whole standard input (at most MaxStdin bytes).
	Stdin []byte
	// Args is the guest's argv, exactly (argv[0] included). Nil means none.
	Args []string
	// Mounts are the host directories the guest sees. None by default.
	// Run fails (before the guest starts) if a host directory is missing
	// or a guest path is not absolute and clean, or is mounted twice.
	Mounts []Mount
	// Network grants agrun.http_request. Nil links a stub that answers
	// not_granted and makes the call fail with ErrNotGranted.
	Network *NetworkGrant
	// Limits for this call; a zero field means the Runtime's default.
	Limits Limits
}

// Mount makes a host directory visible to the guest.
type Mount struct {
	// HostPath is the host directory; it must exist.
	HostPath string
	// GuestPath is where the guest sees it: an absolute, clean path.
	GuestPath string
	// Writable lets the guest create, write, truncate, rename and link
	// inside the mount. Without it the mount is read-only.
	Writable bool
	// AllowDelete lets the guest unlink files, remove directories and
	// rename over existing entries. It needs Writable: Run refuses a mount
	// with AllowDelete alone.
	AllowDelete bool
}

// NetworkGrant lets the guest make HTTP requests through
// agrun.http_request.
type NetworkGrant struct {
	// AllowedHosts are the host names (compared case-insensitively) the
	// guest may reach. "host" allows every port of that host; "host:port"
	// only that port. IP literals are written the same way ("[::1]:8080").
	AllowedHosts []string
	// AllowPrivate lets allowed hosts resolve to loopback, private,
	// link-local, unique-local and other non-public addresses. Off by
	// default: such addresses are refused at dial time.
	AllowPrivate bool
	// MaxResponseBytes caps each response body. If zero, 4 MiB.
	MaxResponseBytes int64
	// MaxRequests caps the requests of one call. If zero, 16.
	MaxRequests int
}

// Output is what the guest produced.
type Output struct {
	// Stdout and Stderr are what the guest wrote, up to the caps.
	Stdout, Stderr []byte
	// ExitCode is the guest's exit code (0 when _start returned, and when
	// the sandbox ended the call).
	ExitCode uint32
	// Duration is the wall time of the call, instantiation included.
	Duration time.Duration
}

// randReader is the guest's source of random bytes.
var randReader = rand.Reader

// sleeper returns the guest's sleep (poll_oneoff with a clock): real
// time, cut short when the call ends, which wazero's own sleep is not.
func sleeper(ctx context.Context) func(ns int64) {
	return func(ns int64) {
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// Run runs the module's _start in a fresh instance and returns what it
// wrote. It is safe to call concurrently; at most MaxInstances calls run at
// once, the others wait (ErrTimeout is not involved: a caller that gives up
// waiting gets its context's error).
//
// A non-zero exit code is not an error: the Output carries it and the error
// is nil. Otherwise the error wraps one of ErrTimeout, ErrMemoryLimit,
// ErrOutputLimit, ErrInputLimit, ErrTrap, ErrNotGranted or ErrClosed
// together with its cause, or is the caller's context error; the Output is
// then still returned (non-nil) with whatever the guest wrote, except for
// errors raised before the guest started.
func (r *Runtime) Run(ctx context.Context, m *Module, in Input) (*Output, error) {
	if m == nil || m.r != r {
		return nil, errors.New("runtime: Run with a nil module or one from another Runtime")
	}
	lim := in.Limits.withDefaults(r.cfg.Limits)
	if int64(len(in.Stdin)) > lim.MaxStdin {
		return nil, fmt.Errorf("%w: stdin is %d bytes, over the limit of %d", ErrInputLimit, len(in.Stdin), lim.MaxStdin)
	}
	if min := int64(m.c.info.Memories[0].Min) * 65536; min > lim.MemoryBytes {
		return nil, fmt.Errorf("%w: initial memory of %d bytes exceeds the limit of %d", ErrMemoryLimit, min, lim.MemoryBytes)
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	r.inflight.Add(1)
	r.mu.Unlock()
	defer r.inflight.Done()
	if !m.acquire() {
		return nil, fmt.Errorf("%w: module", ErrClosed)
	}
	defer r.release(m.sum, m.c)

	// Wait for an instance slot.
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.closing.Done():
		return nil, ErrClosed
	}
	defer func() { <-r.sem }()

	fsCfg, closers, err := mountConfig(in.Mounts, lim.MaxWriteBytes)
	if err != nil {
		return nil, err
	}
	defer closeAll(closers)

	info := m.c.info
	var snap *snapshot
	if info.snap != nil {
		snap, err = info.snap.get(ctx, snapshotKey(in), func() (*snapshot, bool) {
			return r.takeSnapshot(ctx, m, in, lim)
		})
		if err != nil {
			return nil, err
		}
		if snap != nil && snap.mem.size > uint64(lim.MemoryBytes)&^0xffff {
			snap = nil // this call's limit is lower: let _initialize meet it
		}
	}

	start := time.Now()
	timeoutCtx, cancelTimeout := context.WithTimeout(ctx, lim.Timeout)
	defer cancelTimeout()
	callCtx, cancel := context.WithCancelCause(timeoutCtx)
	defer cancel(nil)
	stopOnClose := context.AfterFunc(r.closing, func() { cancel(ErrClosed) })
	defer stopOnClose()

	st := newCallState(r, m, in.Network, cancel)
	defer st.close()
	stdout := &capWriter{max: lim.MaxStdout, onExceed: st.outputExceeded}
	stderr := &capWriter{max: lim.MaxStderr, onExceed: st.outputExceeded}
	cfg := r.modCfg.
		WithStdin(bytes.NewReader(in.Stdin)).
		WithStdout(stdout).
		WithStderr(stderr).
		WithArgs(in.Args...).
		WithNanosleep(sleeper(callCtx))
	if fsCfg != nil {
		cfg = cfg.WithFSConfig(fsCfg)
	}
	runCtx := context.WithValue(callCtx, callStateKey{}, st)
	alloc := &memAllocator{pool: r.pool, limit: uint64(lim.MemoryBytes) &^ 0xffff, image: info.image, onExceed: st.memoryExceeded}
	if info.reactor {
		cfg = cfg.WithStartFunctions()
		if snap != nil {
			alloc.image = snap.mem
		}
	}
	runCtx = experimental.WithMemoryAllocator(runCtx, alloc)

	mod, err := r.wz.InstantiateModule(runCtx, m.c.cm, cfg)
	if err == nil && info.reactor {
		err = callReactor(runCtx, mod, info, snap)
	}
	// Whether the time limit had passed when the guest ended: a guest can
	// still return normally after it (the deadline passed inside a host
	// function, and the guest exited before wazero stopped it).
	expired := errors.Is(timeoutCtx.Err(), context.DeadlineExceeded)
	if mod != nil {
		mod.Close(context.Background())
	}
	out := &Output{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(), Duration: time.Since(start)}
	return out, st.classify(ctx, timeoutCtx, callCtx, expired, err, out)
}

// callReactor runs one call of a reactor in the fresh instance mod: from
// the snapshot if there is one, else _initialize first.
func callReactor(ctx context.Context, mod api.Module, info *moduleInfo, snap *snapshot) error {
	if snap != nil {
		if err := restore(mod, info.snap, snap); err != nil {
			return err
		}
	} else if _, err := mod.ExportedFunction("_initialize").Call(ctx); err != nil {
		return err
	}
	_, err := mod.ExportedFunction("agrun_call").Call(ctx)
	return err
}

// classify turns how the instance ended into Run's result. expired says
// whether the call's time limit had passed when the instance ended: such a
// call ends with ErrTimeout even if the guest returned normally.
func (st *callState) classify(ctx, timeoutCtx, callCtx context.Context, expired bool, err error, out *Output) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) && callCtx.Err() == nil {
		out.ExitCode = exit.ExitCode() // not the code wazero uses for a closed context
	}
	switch {
	case st.notGranted.Load():
		return fmt.Errorf("%w: the guest called agrun.http_request without a network grant", ErrNotGranted)
	case st.hostErr.Load() != nil:
		return *st.hostErr.Load()
	case errors.Is(context.Cause(callCtx), ErrClosed):
		return fmt.Errorf("%w: the runtime was closed during the call", ErrClosed)
	case st.outExceeded.Load():
		return wrapCause(ErrOutputLimit, err)
	case st.memExceeded.Load():
		return wrapCause(ErrMemoryLimit, err)
	case err == nil && !expired:
		return nil
	case ctx.Err() == context.Canceled:
		return fmt.Errorf("runtime: call cancelled: %w", context.Canceled)
	case timeoutCtx.Err() != nil:
		return fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)
	case exit != nil:
		if exit.ExitCode() == 2 && bytes.Contains(out.Stderr, []byte("out of memory")) {
			return fmt.Errorf("%w: the guest ran out of memory", ErrMemoryLimit)
		}
		return nil
	}
	return wrapCause(ErrTrap, err)
}

func wrapCause(sentinel, cause error) error {
	if cause == nil {
		return sentinel
	}
	return fmt.Errorf("%w: %w", sentinel, cause)
}

// capWriter collects a guest's output up to max bytes. The write that
// crosses the cap keeps what fits, fails (the guest's fd_write gets EIO) and
// ends the call. Writes happen on the guest's goroutine only.
type capWriter struct {
	buf      bytes.Buffer
	max      int64
	over     bool
	onExceed func()
}

var errOutputCap = errors.New("output limit exceeded")

func (w *capWriter) Write(p []byte) (int, error) {
	if w.over {
		return 0, errOutputCap
	}
	if room := w.max - int64(w.buf.Len()); int64(len(p)) > room {
		w.buf.Write(p[:room])
		w.over = true
		w.onExceed()
		return int(room), errOutputCap
	}
	return w.buf.Write(p)
}

// callStateKey finds the callState in the context host functions receive.
type callStateKey struct{}

// callState is what one call's host functions share. Host functions run on
// the guest's goroutine; the flags are atomic because classify may read
// them after a close from another goroutine.
type callState struct {
	r       *Runtime
	module  string // short hash, for logs
	grant   *NetworkGrant
	cancel  context.CancelCauseFunc
	net     *netClient // created on the first granted request
	logged  int64
	pending []byte
	hasResp bool
	reqs    int

	// snapshotting: this state belongs to a snapshot's _initialize
	// (snapshot.go), where calling a host function, writing output or
	// touching a mount is a side effect that abandons the snapshot
	// (touched records it).
	snapshotting bool
	touched      atomic.Bool

	notGranted  atomic.Bool
	outExceeded atomic.Bool
	memExceeded atomic.Bool
	hostErr     atomic.Pointer[error]
}

func newCallState(r *Runtime, m *Module, grant *NetworkGrant, cancel context.CancelCauseFunc) *callState {
	return &callState{r: r, module: m.sha[:12], grant: grant, cancel: cancel}
}

func (st *callState) outputExceeded() {
	st.outExceeded.Store(true)
	st.cancel(ErrOutputLimit)
}

func (st *callState) memoryExceeded() {
	st.memExceeded.Store(true)
	st.cancel(ErrMemoryLimit)
}

func (st *callState) close() {
	if st.net != nil {
		st.net.close()
	}
}
