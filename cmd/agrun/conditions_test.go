package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/testing/chattest"
)

// The loop under real conditions, through `agrun run` and `agrun chat`:
// cut-off and stalled streams, rate limits, length, reasoning, usage and
// budgets.

// jsonEvents parses the JSON lines of `run --json`.
func jsonEvents(t *testing.T, stdout string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		evs = append(evs, ev)
	}
	return evs
}

func ofType(evs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["type"] == typ {
			out = append(out, ev)
		}
	}
	return out
}

// sessionFile is the stored session id of the test env.
func (e *testEnv) sessionFile(id string) string {
	e.t.Helper()
	matches, _ := filepath.Glob(filepath.Join(e.dir, "sessions", id+"*"))
	if len(matches) == 0 {
		e.t.Fatalf("no session file for %s", id)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func TestRunCutOffStream(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{Text: "Half a sent", Cut: true},
		chattest.Reply{Text: "Whole sentence."},
		// --json, retries off: the cut reply is an error, not an answer.
		chattest.Reply{Text: "Half again", Cut: true},
	)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "--session", "cut1", "say it").wantCode(t, exitOK)
	if !strings.HasSuffix(r.stdout, "Whole sentence.\n") {
		t.Errorf("stdout %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "(1/2); the partial reply above is discarded\n") {
		t.Errorf("the retry line does not say the shown part is void: %q", r.stderr)
	}
	if !strings.Contains(r.stderr, "agrun: the stream from the provider broke off before the reply was complete (no finish_reason), retrying in ") || !strings.Contains(r.stderr, "(1/2)") {
		t.Errorf("stderr %q", r.stderr)
	}
	if s := e.sessionFile("cut1"); strings.Contains(s, "Half a sent") {
		t.Errorf("the cut reply was saved: %s", s)
	}

	b, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, []byte(strings.Replace(string(b), "max_turns = 5", "max_turns = 5\nmax_retries = 0", 1)), 0o644)
	r = e.run("", "run", "--json", "--session", "cut2", "again").wantCode(t, exitFailure)
	evs := jsonEvents(t, r.stdout)
	last := evs[len(evs)-1]
	if last["type"] != "error" || last["kind"] != "provider" || last["session"] != "cut2" || !strings.Contains(last["message"].(string), "finish_reason") {
		t.Errorf("error event %v", last)
	}
	if s := e.sessionFile("cut2"); strings.Contains(s, "Half again") {
		t.Errorf("the cut reply was saved: %s", s)
	}
}

func TestRunCutOffToolCallIsNotRun(t *testing.T) {
	t.Parallel()
	cut := chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "word_count", Args: `{"text":"a b c"}`}}, Cut: true}
	srv := chattest.New(t, cut, cut, cut)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "count").wantCode(t, exitFailure)
	if strings.Contains(r.stderr, "word_count {") || strings.Count(r.stderr, "retrying in") != 2 {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestRunRetryAfter(t *testing.T) {
	t.Parallel()
	slow := `{"error":{"message":"slow down","type":"rate_limit"}}`
	srv := chattest.New(t,
		chattest.Reply{Status: 429, Body: slow, Header: map[string]string{"Retry-After": "1"}},
		chattest.Reply{Text: "Finally."},
		chattest.Reply{Status: 429, Body: slow, Header: map[string]string{"Retry-After": "120"}},
	)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "hi").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "agrun: 429 from provider, retrying in 1s (1/2)\n") || r.stdout != "Finally.\n" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	start := time.Now()
	r = e.run("", "run", "--json", "--session", "rl", "hi").wantCode(t, exitFailure)
	if time.Since(start) > 10*time.Second {
		t.Errorf("waited %s", time.Since(start))
	}
	evs := jsonEvents(t, r.stdout)
	last := evs[len(evs)-1]
	if last["type"] != "error" || last["kind"] != "provider" || last["session"] != "rl" || !strings.Contains(last["message"].(string), "max_retry_wait") {
		t.Errorf("error event %v", last)
	}
}

func TestRunRetryEventJSON(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{Status: 503, Body: `{"error":{"message":"overloaded"}}`, Header: map[string]string{"Retry-After-Ms": "20"}},
		chattest.Reply{Text: "ok"},
	)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "--json", "hi").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `{"type":"retry","attempt":1,"max":2,"wait_ms":20,"reason":"503 Service Unavailable: overloaded"}`+"\n") {
		t.Errorf("stdout %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "agrun: 503 from provider, retrying in 20ms (1/2)") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestRunStalledStream(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Text: "I was say", Stall: true})
	e := newTestEnv(t, srv.URL, "")
	b, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, []byte(strings.Replace(string(b), "max_turns = 5", "max_turns = 5\nmax_retries = 0\nstream_idle_timeout = \"200ms\"", 1)), 0o644)
	r := e.run("", "run", "--json", "--session", "stall", "hi").wantCode(t, exitFailure)
	evs := jsonEvents(t, r.stdout)
	last := evs[len(evs)-1]
	if last["type"] != "error" || last["kind"] != "stream_idle" || last["session"] != "stall" {
		t.Errorf("error event %v", last)
	}
}

func TestRunLengthTruncated(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Text: "The answer is cut", Finish: "length"}, chattest.Reply{Text: "Cut again", Finish: "length"})
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "q").wantCode(t, exitOK)
	if r.stdout != "The answer is cut\n" || !strings.Contains(r.stderr, `agrun: warning: the answer was cut off at the model's output limit (finish_reason "length")`) {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = e.run("", "run", "--json", "q").wantCode(t, exitOK)
	evs := jsonEvents(t, r.stdout)
	if done := evs[len(evs)-1]; done["type"] != "done" || done["truncated"] != true {
		t.Errorf("done %v", done)
	}
}

func TestRunReasoning(t *testing.T) {
	t.Parallel()
	reply := chattest.Reply{Reasoning: "Thinking it over.", Text: "Answer."}
	srv := chattest.New(t, reply, reply, reply, reply)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "--session", "rs", "q").wantCode(t, exitOK)
	if strings.Contains(r.stdout+r.stderr, "Thinking") || r.stdout != "Answer.\n" {
		t.Errorf("reasoning shown by default: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = e.run("", "run", "--show-reasoning", "q").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "Thinking it over.\n") || r.stdout != "Answer.\n" || strings.Contains(r.stderr, "\x1b[") {
		t.Errorf("--show-reasoning: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = e.run("", "run", "--json", "q").wantCode(t, exitOK)
	if ev := ofType(jsonEvents(t, r.stdout), "reasoning_delta"); len(ev) != 0 || strings.Contains(r.stdout+r.stderr, "Thinking") {
		t.Errorf("--json without --show-reasoning shows the reasoning: %s", r.stdout)
	}
	r = e.run("", "run", "--json", "--show-reasoning", "q").wantCode(t, exitOK)
	var text strings.Builder
	for _, ev := range ofType(jsonEvents(t, r.stdout), "reasoning_delta") {
		text.WriteString(ev["text"].(string))
	}
	if text.String() != "Thinking it over." {
		t.Errorf("reasoning events %q in %s", text.String(), r.stdout)
	}
	// Reasoning is model text: escaped before it reaches the terminal.
	srv.Add(chattest.Reply{Reasoning: "evil \x1b]0;pwned\x07 title", Text: "ok"})
	r = e.run("", "run", "--show-reasoning", "q").wantCode(t, exitOK)
	if strings.ContainsAny(r.stderr, "\x1b\x07") || !strings.Contains(r.stderr, "evil ") {
		t.Errorf("raw control characters on stderr: %q", r.stderr)
	}
	// Kept in the session, for the provider that wrote it (DeepSeek
	// refuses a turn without it), never shown by sessions show, and sent
	// back only in that session.
	if s := e.sessionFile("rs"); !strings.Contains(s, `"reasoning":{"api":"chat"`) || !strings.Contains(s, "Thinking it over.") {
		t.Errorf("reasoning not saved: %s", s)
	}
	for _, req := range srv.Requests() {
		if strings.Contains(string(req.Raw), "Thinking") {
			t.Errorf("reasoning of another session sent: %s", req.Raw)
		}
	}
	if r := e.run("", "sessions", "show", "rs").wantCode(t, exitOK); strings.Contains(r.stdout, "Thinking") {
		t.Errorf("sessions show shows the reasoning: %s", r.stdout)
	}
	srv.Add(chattest.Reply{Text: "again"})
	e.run("", "run", "--session", "rs", "and?").wantCode(t, exitOK)
	reqs := srv.Requests()
	if last := reqs[len(reqs)-1]; !strings.Contains(string(last.Raw), `"reasoning_content":"Thinking it over."`) {
		t.Errorf("reasoning not sent back in its session: %s", last.Raw)
	}
}

func TestChatShowsReasoning(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Reasoning: "Hmm, a greeting.", Text: "Hello!", Finish: "length"})
	e := newTestEnv(t, srv.URL, "")
	r := e.run("hi\n", "chat", "--show-reasoning").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "Hmm, a greeting.\n") || !strings.Contains(r.stdout, "Hello!") || !strings.Contains(r.stderr, "cut off") {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestRunUsageSummary(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "word_count", Args: `{"text":"a b"}`}},
			Usage: &chattest.Usage{PromptTokens: 100, CompletionTokens: 10, TotalTokens: 110, CachedTokens: 64}},
		chattest.Reply{Text: "Two.", Usage: &chattest.Usage{PromptTokens: 130, CompletionTokens: 5, TotalTokens: 135, ReasoningTokens: 2}},
		chattest.Reply{Text: "Quiet."},
		chattest.Reply{Text: "Json."},
	)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "count").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "agrun: 2 requests, 1 tool call, 245 tokens (230 prompt, 64 cached, 15 completion, 2 reasoning), ") {
		t.Errorf("stderr %q", r.stderr)
	}
	r = e.run("", "run", "-q", "again").wantCode(t, exitOK)
	if strings.Contains(r.stderr, "tokens") {
		t.Errorf("-q: stderr %q", r.stderr)
	}
	r = e.run("", "run", "--json", "again").wantCode(t, exitOK)
	if !strings.HasSuffix(r.stdout, `"text":"Json.","usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`+"\n") || strings.Contains(r.stderr, "tokens") {
		t.Errorf("stdout %s stderr %q", r.stdout, r.stderr)
	}
}

func TestRunBudgets(t *testing.T) {
	t.Parallel()
	calls := chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "word_count", Args: `{"text":"a"}`}, {ID: "c2", Name: "word_count", Args: `{"text":"b c"}`}}}
	srv := chattest.New(t, calls, calls, calls, calls)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "--json", "--session", "b1", "--max-tool-calls", "1", "count").wantCode(t, exitFailure)
	evs := jsonEvents(t, r.stdout)
	if last := evs[len(evs)-1]; last["kind"] != "max_tool_calls" || last["session"] != "b1" ||
		last["message"] != "tool call budget reached: the model asked for 2 tool calls, 1 are allowed per run; run stopped (to allow more: [llm] max_tool_calls, or run --max-tool-calls N)" {
		t.Errorf("error %v", last)
	}
	if n := len(ofType(evs, "tool_started")); n != 1 {
		t.Errorf("%d calls ran", n)
	}
	// The call over the budget is answered with the budget's kind, and in
	// text mode its line shows what was asked and says it did not run and
	// why.
	if done := ofType(evs, "tool_completed"); len(done) != 2 || done[1]["error_kind"] != "max_tool_calls" {
		t.Errorf("tool_completed events %v", done)
	}
	srv.Add(calls)
	r = e.run("", "run", "--session", "b0", "--max-tool-calls", "1", "count").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "agrun: word_count {\"text\":\"a\"} → ok {\"words\":1,") ||
		!strings.Contains(r.stderr, "agrun: word_count {\"text\":\"b c\"} → not run (max_tool_calls): the run's budget of 1 tool calls is spent; the run stops here\n") {
		t.Errorf("stderr %q", r.stderr)
	}
	// Each reply uses 15 tokens: the run stops before its third request.
	r = e.run("", "run", "--json", "--session", "b2", "--max-tokens", "30", "count").wantCode(t, exitFailure)
	evs = jsonEvents(t, r.stdout)
	if last := evs[len(evs)-1]; last["kind"] != "max_tokens" || last["session"] != "b2" || len(ofType(evs, "turn_complete")) != 2 {
		t.Errorf("events %v", evs)
	}
	// In text mode the message says what to change, without a package
	// prefix.
	srv.Add(calls) // b3 takes the last scripted reply and this one
	r = e.run("", "run", "--session", "b3", "--max-tokens", "30", "count").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "agrun: token budget reached: the run used 30 tokens of its 30; run stopped before the next request (to allow more: [llm] max_total_tokens, or run --max-tokens N)\n") {
		t.Errorf("stderr %q", r.stderr)
	}
	// The partial history is kept and valid: the session continues.
	srv.Add(chattest.Reply{Text: "Resumed."})
	e.run("", "run", "--session", "b2", "go on").wantCode(t, exitOK)
	e.run("", "run", "--max-tokens", "-1", "x").wantCode(t, exitUsage)
}

// The config's keys reach the loop.
func TestLoopConfigKeys(t *testing.T) {
	cfg, err := config.Parse("agrun.toml", []byte(`
[llm]
model = "m"
stream_idle_timeout = "90s"
max_retry_wait = "1m"
max_total_tokens = 5000
max_tool_calls = 7
`))
	if err != nil {
		t.Fatal(err)
	}
	lc, err := loopConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if lc.StreamIdleTimeout != 90*time.Second || lc.MaxRetryWait != time.Minute || lc.MaxTotalTokens != 5000 || lc.MaxToolCalls != 7 {
		t.Errorf("loop config %+v", lc)
	}
}

// Ctrl-C mid-stream keeps what was shown, marked interrupted, in the session.
func TestRunInterruptedKeepsPartialReply(t *testing.T) {
	t.Parallel()
	gone := make(chan struct{})
	srv := chattest.New(t, chattest.Reply{Text: "I was saying", Stall: true, Gone: gone},
		chattest.Reply{Text: "Go on then.", Check: func(t testing.TB, got chattest.Request) {
			if m := got.Messages[1]; m.Role != "assistant" || m.Content == nil || *m.Content != "I was saying [interrupted by the user]" {
				t.Errorf("resumed history %s", got.Raw)
			}
		}})
	e := newTestEnv(t, srv.URL, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errb := &syncWriter{}, &syncWriter{}
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"-c", e.config, "run", "--session", "int", "talk"}, strings.NewReader(""), out, errb)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "I was saying") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	select {
	case <-gone:
	case <-time.After(30 * time.Second): // fail, not hang until the package's timeout
		t.Fatalf("the model server never saw the interrupted request go away\nstdout %q\nstderr %q", out.String(), errb.String())
	}
	if s := e.sessionFile("int"); !strings.Contains(s, `"content":"I was saying","interrupted":true`) {
		t.Fatalf("session %s", s)
	}
	if r := e.run("", "sessions", "show", "int").wantCode(t, exitOK); !strings.Contains(r.stdout, "assistant: I was saying [interrupted]\n") {
		t.Errorf("sessions show: %s", r.stdout)
	}
	e.run("", "run", "--session", "int", "continue").wantCode(t, exitOK)
}

// syncWriter is a buffer safe for a writer and a reader at once.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
