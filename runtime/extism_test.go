package runtime

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func plugin(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "plugins", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExtismArena(t *testing.T) {
	e := newExtState([]byte("0123456789"), &Plugin{})
	if e.input == 0 || e.inLen != 10 || string(e.bytes(e.input, 10)) != "0123456789" {
		t.Fatalf("input block %d, %d bytes", e.input, e.inLen)
	}
	a, _ := e.alloc(20, 1<<20)
	if a == 0 || e.block(a) < 0 || e.blocks[e.block(a)].len != 20 {
		t.Fatalf("alloc(20) = %d", a)
	}
	if z, ok := e.alloc(0, 1<<20); z != 0 || !ok {
		t.Errorf("alloc(0) = %d, %v; want 0 (Extism's null)", z, ok)
	}
	for _, c := range []struct {
		addr, n uint64
		ok      bool
	}{
		{a, 8, true}, {a + 24, 8, true}, {a + 25, 8, false}, {0, 1, false}, {7, 1, false},
		{1 << 63, 8, false}, {^uint64(0) - 3, 8, false}, {a, ^uint64(0), false},
	} {
		if got := e.find(c.addr, c.n) >= 0; got != c.ok {
			t.Errorf("find(%d, %d) = %v, want %v", c.addr, c.n, got, c.ok)
		}
	}
	if e.block(a+1) >= 0 {
		t.Error("block(a+1): an address inside a block is not a block")
	}
	e.release(a)
	e.release(a) // a double free is ignored
	if e.block(a) >= 0 {
		t.Error("a freed block is still live")
	}
	if b, _ := e.alloc(30, 1<<20); b != a {
		t.Errorf("alloc(30) after freeing a 32-byte block = %d, want it reused (%d)", b, a)
	}
	e.release(e.input)
	if e.block(e.input) < 0 {
		t.Error("the input block was freed")
	}
}

// TestPluginMemoryCounted: what a plug-in allocates through Extism counts
// in its memory limit with its own memory.
func TestPluginMemoryCounted(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, plugin(t, "hostile"))
	lim := Limits{MemoryBytes: 16 << 20}
	// 12 MiB of Extism memory would fit alone, not with the Go guest's own.
	_, err := r.Run(context.Background(), m, Input{Stdin: []byte(`{"n":"12582912"}`), Plugin: &Plugin{Function: "huge_alloc"}, Limits: lim})
	if !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("12 MiB alloc under a 16 MiB limit: %v, want ErrMemoryLimit", err)
	}
	out, err := r.Run(context.Background(), m, Input{Stdin: []byte(`{"n":"1048576"}`), Plugin: &Plugin{Function: "huge_alloc"}, Limits: lim})
	if err != nil {
		t.Fatalf("1 MiB alloc: %v", err)
	}
	if out.Audit.MemoryPeak < 1<<20 {
		t.Errorf("memory peak %d: the arena is not counted", out.Audit.MemoryPeak)
	}
	// The other way: 6 MiB in the arena, then 6 MiB of the guest's own.
	in := Input{Stdin: []byte(`{"n":"6291456"}`), Plugin: &Plugin{Function: "alloc_then_grow"}, Limits: lim}
	if _, err := r.Run(context.Background(), m, in); !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("6 MiB + 6 MiB under a 16 MiB limit: %v, want ErrMemoryLimit", err)
	}
	in.Limits.MemoryBytes = 64 << 20
	if out, err := r.Run(context.Background(), m, in); err != nil || string(out.Plugin.Output) != "6291456" {
		t.Fatalf("under 64 MiB: %v", err)
	}
}

func TestPluginRunRefusals(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, plugin(t, "count_vowels"))
	ctx := context.Background()
	for _, c := range []struct {
		name string
		in   Input
		want error
		text string
	}{
		{"no Plugin", Input{}, ErrCompile, "Run it with Input.Plugin"},
		{"no such function", Input{Plugin: &Plugin{Function: "nope"}}, ErrCompile, `no function "nope"`},
		{"_initialize", Input{Plugin: &Plugin{Function: "_initialize"}}, ErrCompile, "start-up"},
		{"a snapshot export", Input{Plugin: &Plugin{Function: snapshotGlobalPrefix + "0"}}, ErrCompile, "no function"},
		{"config too big", Input{Plugin: &Plugin{Function: "shout", Config: map[string]string{"k": strings.Repeat("v", MaxPluginConfigBytes)}}}, ErrInputLimit, "config"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Run(ctx, m, c.in)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("got %v, want %v containing %q", err, c.want, c.text)
			}
		})
	}
	t.Run("Plugin on a module that is not one", func(t *testing.T) {
		wc := compile(t, r, probe(t))
		_, err := r.Run(ctx, wc, Input{Plugin: &Plugin{Function: "_start"}})
		if !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), "not an Extism plug-in") {
			t.Fatalf("got %v", err)
		}
	})
}

// TestPluginSnapshotCalls: a Go plug-in's calls start from the snapshot
// taken after its _initialize, and each gets fresh vars.
func TestPluginSnapshotCalls(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, plugin(t, "count_vowels"))
	for i := range 3 {
		out, err := r.Run(context.Background(), m, Input{Stdin: []byte(`{"text":"aaa"}`), Plugin: &Plugin{Function: "count_vowels"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(out.Plugin.Output); got != `{"count":3,"vowels":"aeiou","calls":1}` {
			t.Fatalf("call %d: %s", i, got)
		}
	}
	if r.Stats().SnapshotBytes == 0 {
		t.Error("no snapshot was taken of the plug-in's _initialize")
	}
}

// BenchmarkExtismArena is the Go kernel's alloc, length and free (the
// kernel module's: testdata/plugins' BenchmarkKernelAllocFree).
func BenchmarkExtismArena(b *testing.B) {
	e := newExtState(nil, &Plugin{})
	for b.Loop() {
		p, _ := e.alloc(64, 1<<20)
		_ = e.block(p)
		e.release(p)
	}
}

// BenchmarkPluginCall is a whole call of count_vowels under agrun (the
// SDK's: testdata/plugins' BenchmarkExtismCall).
func BenchmarkPluginCall(b *testing.B) {
	r := newRuntime(b, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	m := compile(b, r, plugin(b, "count_vowels"))
	in := Input{
		Stdin:  []byte(`{"text":"` + strings.Repeat("Rhythm and you ", 64) + `"}`),
		Plugin: &Plugin{Function: "count_vowels", Config: map[string]string{"vowels": "aeiouy"}},
	}
	for b.Loop() {
		if _, err := r.Run(context.Background(), m, in); err != nil {
			b.Fatal(err)
		}
	}
}
