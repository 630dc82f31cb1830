package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testguest"
)

// These tests run the built binary, as users and scripts do.

func (e *testEnv) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(binary(e.t), append([]string{"-c", e.config}, args...)...)
	cmd.Env = append(append(os.Environ(), "AGRUN_TEST_KEY=k"), e.env...)
	return cmd
}

func TestBinaryExitCodes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"version"}, 0, "agrun "},
		{[]string{"call", "word_count", `{"text":"a"}`}, 0, `"words":1`},
		{[]string{"call", "--json", "nope"}, 2, `"kind":"not_found"`},
		{[]string{"call", "--json", "./nope.wasm", "{}"}, 2, `"kind":"module_refused"`},
		{[]string{"call", "word_count", `[]`}, 2, ""}, // the command line's arguments: a usage error
		{[]string{"bogus"}, 2, ""},
		{[]string{"tools", "extra"}, 2, ""},
	} {
		cmd := e.cmd(tc.args...)
		cmd.Stdin = strings.NewReader("")
		out, _ := cmd.Output()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.out) {
			t.Errorf("%v: exit %d stdout %q; want %d and %q", tc.args, code, out, tc.code, tc.out)
		}
	}
}

// TestSessionSurvivesSIGKILL kills agrun while a tool runs, then resumes
// the session: nothing written before the kill is lost, and the resumed
// history is valid (the interrupted call is answered "cancelled").
func TestSessionSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	toolHit := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case toolHit <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	host := strings.TrimPrefix(slow.URL, "http://")
	args := fmt.Sprintf(`{"latitude":1,"longitude":2,"api_base":%q}`, slow.URL)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_w", Name: "get_weather", Args: args}}},
		chattest.Reply{Text: "resumed fine"},
	)
	e := newTestEnv(t, srv.URL, fmt.Sprintf(`
[tools.get_weather]
wasm = %q
allowed_hosts = [%q]
allow_private = true
timeout = "60s"
`, filepath.Join(repoRoot(t), "testdata/get_weather.wasm"), host))

	cmd := e.cmd("run", "--session", "killed", "weather please")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-toolHit:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the tool never ran; stderr: %s", stderr.String())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	// Everything up to the kill is on disk.
	show := e.cmd("sessions", "show", "--json", "killed")
	out, err := show.Output()
	if err != nil {
		t.Fatalf("sessions show: %v", err)
	}
	var recs []struct{ Message map[string]any } // the raw records: messages and request records
	err = json.Unmarshal(out, &recs)
	var msgs []struct{ Message map[string]any }
	for _, r := range recs {
		if r.Message != nil {
			msgs = append(msgs, r)
		}
	}
	if err != nil || len(msgs) != 2 || msgs[1].Message["role"] != "assistant" {
		t.Fatalf("saved before the kill: %s (%v)", out, err)
	}

	// Resume: the next request carries a valid history.
	cmd = e.cmd("run", "--session", "killed", "try again")
	out, err = cmd.Output()
	if err != nil || !strings.Contains(string(out), "resumed fine") {
		t.Fatalf("resume: %v, %s", err, out)
	}
	reqs := srv.Requests()
	got := reqs[1].Messages
	if len(got) != 4 || got[1].Role != "assistant" || got[2].Role != "tool" || got[2].ToolCallID != "call_w" || got[3].Role != "user" {
		t.Fatalf("resumed history: %+v", got)
	}
	if !strings.Contains(*got[2].Content, "cancelled") {
		t.Fatalf("interrupted call answered %q, want a cancelled message", *got[2].Content)
	}
}

// TestChatCtrlC: the first Ctrl-C cancels the running turn and the chat
// goes on; EOF ends it.
func TestChatCtrlC(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	started := make(chan struct{})
	srv := chattest.New(t,
		chattest.Reply{Text: "never finished", Hold: hold, Started: started},
		chattest.Reply{Text: "second answer"},
	)
	e := newTestEnv(t, srv.URL, "")
	cmd := e.cmd("chat", "--session", "ctrlc")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "first\n")
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("first prompt never reached the model: %s", stderr.String())
	}
	cmd.Process.Signal(os.Interrupt)
	io.WriteString(stdin, "second\n")
	sc := bufio.NewScanner(stdout)
	found := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "second answer") {
				found = true
				stdin.Close()
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("no second answer; stderr: %s", stderr.String())
	}
	if err := cmd.Wait(); err != nil || !found {
		t.Fatalf("chat: %v, found %v, stderr %s", err, found, stderr.String())
	}
	if !strings.Contains(stderr.String(), "cancelled") {
		t.Fatalf("no cancellation notice: %s", stderr.String())
	}
}

// TestServeBinary: `agrun serve` as users start it: upload a module, call
// it, and stop on SIGTERM with exit code 0.
func TestServeBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agrun.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("[sandbox]\ncache_dir = %q\n[sessions]\ndir = \"sessions\"\n[serve]\ndata_dir = \"served\"\n",
		testguest.CompilationCacheDir(t))), 0o644)
	cmd := exec.Command(binary(t), "-c", cfg, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGRUN_TOKENS=")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	var base string
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving on "); ok {
			base, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	if base == "" {
		t.Fatal("no serving line on stderr")
	}
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		rest <- b.String()
	}()
	wasm, _ := os.ReadFile(filepath.Join(repoRoot(t), "testdata/word_count.wasm"))
	resp, err := http.Post(base+"/v1/tools", "application/wasm", bytes.NewReader(wasm))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Post(base+"/v1/tools/word_count/call", "application/json", strings.NewReader(`{"text":"one two three"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"ok":true`) || !strings.Contains(string(body), `"words":3`) {
		t.Fatalf("call: %s", body)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	// SIGTERM is said, with the wait it starts, and the end.
	if out := <-rest; !strings.Contains(out, "agrun: shutting down: no new requests; waiting up to 30s for those in flight\n") ||
		!strings.HasSuffix(out, "agrun: stopped\n") {
		t.Errorf("stderr after SIGTERM: %q", out)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve did not exit cleanly on SIGTERM: %v", err)
	}
}
