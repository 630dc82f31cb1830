package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestLoopFreeCode: code that never loops — a tree of 2^60 calls, long
// straight-line bodies called from such a tree — ends at its deadline, in
// process (the standard after-conditions) and through the CLI, where it
// also ends on SIGTERM. wazero's own interruption checks only at loop
// headers: before the guest metered itself, `agrun call` on calltree.wasm
// burned a core for as long as anyone waited.
func TestLoopFreeCode(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	lim := wasmtools.Grant{Limits: runtime.Limits{Timeout: hostile.CallTimeout}}
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "calltree"), "calltree"), lim))
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "straightline"), "straightline"), lim))
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "calltree"), "calltree_fuel"), wasmtools.Grant{Limits: runtime.Limits{Timeout: time.Minute, Fuel: 10_000_000}}))
	for _, c := range []struct{ name, tool string }{
		{"a tree of 2^60 calls", "calltree"},
		{"straight-line bodies in a tree of calls", "straightline"},
		{"a tree of calls, stopped by fuel alone", "calltree_fuel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			start := time.Now()
			i := f.Reg.Invoke(context.Background(), c.tool, json.RawMessage(`{}`))
			if d := time.Since(start); d > 20*hostile.CallTimeout+5*time.Second {
				t.Errorf("ended after %v; the limit was %v", d, hostile.CallTimeout)
			}
			f.After(t, before, hostile.Inv(i), registry.Timeout)
		})
	}

	wasm := hostile.WriteTemp(t, "calltree.wasm", hostile.Pack(t, hostile.WAT(t, "calltree"), "calltree"))
	env := hostile.NewCLIEnv(t, "", fmt.Sprintf("\n[tools.calltree]\nwasm = %q\ntimeout = \"1s\"\n\n[tools.calltree_long]\nwasm = %q\ntimeout = \"10m\"\n", wasm, wasm))
	t.Run("agrun call, timeout 1s", func(t *testing.T) {
		start := time.Now()
		r := env.Run("{}", "call", "--json", "calltree")
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("agrun call took %v with a timeout of 1s", d)
		}
		var got struct {
			OK    bool
			Error struct{ Kind string }
		}
		if err := json.Unmarshal(r.Stdout, &got); err != nil || got.OK || got.Error.Kind != string(registry.Timeout) || r.Code != 1 {
			t.Fatalf("exit %d, stdout %s (%v), want a timeout", r.Code, r.Stdout, err)
		}
	})
	t.Run("agrun call ends on SIGTERM", func(t *testing.T) {
		cmd := exec.Command(hostile.AgrunBinary(t), "-c", env.Config, "call", "--json", "calltree_long")
		cmd.Stdin = strings.NewReader("{}")
		hostile.Must(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		time.Sleep(time.Second) // the guest is running (compiled from the cache)
		hostile.Must(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatal("agrun call was still running 30 s after SIGTERM")
		}
	})
}
