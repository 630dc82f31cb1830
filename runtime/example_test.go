package runtime_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agcore/agrun/runtime"
)

func Example() {
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)

	// A WASI command that writes "hello" to stdout (its source is
	// testdata/wat/hello.wat).
	wasm, err := os.ReadFile("testdata/wat/hello.wasm")
	if err != nil {
		panic(err)
	}
	mod, err := rt.Compile(ctx, wasm)
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
