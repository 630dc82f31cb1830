package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/testing/syncbuf"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// wasiPanics are guests whose one WASI call made wazero 1.12 panic inside
// its own function; wazero recovered the panic and its error carried the
// host's whole goroutine stack (source and module-cache paths, heap
// addresses), which agrun handed to the caller.
var wasiPanics = []struct{ name, file, fn string }{
	{"poll_oneoff with 2^28 subscriptions", "wasi_poll_overflow", "wasi_snapshot_preview1.poll_oneoff"},
	{"fd_filestat_set_times on stdout", "wasi_settimes_stdout", "wasi_snapshot_preview1.fd_filestat_set_times"},
}

// hostPanicText is what a host's Go panic and stack trace look like.
var hostPanicText = []string{"goroutine", ".go:", "panic", "recovered by wazero", "runtime error", "/pkg/mod/", "+0x"}

// checkNoPanicText asserts s carries nothing of a host panic.
func checkNoPanicText(t testing.TB, what, s string) {
	t.Helper()
	for _, m := range hostPanicText {
		if strings.Contains(s, m) {
			t.Errorf("%s carries host text %q: %s", what, m, hostile.Truncate(s, 1500))
			return
		}
	}
}

// shortHash is the module hash the runtime logs: 12 hex digits of the
// SHA-256 of the .wasm.
func shortHash(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])[:12]
}

// TestWASIPanics: the guests that made wazero's WASI functions panic fail
// with execution_failed and a message that says the host refused the call
// and carries no stack; the refusal is logged with the module's hash; the
// after-conditions hold.
func TestWASIPanics(t *testing.T) {
	var logs syncbuf.Buffer
	f := hostile.NewFixture(t, runtime.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, c := range wasiPanics {
		t.Run(c.name, func(t *testing.T) {
			wasm := hostile.Pack(t, hostile.WAT(t, c.file), c.file)
			f.Register(t, f.Load(t, wasm, wasmtools.Grant{Limits: runtime.Limits{Timeout: 5 * time.Second}}))
			before := f.Snapshot(t)
			got := hostile.Inv(f.Reg.Invoke(context.Background(), c.file, json.RawMessage(`{}`)))
			f.After(t, before, got, registry.ExecutionFailed)
			var re *registry.Error
			if !errors.As(got.Err, &re) {
				return // after reported it
			}
			msg := re.Message()
			if !strings.Contains(msg, "the host refused a call to "+c.fn) {
				t.Errorf("message %q; want it to say the host refused a call to %s", hostile.Truncate(msg, 1500), c.fn)
			}
			checkNoPanicText(t, "the message", msg)
			checkNoPanicText(t, "the error", got.Err.Error())
			if l := logs.String(); !strings.Contains(l, "module="+shortHash(wasm)) || !strings.Contains(l, "function="+c.fn) {
				t.Errorf("the refusal was not logged with the module's hash %s: %s", shortHash(wasm), hostile.Truncate(l, 2000))
			}
		})
	}
}

// wasiPanicTools writes the wasiPanics guests (packed) to dir and returns
// the [tools.*] entries naming them, by file name.
func wasiPanicTools(t *testing.T, dir string) (toml string, hashes map[string]string) {
	t.Helper()
	var b strings.Builder
	hashes = map[string]string{}
	for _, c := range wasiPanics {
		wasm := hostile.Pack(t, hostile.WAT(t, c.file), c.file)
		p := filepath.Join(dir, c.file+".wasm")
		hostile.Must(t, os.WriteFile(p, wasm, 0o644))
		fmt.Fprintf(&b, "\n[tools.%s]\nwasm = %q\n", c.file, p)
		hashes[c.file] = shortHash(wasm)
	}
	return b.String(), hashes
}

// TestCLIWASIPanics: through the built binary, `agrun call --json` on
// those tools prints one bounded object, execution_failed, saying the host
// refused, with no stack; the operator's stderr gets the log line with the
// module's hash.
func TestCLIWASIPanics(t *testing.T) {
	tools, hashes := wasiPanicTools(t, t.TempDir())
	e := hostile.NewCLIEnv(t, "", tools)
	for _, c := range wasiPanics {
		t.Run(c.name, func(t *testing.T) {
			r := e.Run("", "call", "--json", c.file, "{}")
			var res struct {
				OK    bool `json:"ok"`
				Error struct {
					Kind    string `json:"kind"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(r.Stdout, &res); err != nil {
				t.Fatalf("stdout is not one JSON object (%v): %s", err, hostile.Truncate(string(r.Stdout), 2000))
			}
			if r.Code != 1 || res.OK || res.Error.Kind != string(registry.ExecutionFailed) {
				t.Errorf("exit %d, %s; want exit 1 and execution_failed", r.Code, hostile.Truncate(string(r.Stdout), 2000))
			}
			if !strings.Contains(res.Error.Message, "the host refused a call to "+c.fn) {
				t.Errorf("message %q; want it to say the host refused", hostile.Truncate(res.Error.Message, 1500))
			}
			if len(r.Stdout) > 1024 {
				t.Errorf("stdout is %d bytes; want a bounded message", len(r.Stdout))
			}
			checkNoPanicText(t, "stdout", string(r.Stdout))
			hostile.CheckTerminalSafe(t, "stderr", r.Stderr)
			if !bytes.Contains(r.Stderr, []byte("module="+hashes[c.file])) {
				t.Errorf("stderr lacks the log line with the module's hash %s: %s", hashes[c.file], hostile.Truncate(string(r.Stderr), 2000))
			}
		})
	}
}

// TestServeWASIPanics: a remote uploader's tool that makes wazero panic
// gets an execution_failed answer that says the host refused, without the
// host's stack, and the server keeps serving.
func TestServeWASIPanics(t *testing.T) {
	e := hostile.NewCLIEnv(t, "", fmt.Sprintf("\n[serve]\ndata_dir = %q\n", filepath.Join(t.TempDir(), "serve")))
	base, _ := startServe(t, e, nil)
	client := &http.Client{Timeout: 30 * time.Second}
	post := func(path, ctype string, body []byte) (int, []byte) {
		t.Helper()
		resp, err := client.Post(base+path, ctype, bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	for _, c := range wasiPanics {
		t.Run(c.name, func(t *testing.T) {
			if code, raw := post("/v1/tools", "application/wasm", hostile.Pack(t, hostile.WAT(t, c.file), c.file)); code/100 != 2 {
				t.Fatalf("upload: %d %s", code, raw)
			}
			_, raw := post("/v1/tools/"+c.file+"/call", "application/json", []byte(`{}`))
			var a struct {
				OK    bool `json:"ok"`
				Error struct {
					Kind    string `json:"kind"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &a); err != nil || a.OK || a.Error.Kind != string(registry.ExecutionFailed) ||
				!strings.Contains(a.Error.Message, "the host refused a call to "+c.fn) {
				t.Errorf("answer %s; want execution_failed saying the host refused", hostile.Truncate(string(raw), 2000))
			}
			if len(raw) > 1024 {
				t.Errorf("answer is %d bytes; want a bounded message", len(raw))
			}
			checkNoPanicText(t, "the answer", string(raw))
		})
	}
	if code, raw := post("/v1/tools/word_count/call", "application/json", []byte(hostile.WordCountArgs)); code != 200 {
		t.Errorf("word_count after the attacks: %d %s", code, raw)
	}
}
