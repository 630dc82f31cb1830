package runtime

import (
	"context"
	"fmt"
	"testing"
)

// A snapshot larger than the declared minimum (_initialize grows), calls
// that grow and dirty pages, then calls on the shrunk, reused instance that
// grow and look there, or touch just past the snapshot's size (must trap,
// as on a fresh instance).
func TestShrinkProbe(t *testing.T) {
	wasm := wat(t, "shrinkprobe")
	fresh := newRuntime(t, Config{DisablePrepare: true})
	reuse := newRuntime(t, Config{})
	fm, rm := compile(t, fresh, wasm), compile(t, reuse, wasm)
	ctx := context.Background()
	seq := "ggnhgohgfhgchgghhnggg"
	for i, mode := range seq {
		in := Input{Stdin: []byte{byte(mode)}}
		want, werr := fresh.Run(ctx, fm, in)
		got, gerr := reuse.Run(ctx, rm, in)
		w := fmt.Sprintf("%q %v %d", want.Stdout, werr, want.ExitCode)
		g := fmt.Sprintf("%q %v %d", got.Stdout, gerr, got.ExitCode)
		if w != g {
			t.Fatalf("call %d (%c): reused %s, fresh %s", i, mode, g, w)
		}
		waitIdle(t, reuse)
	}
	if n := reuse.Stats().InstancesReused; n == 0 {
		t.Error("nothing reused")
	} else {
		t.Logf("%d reused", n)
	}
}
