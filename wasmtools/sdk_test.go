package wasmtools_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/wasmtools"
)

// A tool written with the guest SDK ends the same whether it is built as a
// command or as a reactor (-buildmode=c-shared: run from a snapshot, where
// a successful Run returns from agrun_call instead of calling proc_exit).
func TestSDKCommandAndReactorAgree(t *testing.T) {
	builds := map[string][]byte{
		"command": testguest.Build(t, "testdata/guests/sdk"),
		"reactor": testguest.Build(t, "testdata/guests/sdk", "-buildmode=c-shared"),
	}
	type outcome struct {
		out  string
		kind registry.Kind
		msg  string
	}
	run := func(wasm []byte, name string, output string, mode string) outcome {
		tool := loadWith(t, wasm, wasmtools.Manifest{Name: name, Description: "d", Output: output}, wasmtools.Grant{})
		out, err := call(t, tool, map[string]string{"mode": mode})
		var e *registry.Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("%s %s: %v is not a *registry.Error", name, mode, err)
		}
		if e != nil {
			return outcome{kind: e.Kind, msg: e.Message()}
		}
		return outcome{out: string(out)}
	}
	for _, tt := range []struct {
		name, mode string
		output     string
		want       outcome
	}{
		{"sdk", "ok", wasmtools.OutputJSON, outcome{out: `{"result":"fine"}`}},
		{"sdk", "error", wasmtools.OutputJSON, outcome{kind: registry.ExecutionFailed, msg: "it went wrong"}},
		{"sdk", "panic", wasmtools.OutputJSON, outcome{kind: registry.ExecutionFailed, msg: "tool panicked: boom"}},
		{"sdk", "exit3", wasmtools.OutputJSON, outcome{kind: registry.ExecutionFailed, msg: "exited on purpose"}},
		{"sdk_text", "text", wasmtools.OutputText, outcome{out: `"plain words"`}},
	} {
		for build, wasm := range builds {
			t.Run(fmt.Sprint(tt.mode, "/", build), func(t *testing.T) {
				for i := 0; i < 2; i++ { // the second from the snapshot (and a prepared instance)
					if got := run(wasm, tt.name, tt.output, tt.mode); got != tt.want {
						t.Fatalf("call %d: %+v, want %+v", i, got, tt.want)
					}
				}
			})
		}
	}
	// A panic in main outside Run is the Go runtime's: the panic on stderr,
	// and exit 2 (command) or a trap (reactor: Go cannot exit from inside
	// agrun_call); either way the message carries the panic.
	for build, wasm := range builds {
		got := run(wasm, "sdk_mainpanic", wasmtools.OutputJSON, "ok")
		if got.kind != registry.ExecutionFailed || !strings.Contains(got.msg, "panic: main panicked before Run") || !strings.Contains(got.msg, "goroutine") {
			t.Errorf("%s: panic in main: %+v", build, got)
		}
	}
}
