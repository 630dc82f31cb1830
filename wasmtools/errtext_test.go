package wasmtools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/wasmtools"
)

// withFuncName appends a name section naming function 0 name.
func withFuncName(wasm []byte, name string) []byte {
	leb := func(b []byte, n int) []byte {
		for {
			c := byte(n & 0x7f)
			n >>= 7
			if n == 0 {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	var names []byte
	names = leb(names, 1) // one entry
	names = leb(names, 0) // function 0
	names = leb(names, len(name))
	names = append(names, name...)
	var sub []byte
	sub = append(sub, 1) // function names
	sub = leb(sub, len(names))
	sub = append(sub, names...)
	var body []byte
	body = leb(body, 4)
	body = append(body, "name"...)
	body = append(body, sub...)
	out := append([]byte(nil), wasm...)
	out = append(out, 0)
	out = leb(out, len(body))
	return append(out, body...)
}

// A trap's text is built from the module's own function names. Whatever
// they hold (terminal escapes, OSC with BEL, a C1 CSI, bidi overrides,
// kilobytes of name), the tool error's message is cleaned and capped like
// the guest's own {"error"} message: what the model and the terminal get.
func TestTrapTextIsCleanedAndCapped(t *testing.T) {
	evil := "f\x1b[2J\x1b]0;pwned\x07\u009b31m\u202e" + strings.Repeat("n", 2000)
	wasm := withFuncName(testguest.WAT(t, "testdata/guests/trapdeep.wat"), evil)
	tool := loadWith(t, wasm, wasmtools.Manifest{Name: "trapdeep", Description: "traps deep"}, wasmtools.Grant{})
	_, err := tool.Execute(context.Background(), json.RawMessage(`{}`))
	e := require.Kind(t, err, registry.ExecutionFailed)
	msg := e.Message()
	if i := textsafe.IndexUnsafe(msg); i >= 0 {
		t.Errorf("message keeps an unsafe rune at %d: %q", i, textsafe.Truncate(msg, 300))
	}
	if len(msg) > 4<<10 {
		t.Errorf("message is %d bytes, more than a guest's message may be (4 KiB)", len(msg))
	}
	if s := err.Error(); textsafe.IndexUnsafe(s) >= 0 || len(s) > 5<<10 {
		t.Errorf("Error() is %d bytes and safe=%v", len(s), textsafe.IsSafe(s))
	}
}
