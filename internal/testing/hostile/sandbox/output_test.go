package sandbox

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestOutput: floods end with output_limit; whatever the guest writes, the
// model receives valid UTF-8 without raw control characters.
func TestOutput(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	f.Hostile(t, "out_json", wasmtools.Grant{})
	textWasm, err := wasmtools.Pack(hostile.HostileWasm(t), wasmtools.Manifest{Name: "out_text", Description: "text output", Output: wasmtools.OutputText})
	hostile.Must(t, err)
	f.Register(t, f.Load(t, textWasm, wasmtools.Grant{}))

	for _, c := range []struct {
		name, tool string
		args       map[string]any
		want       registry.Kind
	}{
		{"stdout flood", "out_json", map[string]any{"op": "flood"}, registry.OutputLimit},
		{"stderr flood", "out_json", map[string]any{"op": "errflood"}, registry.OutputLimit},
		{"stdout flood, text tool", "out_text", map[string]any{"op": "flood"}, registry.OutputLimit},
		{"raw escapes in JSON output", "out_json", hostile.Emit(t, `{"x":"`+hostile.TerminalAttack+`"}`, "", 0), registry.ExecutionFailed},
		{"escaped escapes in JSON output", "out_json", hostile.Emit(t, `{"x":"\u001b[2J\u001b]0;pwned\u0007"}`, "", 0), ""},
		{"invalid UTF-8 in a JSON string", "out_json", hostile.Emit(t, "{\"x\":\"\xff\xfe\xc0\xaf\"}", "", 0), ""},
		{"escapes and invalid UTF-8 in text output", "out_text", hostile.Emit(t, hostile.TerminalAttack, "", 0), ""},
		{"escapes in the error message on stderr", "out_json", hostile.Emit(t, "", hostile.TerminalAttack, 1), registry.ExecutionFailed},
		{"escapes in the JSON error on stdout", "out_json", hostile.Emit(t, `{"error":"\u001b]0;pwned\u0007\u001b[2J gone"}`, "", 1), registry.ExecutionFailed},
		{"60 KiB of stderr", "out_json", hostile.Emit(t, "", strings.Repeat("\x1b[31mE", 60<<10/6), 1), registry.ExecutionFailed},
		{"not JSON at all", "out_json", hostile.Emit(t, "\x1b[2J not json", "", 0), registry.ExecutionFailed},
		{"empty output", "out_json", hostile.Emit(t, "", "", 0), registry.ExecutionFailed},
		{"two JSON values", "out_json", hostile.Emit(t, `{"a":1}{"b":2}`, "", 0), registry.ExecutionFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			got := hostile.Inv(f.Reg.Invoke(context.Background(), c.tool, hostile.ArgsJSON(t, c.args)))
			f.After(t, before, got, c.want)
			if got.Err == nil {
				checkToolOutput(t, got.Out)
			} else if re := (*registry.Error)(nil); errorsAs(got.Err, &re) && len(re.Error()) > 8<<10 {
				t.Errorf("error message is %d bytes; want it capped", len(re.Error()))
			}
		})
	}
}

// checkToolOutput asserts a successful result is fit for the model: valid
// UTF-8 and no raw control bytes (inside JSON strings they must be
// escaped, which json.Valid already demands; this checks the bytes).
func checkToolOutput(t testing.TB, out []byte) {
	t.Helper()
	if !utf8.Valid(out) {
		t.Errorf("output is not valid UTF-8: %q", out)
	}
	if i := bytes.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' && r != '\r' || r >= 0x80 && r < 0xa0 }); i >= 0 {
		t.Errorf("output carries a raw control character at %d: %q", i, out)
	}
}

func errorsAs(err error, target **registry.Error) bool {
	re, ok := err.(*registry.Error)
	if ok {
		*target = re
	}
	return ok
}

// countingHandler is a slog.Handler that counts what it receives.
type countingHandler struct {
	mu       sync.Mutex
	records  int
	bytes    int
	rawEsc   bool
	maxBytes int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records++
	h.bytes += len(r.Message)
	h.maxBytes = max(h.maxBytes, len(r.Message))
	h.rawEsc = h.rawEsc || strings.ContainsRune(r.Message, 0x1b)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestLogFlood: a guest that floods agrun.log gets at most 256 KiB per call
// into the host's log, in messages of at most 4 KiB.
func TestLogFlood(t *testing.T) {
	h := &countingHandler{}
	f := hostile.NewFixture(t, runtime.Config{Logger: slog.New(h)})
	f.Hostile(t, "logger", wasmtools.Grant{})
	before := f.Snapshot(t)
	got := hostile.Inv(f.Reg.Invoke(context.Background(), "logger", hostile.ArgsJSON(t, map[string]any{"op": "logflood", "n": 100000})))
	f.After(t, before, got, "")
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Logf("the host logged %d messages, %d bytes", h.records, h.bytes)
	if h.bytes > 256<<10 || h.maxBytes > 4<<10 {
		t.Errorf("host log got %d bytes (largest message %d); want at most 256 KiB in messages of at most 4 KiB", h.bytes, h.maxBytes)
	}
	if h.rawEsc {
		// The message reaches the operator's slog handler as the guest wrote
		// it (valid UTF-8); slog's text and JSON handlers quote it. A custom
		// handler printing msg raw would pass escapes on.
		t.Log("note: log messages keep ESC; slog's handlers quote them")
	}
}
