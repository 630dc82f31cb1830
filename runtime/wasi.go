package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// agrun's WASI host module is wazero's wasi_snapshot_preview1 with every
// function behind a guard (guardWASI): agrun's own checks first, for the
// arguments with which wazero 1.12's function panics or allocates without
// bound (wasiChecks), then wazero's function, whose panic, should another
// input reach one, is logged and ends the call with a refusal that carries
// none of the panic's text (see scrubPanic). docs/SECURITY.md lists the
// upstream bugs; FuzzWASI is how they were found.

// WASI errno values (wasi_snapshot_preview1 $errno) the checks answer with.
const (
	errnoBadf        = 8
	errnoNameTooLong = 37
)

// maxGuestPath is the longest path a WASI path function is handed:
// Linux's PATH_MAX. wazero copies a path of any length out of the guest's
// memory (up to all of it) into a host string before anything looks at
// it; a longer one is answered ENAMETOOLONG, as the kernel would.
const maxGuestPath = 4096

// pathLen returns the check of a WASI path function whose path lengths
// are its parameters at the indices given.
func pathLen(idx ...int) wasiCheck {
	return func(_ api.Module, p []uint64) (uint32, string) {
		for _, i := range idx {
			if uint32(p[i]) > maxGuestPath {
				return errnoNameTooLong, ""
			}
		}
		return 0, ""
	}
}

// maxGuestFD is the largest descriptor number fd_renumber may move a file
// to. wazero's file table grows to the target number at once, 8 bytes per
// slot of host memory (2^31-1 would be 16 GiB); 2^16 slots cost 512 KiB,
// and a guest has at most about a thousand files open per mount anyway
// (runtime/internal/sandboxfs). Beyond it the guest gets EBADF, as dup2 answers
// past RLIMIT_NOFILE.
const maxGuestFD = 1<<16 - 1

// wasiCheck looks at a WASI call's arguments before wazero's function
// runs. A non-empty refusal ends the call as wazero's panic did, without
// its text: the call fails with ErrTrap and "the host refused a call to
// <function>: <refusal>". Otherwise a non-zero errno answers the call
// without running wazero's function.
type wasiCheck func(mod api.Module, params []uint64) (errno uint32, refusal string)

// wasiChecks are the arguments agrun stops in front of wazero 1.12's
// functions: the inputs with which they panic (refused: the call ends, as
// it did when wazero recovered the panic) or allocate without bound
// (answered with an errno), found by FuzzWASI or by reading the source.
var wasiChecks = map[string]wasiCheck{
	// poll_oneoff(in, out, nsubscriptions, result.nevents) reads
	// nsubscriptions*48 bytes at in and *32 at out, computed in uint32:
	// 2^28 subscriptions wrap both to 0 (2^28+1 to 48 and 32), the reads
	// succeed, and the loop indexes past them (index out of range). No
	// memory holds that many; a count that fits in 32 bits wazero checks
	// against the memory itself (EFAULT).
	"poll_oneoff": func(_ api.Module, p []uint64) (uint32, string) {
		if n := uint64(uint32(p[2])); n*48 > 1<<32-1 {
			return 0, fmt.Sprintf("%d subscriptions overflow the 32-bit size of their buffer", n)
		}
		return 0, ""
	},
	// fd_filestat_set_times(fd, ...) on stdin, stdout or stderr: their
	// file answers ENOSYS, and the fallback then calls Utimens on the
	// entry's file system, which stdio entries do not have (nil pointer
	// dereference). Stdio is always at 0-2: wazero marks it pre-opened, so
	// fd_renumber refuses to move it (a file that takes a closed stdio
	// number is refused here too, which only costs it its times).
	"fd_filestat_set_times": func(_ api.Module, p []uint64) (uint32, string) {
		if fd := int32(uint32(p[0])); fd >= 0 && fd <= 2 {
			return 0, fmt.Sprintf("setting the times of fd %d (stdio)", fd)
		}
		return 0, ""
	},
	// The path functions: a path longer than PATH_MAX (see maxGuestPath).
	"path_create_directory":   pathLen(2),
	"path_filestat_get":       pathLen(3),
	"path_filestat_set_times": pathLen(3),
	"path_link":               pathLen(3, 6),
	"path_open":               pathLen(3),
	"path_readlink":           pathLen(2),
	"path_remove_directory":   pathLen(2),
	"path_rename":             pathLen(2, 5),
	"path_symlink":            pathLen(1, 4),
	"path_unlink_file":        pathLen(2),
	// fd_renumber(from, to) grows the file table to slot to at once.
	"fd_renumber": func(_ api.Module, p []uint64) (uint32, string) {
		if to := int32(uint32(p[1])); to > maxGuestFD {
			return errnoBadf, ""
		}
		return 0, ""
	},
}

// instantiateWASI registers import module wasi_snapshot_preview1: every
// function wazero exports, wrapped by guardWASI, under its own name,
// signature and parameter names.
func (r *Runtime) instantiateWASI(ctx context.Context) error {
	// Compiling wazero's module is how its functions can be read back
	// (FunctionDefinition.GoFunction); it is never instantiated.
	ub := r.wz.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(ub)
	upstream, err := ub.Compile(ctx)
	if err != nil {
		return err
	}
	defer upstream.Close(ctx)

	b := r.wz.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	// Exporting wazero's functions first fixes the export order; each
	// Export below replaces the function of its name in place.
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	for name, d := range upstream.ExportedFunctions() {
		fn, ok := d.GoFunction().(api.GoModuleFunction)
		if !ok {
			return fmt.Errorf("WASI function %s is a %T, not an api.GoModuleFunction", name, d.GoFunction())
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(r.guardWASI(name, wasiChecks[name], fn), d.ParamTypes(), d.ResultTypes()).
			WithParameterNames(d.ParamNames()...).
			WithResultNames(d.ResultNames()...).
			Export(name)
	}
	_, err = b.Instantiate(ctx)
	return err
}

// guardWASI returns wazero's WASI function fn behind check (nil: none)
// and a recover: a panic other than proc_exit's is logged with its stack
// and the module's hash, and re-raised as a *hostRefusal, which ends the
// call at once and which scrubPanic turns into the call's error.
func (r *Runtime) guardWASI(name string, check wasiCheck, fn api.GoModuleFunction) api.GoModuleFunction {
	qualified := wasi_snapshot_preview1.ModuleName + "." + name
	return api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		// The guest's own code is stopped by its meter; a loop of costly
		// host calls (random_get of 32 MiB, reads of a large file) is
		// stopped here, at the next call after the call's context ended.
		if ctx.Err() != nil {
			stopGuest(ctx)
		}
		if !keepsInstance(name, stack) {
			if st := stateOf(ctx); st != nil {
				st.touchedInstance.Store(true) // reuse.go: not reused
			}
		}
		if check != nil {
			errno, refusal := check(mod, stack)
			if refusal != "" {
				r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "the host refused a call",
					append(callAttrs(ctx), slog.String("function", qualified), slog.String("reason", refusal))...)
				panic(&hostRefusal{fn: qualified, reason: refusal})
			}
			if errno != 0 {
				stack[0] = uint64(errno)
				return
			}
		}
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if exit, ok := p.(*sys.ExitError); ok {
				panic(exit) // proc_exit, and a closed module: wazero's own control flow
			}
			logHostPanic(ctx, stateOf(ctx), qualified, p)
			panic(&hostRefusal{fn: qualified})
		}()
		fn.Call(ctx, mod, stack)
	})
}

// logHostPanic logs the panic p recovered in host function fn during the
// call st (nil if unknown: then to slog.Default) at Error level, with its
// value, the host's stack and the module's hash, and returns the error the
// call ends with instead: ErrTrap and "the host refused a call to <fn>".
func logHostPanic(ctx context.Context, st *callState, fn string, p any) error {
	logger, attrs := slog.Default(), []slog.Attr{slog.String("module", "")}
	if st != nil {
		attrs = st.logAttrs()
		if st.r != nil {
			logger = st.r.cfg.Logger
		}
	}
	logger.LogAttrs(ctx, slog.LevelError, "the host refused a call: a host function panicked",
		append(attrs, slog.String("function", fn),
			slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))...)
	return fmt.Errorf("%w: %w", ErrTrap, &hostRefusal{fn: fn})
}

// callAttrs are the log attributes of the call ctx belongs to (its name
// and module), or an empty module.
func callAttrs(ctx context.Context) []slog.Attr {
	if st := stateOf(ctx); st != nil {
		return st.logAttrs()
	}
	return []slog.Attr{slog.String("module", "")}
}

// hostRefusal is the panic a guarded host function raises in place of its
// own, already logged: the call ends with ErrTrap and the text "the host
// refused a call to <fn>[: <reason>]". Its text is the host's own, never
// the guest's or a panic's.
type hostRefusal struct{ fn, reason string }

func (e *hostRefusal) Error() string {
	if e.reason == "" {
		return "the host refused a call to " + e.fn
	}
	return "the host refused a call to " + e.fn + ": " + e.reason
}

// recoveredMarker is in the text of every error wazero builds from a panic
// it recovered in host code (internal/wasmdebug: "%v (recovered by
// wazero)\nwasm stack trace: ...", with the host's debug.Stack() when the
// panic was a runtime.Error).
const recoveredMarker = "(recovered by wazero)"

// scrubPanic is the error of a call that ended with err and none of the
// limits: err wrapped in ErrTrap, unless err is a host panic recovered by
// wazero. Such an error's text is the panic's value and, for a Go runtime
// error, the host's whole goroutine stack (source and module-cache paths,
// addresses): it is logged here (a *hostRefusal was logged where it was
// raised) and the call gets ErrTrap with "the host refused a call to
// <function>" instead, the function named only when it is one of the
// host's own (the wasm stack trace's first frame), never guest text.
func (st *callState) scrubPanic(err error) error {
	var refusal *hostRefusal
	if errors.As(err, &refusal) {
		return fmt.Errorf("%w: %w", ErrTrap, refusal)
	}
	if err == nil {
		return ErrTrap
	}
	// The marker ends the panic's own description, before the wasm stack
	// trace, whose frames the guest's name section names.
	if head, _, _ := strings.Cut(err.Error(), "\nwasm stack trace:"); !strings.Contains(head, recoveredMarker) {
		return wrapCause(ErrTrap, err)
	}
	refusal = &hostRefusal{fn: st.r.hostFunction(err.Error())}
	if refusal.fn == "" {
		refusal.fn = "a host function"
	}
	st.r.cfg.Logger.LogAttrs(context.Background(), slog.LevelError, "the host refused a call: wazero recovered a panic",
		append(st.logAttrs(), slog.String("function", refusal.fn), slog.String("error", err.Error()))...)
	return fmt.Errorf("%w: %w", ErrTrap, refusal)
}

// hostFunction is the host function named by the first frame of the wasm
// stack trace in a wazero error text, if it is one of the host's own
// ("wasi_snapshot_preview1.poll_oneoff", "agrun.log"), else "".
func (r *Runtime) hostFunction(text string) string {
	_, trace, ok := strings.Cut(text, "wasm stack trace:\n\t")
	if !ok {
		return ""
	}
	frame, _, _ := strings.Cut(trace, "(")
	module, name, _ := strings.Cut(frame, ".")
	switch module {
	case wasi_snapshot_preview1.ModuleName:
		if _, ok := r.wasiSigs[name]; ok {
			return frame
		}
	case "agrun":
		if _, ok := agrunSigs[name]; ok {
			return frame
		}
	}
	return ""
}
