package wasmtools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/agcore/agrun/permission"
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

// A bare WASI program written by someone else gets its manifest from the
// operator instead of a custom section. Here the C example is given a new
// name, and "text" output: its stdout comes back as one JSON string.
func ExampleLoadWithManifest() {
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
	tool, err := wasmtools.LoadWithManifest(ctx, rt, wasm, wasmtools.Manifest{
		Name:        "add",
		Description: "Add numbers; the answer is text.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"numbers":{"type":"array","items":{"type":"number"}}}}`),
		Output:      wasmtools.OutputText,
	}, wasmtools.Grant{})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := tool.Execute(ctx, json.RawMessage(`{"numbers":[40,2]}`))
	fmt.Println(tool.Name(), string(out), err)
	// Output:
	// add "{\"sum\":42,\"count\":2}\n" <nil>
}

// What a tool gets is what its manifest declares and the grant offers,
// never more: this manifest declares read access to files, so the
// writable mount is read-only and the offered host is not linked.
func ExampleTool_Capabilities() {
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
	m := wasmtools.Manifest{
		Name:        "reader",
		Description: "Reads files under /data.",
		Permissions: []permission.Permission{permission.Filesystem, permission.Read},
	}
	tool, err := wasmtools.LoadWithManifest(ctx, rt, wasm, m, wasmtools.Grant{
		AllowedHosts: []string{"api.example.com"},
		Mounts:       []wasmtools.Mount{{Host: ".", Guest: "/data", Writable: true, AllowDelete: true}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := tool.Capabilities()
	fmt.Println("network:", c.Network != nil)
	for _, mnt := range c.Mounts {
		fmt.Println("mount:", mnt.Guest, "writable:", mnt.Writable, "delete:", mnt.AllowDelete)
	}
	// Output:
	// network: false
	// mount: /data writable: false delete: false
}
