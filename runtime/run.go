package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agcore/agrun/runtime/internal/sandboxfs"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

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
	// Audit is what the guest did: CPU, memory, bytes in and out, files
	// per mount, HTTP requests, host calls (see Audit).
	Audit Audit
	// Plugin is what an Extism plug-in call (Input.Plugin) produced; nil
	// for other calls.
	Plugin *PluginOutput
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
// started from a snapshot of its memory and globals taken after its
// _initialize, or after running _initialize when there is no snapshot. It
// is safe to call concurrently; at most MaxInstances calls run at once,
// the others wait (ErrTimeout is not involved: a caller that gives up
// waiting gets its context's error). While a call of a snapshotted reactor
// runs, the next instance is prepared in the background (see
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
		return nil, errors.New("runtime.Run with a nil module or one from another Runtime")
	}
	if err := checkPluginInput(m, in.Plugin); err != nil {
		return nil, err
	}
	c, err := r.admit(ctx, m, in)
	if err != nil {
		return nil, err
	}
	defer c.release()
	g := c.begin(ctx, in)
	defer g.end()
	cpu := startThreadCPU()
	inst, out, err := c.instantiate(g, in)
	g.cpu = cpu.stop()
	if out != nil { // the call ended before its guest started
		return out, err
	}
	return c.finish(g, inst, err, in)
}

// instance is the instance a call ran in.
type instance struct {
	mod   api.Module // nil if none was made
	snap  *snapshot  // the snapshot it started from, or nil
	entry *snapEntry // snap's entry
	p     *prepared  // the instance as prepared from snap (prepare.go)
	// reusable: the call may hand the instance to the next one if it ends
	// clean (see call.reusable).
	reusable bool
}

// call is one admitted Run: it holds, until release, an inflight count
// (Runtime.Close waits for it), a reference to the compiled module, an
// instance slot, and the opened mounts.
type call struct {
	r       *Runtime
	m       *Module
	lim     Limits
	fss     []experimentalsys.FS
	closers []io.Closer
	recs    []*sandboxfs.Recorder // the mounts' audit, in fss order
	// holders counts who still needs the call's resources: Run, and an
	// instance being closed in the background. The last to let go
	// releases them.
	holders atomic.Int32
	// behind: an instance of the call is closed in the background; its
	// release ends the runtime's count of such instances.
	behind bool
}

// admit checks the input against the call's limits, takes a reference to
// the module, waits for an instance slot and opens the mounts. On success
// the returned call owns all of that; on failure nothing is held.
func (r *Runtime) admit(ctx context.Context, m *Module, in Input) (*call, error) {
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
	if !m.acquire() {
		r.inflight.Done()
		return nil, fmt.Errorf("%w: module", ErrClosed)
	}
	fail := func(err error) (*call, error) {
		r.release(m.sum, m.c)
		r.inflight.Done()
		return nil, err
	}

	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-r.closing.Done():
		return fail(ErrClosed)
	}
	fss, closers, recs, err := mountFS(in.Mounts, lim.MaxWriteBytes)
	if err != nil {
		<-r.sem
		return fail(err)
	}
	c := &call{r: r, m: m, lim: lim, fss: fss, closers: closers, recs: recs}
	c.holders.Store(1)
	return c, nil
}

// hold adds a holder of the call's resources (see release).
func (c *call) hold() { c.holders.Add(1) }

// release lets go of the call's resources; the last holder gives them
// back, in the reverse order of admit: mounts, slot, module, inflight.
func (c *call) release() {
	if c.holders.Add(-1) != 0 {
		return
	}
	closeAll(c.closers)
	// The slot first, then the count of instances closed behind their
	// call: the other order leaves a moment where the slot is held but
	// not counted as closing, and cpusBusy skips a prepare it should make
	// (seen as TestPrepareAhead waiting in vain on a loaded machine).
	<-c.r.sem
	if c.behind {
		c.r.closingBehind.Add(-1)
	}
	c.r.release(c.m.sum, c.m.c)
	c.r.inflight.Done()
}

// guestRun is what one call's guest runs with: its contexts, the state its
// host functions share, and its output writers.
type guestRun struct {
	start                    time.Time
	ctx, timeoutCtx, callCtx context.Context
	done                     func()
	st                       *callState
	stdout, stderr           *capWriter
	stdin                    *countReader
	cpu                      time.Duration   // the thread's CPU time while the guest ran
	runCtx                   context.Context // callCtx carrying st for the host functions
	limit                    uint64          // the memory limit, in whole pages
}

// begin sets up the guest's run. One time limit covers the whole call, a
// snapshot's _initialize included (and the wait while another call takes
// it).
func (c *call) begin(ctx context.Context, in Input) *guestRun {
	g := &guestRun{start: time.Now(), ctx: ctx}
	var cancel context.CancelCauseFunc
	g.timeoutCtx, g.callCtx, cancel, g.done = c.r.callContexts(ctx, c.lim.Timeout)
	g.st = newCallState(c.r, c.m, in.Network, cancel)
	g.st.fuelLimit = c.lim.Fuel
	g.st.name, g.st.lim = in.Name, c.lim
	g.stdout = &capWriter{max: c.lim.MaxStdout, onExceed: func() { g.st.outputExceeded("stdout", c.lim.MaxStdout) }}
	g.stderr = &capWriter{max: c.lim.MaxStderr, onExceed: func() { g.st.outputExceeded("stderr", c.lim.MaxStderr) }}
	if in.Plugin != nil {
		// A plug-in's input is Extism's (input_load_*), not stdin.
		g.st.ext = newExtState(in.Stdin, in.Plugin)
		g.stdin = &countReader{r: bytes.NewReader(nil)}
	} else {
		g.stdin = &countReader{r: bytes.NewReader(in.Stdin)}
	}
	g.runCtx = context.WithValue(g.callCtx, callStateKey{}, g.st)
	g.limit = uint64(c.lim.MemoryBytes) &^ 0xffff
	return g
}

// end stops the guest's contexts and its network client.
func (g *guestRun) end() {
	g.st.close()
	g.done()
}

// classify is callState.classify for this run.
func (g *guestRun) classify(expired bool, err error, out *Output) error {
	return g.st.classify(g.ctx, g.timeoutCtx, g.callCtx, expired, err, out)
}

// instantiate gets the call's instance and runs the guest in it: from the
// module's snapshot (prepared ahead, reused, or made now) when it has one
// that fits the call's memory limit, else fresh. A non-nil Output means
// the call ended before its guest started, with that Output and error.
func (c *call) instantiate(g *guestRun, in Input) (instance, *Output, error) {
	snap, entry, out, err := c.snapshot(g, in)
	if out != nil {
		return instance{}, out, err
	}
	if snap == nil {
		mod, err := c.fresh(g, in)
		return instance{mod: mod}, nil, err
	}
	r := c.r
	inst := instance{snap: snap, entry: entry, reusable: r.mayReuse(in)}
	args, paths := append([]string(nil), in.Args...), guestPaths(in.Mounts)
	p := r.takePrepared(g.callCtx, entry, g.limit)
	if p == nil {
		p, err = r.prepare(c.m.c, snap, args, paths, g.limit)
	}
	r.prepareAhead(c.m, entry, snap, args, paths, g.limit)
	if err != nil {
		return inst, nil, err
	}
	inst.mod, inst.p = p.mod, p
	p.bind(g.stdin, g.stdout, g.stderr, c.fss, g.callCtx, g.st.memoryExceeded, g.st.extHeld)
	return inst, nil, g.callEntry(p.mod, in)
}

// snapshot returns the module's snapshot for this call's argv and mounts,
// taking it if no call did yet, or nil if the module has none or it needs
// more memory than this call may use (then _initialize runs in the
// call's instance and meets the limit itself).
func (c *call) snapshot(g *guestRun, in Input) (*snapshot, *snapEntry, *Output, error) {
	s := c.m.c.info.snap
	if s == nil {
		return nil, nil, nil, nil
	}
	var initErr error
	snap, entry, err := s.get(g.callCtx, snapshotKey(in), func() (*snapshot, bool) {
		s, final, failure := c.r.takeSnapshot(g.callCtx, c.m, in, c.lim)
		initErr = failure
		return s, final
	})
	if initErr != nil { // _initialize hit a limit, so would the call
		return nil, nil, &Output{Duration: time.Since(g.start)}, initErr
	}
	if err != nil { // the call's time ran out, or it was cancelled, while another call took the snapshot
		out := &Output{Duration: time.Since(g.start)}
		return nil, nil, out, g.classify(errors.Is(g.timeoutCtx.Err(), context.DeadlineExceeded), err, out)
	}
	if snap != nil && snap.mem.size > g.limit {
		snap = nil
	}
	return snap, entry, nil, nil
}

// fresh instantiates the module anew and runs the guest: _start, or a
// reactor's _initialize then agrun_call.
func (c *call) fresh(g *guestRun, in Input) (api.Module, error) {
	r, info := c.r, c.m.c.info
	cfg := r.modCfg.
		WithStdin(g.stdin).
		WithStdout(g.stdout).
		WithStderr(g.stderr).
		WithArgs(in.Args...).
		WithNanosleep(sleeper(g.callCtx))
	if fsCfg := fsConfig(guestPaths(in.Mounts), c.fss); fsCfg != nil {
		cfg = cfg.WithFSConfig(fsCfg)
	}
	if info.reactor || in.Plugin != nil {
		cfg = cfg.WithStartFunctions() // a plug-in's _start is never run, as in Extism
	}
	alloc := &memAllocator{pool: r.pool, limit: g.limit, image: info.image, onExceed: g.st.memoryExceeded, held: g.st.extHeld}
	mod, err := r.wz.InstantiateModule(experimental.WithMemoryAllocator(g.runCtx, alloc), c.m.c.cm, cfg)
	switch {
	case err != nil:
	case info.reactor:
		_, err = mod.ExportedFunction("_initialize").Call(g.runCtx)
	case in.Plugin != nil:
		// A plug-in built as a WASI command is initialised as Extism does it.
		if ctors := mod.ExportedFunction("__wasm_call_ctors"); ctors != nil && len(ctors.Definition().ParamTypes()) == 0 {
			_, err = ctors.Call(g.runCtx)
		}
	}
	if err == nil && (info.reactor || in.Plugin != nil) {
		err = g.callEntry(mod, in)
	}
	return mod, err
}

// callEntry calls the instance's entry point for the call: a plug-in's
// function (its i32 result is the plug-in's status), else agrun_call.
func (g *guestRun) callEntry(mod api.Module, in Input) error {
	if in.Plugin == nil {
		_, err := mod.ExportedFunction("agrun_call").Call(g.runCtx)
		return err
	}
	res, err := mod.ExportedFunction(in.Plugin.Function).Call(g.runCtx)
	if err == nil && len(res) == 1 {
		g.st.ext.status = api.DecodeU32(res[0])
	}
	return err
}

// finish turns how the guest ended into Run's result and disposes of the
// call's instance (see dispose).
func (c *call) finish(g *guestRun, inst instance, err error, in Input) (*Output, error) {
	// Whether the time limit had passed when the guest ended: a guest can
	// still return normally after it (the deadline passed inside a host
	// function, and the guest exited before wazero stopped it).
	expired := errors.Is(g.timeoutCtx.Err(), context.DeadlineExceeded)
	var fuel, memPeak int64
	if mod := inst.mod; mod != nil {
		fuel = g.st.fuelUsed(mod)
		if mem := mod.Memory(); mem != nil {
			memPeak = int64(mem.Size())
		}
	}
	out := &Output{Stdout: g.stdout.buf.Bytes(), Stderr: g.stderr.buf.Bytes(), Duration: time.Since(g.start), Fuel: fuel}
	out.Audit = g.audit(memPeak, in.Mounts, c.recs)
	if e := g.st.ext; e != nil {
		out.Plugin = &PluginOutput{Output: e.output, Error: e.errMsg, Status: e.status}
		out.Audit.MemoryPeak += int64(e.held())
	}
	err = g.classify(expired, err, out)
	if inst.mod != nil {
		c.dispose(g, inst, in, err == nil && !expired && out.ExitCode == 0)
	}
	if (err != nil || out.ExitCode != 0) && len(out.Stderr) > 0 && c.r.cfg.Logger.Enabled(g.ctx, slog.LevelDebug) {
		c.r.cfg.Logger.LogAttrs(g.ctx, slog.LevelDebug, "failed call's stderr: "+stderrTail(out.Stderr),
			append(g.st.logAttrs(), slog.Int("exit_code", int(out.ExitCode)))...)
	}
	return out, err
}

// dispose closes the call's instance, or, when the call ended clean
// (ok: no error, no limit crossed, exit code 0) and its instance may be
// reused (call.reusable), resets it to its snapshot and makes it ready
// for the next call (recycle). For an instance from a snapshot either is
// done in the background when a CPU is idle (resetting its memory is the
// rest of what closing costs), holding the call's slot and mounts until
// it is done. A reusable call whose instance is not reused prepares the
// next one instead, in case the call skipped that when it started
// because this instance was expected back.
func (c *call) dispose(g *guestRun, inst instance, in Input, ok bool) {
	r, mod := c.r, inst.mod
	reuse := inst.reusable && ok && c.reusable(g, inst)
	if inst.reusable && !reuse {
		r.prepareAhead(c.m, inst.entry, inst.snap, append([]string(nil), in.Args...), nil, g.limit)
	}
	if reuse {
		inst.entry.mu.Lock()
		inst.entry.recycling++
		inst.entry.mu.Unlock()
	}
	done := func() {
		if reuse {
			r.recycle(c.m.c, inst)
			return
		}
		mod.Close(context.Background())
	}
	if inst.snap != nil && r.closeAhead() {
		c.behind = true
		c.hold()
		go func() {
			done()
			c.release()
		}()
		return
	}
	done()
}

// maxLoggedStderr is how much of a failed call's stderr is logged: its end.
const maxLoggedStderr = 2 << 10

func stderrTail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > maxLoggedStderr {
		b = b[len(b)-maxLoggedStderr:]
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
		b = append([]byte("…"), b...)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
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
	case st.outExceeded.Load() != nil:
		return &limitError{*st.outExceeded.Load(), ErrOutputLimit, err}
	case st.memExceeded.Load():
		return &limitError{"memory limit " + FormatBytes(st.lim.MemoryBytes) + " exceeded", ErrMemoryLimit, err}
	case st.fuelOut.Load():
		return fmt.Errorf("%w (a budget of %d units)", ErrFuelExhausted, st.fuelLimit)
	case st.stackOut.Load():
		return fmt.Errorf("%w: call stack exhausted (estimated over %d bytes)", ErrTrap, st.r.cfg.MaxStackBytes)
	case err == nil && !expired:
		return nil
	case ctx.Err() == context.Canceled:
		return fmt.Errorf("call cancelled: %w", context.Canceled)
	case timeoutCtx.Err() != nil && ctx.Err() != nil:
		return &limitError{"the caller's deadline passed", ErrTimeout, context.DeadlineExceeded}
	case timeoutCtx.Err() != nil:
		return &limitError{"timeout after " + st.lim.Timeout.String(), ErrTimeout, context.DeadlineExceeded}
	case exit != nil:
		if exit.ExitCode() == 2 && bytes.Contains(out.Stderr, []byte("out of memory")) {
			return &limitError{"memory limit " + FormatBytes(st.lim.MemoryBytes) + " exceeded (the guest ran out of memory)", ErrMemoryLimit, nil}
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
	total    int64 // bytes the guest wrote, past the cap included
}

var errOutputCap = errors.New("output limit exceeded")

func (w *capWriter) Write(p []byte) (int, error) {
	w.total += int64(len(p))
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

	// name labels the call's log records (Input.Name); lim is the call's
	// limits, named in the errors that end it.
	name string
	lim  Limits

	// touchedInstance: the guest called a WASI function that may change
	// its instance's state outside memory and globals (wasi.go,
	// keepsInstance); the instance is not reused.
	touchedInstance atomic.Bool

	notGranted  atomic.Bool
	outExceeded atomic.Pointer[string] // which stream, and its cap: "stderr exceeded 64KiB"
	memExceeded atomic.Bool
	hostErr     atomic.Pointer[error]

	// ext is an Extism plug-in call's kernel (extism.go); nil otherwise.
	ext *extState

	audit auditState
}

func newCallState(r *Runtime, m *Module, grant *NetworkGrant, cancel context.CancelCauseFunc) *callState {
	return &callState{r: r, module: m.sha[:12], grant: grant, cancel: cancel}
}

// logAttrs are the attributes of the call's log records.
func (st *callState) logAttrs() []slog.Attr {
	if st.name == "" {
		return []slog.Attr{slog.String("module", st.module)}
	}
	return []slog.Attr{slog.String("name", st.name), slog.String("module", st.module)}
}

func (st *callState) outputExceeded(stream string, max int64) {
	msg := stream + " exceeded " + FormatBytes(max)
	st.outExceeded.CompareAndSwap(nil, &msg)
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
