package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
)

// runWith runs the CLI with any stdin (a file, a pipe) and context.
func (e *testEnv) runWith(ctx context.Context, stdin io.Reader, stdout io.Writer, args ...string) result {
	e.t.Helper()
	var out, errb bytes.Buffer
	w := io.Writer(&out)
	if stdout != nil {
		w = io.MultiWriter(&out, stdout)
	}
	code := run(ctx, append([]string{"-c", e.config}, args...), stdin, w, &errb)
	return result{out.String(), errb.String(), code}
}

// sessionFiles lists the session files of e.
func (e *testEnv) sessionFiles() []string {
	m, _ := filepath.Glob(filepath.Join(e.dir, "sessions", "*.jsonl"))
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

func content(m chattest.Message) string {
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// TestRunOverrides: -m, -s, --max-turns and --base-url override [llm] for
// one run, long and short forms.
func TestRunOverrides(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{Text: "one"},
		chattest.Reply{Text: "two"},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "word_count", Args: `{"text":"a"}`}}},
	)
	e := newTestEnv(t, "", "") // [llm] base_url is unreachable: --base-url must win
	e.run("", "run", "--base-url", srv.URL, "-m", "other-model", "-s", "Be brief.", "hi").wantCode(t, exitOK)
	e.run("", "run", "--base-url", srv.URL, "--model", "third", "--system", "", "hi").wantCode(t, exitOK)
	r := e.run("", "run", "--base-url", srv.URL, "--max-turns", "1", "count").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "maximum number of turns") {
		t.Fatalf("--max-turns 1: %s", r.stderr)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	if reqs[0].Model != "other-model" || reqs[0].Messages[0].Role != "system" || content(reqs[0].Messages[0]) != "Be brief." {
		t.Errorf("request 1: model %q, first message %+v", reqs[0].Model, reqs[0].Messages[0])
	}
	if reqs[1].Model != "third" || reqs[1].Messages[0].Role != "user" {
		t.Errorf("request 2: model %q, first role %q (an empty -s means no system prompt)", reqs[1].Model, reqs[1].Messages[0].Role)
	}
	if reqs[2].Model != "test-model" {
		t.Errorf("request 3: model %q, want [llm] model", reqs[2].Model)
	}
	for _, args := range [][]string{{"--max-turns", "0", "x"}, {"--model", "", "x"}, {"--base-url", "ftp://x", "x"}, {"--session", "a", "-c", "x"}} {
		e.run("", append([]string{"run"}, args...)...).wantCode(t, exitUsage)
	}
}

// TestRunPromptFromStdin: `-`, or no prompt and stdin not a terminal,
// reads the prompt from stdin; a prompt with piped stdin gets it
// appended; stdin is bounded.
func TestRunPromptFromStdin(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Text: "a"}, chattest.Reply{Text: "b"}, chattest.Reply{Text: "c"}, chattest.Reply{Text: "d"}, chattest.Reply{Text: "e"})
	e := newTestEnv(t, srv.URL, "")
	ctx := context.Background()
	e.runWith(ctx, strings.NewReader("piped prompt\n"), nil, "run").wantCode(t, exitOK)
	e.runWith(ctx, strings.NewReader("the file\n"), nil, "run", "summarise", "this").wantCode(t, exitOK)
	e.runWith(ctx, strings.NewReader("dash prompt"), nil, "run", "-").wantCode(t, exitOK)
	// A pipe (an *os.File that is not a terminal) is read too.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { pw.Write([]byte("from a pipe")); pw.Close() }()
	e.runWith(ctx, pr, nil, "run", "what is").wantCode(t, exitOK)
	pr.Close()
	// Over the bound: cut, and said.
	big := strings.Repeat("x", maxStdinPrompt+10)
	r := e.runWith(ctx, strings.NewReader(big), nil, "run", "long").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "stdin is longer than 1 MiB: only its first 1 MiB is sent") {
		t.Errorf("no word about the cut: %s", r.stderr)
	}
	reqs := srv.Requests()
	want := []string{"piped prompt\n", "summarise this\n\nthe file\n", "dash prompt", "what is\n\nfrom a pipe", "long\n\n" + big[:maxStdinPrompt]}
	for i, w := range want {
		if got := content(reqs[i].Messages[len(reqs[i].Messages)-1]); got != w {
			t.Errorf("prompt %d = %.60q (%d bytes), want %.60q (%d bytes)", i, got, len(got), w, len(w))
		}
	}
	// A character device (a terminal, /dev/null) is not read: no prompt is
	// a usage error, and no request is made.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r = e.runWith(ctx, null, nil, "run").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "needs a PROMPT") {
		t.Errorf("no prompt: %s", r.stderr)
	}
	e.runWith(ctx, strings.NewReader("  \n"), nil, "run").wantCode(t, exitUsage)
	if n := len(srv.Requests()); n != 5 {
		t.Fatalf("%d requests, want 5", n)
	}
}

// TestRunContinue: -c/--continue continues the most recently used session
// (the global -c FILE before the command still names the config); -c
// with a config file after the command says where it goes.
func TestRunContinue(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Text: "first"}, chattest.Reply{Text: "second"}, chattest.Reply{Text: "third"}, chattest.Reply{Text: "fourth"})
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "-c", "hello").wantCode(t, exitOK) // nothing to continue yet
	if !strings.Contains(r.stderr, "no saved session to continue") {
		t.Errorf("stderr: %s", r.stderr)
	}
	e.run("", "run", "--session", "older", "other").wantCode(t, exitOK)
	time.Sleep(20 * time.Millisecond) // distinct modification times
	e.run("", "run", "--session", "newer", "latest").wantCode(t, exitOK)
	// e.run passes the global "-c CONFIG" before "run": both -c work.
	r = e.run("", "run", "-c", "and then?").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "agrun: session newer\n") {
		t.Fatalf("-c did not continue the most recent session: %s", r.stderr)
	}
	reqs := srv.Requests()
	last := reqs[len(reqs)-1].Messages
	if len(last) != 3 || content(last[0]) != "latest" || content(last[2]) != "and then?" {
		t.Fatalf("continued request: %+v", last)
	}
	r = e.run("", "run", "-c", e.config, "hi").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "a config file is --config "+e.config+" after the command, or -c before it: agrun -c "+e.config+" run") {
		t.Fatalf("-c FILE after run: %s", r.stderr)
	}
}

// TestRunToolsFlag: --tools narrows the tools offered, --no-tools offers
// none, an unknown name is a usage error before any request.
func TestRunToolsFlag(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Text: "a"}, chattest.Reply{Text: "b"}, chattest.Reply{Text: "c"})
	e := newTestEnv(t, srv.URL, "")
	e.run("", "run", "--tools", "word_count,sum_c", "hi").wantCode(t, exitOK)
	e.run("", "run", "--no-tools", "hi").wantCode(t, exitOK)
	e.run("", "run", "hi").wantCode(t, exitOK)
	r := e.run("", "run", "--tools", "word_count,nope", "hi").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, `--tools: no tool "nope" in the config`) {
		t.Errorf("unknown tool: %s", r.stderr)
	}
	e.run("", "run", "--tools", "word_count", "--no-tools", "hi").wantCode(t, exitUsage)
	e.run("", "run", "--tools", ",", "hi").wantCode(t, exitUsage)
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	var names []string
	for _, tl := range reqs[0].Tools {
		names = append(names, tl.Function.Name)
	}
	if strings.Join(names, ",") != "sum_c,word_count" || len(reqs[1].Tools) != 0 || len(reqs[2].Tools) != 4 {
		t.Fatalf("tools offered: %v, %d, %d", names, len(reqs[1].Tools), len(reqs[2].Tools))
	}
	// A named tool that failed to load is a configuration error.
	e2 := newTestEnv(t, srv.URL, "\n[tools.broken]\nwasm = \"missing.wasm\"\n")
	r = e2.run("", "run", "--tools", "broken", "hi").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "--tools: tool broken failed to load") {
		t.Errorf("broken tool: %s", r.stderr)
	}
}

// TestRunMissingKey: no key for a remote provider is said before any
// request, exit 2, nothing saved; a loopback base_url needs none.
func TestRunMissingKey(t *testing.T) {
	srv := chattest.New(t, chattest.Reply{Text: "local ok"})
	e := newTestEnv(t, "https://llm.example.invalid/v1", "")
	t.Setenv("AGRUN_TEST_KEY", "")
	r := e.run("", "run", "hi").wantCode(t, exitUsage)
	if r.stderr != "agrun: AGRUN_TEST_KEY is not set ([llm] api_key_env); local servers need none: set base_url\n" || r.stdout != "" {
		t.Fatalf("missing key: %+v", r)
	}
	r = e.run("", "run", "--json", "hi").wantCode(t, exitUsage)
	if !strings.Contains(r.stdout, `{"type":"error","kind":"config","message":"AGRUN_TEST_KEY is not set`) {
		t.Fatalf("--json: %q", r.stdout)
	}
	e.run("hi\n", "chat").wantCode(t, exitUsage)
	if f := e.sessionFiles(); len(f) != 0 {
		t.Fatalf("sessions saved: %v", f)
	}
	e.run("", "run", "--base-url", srv.URL, "hi").wantCode(t, exitOK)
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Auth != "" {
		t.Fatalf("local run: %d requests", len(reqs))
	}
}

// TestFailedFirstRequestLeavesNoSession: a new session whose first
// request fails is not left behind; an existing one keeps its history.
func TestFailedFirstRequestLeavesNoSession(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{Status: 500, Body: `{"error":{"message":"boom"}}`},
		chattest.Reply{Text: "fine"},
		chattest.Reply{Status: 400, Body: `{"error":{"message":"bad"}}`},
		chattest.Reply{Status: 500, Body: `{"error":{"message":"boom"}}`},
	)
	e := newTestEnv(t, srv.URL, "")
	b, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, []byte(strings.Replace(string(b), "max_turns = 5", "max_turns = 5\nmax_retries = 0", 1)), 0o644)
	if r := e.run("", "run", "--json", "hi").wantCode(t, exitFailure); strings.Contains(r.stdout, `"session"`) {
		t.Fatalf("the error event names a session that was removed: %s", r.stdout)
	}
	e.run("", "run", "--json", "hi").wantCode(t, exitOK)
	if f := e.sessionFiles(); len(f) != 1 {
		t.Fatalf("session files %v, want only the one that got a reply", f)
	}
	id := strings.TrimSuffix(e.sessionFiles()[0], ".jsonl")
	e.run("", "run", "--session", id, "again").wantCode(t, exitFailure)
	if f := e.sessionFiles(); len(f) != 1 {
		t.Fatalf("an existing session was removed after a failed request: %v", f)
	}
	r := e.run("", "sessions", "show", id).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "fine") || !strings.Contains(r.stdout, "user: again") {
		t.Fatalf("existing session: %s", r.stdout)
	}
	// A session the user named is kept (its error event names it, to be
	// resumed): it is not an orphan.
	r = e.run("", "run", "--json", "--session", "named", "hi").wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, `"session":"named"`) || len(e.sessionFiles()) != 2 {
		t.Fatalf("a named session whose first request failed: %s, files %v", r.stdout, e.sessionFiles())
	}
}

// signalWriter signals once it has been written text containing want.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// TestRunInterrupted: Ctrl-C (the context cancelled) while a reply
// streams ends the run with exit 130 and one line "interrupted"; with
// --json the last line is an error of kind "interrupted". The session
// keeps what was recorded before.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	stall := chattest.Reply{Chunks: []string{chattest.TextChunk("partial ans")}, Stall: true}
	srv := chattest.New(t, chattest.Reply{Text: "earlier"}, stall, stall)
	e := newTestEnv(t, srv.URL, "")
	e.run("", "run", "--session", "int", "first").wantCode(t, exitOK)
	for _, asJSON := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		w := &signalWriter{want: "partial ans", seen: make(chan struct{})}
		go func() {
			select {
			case <-w.seen:
			case <-time.After(30 * time.Second):
			}
			cancel()
		}()
		args := []string{"run", "--session", "int", "second"}
		if asJSON {
			args = []string{"run", "--json", "--session", "int", "second"}
		}
		r := e.runWith(ctx, strings.NewReader(""), w, args...)
		cancel()
		r.wantCode(t, exitInterrupted)
		if asJSON {
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if last := lines[len(lines)-1]; last != `{"type":"error","kind":"interrupted","message":"interrupted","session":"int"}` {
				t.Fatalf("--json last line: %s", last)
			}
			continue
		}
		if strings.Count(r.stderr, "interrupted") != 1 || !strings.HasSuffix(r.stderr, "agrun: interrupted\n") || strings.Contains(r.stderr, "context canceled") {
			t.Fatalf("stderr: %q", r.stderr)
		}
		if !strings.Contains(r.stdout, "partial ans") {
			t.Fatalf("stdout: %q", r.stdout)
		}
	}
	msgs := e.run("", "sessions", "show", "--json", "int").wantCode(t, exitOK)
	var all, recs []struct {
		Message json.RawMessage `json:"message"`
	}
	err := json.Unmarshal([]byte(msgs.stdout), &all)
	for _, r := range all {
		if len(r.Message) > 0 { // not the request records
			recs = append(recs, r)
		}
	}
	if err != nil || len(recs) < 2 || !strings.Contains(string(recs[1].Message), "earlier") {
		t.Fatalf("session after interrupts: %s", msgs.stdout)
	}
}

// TestChatFlags: chat takes run's per-run flags.
func TestChatFlags(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Text: "one"}, chattest.Reply{Text: "two"})
	e := newTestEnv(t, srv.URL, "")
	e.run("hi\n", "chat", "--session", "ch", "-m", "chat-model", "--tools", "sum_c").wantCode(t, exitOK)
	r := e.run("more\n", "chat", "-c", "--no-tools", "-s", "Terse.").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "session ch (2 messages)") {
		t.Fatalf("chat -c: %s", r.stderr)
	}
	reqs := srv.Requests()
	if reqs[0].Model != "chat-model" || len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Function.Name != "sum_c" {
		t.Fatalf("chat 1: model %q, %d tools", reqs[0].Model, len(reqs[0].Tools))
	}
	if reqs[1].Model != "test-model" || len(reqs[1].Tools) != 0 || content(reqs[1].Messages[0]) != "Terse." || len(reqs[1].Messages) != 4 {
		t.Fatalf("chat 2: model %q, %d tools, messages %+v", reqs[1].Model, len(reqs[1].Tools), reqs[1].Messages)
	}
	e.run("", "chat", "extra").wantCode(t, exitUsage)
	e.run("", "chat", "--tools", "nope").wantCode(t, exitUsage)
	// A chat that sent nothing leaves no session behind.
	before := e.sessionFiles()
	e.run("/exit\n", "chat").wantCode(t, exitOK)
	if after := e.sessionFiles(); len(after) != len(before) {
		t.Fatalf("an empty chat left a session: %v -> %v", before, after)
	}
}

// TestRunCtrlCBinary: SIGINT to the built binary while a reply streams:
// exit 130, "interrupted" on stderr, the streamed text on stdout.
func TestRunCtrlCBinary(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Chunks: []string{chattest.TextChunk("streamed so far")}, Stall: true})
	e := newTestEnv(t, srv.URL, "")
	cmd := e.cmd("run", "--no-tools", "hi")
	cmd.Stdin = strings.NewReader("")
	w := &signalWriter{want: "streamed so far", seen: make(chan struct{})}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.seen:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("no text streamed; stderr: %s", stderr.String())
	}
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.HasSuffix(stderr.String(), "agrun: interrupted\n") || strings.Contains(stderr.String(), "context canceled") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
