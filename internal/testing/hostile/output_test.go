package hostile

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// Terminal attacks: CSI colour and cursor moves, an OSC title change ended
// by BEL, an OSC 8 hyperlink, a C1 CSI (0x9b, as a raw byte and as U+009B),
// a bidi override, invalid UTF-8 and a NUL.
const terminalAttack = "\x1b[2J\x1b[31mred\x1b[0m \x1b]0;pwned\x07 \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\ \x9b31m \u009b31m \u202egnp.exe\u202c \xff\xfe bad \x00 nul"

// emit is the hostile guest's "emit" op.
func emit(t testing.TB, stdout, stderr string, exit int) map[string]any {
	return map[string]any{"op": "emit", "stdout_b64": base64.StdEncoding.EncodeToString([]byte(stdout)),
		"stderr_b64": base64.StdEncoding.EncodeToString([]byte(stderr)), "exit": exit}
}

// TestOutput: floods end with output_limit; whatever the guest writes, the
// model receives valid UTF-8 without raw control characters.
func TestOutput(t *testing.T) {
	f := newFixture(t, runtime.Config{})
	f.hostile(t, "out_json", wasmtools.Grant{})
	textWasm, err := wasmtools.Pack(hostileWasm(t), wasmtools.Manifest{Name: "out_text", Description: "text output", Output: wasmtools.OutputText})
	must(t, err)
	f.register(t, f.load(t, textWasm, wasmtools.Grant{}))

	for _, c := range []struct {
		name, tool string
		args       map[string]any
		want       registry.Kind
	}{
		{"stdout flood", "out_json", map[string]any{"op": "flood"}, registry.OutputLimit},
		{"stderr flood", "out_json", map[string]any{"op": "errflood"}, registry.OutputLimit},
		{"stdout flood, text tool", "out_text", map[string]any{"op": "flood"}, registry.OutputLimit},
		{"raw escapes in JSON output", "out_json", emit(t, `{"x":"`+terminalAttack+`"}`, "", 0), registry.ExecutionFailed},
		{"escaped escapes in JSON output", "out_json", emit(t, `{"x":"\u001b[2J\u001b]0;pwned\u0007"}`, "", 0), ""},
		{"invalid UTF-8 in a JSON string", "out_json", emit(t, "{\"x\":\"\xff\xfe\xc0\xaf\"}", "", 0), ""},
		{"escapes and invalid UTF-8 in text output", "out_text", emit(t, terminalAttack, "", 0), ""},
		{"escapes in the error message on stderr", "out_json", emit(t, "", terminalAttack, 1), registry.ExecutionFailed},
		{"escapes in the JSON error on stdout", "out_json", emit(t, `{"error":"\u001b]0;pwned\u0007\u001b[2J gone"}`, "", 1), registry.ExecutionFailed},
		{"60 KiB of stderr", "out_json", emit(t, "", strings.Repeat("\x1b[31mE", 60<<10/6), 1), registry.ExecutionFailed},
		{"not JSON at all", "out_json", emit(t, "\x1b[2J not json", "", 0), registry.ExecutionFailed},
		{"empty output", "out_json", emit(t, "", "", 0), registry.ExecutionFailed},
		{"two JSON values", "out_json", emit(t, `{"a":1}{"b":2}`, "", 0), registry.ExecutionFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.snapshot(t)
			got := inv(f.reg.Invoke(context.Background(), c.tool, argsJSON(t, c.args)))
			f.after(t, before, got, c.want)
			if got.err == nil {
				checkToolOutput(t, got.out)
			} else if re := (*registry.Error)(nil); errorsAs(got.err, &re) && len(re.Error()) > 8<<10 {
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
	f := newFixture(t, runtime.Config{Logger: slog.New(h)})
	f.hostile(t, "logger", wasmtools.Grant{})
	before := f.snapshot(t)
	got := inv(f.reg.Invoke(context.Background(), "logger", argsJSON(t, map[string]any{"op": "logflood", "n": 100000})))
	f.after(t, before, got, "")
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
