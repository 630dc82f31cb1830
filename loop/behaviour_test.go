package loop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agcore/agrun/internal/testing/chattest"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/registry"
)

// waitLong bounds waits that only end early when something is broken; the
// tests never assert on durations.
const waitLong = 10 * time.Second

// Two tools that each wait for the other: the turn only succeeds if they
// really run at the same time.
func TestParallelToolsRunConcurrently(t *testing.T) {
	pingUp, pongUp := make(chan struct{}), make(chan struct{})
	meet := func(name string, mine, theirs chan struct{}) *funcTool {
		return &funcTool{name: name, desc: "waits for its partner", fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			close(mine)
			select {
			case <-theirs:
				return json.RawMessage(`"met"`), nil
			case <-time.After(waitLong):
				return nil, errors.New("partner never ran: calls are not parallel")
			}
		}}
	}
	srv := newServer(t,
		jsonReply("", "tool_calls", call("p1", "ping", `{}`), call("p2", "pong", `{}`)),
		expect(func(t testing.TB, got received) {
			for _, i := range []int{2, 3} {
				if c := str(got.Messages[i].Content); c != `"met"` {
					t.Errorf("tool message %d = %q", i, c)
				}
			}
		}, jsonReply("both met", "stop")),
	)
	c := newCycle(t, srv, Config{})
	reg := newRegistry(t, meet("ping", pingUp, pongUp), meet("pong", pongUp, pingUp))
	if _, err := c.SubmitWithTools(context.Background(), "x", reg); err != nil {
		t.Fatal(err)
	}
}

// streamThenHang returns a step that streams one text chunk and then
// waits for the client to go away, reporting it on gone.
func streamThenHang(gone chan<- struct{}) step {
	return step{Chunks: []string{textChunk("partial ")}, Stall: true, Gone: gone}
}

// waitGone waits for a streamThenHang step to see its client go away.
func waitGone(t *testing.T, gone <-chan struct{}) {
	t.Helper()
	select {
	case <-gone:
	case <-time.After(waitLong):
		t.Errorf("client never closed the stream")
	}
}

func TestCancelMidStream(t *testing.T) {
	gone := make(chan struct{})
	srv := newServer(t, streamThenHang(gone))
	c := newCycle(t, srv, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	var texts int
	for ev, e := range c.SubmitStreamWithTools(ctx, "x", newRegistry(t, wordCount())) {
		if _, ok := ev.(*TextDelta); ok {
			texts++
			cancel()
		}
		if e != nil {
			err = e
		}
	}
	if !errors.Is(err, context.Canceled) || KindOf(err) != KindCancelled {
		t.Fatalf("err = %v (kind %q)", err, KindOf(err))
	}
	if texts != 1 {
		t.Errorf("%d text deltas", texts)
	}
	waitGone(t, gone)
	// What the user saw is kept, marked interrupted.
	if m := c.Messages(); len(m) != 2 || m[0].Role != RoleUser || m[1].Content != "partial " || !m[1].Interrupted {
		t.Errorf("history %+v", m)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("cancelled request retried: %d requests", n)
	}
}

// Cancelling while a tool runs stops the run promptly; the earlier turn
// keeps its result, the running call is answered "cancelled", and the
// session continues with a valid history.
func TestCancelMidTool(t *testing.T) {
	started := make(chan struct{})
	slow := &funcTool{name: "slow", desc: "blocks until cancelled", fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		close(started)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(waitLong):
			return nil, errors.New("never cancelled")
		}
	}}
	srv := newServer(t,
		jsonReply("", "tool_calls", call("f", "word_count", `{"text":"a"}`)),
		jsonReply("", "tool_calls", call("s", "slow", `{}`)),
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if roles(got.Messages) != "user,assistant,tool,assistant,tool,user" {
				t.Errorf("roles %s", roles(got.Messages))
			}
		}, jsonReply("resumed", "stop")),
	)
	c := newCycle(t, srv, Config{})
	reg := newRegistry(t, wordCount(), slow)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := c.SubmitWithTools(ctx, "x", reg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	m := c.Messages()
	if len(m) != 5 || m[2].Content != `{"words":1}` || !strings.HasPrefix(m[4].Content, "error (cancelled): ") || m[4].ToolCallID != "s" {
		t.Fatalf("history %+v", m)
	}
	resp, err := c.SubmitWithTools(context.Background(), "again", reg)
	if err != nil || resp.Text != "resumed" {
		t.Fatalf("resume: %+v %v", resp, err)
	}
}

// A consumer that stops ranging mid-stream closes the request; one that
// stops after the reply leaves the calls answered "cancelled", not run.
func TestConsumerStopsEarly(t *testing.T) {
	t.Run("mid-stream", func(t *testing.T) {
		gone := make(chan struct{})
		srv := newServer(t, streamThenHang(gone))
		c := newCycle(t, srv, Config{})
		for ev := range c.SubmitStreamWithTools(context.Background(), "x", nil) {
			if _, ok := ev.(*TextDelta); ok {
				break
			}
		}
		waitGone(t, gone)
		if m := c.Messages(); len(m) != 2 || !m[1].Interrupted || m[1].Content != "partial " {
			t.Errorf("history %+v", m)
		}
	})
	t.Run("before tools run", func(t *testing.T) {
		var rec recorder
		srv := newServer(t,
			sseChunks(callChunk(0, "k1", "t", `{"a":1}`), callChunk(1, "k2", "t", `{"a":2}`), toolCallsFinishChunk),
			expect(func(t testing.TB, got received) { checkWireHistory(t, got.Messages) }, streamText("fine")),
		)
		c := newCycle(t, srv, Config{})
		reg := newRegistry(t, rec.tool("t"))
		for ev := range c.SubmitStreamWithTools(context.Background(), "x", reg) {
			if _, ok := ev.(*ToolExecutionStarted); ok {
				break
			}
		}
		if got := rec.got(); len(got) != 0 {
			t.Errorf("tools ran after the consumer stopped: %v", got)
		}
		m := c.Messages()
		if len(m) != 4 || !strings.HasPrefix(m[2].Content, "error (cancelled): ") || !strings.HasPrefix(m[3].Content, "error (cancelled): ") {
			t.Fatalf("history %+v", m)
		}
		// The history is valid to send.
		for _, err := range c.SubmitStreamWithTools(context.Background(), "y", reg) {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("ranged twice", func(t *testing.T) {
		srv := newServer(t, streamText("once"))
		c := newCycle(t, srv, Config{})
		seq := c.SubmitStreamWithTools(context.Background(), "x", nil)
		for range seq {
		}
		var err error
		for _, e := range seq {
			err = e
		}
		if !errors.Is(err, ErrConsumed) || len(srv.Requests()) != 1 {
			t.Errorf("err %v, %d requests", err, len(srv.Requests()))
		}
	})
}

func TestRepeatedCall(t *testing.T) {
	t.Run("fourth repeat ends the run", func(t *testing.T) {
		var rec recorder
		same := []string{`{"q":"same","n":1}`, `{"n":1,"q":"same"}`, `{ "q" : "same", "n" : 1 }`, `{"q":"same","n":1}`}
		var steps []step
		for i, args := range same {
			reply := sseChunks(callChunk(0, fmt.Sprintf("r%d", i), "search", args), toolCallsFinishChunk)
			if i == 3 {
				reply = expect(func(t testing.TB, got received) {
					third := str(got.Messages[6].Content)
					if !strings.HasPrefix(third, `{"ok":3}`) || !strings.Contains(third, "3 turns in a row") {
						t.Errorf("third answer does not warn the model: %q", third)
					}
					if second := str(got.Messages[4].Content); second != `{"ok":2}` {
						t.Errorf("second answer %q", second)
					}
				}, reply)
			}
			steps = append(steps, reply)
		}
		srv := newServer(t, steps...)
		c := newCycle(t, srv, Config{})
		var completed []*ToolExecutionCompleted
		var err error
		for ev, e := range c.SubmitStreamWithTools(context.Background(), "x", newRegistry(t, rec.tool("search"))) {
			if tc, ok := ev.(*ToolExecutionCompleted); ok {
				completed = append(completed, tc)
			}
			err = e
		}
		var rep *RepeatedCallError
		if !errors.Is(err, ErrRepeatedCall) || !errors.As(err, &rep) || rep.Tool != "search" || rep.Turns != 4 || KindOf(err) != KindRepeatedCall {
			t.Fatalf("err = %v", err)
		}
		if got := rec.got(); len(got) != 3 {
			t.Errorf("tool ran %d times", len(got))
		}
		m := c.Messages()
		if len(m) != 9 || !strings.HasPrefix(m[8].Content, "error (cancelled): not run: ") {
			t.Errorf("history %+v", m)
		}
		if len(completed) != 4 || !completed[3].IsError || completed[3].ErrorKind != registry.Cancelled {
			t.Errorf("events %+v", completed)
		}
	})
	t.Run("interrupted repeats do not count", func(t *testing.T) {
		var rec recorder
		srv := newServer(t,
			jsonReply("", "tool_calls", call("a", "search", `{"q":1}`)),
			jsonReply("", "tool_calls", call("b", "search", `{"q":1}`)),
			jsonReply("", "tool_calls", call("c", "search", `{"q":2}`)),
			jsonReply("", "tool_calls", call("d", "search", `{"q":1}`)),
			jsonReply("", "tool_calls", call("e", "search", `{"q":1}`)),
			expect(func(t testing.TB, got received) {
				for _, m := range got.Messages {
					if strings.Contains(str(m.Content), "in a row") {
						t.Errorf("warned without 3 repeats in a row: %q", str(m.Content))
					}
				}
			}, jsonReply("done", "stop")),
		)
		c := newCycle(t, srv, Config{})
		if _, err := c.SubmitWithTools(context.Background(), "x", newRegistry(t, rec.tool("search"))); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRetriesOn429And5xx(t *testing.T) {
	srv := newServer(t,
		status(http.StatusTooManyRequests, `{"error":{"message":"slow down","type":"rate_limit"}}`, "retry-after-ms", "1"),
		status(http.StatusServiceUnavailable, `{"error":{"message":"overloaded"}}`, "retry-after-ms", "1"),
		jsonReply("finally", "stop"),
	)
	c := newCycle(t, srv, Config{})
	resp, err := c.SubmitWithTools(context.Background(), "x", nil)
	if err != nil || resp.Text != "finally" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, r := range reqs {
		if roles(r.Messages) != "user" {
			t.Errorf("retried request differs: %s", r.Raw)
		}
	}
	if m := c.Messages(); len(m) != 2 {
		t.Errorf("history %+v", m)
	}

	// With retries off, the 429 is the answer.
	srv = newServer(t, status(http.StatusTooManyRequests, `{"error":{"message":"slow down","type":"rate_limit"}}`, "retry-after-ms", "1"))
	c = newCycle(t, srv, Config{Limits: Limits{MaxRetries: -1}})
	_, err = c.Submit(context.Background(), "x")
	var api *APIError
	if !errors.As(err, &api) || api.StatusCode != 429 || api.Message != "slow down" || len(srv.Requests()) != 1 {
		t.Errorf("err %v, %d requests", err, len(srv.Requests()))
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	tests := []struct {
		name     string
		code     int
		body     string
		wantMsg  string
		wantCode string
	}{
		{"openai", 400, `{"error":{"message":"Invalid 'messages[2].tool_call_id': empty string.","type":"invalid_request_error","param":"messages","code":"invalid_value"}}`,
			"Invalid 'messages[2].tool_call_id': empty string.", "invalid_value"},
		{"ollama", 404, `{"error":"model \"qwen9\" not found, try pulling it first"}`, `model "qwen9" not found, try pulling it first`, ""},
		{"vllm", 400, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`, "max_tokens is too large", "400"},
		{"html", 401, `<html><body>401 Authorization Required</body></html>`, "<html><body>401 Authorization Required</body></html>", ""},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tt.name, stream), func(t *testing.T) {
				srv := newServer(t, status(tt.code, tt.body))
				c := newCycle(t, srv, Config{})
				var err error
				if stream {
					for _, e := range c.SubmitStreamWithTools(context.Background(), "x", nil) {
						err = e
					}
				} else {
					_, err = c.SubmitWithTools(context.Background(), "x", nil)
				}
				var api *APIError
				if !errors.As(err, &api) {
					t.Fatalf("err = %T %v", err, err)
				}
				if api.StatusCode != tt.code || api.Message != tt.wantMsg || api.Code != tt.wantCode {
					t.Errorf("api error %+v", api)
				}
				if !strings.Contains(err.Error(), tt.wantMsg) || KindOf(err) != KindProvider {
					t.Errorf("error text %q kind %q", err, KindOf(err))
				}
				if n := len(srv.Requests()); n != 1 {
					t.Errorf("%d requests", n)
				}
			})
		}
	}
}

func TestUnreachableProvider(t *testing.T) {
	srv := newServer(t)
	c := newCycle(t, srv, Config{Limits: Limits{MaxRetries: -1}})
	srv.Close()
	_, err := c.Submit(context.Background(), "x")
	if err == nil || KindOf(err) != KindTransport {
		t.Fatalf("err = %v (kind %q)", err, KindOf(err))
	}
}

// A session saved one JSON line per message through OnMessage resumes into
// a Cycle that sends exactly the same history.
func TestResumeFromSavedHistory(t *testing.T) {
	var saved bytes.Buffer
	save := func(m Message) {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		saved.Write(append(b, '\n'))
	}
	srv := newServer(t,
		jsonReply("", "tool_calls", call("", "word_count", `{"text":"x y"}`), call("", "word_count", `{bad`)),
		jsonReply("Two words.", "stop"),
	)
	c := newCycle(t, srv, Config{System: "sys", Hooks: Hooks{OnMessage: save}})
	if _, err := c.SubmitWithTools(context.Background(), "count", newRegistry(t, wordCount())); err != nil {
		t.Fatal(err)
	}
	var history []Message
	sc := bufio.NewScanner(&saved)
	for sc.Scan() {
		var m Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		history = append(history, m)
	}
	if !equalMessages(history, c.Messages()) {
		t.Fatalf("saved\n%+v\nlive\n%+v", history, c.Messages())
	}
	first := srv.Requests()[1].Messages

	srv2 := newServer(t, expect(func(t testing.TB, got received) {
		checkWireHistory(t, got.Messages)
		prev, _ := json.Marshal(first)
		now, _ := json.Marshal(got.Messages[:len(first)])
		if string(prev) != string(now) {
			t.Errorf("resumed history differs\n%s\n%s", prev, now)
		}
		if roles(got.Messages) != "system,user,assistant,tool,tool,assistant,user" {
			t.Errorf("roles %s", roles(got.Messages))
		}
	}, jsonReply("again", "stop")))
	c2 := newCycle(t, srv2, Config{System: "sys", History: history})
	if _, err := c2.SubmitWithTools(context.Background(), "more", newRegistry(t, wordCount())); err != nil {
		t.Fatal(err)
	}
	// A later synthesized id does not reuse one from the history.
	if ids := []string{history[1].ToolCalls[0].ID, history[1].ToolCalls[1].ID}; ids[0] != "call_1" || ids[1] != "call_2" {
		t.Errorf("ids %v", ids)
	}
}

func TestResumeRepairsCutSession(t *testing.T) {
	cut := []Message{
		{Role: RoleUser, Content: "go"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a", Name: "t", Arguments: "{}"}, {ID: "b", Name: "t", Arguments: "{}"}}},
		{Role: RoleTool, ToolCallID: "a", Name: "t", Content: `{"ok":1}`},
	}
	var appended []Message
	srv := newServer(t, expect(func(t testing.TB, got received) {
		checkWireHistory(t, got.Messages)
	}, jsonReply("ok", "stop")))
	c := newCycle(t, srv, Config{History: cut, Hooks: Hooks{OnMessage: func(m Message) { appended = append(appended, m) }}})
	if len(appended) != 1 || appended[0].ToolCallID != "b" || !strings.HasPrefix(appended[0].Content, "error (cancelled): ") {
		t.Fatalf("repair appended %+v", appended)
	}
	if _, err := c.Submit(context.Background(), "next"); err != nil {
		t.Fatal(err)
	}
	// The caller's slice is not modified.
	if len(cut) != 3 || cut[1].ToolCalls[0].ID != "a" {
		t.Errorf("caller's history changed: %+v", cut)
	}
}

func TestInvalidHistory(t *testing.T) {
	call := []ToolCall{{ID: "a", Name: "t", Arguments: "{}"}}
	tests := map[string][]Message{
		"unknown role":       {{Role: "robot", Content: "x"}},
		"orphan tool":        {{Role: RoleUser, Content: "x"}, {Role: RoleTool, ToolCallID: "zz", Content: "x"}},
		"user before answer": {{Role: RoleAssistant, ToolCalls: call}, {Role: RoleUser, Content: "x"}, {Role: RoleTool, ToolCallID: "a"}},
		"empty call id":      {{Role: RoleAssistant, ToolCalls: []ToolCall{{Name: "t"}}}},
		"duplicate call id":  {{Role: RoleAssistant, ToolCalls: append(call, call...)}},
		"answered twice":     {{Role: RoleAssistant, ToolCalls: call}, {Role: RoleTool, ToolCallID: "a"}, {Role: RoleTool, ToolCallID: "a"}},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(Config{Provider: offline(t), History: h})
			if !errors.Is(err, ErrInvalidHistory) {
				t.Errorf("err = %v", err)
			}
		})
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without a provider succeeded")
	}
	if _, err := NewTestProvider(TestProviderConfig{BaseURL: "localhost:11434/v1", Model: "m"}); err == nil {
		t.Error("a provider with a base URL without scheme was made")
	}
	if _, err := NewTestProvider(TestProviderConfig{BaseURL: "http://x/v1"}); err == nil {
		t.Error("a provider without a model was made")
	}
}

func TestBusy(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	block := &funcTool{name: "block", desc: "blocks", fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		close(inside)
		<-release
		return json.RawMessage(`1`), nil
	}}
	srv := newServer(t, jsonReply("", "tool_calls", call("b", "block", `{}`)), jsonReply("done", "stop"))
	c := newCycle(t, srv, Config{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.SubmitWithTools(context.Background(), "x", newRegistry(t, block))
		errc <- err
	}()
	<-inside
	if _, err := c.Submit(context.Background(), "y"); !errors.Is(err, ErrBusy) {
		t.Errorf("concurrent Submit: %v", err)
	}
	_ = c.Messages() // safe while running
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := newServer(t, step{Hold: release}) // never answers within the request timeout
	c := newCycle(t, srv, Config{Limits: Limits{RequestTimeout: 50 * time.Millisecond, MaxRetries: -1}})
	_, err := c.Submit(context.Background(), "x")
	if !errors.Is(err, context.DeadlineExceeded) || KindOf(err) != KindTimeout {
		t.Fatalf("err = %v (kind %q)", err, KindOf(err))
	}
	if m := c.Messages(); len(m) != 1 {
		t.Errorf("history %+v", m)
	}
}

// Some proxies answer 200 with an error object instead of a completion.
func TestErrorObjectWithStatus200(t *testing.T) {
	srv := newServer(t, step{Status: http.StatusOK, Body: `{"error":{"message":"upstream model failed","code":502}}`})
	c := newCycle(t, srv, Config{Limits: Limits{MaxRetries: -1}})
	_, err := c.Submit(context.Background(), "x")
	var api *APIError
	if !errors.As(err, &api) || api.Message != "upstream model failed" || api.Code != "502" || api.StatusCode != 502 {
		t.Fatalf("err = %v", err)
	}
	// A relayed 5xx (OpenRouter's upstream failed) is retried like one.
	srv = newServer(t, step{Status: http.StatusOK, Body: `{"error":{"message":"upstream model failed","code":502}}`}, jsonReply("fine", ""))
	c = newCycle(t, srv, Config{})
	if resp, err := c.Submit(context.Background(), "x"); err != nil || resp.Text != "fine" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}

// Stopping a stream early leaves no goroutine behind: the run happens in
// the ranging goroutine and the response body is closed.
func TestNoGoroutineLeftAfterEarlyStop(t *testing.T) {
	gone := make(chan struct{})
	srv := newServer(t, streamThenHang(gone))
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	c := newCycleWith(t, srv, TestProviderConfig{HTTPClient: client}, Config{})
	before := runtime.NumGoroutine()
	for ev := range c.SubmitStreamWithTools(context.Background(), "x", nil) {
		if _, ok := ev.(*TextDelta); ok {
			break
		}
	}
	waitGone(t, gone)
	deadline := time.Now().Add(waitLong)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunawayReasoningIsCut: reasoning counts against the reply's cap
// too: a provider streaming reasoning for ever ends the request.
func TestRunawayReasoningIsCut(t *testing.T) {
	old := maxReplyBytes
	maxReplyBytes = 1000
	defer func() { maxReplyBytes = old }()
	var chunks []string
	for range 100 {
		chunks = append(chunks, chattest.ReasoningChunk("reasoning_content", strings.Repeat("r", 50)))
	}
	srv := newServer(t, sseChunks(append(chunks, textChunk("late"), stopChunk)...))
	c := newCycle(t, srv, Config{Limits: Limits{MaxRetries: -1}})
	var err error
	shown := 0
	for ev, e := range c.SubmitStreamWithTools(context.Background(), "x", nil) {
		if r, ok := ev.(*ReasoningDelta); ok {
			shown += len(r.Text)
		}
		err = e
	}
	if !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), "too large") || shown > 1000 {
		t.Fatalf("err = %v after %d bytes of reasoning", err, shown)
	}
}

func TestRunawayStreamIsCut(t *testing.T) {
	old := maxReplyBytes
	maxReplyBytes = 1000
	defer func() { maxReplyBytes = old }()
	var chunks []string
	for range 100 {
		chunks = append(chunks, textChunk(strings.Repeat("x", 50)))
	}
	srv := newServer(t, sseChunks(chunks...))
	c := newCycle(t, srv, Config{})
	var err error
	for _, e := range c.SubmitStreamWithTools(context.Background(), "x", nil) {
		err = e
	}
	if !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("err = %v", err)
	}
	if m := c.Messages(); len(m) != 1 {
		t.Errorf("history %+v", m)
	}
}

func TestStreamRetriesThenStreams(t *testing.T) {
	srv := newServer(t,
		status(http.StatusBadGateway, `<html>bad gateway</html>`, "retry-after-ms", "1"),
		streamText("after ", "retry"),
	)
	c := newCycle(t, srv, Config{})
	var text strings.Builder
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "x", nil) {
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := ev.(*TextDelta); ok {
			text.WriteString(d.Text)
		}
	}
	if text.String() != "after retry" || len(srv.Requests()) != 2 {
		t.Errorf("text %q after %d requests", text.String(), len(srv.Requests()))
	}
}

func TestFinishReasonLength(t *testing.T) {
	srv := newServer(t, jsonReply("truncated answ", "length"))
	c := newCycle(t, srv, Config{})
	resp, err := c.SubmitWithTools(context.Background(), "x", newRegistry(t, wordCount()))
	if err != nil || resp.FinishReason != "length" || resp.Text != "truncated answ" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}
