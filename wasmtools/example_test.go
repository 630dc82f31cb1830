package wasmtools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// Load a packed tool (here the C example, sum_c) and call it. The grant is
// empty: the tool declares no permissions and needs none.
func ExampleLoad() {
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{DisableCache: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rt.Close(ctx)

	wasm, err := os.ReadFile("../testdata/sum_c.wasm")
	if err != nil {
		fmt.Println(err)
		return
	}
	tool, err := wasmtools.Load(ctx, rt, wasm, wasmtools.Grant{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tool.Name(), tool.Permissions())

	out, err := tool.Execute(ctx, json.RawMessage(`{"numbers":[1,2.5,-3]}`))
	fmt.Println(string(out), err)

	// A failure is a *registry.Error carrying the tool's own message.
	_, err = tool.Execute(ctx, json.RawMessage(`{"numbers":"many"}`))
	fmt.Println(err)
	// Output:
	// sum_c []
	// {"sum":0.5,"count":3} <nil>
	// tool "sum_c": execution_failed: invalid arguments: "numbers" must be an array
}
