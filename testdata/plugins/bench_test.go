//go:build !wasip1

package plugins

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
)

// The Extism side of docs/RATIONALE.md's "Extism's kernel in Go": what
// reusing Extism's kernel module (extism-runtime.wasm, embedded in the
// SDK) costs per call, measured as the SDK uses it, and a whole call of
// count_vowels under the SDK with a fresh instance (agrun's isolation).
// agrun's side is runtime's BenchmarkExtismArena and BenchmarkPluginCall.

func kernelWasm(b *testing.B) []byte {
	b.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/extism/go-sdk").Output()
	if err != nil {
		b.Skipf("go list: %v", err)
	}
	wasm, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "extism-runtime.wasm"))
	if err != nil {
		b.Skip(err)
	}
	return wasm
}

// BenchmarkKernelInstantiate: the kernel instance a fresh call needs
// (isolation: one per call), instantiated and closed.
func BenchmarkKernelInstantiate(b *testing.B) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, kernelWasm(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		m, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
		if err != nil {
			b.Fatal(err)
		}
		m.Close(ctx)
	}
}

// BenchmarkKernelAllocFree: one alloc and one free of 64 bytes through the
// kernel's exports, as the SDK's host functions call them
// (CallWithStack), plus one length: what a PDK's alloc/length/free host
// calls cost on top of the host call itself.
func BenchmarkKernelAllocFree(b *testing.B) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, kernelWasm(b))
	if err != nil {
		b.Fatal(err)
	}
	m, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		b.Fatal(err)
	}
	alloc, length, free := m.ExportedFunction("alloc"), m.ExportedFunction("length"), m.ExportedFunction("free")
	stack := make([]uint64, 1)
	b.ResetTimer()
	for b.Loop() {
		stack[0] = 64
		must(b, alloc.CallWithStack(ctx, stack))
		p := stack[0]
		must(b, length.CallWithStack(ctx, stack))
		stack[0] = p
		must(b, free.CallWithStack(ctx, stack))
	}
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkExtismCall: count_vowels under the SDK, a fresh plug-in
// instance per call (kernel, guest, _initialize), as agrun isolates calls.
func BenchmarkExtismCall(b *testing.B) {
	ctx := context.Background()
	cp, err := extism.NewCompiledPlugin(ctx, extism.Manifest{
		Wasm:   []extism.Wasm{extism.WasmFile{Path: "count_vowels.wasm"}},
		Config: map[string]string{"vowels": "aeiouy"},
	}, extism.PluginConfig{EnableWasi: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Close(ctx)
	in := []byte(`{"text":"` + strings.Repeat("Rhythm and you ", 64) + `"}`)
	b.ResetTimer()
	for b.Loop() {
		p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.Call("count_vowels", in); err != nil {
			b.Fatal(err)
		}
		p.Close(ctx)
	}
}
