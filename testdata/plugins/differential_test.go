//go:build !wasip1

// The Extism half of agrun's differential test: each case of
// differential.json, run under Extism's own Go SDK, gives the output,
// error and status written there; agrun's half (wasmtools,
// TestPluginDifferential) runs the same cases under agrun against the
// same file. This module is agrun's only user of the Extism SDK, so that
// it never enters agrun's go.mod.
package plugins

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	extism "github.com/extism/go-sdk"
)

type diffCase struct {
	Name     string            `json:"name"`
	Plugin   string            `json:"plugin"`
	Function string            `json:"function"`
	Input    string            `json:"input"`
	Config   map[string]string `json:"config"`
	Output   string            `json:"output"`
	Error    string            `json:"error"`
	Status   uint32            `json:"status"`
}

func TestDifferentialExtism(t *testing.T) {
	b, err := os.ReadFile("differential.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []diffCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			m := extism.Manifest{
				Wasm:   []extism.Wasm{extism.WasmFile{Path: c.Plugin + ".wasm"}},
				Config: c.Config,
			}
			p, err := extism.NewPlugin(ctx, m, extism.PluginConfig{EnableWasi: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ctx)
			status, out, err := p.Call(c.Function, []byte(c.Input))
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if status != c.Status || string(out) != c.Output || gotErr != c.Error {
				t.Errorf("Extism: status %d, output %q, error %q; differential.json says %d, %q, %q", status, out, gotErr, c.Status, c.Output, c.Error)
			}
		})
	}
}
