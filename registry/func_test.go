package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agcore/agrun/registry"
)

type countIn struct {
	Text string `json:"text" jsonschema:"the text to count"`
	Min  int    `json:"min,omitempty" jsonschema:"count only words at least this long"`
}

func countWords(_ context.Context, in countIn) (map[string]int, error) {
	n := 0
	for _, w := range strings.Fields(in.Text) {
		if len(w) >= in.Min {
			n++
		}
	}
	return map[string]int{"words": n}, nil
}

// A Go function is a tool in a few lines: its schema comes from its
// argument type, and the registry validates calls against it.
func ExampleNewFunc() {
	tool, err := registry.NewFunc("word_count", "Count the words of a text", countWords)
	if err != nil {
		panic(err)
	}
	reg := registry.New()
	if err := reg.Register(tool); err != nil {
		panic(err)
	}
	fmt.Println(string(tool.Parameters()))
	inv := reg.Invoke(context.Background(), "word_count", json.RawMessage(`{"text":"to be or not to be","min":3}`))
	fmt.Println(string(inv.Output), inv.Err)
	inv = reg.Invoke(context.Background(), "word_count", json.RawMessage(`{"txt":"typo"}`))
	fmt.Println(registry.KindOf(inv.Err))
	// Output:
	// {"type":"object","properties":{"text":{"type":"string","description":"the text to count"},"min":{"type":"integer","description":"count only words at least this long"}},"required":["text"],"additionalProperties":false}
	// {"words":1} <nil>
	// invalid_arguments
}

func TestFuncErrors(t *testing.T) {
	if _, err := registry.NewFunc("bad name!", "", countWords); err == nil {
		t.Error("an invalid name was taken")
	}
	if _, err := registry.NewFunc("scalar", "", func(context.Context, string) (string, error) { return "", nil }); err == nil || !strings.Contains(err.Error(), "must be a struct") {
		t.Errorf("a string argument: %v", err)
	}
	boom := errors.New("the disk is full")
	tool, err := registry.NewFunc("fails", "", func(context.Context, struct{}) (int, error) { return 0, boom })
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	reg.Register(tool)
	inv := reg.Invoke(context.Background(), "fails", json.RawMessage(`{}`))
	if registry.KindOf(inv.Err) != registry.ExecutionFailed || !errors.Is(inv.Err, boom) {
		t.Errorf("err %v", inv.Err)
	}
	denied, _ := registry.NewFunc("denies", "", func(context.Context, struct{}) (int, error) {
		return 0, registry.Errorf(registry.PermissionDenied, "denies", "not for you")
	})
	reg.Register(denied)
	if inv := reg.Invoke(context.Background(), "denies", json.RawMessage(`{}`)); registry.KindOf(inv.Err) != registry.PermissionDenied {
		t.Errorf("err %v", inv.Err)
	}
}
