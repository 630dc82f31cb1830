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
	// Host is the host directory; it must exist.
	Host string
	// Guest is where the guest sees it: an absolute, clean path.
	Guest string
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
	// Fuel is what the call's guest code spent, in the units of
	// Limits.Fuel (zero when the guest did not start): for the same
	// module and input, the same on every machine.
	Fuel int64
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

// Run runs one call in a fresh instance of the module and returns what it
// wrote: a command's _start; a reactor's agrun_call, in an instance
// started from the snapshot taken after its _initialize (see
// snapshot.go), or after running _initialize when there is none. It is
// safe to call concurrently; at most MaxInstances calls run at once, the
// others wait (ErrTimeout is not involved: a caller that gives up waiting
// gets its context's error). While a call of a snapshotted reactor runs,
// the next instance is prepared in the background (see
// Config.DisablePrepare).
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
	slot := true // false once a background close owns the slot
	defer func() {
		if slot {
			<-r.sem
		}
	}()

	fss, closers, err := mountFS(in.Mounts, lim.MaxWriteBytes)
	if err != nil {
		return nil, err
	}
	defer func() { closeAll(closers) }() // nil once a background close owns them

	// One time limit for the whole call, a snapshot's _initialize
	// included (and the wait while another call takes it).
	start := time.Now()
	timeoutCtx, callCtx, cancel, done := r.callContexts(ctx, lim.Timeout)
	defer done()

	st := newCallState(r, m, in.Network, cancel)
	st.fuelLimit = lim.Fuel
	defer st.close()
	stdout := &capWriter{max: lim.MaxStdout, onExceed: st.outputExceeded}
	stderr := &capWriter{max: lim.MaxStderr, onExceed: st.outputExceeded}
	runCtx := context.WithValue(callCtx, callStateKey{}, st)

	info := m.c.info
	limit := uint64(lim.MemoryBytes) &^ 0xffff
	var snap *snapshot
	var entry *snapEntry
	if info.snap != nil {
		var initErr error
		snap, entry, err = info.snap.get(callCtx, snapshotKey(in), func() (*snapshot, bool) {
			s, final, failure := r.takeSnapshot(callCtx, m, in, lim)
			initErr = failure
			return s, final
		})
		if initErr != nil { // _initialize hit a limit, so would the call
			return &Output{Duration: time.Since(start)}, initErr
		}
		if err != nil { // the call's time ran out, or it was cancelled, while another call took the snapshot
			out := &Output{Duration: time.Since(start)}
			return out, st.classify(ctx, timeoutCtx, callCtx, errors.Is(timeoutCtx.Err(), context.DeadlineExceeded), err, out)
		}
		if snap != nil && snap.mem.size > limit {
			snap = nil // this call's limit is lower: let _initialize meet it
		}
	}

	var mod api.Module
	if snap != nil {
		// From the snapshot: an instance prepared ahead, or one made now;
		// either way, prepare the next one (prepare.go).
		args, paths := append([]string(nil), in.Args...), guestPaths(in.Mounts)
		p := r.takePrepared(entry, limit)
		if p == nil {
			p, err = r.prepare(m.c, snap, args, paths, limit)
		}
		r.prepareAhead(m, entry, snap, args, paths, limit)
		if err == nil {
			mod = p.mod
			p.bind(bytes.NewReader(in.Stdin), stdout, stderr, fss, callCtx, st.memoryExceeded)
			_, err = mod.ExportedFunction("agrun_call").Call(runCtx)
		}
	} else {
		cfg := r.modCfg.
			WithStdin(bytes.NewReader(in.Stdin)).
			WithStdout(stdout).
			WithStderr(stderr).
			WithArgs(in.Args...).
			WithNanosleep(sleeper(callCtx))
		if fsCfg := fsConfig(guestPaths(in.Mounts), fss); fsCfg != nil {
			cfg = cfg.WithFSConfig(fsCfg)
		}
		if info.reactor {
			cfg = cfg.WithStartFunctions()
		}
		alloc := &memAllocator{pool: r.pool, limit: limit, image: info.image, onExceed: st.memoryExceeded}
		mod, err = r.wz.InstantiateModule(experimental.WithMemoryAllocator(runCtx, alloc), m.c.cm, cfg)
		if err == nil && info.reactor {
			err = runReactor(runCtx, mod)
		}
	}
	// Whether the time limit had passed when the guest ended: a guest can
	// still return normally after it (the deadline passed inside a host
	// function, and the guest exited before wazero stopped it).
	expired := errors.Is(timeoutCtx.Err(), context.DeadlineExceeded)
	var fuel int64
	if mod != nil {
		fuel = st.fuelUsed(mod)
		if snap != nil && r.closeAhead(m) {
			// Resetting the memory for reuse is the rest of what closing
			// costs: do it off the call's path, with the slot and the
			// mounts held until done (prepare.go).
			mounts := closers
			closers, slot = nil, false
			go func() {
				defer r.inflight.Done()
				defer r.release(m.sum, m.c)
				mod.Close(context.Background())
				closeAll(mounts)
				r.closingBehind.Add(-1)
				<-r.sem
			}()
		} else {
			mod.Close(context.Background())
		}
	}
	out := &Output{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(), Duration: time.Since(start), Fuel: fuel}
	return out, st.classify(ctx, timeoutCtx, callCtx, expired, err, out)
}

// callContexts returns the contexts guest code runs under: timeoutCtx
// ends at the time limit; callCtx also when cancel is called (with the
// cause: a limit crossed in a host function or a writer) or the runtime
// closes (cause ErrClosed). Call done when the guest has stopped.
func (r *Runtime) callContexts(ctx context.Context, timeout time.Duration) (timeoutCtx, callCtx context.Context, cancel context.CancelCauseFunc, done func()) {
	timeoutCtx, cancelTimeout := context.WithTimeout(ctx, timeout)
	callCtx, cancel = context.WithCancelCause(timeoutCtx)
	stopOnClose := context.AfterFunc(r.closing, func() { cancel(ErrClosed) })
	return timeoutCtx, callCtx, cancel, func() {
		stopOnClose()
		cancel(nil)
		cancelTimeout()
	}
}

// runReactor runs one call of a reactor without a snapshot in the fresh
// instance mod: _initialize, then agrun_call.
func runReactor(ctx context.Context, mod api.Module) error {
	if _, err := mod.ExportedFunction("_initialize").Call(ctx); err != nil {
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
	case st.fuelOut.Load():
		return fmt.Errorf("%w (a budget of %d units)", ErrFuelExhausted, st.fuelLimit)
	case st.stackOut.Load():
		return fmt.Errorf("%w: call stack exhausted (estimated over %d bytes)", ErrTrap, st.r.cfg.MaxStackBytes)
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
	return st.scrubPanic(err)
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

	// Metering (meter.go): the call's fuel limit (0: none), the fuel
	// granted so far; the guest ran out of fuel, or of stack.
	fuelLimit   int64
	fuelGranted int64
	fuelOut     atomic.Bool
	stackOut    atomic.Bool

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
