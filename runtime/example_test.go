package runtime_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/agcore/agrun/runtime"
)

// A module that writes "hello" to stdout, in WebAssembly text format.
const helloWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`

func Example() {
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)

	mod, err := rt.Compile(ctx, assemble(helloWAT))
	if err != nil {
		panic(err)
	}
	out, err := rt.Run(ctx, mod, runtime.Input{
		Args:   []string{"hello"},
		Limits: runtime.Limits{Timeout: 2 * time.Second},
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("exit %d: %s", out.ExitCode, out.Stdout)
	// Output: exit 0: hello
}

// assemble turns WAT into a module with wat2wasm (wabt).
func assemble(wat string) []byte {
	dir, err := os.MkdirTemp("", "agrun-example")
	if err != nil {
		panic(err)
	}
	src, bin := filepath.Join(dir, "m.wat"), filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(src, []byte(wat), 0o644); err != nil {
		panic(err)
	}
	if out, err := exec.Command("wat2wasm", "-o", bin, src).CombinedOutput(); err != nil {
		panic(fmt.Sprintf("wat2wasm: %v\n%s", err, out))
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		panic(err)
	}
	os.RemoveAll(dir)
	return b
}
