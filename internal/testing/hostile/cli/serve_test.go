package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/testing/syncbuf"
)

// TestServe drives `agrun serve` (the built binary) as an untrusted client
// would: hostile uploads and hostile calls of an uploaded attacker. Each
// answer carries the right kind; the server process stays up, keeps serving
// the operator's tools, holds no more descriptors than before and stays
// within a memory bound; a SIGTERM still ends it cleanly.
func TestServe(t *testing.T) {
	peer := hostile.NewPeer(t, nil)
	e := hostile.NewCLIEnv(t, "", fmt.Sprintf(`
[permissions]
allowed = ["read", "network", "filesystem", "write"]

[serve]
data_dir = %q
call_timeout = "10s"

[serve.uploads]
timeout = "1s"
memory = "16MiB"
`, filepath.Join(t.TempDir(), "serve")))
	var stderr syncbuf.Buffer
	base, cmd := startServe(t, e, &stderr)
	client := &http.Client{Timeout: 30 * time.Second}
	type answer struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
		Error  struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
	}
	do := func(method, path, ctype string, body []byte) (int, answer, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v (server stderr: %s)", method, path, err, hostile.Truncate(stderr.String(), 2000))
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var a answer
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Errorf("%s %s: answer is not JSON: %q", method, path, hostile.Truncate(string(raw), 300))
		}
		hostile.CheckTerminalSafe(t, method+" "+path+" answer", raw)
		return resp.StatusCode, a, raw
	}
	upload := func(wasm []byte) (int, answer) {
		code, a, _ := do("POST", "/v1/tools", "application/wasm", wasm)
		return code, a
	}
	pid := cmd.Process.Pid
	fds := func() int {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		return len(ents)
	}
	rss := func() int64 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
				return kb << 10
			}
		}
		return 0
	}
	if code, a, _ := do("POST", "/v1/tools/word_count/call", "application/json", []byte(hostile.WordCountArgs)); code != 200 || !a.OK {
		t.Fatalf("word_count before the attacks: %d %+v", code, a)
	}
	fdsBefore, rssBefore := fds(), rss()

	// Hostile uploads.
	for _, c := range []struct {
		name string
		wasm []byte
		kind string
	}{
		{"random bytes", bytes.Repeat([]byte{0xde, 0xad}, 500), "malformed_module"},
		{"no manifest", hostile.HostileWasm(t), "no_manifest"},
		{"table growth bomb", hostile.Pack(t, hostile.WAT(t, "tablegrow"), "bomb"), "module_refused"},
		{"declared memory over the limit", hostile.Pack(t, hostile.WAT(t, "bigmin"), "bigmin"), "module_refused"},
		{"undeclared import", hostile.Pack(t, hostile.WAT(t, "undeclared_env"), "envimport"), "module_refused"},
		{"over an operator tool", hostile.Pack(t, hostile.HostileWasm(t), "word_count"), "forbidden"},
		{"invalid manifest", hostile.WithSection(hostile.HostileWasm(t), "agrun.manifest", []byte(`{"name":"x","name":"y","description":"d"}`)), "invalid_manifest"},
	} {
		t.Run("upload "+c.name, func(t *testing.T) {
			if _, a := upload(c.wasm); a.OK || a.Error.Kind != c.kind {
				t.Errorf("answer %+v; want kind %s", a, c.kind)
			}
		})
	}
	// The attacker itself, asking for everything; uploads get nothing.
	if code, a := upload(hostile.Pack(t, hostile.HostileWasm(t), "attacker", "network", "filesystem", "read", "write")); code/100 != 2 {
		t.Fatalf("upload attacker: %d %+v", code, a)
	}
	if code, a := upload(hostile.Pack(t, hostile.WAT(t, "growmem"), "grower")); code/100 != 2 {
		t.Fatalf("upload grower: %d %+v", code, a)
	}
	if _, a, raw := do("POST", "/v1/tools/grower/call", "application/json", []byte(`{}`)); a.Error.Kind != "memory_limit" {
		t.Errorf("grower: %s; want memory_limit", raw)
	}
	for _, c := range []struct {
		name string
		args map[string]any
		kind string // "" = ok
	}{
		{"spin", map[string]any{"op": "spin"}, "timeout"},
		{"stdout flood", map[string]any{"op": "flood"}, "output_limit"},
		{"network it asked for", map[string]any{"op": "http", "url": peer.URL}, "permission_denied"},
		{"files it asked for", map[string]any{"op": "probe", "paths": []string{"/etc/passwd", "/data/x"}}, ""},
		{"escapes in the error", hostile.Emit(t, "", hostile.TerminalAttack, 1), "execution_failed"},
		{"escapes in the result", hostile.Emit(t, `{"x":"\u001b[2J"}`, "", 0), ""},
		{"duplicate keys", nil, "invalid_arguments"},
	} {
		t.Run("call "+c.name, func(t *testing.T) {
			body := hostile.ArgsJSON(t, c.args)
			if c.args == nil {
				body = []byte(`{"op":"emit","op":"spin"}`)
			}
			_, a, raw := do("POST", "/v1/tools/attacker/call", "application/json", body)
			if c.kind == "" && !a.OK || c.kind != "" && a.Error.Kind != c.kind {
				t.Errorf("answer %s; want kind %q", hostile.Truncate(string(raw), 300), c.kind)
			}
			if bytes.Contains(raw, []byte(hostile.Secret)) || bytes.Contains(raw, []byte("root:x:0:0")) {
				t.Errorf("host content reached the client: %s", raw)
			}
		})
	}
	if peer.Hits.Load() != 0 {
		t.Errorf("an uploaded tool reached the network")
	}
	if code, a, _ := do("POST", "/v1/tools/word_count/call", "application/json", []byte(hostile.WordCountArgs)); code != 200 || !a.OK {
		t.Errorf("word_count after the attacks: %d %+v", code, a)
	}
	deadline := time.Now().Add(hostile.Settle)
	for fds() > fdsBefore && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := fds(); n > fdsBefore {
		t.Errorf("server holds %d descriptors, %d before the attacks", n, fdsBefore)
	}
	if r := rss(); r > rssBefore+hostile.MaxRSSGrowth {
		t.Errorf("server RSS grew from %d to %d MiB", rssBefore>>20, r>>20)
	}
	hostile.Must(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agrun serve after SIGTERM: %v\n%s", err, hostile.Truncate(stderr.String(), 2000))
		}
	case <-time.After(time.Minute):
		t.Errorf("agrun serve did not stop after SIGTERM")
	}
}

// startServe runs `agrun serve` with e's config on a free loopback port and
// returns its base URL (http://127.0.0.1:PORT) and the process, which is
// killed at the end of the test. The process gets env added to the test's
// environment ($AGRUN_TOKENS is empty unless env sets it); its stderr also
// goes to stderr, if not nil.
func startServe(t *testing.T, e *hostile.CLIEnv, stderr io.Writer, env ...string) (string, *exec.Cmd) {
	t.Helper()
	var log syncbuf.Buffer
	if stderr == nil {
		stderr = &log
	}
	cmd := exec.Command(hostile.AgrunBinary(t), "-c", e.Config, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(append(os.Environ(), "AGRUN_TOKENS="), env...)
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(stderr, &log, pw)
	hostile.Must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); pw.Close() })
	addrc := make(chan string, 1)
	go func() { // the port the server chose, from its "serving on" line
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "serving on http://"); ok {
				addrc <- strings.Fields(rest)[0]
				break
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-addrc:
		return "http://" + a, cmd
	case <-time.After(2 * time.Minute):
		t.Fatalf("agrun serve did not say where it listens: %s", hostile.Truncate(log.String(), 2000))
		return "", nil
	}
}
