package runtime

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/agcore/agrun/internal/testing/syncbuf"
)

// capturingRuntime is a Runtime whose log goes to the returned buffer.
func capturingRuntime(t *testing.T) (*Runtime, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	return newRuntime(t, Config{Logger: slog.New(slog.NewTextHandler(logs, nil))}), logs
}

// checkNoHostText fails the test if s carries anything of a host panic.
func checkNoHostText(t *testing.T, s string) {
	t.Helper()
	for _, marker := range hostTextMarkers {
		if strings.Contains(s, marker) {
			t.Errorf("error carries host text %q:\n%.2000s", marker, s)
		}
	}
}

// The inputs with which wazero 1.12's WASI functions panic end the call
// as the panic did, but with ErrTrap and a fixed refusal instead of the
// panic's text and the host's stack; the refusal is logged with the
// module's hash.
func TestWASIRefusesPanickingInputs(t *testing.T) {
	r, logs := capturingRuntime(t)
	for _, tt := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"poll_oneoff with 2^28 subscriptions", wat(t, "wasi_poll_overflow"),
			"guest trapped: the host refused a call to wasi_snapshot_preview1.poll_oneoff: 268435456 subscriptions overflow the 32-bit size of their buffer"},
		// 2^28+1: the sizes wrap to 48 and 32, and the loop reads past them.
		{"poll_oneoff with 2^28+1 subscriptions", wasiCallModule(r.wasiSigs, nil, wasiCall{"poll_oneoff", []uint64{0, 0, 1<<28 + 1, 0}}),
			"guest trapped: the host refused a call to wasi_snapshot_preview1.poll_oneoff: 268435457 subscriptions overflow the 32-bit size of their buffer"},
		{"poll_oneoff with 2^32-1 subscriptions", wasiCallModule(r.wasiSigs, nil, wasiCall{"poll_oneoff", []uint64{0, 0, 1<<32 - 1, 0}}),
			"guest trapped: the host refused a call to wasi_snapshot_preview1.poll_oneoff: 4294967295 subscriptions overflow the 32-bit size of their buffer"},
		{"fd_filestat_set_times on stdout", wat(t, "wasi_settimes_stdio"),
			"guest trapped: the host refused a call to wasi_snapshot_preview1.fd_filestat_set_times: setting the times of fd 1 (stdio)"},
		{"fd_filestat_set_times on stdin", wasiCallModule(r.wasiSigs, nil, wasiCall{"fd_filestat_set_times", []uint64{0, 0, 0, 2}}),
			"guest trapped: the host refused a call to wasi_snapshot_preview1.fd_filestat_set_times: setting the times of fd 0 (stdio)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := compile(t, r, tt.wasm)
			defer m.Close(context.Background())
			out, err := run(t, r, m, Input{})
			if !errors.Is(err, ErrTrap) {
				t.Fatalf("err = %v; want ErrTrap", err)
			}
			if out == nil {
				t.Fatal("no Output")
			}
			if err.Error() != tt.want {
				t.Errorf("err = %.2000q\nwant %q", err, tt.want)
			}
			checkNoHostText(t, err.Error())
			if l := logs.String(); !strings.Contains(l, "module="+m.sha[:12]) || !strings.Contains(l, "the host refused a call") {
				t.Errorf("the refusal was not logged with the module's hash %s:\n%s", m.sha[:12], l)
			}
		})
	}
}

// The checks let honest calls of the same functions through to wazero.
func TestWASIHonestCallsPass(t *testing.T) {
	r := newRuntime(t, Config{})
	t.Run("poll_oneoff sleeping 1 ms", func(t *testing.T) {
		out, err := run(t, r, compile(t, r, wat(t, "wasi_poll_sleep")), Input{})
		if err != nil {
			t.Fatal(err)
		}
		if out.ExitCode != 10 { // errno 0, one event
			t.Errorf("exit code %d; want 10 (errno 0 + 1 event * 10)", out.ExitCode)
		}
	})
	t.Run("fd_filestat_set_times on a mounted file", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "file")
		if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, r, compile(t, r, wat(t, "wasi_settimes_file")),
			Input{Mounts: []Mount{{Host: dir, Guest: "/data", Writable: true}}})
		if err != nil {
			t.Fatal(err)
		}
		if out.ExitCode != 0 {
			t.Fatalf("exit code %d; want errno 0", out.ExitCode)
		}
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Unix(0, 1e18); !fi.ModTime().Equal(want) {
			t.Errorf("mtime %v; want %v", fi.ModTime(), want)
		}
	})
}

// fd_renumber onto a far descriptor number grew wazero's file table to it
// at once: 1 GiB of host memory for 2^27, charged to no limit. It now
// answers EBADF past maxGuestFD and allocates nothing of the kind.
func TestWASIRenumberFar(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, wat(t, "wasi_renumber_far"))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	out, err := run(t, r, m, Input{Mounts: []Mount{{Host: dir, Guest: "/data"}}})
	goruntime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != errnoBadf {
		t.Errorf("exit code %d; want EBADF (%d)", out.ExitCode, errnoBadf)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("the call allocated %d MiB on the host", grew>>20)
	}
}

// Every function of the WASI module is behind the guard: a panic in one
// (here a stand-in for an upstream bug no check knows yet) is logged with
// its stack and the module's hash and re-raised as a refusal without its
// text; proc_exit's exit passes through untouched.
func TestGuardWASI(t *testing.T) {
	r, logs := capturingRuntime(t)
	st := &callState{r: r, module: "0123456789ab"}
	ctx := context.WithValue(context.Background(), callStateKey{}, st)
	call := func(fn api.GoModuleFunction) (p any) {
		defer func() { p = recover() }()
		fn.Call(ctx, nil, []uint64{0})
		return nil
	}

	boom := r.guardWASI("fd_write", nil, api.GoModuleFunc(func(context.Context, api.Module, []uint64) {
		var m map[string]int
		//lint:ignore SA5000 the nil map write is the point: a runtime error, as wazero's bugs are
		m["/home/builder/secret.go"]++
	}))
	p := call(boom)
	refusal, ok := p.(*hostRefusal)
	if !ok {
		t.Fatalf("recovered %T %v; want a *hostRefusal", p, p)
	}
	if got, want := refusal.Error(), "the host refused a call to wasi_snapshot_preview1.fd_write"; got != want {
		t.Errorf("refusal %q; want %q", got, want)
	}
	l := logs.String()
	for _, want := range []string{"level=ERROR", "module=0123456789ab", "function=wasi_snapshot_preview1.fd_write", "assignment to entry in nil map", "goroutine "} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %q:\n%s", want, l)
		}
	}

	exit := r.guardWASI("proc_exit", nil, api.GoModuleFunc(func(context.Context, api.Module, []uint64) {
		panic(sys.NewExitError(3))
	}))
	if p, ok := call(exit).(*sys.ExitError); !ok || p.ExitCode() != 3 {
		t.Errorf("proc_exit's panic became %v; want its *sys.ExitError", p)
	}

	// All of them: the runtime's WASI module exports exactly wazero's
	// functions, with their signatures.
	up := wazero.NewRuntime(context.Background())
	defer up.Close(context.Background())
	upMod, err := wasi_snapshot_preview1.Instantiate(context.Background(), up)
	if err != nil {
		t.Fatal(err)
	}
	defer upMod.Close(context.Background())
	want := up.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions()
	got := r.wz.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions()
	if len(got) != len(want) {
		t.Errorf("%d WASI functions; wazero has %d", len(got), len(want))
	}
	for name, d := range want {
		g, ok := got[name]
		if !ok || !bytes.Equal(g.ParamTypes(), d.ParamTypes()) || !bytes.Equal(g.ResultTypes(), d.ResultTypes()) {
			t.Errorf("%s: missing or another signature", name)
			continue
		}
		if _, wrapped := g.GoFunction().(api.GoModuleFunc); !wrapped {
			t.Errorf("%s is %T, not agrun's guard", name, g.GoFunction())
		}
	}
}

// A host panic that wazero itself recovered (from a WASI module without
// agrun's guard: the text wazero 1.12 really produces) is logged in full
// and comes back as ErrTrap with a fixed refusal naming the function; a
// frame the guest named is never quoted; a plain trap is left as it is.
func TestScrubPanic(t *testing.T) {
	r, logs := capturingRuntime(t)
	st := &callState{r: r, module: "0123456789ab"}

	// The real thing: poll_oneoff(2^28) on wazero's own WASI module.
	ctx := context.Background()
	up := wazero.NewRuntime(ctx)
	defer up.Close(ctx)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, up); err != nil {
		t.Fatal(err)
	}
	_, raw := up.Instantiate(ctx, wat(t, "wasi_poll_overflow"))
	if raw == nil || !strings.Contains(raw.Error(), "goroutine ") {
		t.Fatalf("wazero's own poll_oneoff no longer panics with its stack (%v): revisit wasi.go's checks and docs/SECURITY.md", raw)
	}
	err := st.scrubPanic(raw)
	if !errors.Is(err, ErrTrap) || err.Error() != "guest trapped: the host refused a call to wasi_snapshot_preview1.poll_oneoff" {
		t.Errorf("scrubPanic = %q", err)
	}
	if l := logs.String(); !strings.Contains(l, "module=0123456789ab") || !strings.Contains(l, "goroutine ") || !strings.Contains(l, "index out of range") {
		t.Errorf("the panic was not logged in full with the module's hash:\n%.3000s", l)
	}

	// A frame named by the guest's name section is not quoted.
	spoof := errors.New("runtime error: x (recovered by wazero)\nwasm stack trace:\n\t.wasi_snapshot_preview1.fd_write\x1b[31m(i32) i32\n\nGo runtime stack trace:\ngoroutine 1 [running]:\n/root/x.go:1")
	if err := st.scrubPanic(spoof); err.Error() != "guest trapped: the host refused a call to a host function" {
		t.Errorf("scrubPanic(guest-named frame) = %q", err)
	}

	// A trap, also one whose frames the guest named like a panic, is left
	// as it is.
	for _, trap := range []error{
		errors.New("wasm error: unreachable\nwasm stack trace:\n\t.$0()"),
		errors.New("wasm error: unreachable\nwasm stack trace:\n\t.x (recovered by wazero)()"),
	} {
		if err := st.scrubPanic(trap); !errors.Is(err, ErrTrap) || !errors.Is(err, trap) {
			t.Errorf("scrubPanic(%q) = %v; want it wrapped in ErrTrap", trap, err)
		}
	}
}

// agrun's own host functions' guard logs the panic and returns none of its
// text.
func TestGuardHidesPanicText(t *testing.T) {
	r, logs := capturingRuntime(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	st := &callState{r: r, module: "0123456789ab", cancel: cancel}
	func() {
		defer guard(ctx, st, "log", nil)
		panic("/home/builder/go/pkg/mod/secret.go:12")
	}()
	p := st.hostErr.Load()
	if p == nil {
		t.Fatal("no error recorded")
	}
	if !errors.Is(*p, ErrTrap) || (*p).Error() != "guest trapped: the host refused a call to agrun.log" {
		t.Errorf("hostErr = %q", *p)
	}
	if l := logs.String(); !strings.Contains(l, "secret.go:12") || !strings.Contains(l, "module=0123456789ab") {
		t.Errorf("the panic was not logged:\n%s", l)
	}
}

// TestWASIPathTooLong: a path longer than PATH_MAX is answered
// ENAMETOOLONG before wazero copies it out of the guest's memory, for
// every path function (the checks' indices name each "path_len"
// parameter), and a real guest sees "file name too long".
func TestWASIPathTooLong(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, Config{})
	for name, d := range r.wz.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions() {
		if !strings.HasPrefix(name, "path_") {
			continue
		}
		check := wasiChecks[name]
		if check == nil {
			t.Errorf("%s has no path length check", name)
			continue
		}
		params := make([]uint64, len(d.ParamTypes()))
		for i, pn := range d.ParamNames() {
			if strings.HasSuffix(pn, "path_len") {
				params[i] = maxGuestPath + 1
			}
		}
		if errno, _ := check(nil, params); errno != errnoNameTooLong {
			t.Errorf("%s(%v): errno %d, want ENAMETOOLONG", name, d.ParamNames(), errno)
		}
		for i := range params {
			params[i] = maxGuestPath
		}
		if errno, refusal := check(nil, params); errno != 0 || refusal != "" {
			t.Errorf("%s: a path of PATH_MAX bytes refused (%d %q)", name, errno, refusal)
		}
	}
	m := compile(t, r, probe(t))
	out, err := r.Run(ctx, m, Input{
		Args:   []string{"probe", "write", "/data/" + strings.Repeat("n", 5000), "x"},
		Mounts: []Mount{{Host: t.TempDir(), Guest: "/data", Writable: true}},
	})
	if err != nil || !strings.Contains(strings.ToLower(string(out.Stdout)), "file name too long") {
		t.Fatalf("Run: %v, stdout %.200q", err, out.Stdout)
	}
}
