package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func run(t *testing.T, r *Runtime, m *Module, in Input) (*Output, error) {
	t.Helper()
	return r.Run(context.Background(), m, in)
}

func TestRunStdinStdout(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	out, err := run(t, r, m, Input{Args: []string{"probe", "echo"}, Stdin: []byte(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Stdout) != `{"x":1}` || out.ExitCode != 0 || out.Duration <= 0 {
		t.Errorf("out = %+v", out)
	}
}

// No ambient authority: argv is exactly what was passed, the environment is
// empty, there are no directories; clocks and random are real.
func TestRunNoAmbientAuthority(t *testing.T) {
	t.Setenv("AGRUN_SECRET", "leak")
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	var seen []string
	for i := 0; i < 2; i++ {
		out, err := run(t, r, m, Input{Args: []string{"tool", "env"}})
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Args    []string
			Env     []string
			Random  string
			Now     int64
			RootErr string
		}
		if err := json.Unmarshal(out.Stdout, &info); err != nil {
			t.Fatalf("%v: %s", err, out.Stdout)
		}
		if len(info.Args) != 2 || info.Args[0] != "tool" || info.Args[1] != "env" {
			t.Errorf("args = %q", info.Args)
		}
		if len(info.Env) != 0 {
			t.Errorf("env = %q, want none", info.Env)
		}
		if info.RootErr == "<nil>" {
			t.Error("the guest can list / without any mount")
		}
		if d := time.Since(time.Unix(info.Now, 0)); d < -time.Minute || d > time.Minute {
			t.Errorf("guest clock %v off the host's", time.Unix(info.Now, 0))
		}
		seen = append(seen, info.Random)
	}
	if seen[0] == seen[1] {
		t.Errorf("two instances drew the same random bytes %s", seen[0])
	}
}

func TestRunSleepUsesRealTime(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	out, err := run(t, r, m, Input{Args: []string{"probe", "sleep", "30ms"}})
	if err != nil || strings.TrimSpace(string(out.Stdout)) != "true" {
		t.Fatalf("%v %q", err, out.Stdout)
	}
}

func TestRunNonZeroExitIsNotAnError(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	out, err := run(t, r, m, Input{Args: []string{"probe", "exit"}})
	if err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 3 || !strings.Contains(string(out.Stderr), "failing on purpose") {
		t.Errorf("out = %d %q", out.ExitCode, out.Stderr)
	}
}

func TestRunTimeout(t *testing.T) {
	const limit = 500 * time.Millisecond
	r := newRuntime(t, Config{Limits: Limits{Timeout: limit}})
	goMod := compile(t, r, probe(t))
	watMod := compile(t, r, wat(t, "spin"))
	floor := callFloor(t, r, goMod)
	for _, tt := range []struct {
		name string
		m    *Module
		args []string
	}{
		{"loop in _start (Go)", goMod, []string{"probe", "spin"}},
		{"loop in a callee (Go)", goMod, []string{"probe", "spincallee"}},
		{"sleeping for an hour (Go)", goMod, []string{"probe", "sleep", "1h"}},
		{"loop in _start (wat)", watMod, nil},
		{"loop in the start section (wat)", compile(t, r, wat(t, "startloop")), nil},
		// No loop anywhere: wazero alone never stopped these.
		{"a tree of 2^60 calls (wat)", compile(t, r, wat(t, "calltree")), nil},
		{"straight-line bodies in a tree of calls (wat)", compile(t, r, wat(t, "straightline")), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := run(t, r, tt.m, Input{Args: tt.args})
			if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want ErrTimeout and DeadlineExceeded", err)
			}
			if err.Error() != "timeout after 500ms" {
				t.Errorf("message %q, want it to name the limit", err)
			}
			// The bound is checked by the plain run; under -short (the race
			// step of .ci/run, where the detector slows the host side of a
			// stop several times over) only the error is.
			if !testing.Short() && out.Duration > 2*limit+2*floor {
				t.Errorf("stopped after %v, limit %v (an empty call takes %v here)", out.Duration, limit, floor)
			}
		})
	}
}

func TestRunCallerCancels(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, wat(t, "spin"))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := r.Run(ctx, m, Input{})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestRunMemoryLimit(t *testing.T) {
	r := newRuntime(t, Config{Limits: Limits{MemoryBytes: 32 << 20, Timeout: 20 * time.Second}})
	goMod := compile(t, r, probe(t))
	watMod := compile(t, r, wat(t, "growmem"))
	t.Run("Go allocates forever", func(t *testing.T) {
		_, err := run(t, r, goMod, Input{Args: []string{"probe", "alloc"}})
		if !errors.Is(err, ErrMemoryLimit) {
			t.Fatalf("err = %v, want ErrMemoryLimit", err)
		}
	})
	t.Run("wat grows memory ignoring failures", func(t *testing.T) {
		_, err := run(t, r, watMod, Input{})
		if !errors.Is(err, ErrMemoryLimit) {
			t.Fatalf("err = %v, want ErrMemoryLimit", err)
		}
		if !strings.HasPrefix(err.Error(), "memory limit 32MiB exceeded") {
			t.Errorf("message %q, want it to name the limit", err)
		}
	})
	t.Run("initial memory over the call's limit", func(t *testing.T) {
		_, err := run(t, r, goMod, Input{Args: []string{"probe", "echo"}, Limits: Limits{MemoryBytes: 64 << 10}})
		if !errors.Is(err, ErrMemoryLimit) {
			t.Fatalf("err = %v, want ErrMemoryLimit", err)
		}
	})
	t.Run("per-call limit above the default", func(t *testing.T) {
		out, err := run(t, r, goMod, Input{Args: []string{"probe", "echo"}, Stdin: []byte("ok"), Limits: Limits{MemoryBytes: 128 << 20}})
		if err != nil || string(out.Stdout) != "ok" {
			t.Fatalf("%v %+v", err, out)
		}
	})
}

func TestRunTraps(t *testing.T) {
	r := newRuntime(t, Config{Limits: Limits{Timeout: 20 * time.Second}})
	for _, name := range []string{"trap", "recurse"} {
		t.Run(name, func(t *testing.T) {
			_, err := run(t, r, compile(t, r, wat(t, name)), Input{})
			if !errors.Is(err, ErrTrap) {
				t.Fatalf("err = %v, want ErrTrap", err)
			}
		})
	}
	// Go grows its goroutine stacks in linear memory: runaway recursion
	// ends in Go's own fatal error, or at the memory limit; either way the
	// host survives and the call fails.
	t.Run("Go recursion", func(t *testing.T) {
		out, err := run(t, r, compile(t, r, probe(t)), Input{Args: []string{"probe", "recurse"}})
		if err == nil && out.ExitCode == 0 {
			t.Fatalf("runaway recursion succeeded: %+v", out)
		}
		t.Logf("err = %v, exit = %d, stderr = %.200s", err, out.ExitCode, out.Stderr)
	})
}

func TestRunOutputLimit(t *testing.T) {
	r := newRuntime(t, Config{Limits: Limits{MaxStdout: 100 << 10, MaxStderr: 10 << 10, Timeout: 20 * time.Second}})
	m := compile(t, r, probe(t))
	for _, tt := range []struct {
		mode string
		cap  int
		got  func(*Output) []byte
		msg  string
	}{
		{"floodout", 100 << 10, func(o *Output) []byte { return o.Stdout }, "stdout exceeded 100KiB"},
		{"flooderr", 10 << 10, func(o *Output) []byte { return o.Stderr }, "stderr exceeded 10KiB"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			out, err := run(t, r, m, Input{Args: []string{"probe", tt.mode}})
			if !errors.Is(err, ErrOutputLimit) {
				t.Fatalf("err = %v, want ErrOutputLimit", err)
			}
			if err.Error() != tt.msg {
				t.Errorf("message %q, want %q", err, tt.msg)
			}
			if n := len(tt.got(out)); n != tt.cap {
				t.Errorf("kept %d bytes, want the cap %d", n, tt.cap)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1500: "1500B", 64 << 10: "64KiB", 8 << 20: "8MiB", 3 << 30: "3GiB", 1<<20 + 1: "1048577B"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRunInputLimit(t *testing.T) {
	r := newRuntime(t, Config{Limits: Limits{MaxStdin: 10}})
	m := compile(t, r, probe(t))
	_, err := run(t, r, m, Input{Args: []string{"probe", "echo"}, Stdin: bytes.Repeat([]byte("x"), 11)})
	if !errors.Is(err, ErrInputLimit) {
		t.Fatalf("err = %v, want ErrInputLimit", err)
	}
}

// The WASI socket functions may be imported (the ABI allows every WASI
// import) but no socket exists: every call fails.
func TestNoSockets(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, wat(t, "sock"))
	out, err := run(t, r, m, Input{Stdin: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 0 {
		t.Errorf("%d socket calls succeeded", out.ExitCode)
	}
}

// A panicking host function ends the call with an error; the host lives.
func TestHostFunctionPanicIsRecovered(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	st := &callState{cancel: cancel}
	stack := []uint64{7}
	func() {
		defer guard(ctx, st, "http_request", stack)
		var m map[string]int
		//lint:ignore SA5000 the nil map write is the point: a real runtime panic
		m["boom"]++
	}()
	if int32(stack[0]) != codeFault {
		t.Errorf("result = %d, want %d", int32(stack[0]), codeFault)
	}
	if p := st.hostErr.Load(); p == nil || (*p).Error() != "guest trapped: the host refused a call to agrun.http_request" {
		t.Errorf("hostErr = %v", p)
	}
	if context.Cause(ctx) == nil {
		t.Error("the call was not ended")
	}
	// Without call state (a context not from Run) the guard still holds.
	func() {
		defer guard(ctx, nil, "http_request", stack)
		hostHTTPRequest(context.Background(), nil, stack)
	}()
}
