package wasmtools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
)

// Every runtime error becomes a tool error whose message is cleaned and
// capped like a guest's own: the runtime's text may quote the module (a
// trap's stack trace names its functions), whatever the runtime does to
// keep it short. The sentinel stays reachable.
func TestRuntimeErrorTextIsCleaned(t *testing.T) {
	evil := "\x1b[2J\x1b]0;pwned\x07\u009b31m\u202e\U000E0041" + strings.Repeat("$f(i32)\n\t", 2000)
	tool := &Tool{name: "t"}
	for _, sentinel := range []error{runtime.ErrTrap, runtime.ErrMemoryLimit, runtime.ErrOutputLimit, runtime.ErrTimeout, runtime.ErrCompile} {
		err := tool.classify(context.Background(), fmt.Errorf("%w: wasm stack trace:\n\t%s", sentinel, evil))
		var re *registry.Error
		if !errors.As(err, &re) || !errors.Is(err, sentinel) {
			t.Fatalf("%v: got %#v", sentinel, err)
		}
		msg := re.Message()
		if i := textsafe.IndexUnsafe(msg); i >= 0 {
			t.Errorf("%v: unsafe rune at %d of %q", sentinel, i, textsafe.Truncate(msg, 200))
		}
		if len(msg) > maxErrorMessage {
			t.Errorf("%v: message is %d bytes, cap %d", sentinel, len(msg), maxErrorMessage)
		}
	}
}
