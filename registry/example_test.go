package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// wordCount is a tool written in Go, registered next to WASM and MCP tools.
type wordCount struct{}

func (wordCount) Name() string        { return "word_count" }
func (wordCount) Description() string { return "Counts the words of a text" }
func (wordCount) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
}
func (wordCount) Permissions() []permission.Permission { return nil }
func (wordCount) Execute(_ context.Context, args json.RawMessage) (json.RawMessage, error) {
	var in struct{ Text string }
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, registry.NewError(registry.InvalidArguments, "word_count", err)
	}
	return json.Marshal(map[string]int{"words": len(strings.Fields(in.Text))})
}

func ExampleRegistry() {
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	if err := reg.Register(wordCount{}); err != nil {
		panic(err)
	}
	fmt.Println(reg.List())

	inv := reg.Invoke(context.Background(), "word_count", json.RawMessage(`{"text":"the quick brown fox"}`))
	fmt.Println(string(inv.Output), inv.Err)

	inv = reg.Invoke(context.Background(), "word_count", json.RawMessage(`{"txt":"typo"}`))
	fmt.Println(registry.KindOf(inv.Err), inv.Err)

	invs := reg.InvokeAll(context.Background(), []registry.Call{
		{ID: "call_1", Name: "word_count", Args: json.RawMessage(`{"text":"a b"}`)},
		{ID: "call_2", Name: "nope"},
	})
	for _, inv := range invs {
		if inv.Err != nil {
			fmt.Println(inv.ID, "error:", registry.KindOf(inv.Err))
		} else {
			fmt.Println(inv.ID, "ok:", string(inv.Output))
		}
	}
	// Output:
	// [word_count]
	// {"words":4} <nil>
	// invalid_arguments tool "word_count": invalid_arguments: /text: missing
	// call_1 ok: {"words":2}
	// call_2 error: not_found
}
