package hostile

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

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
	f := newFixture(t, runtime.Config{})
	lim := wasmtools.Grant{Limits: runtime.Limits{Timeout: callTimeout}}
	f.register(t, f.load(t, pack(t, wat(t, "calltree"), "calltree"), lim))
	f.register(t, f.load(t, pack(t, wat(t, "straightline"), "straightline"), lim))
	f.register(t, f.load(t, pack(t, wat(t, "calltree"), "calltree_fuel"), wasmtools.Grant{Limits: runtime.Limits{Timeout: time.Minute, Fuel: 10_000_000}}))
	for _, c := range []struct{ name, tool string }{
		{"a tree of 2^60 calls", "calltree"},
		{"straight-line bodies in a tree of calls", "straightline"},
		{"a tree of calls, stopped by fuel alone", "calltree_fuel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.snapshot(t)
			start := time.Now()
			i := f.reg.Invoke(context.Background(), c.tool, json.RawMessage(`{}`))
			if d := time.Since(start); d > 20*callTimeout+5*time.Second {
				t.Errorf("ended after %v; the limit was %v", d, callTimeout)
			}
			f.after(t, before, inv(i), registry.Timeout)
		})
	}

	wasm := writeTemp(t, "calltree.wasm", pack(t, wat(t, "calltree"), "calltree"))
	env := newCLIEnv(t, "", fmt.Sprintf("\n[tools.calltree]\nwasm = %q\ntimeout = \"1s\"\n\n[tools.calltree_long]\nwasm = %q\ntimeout = \"10m\"\n", wasm, wasm))
	t.Run("agrun call, timeout 1s", func(t *testing.T) {
		start := time.Now()
		r := env.run("{}", "call", "--json", "calltree")
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("agrun call took %v with a timeout of 1s", d)
		}
		var got struct {
			OK    bool
			Error struct{ Kind string }
		}
		if err := json.Unmarshal(r.stdout, &got); err != nil || got.OK || got.Error.Kind != string(registry.Timeout) || r.code != 1 {
			t.Fatalf("exit %d, stdout %s (%v), want a timeout", r.code, r.stdout, err)
		}
	})
	t.Run("agrun call ends on SIGTERM", func(t *testing.T) {
		cmd := exec.Command(agrunBinary(t), "-c", env.config, "call", "--json", "calltree_long")
		cmd.Stdin = strings.NewReader("{}")
		must(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		time.Sleep(time.Second) // the guest is running (compiled from the cache)
		must(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatal("agrun call was still running 30 s after SIGTERM")
		}
	})
}
