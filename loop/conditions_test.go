package loop

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/registry"
)

// Tests of the loop under real conditions: streams that break off or
// stall, rate limits with long waits, reasoning deltas, interrupted
// replies, usage and budgets.

// collect runs one streamed prompt and returns its events and error.
func collect(t *testing.T, c *Cycle, ctx context.Context, prompt string, reg *registry.Registry) ([]Event, error) {
	t.Helper()
	var evs []Event
	var err error
	for ev, e := range c.SubmitStreamWithTools(ctx, prompt, reg) {
		if e != nil {
			err = e
			break
		}
		evs = append(evs, ev)
	}
	return evs, err
}

func retries(evs []Event) []*Retry {
	var out []*Retry
	for _, ev := range evs {
		if r, ok := ev.(*Retry); ok {
			out = append(out, r)
		}
	}
	return out
}

func TestCutOffStreamIsRetried(t *testing.T) {
	srv := newServer(t,
		step{Text: "Half a sent", Cut: true},
		expect(func(t testing.TB, got received) {
			if roles(got.Messages) != "user" {
				t.Errorf("the cut reply was sent back: %s", got.Raw)
			}
		}, step{Text: "Whole sentence."}),
	)
	var infos []RequestInfo
	c := newCycle(t, srv, Config{Hooks: Hooks{OnRequest: func(i RequestInfo) { infos = append(infos, i) }}})
	evs, err := collect(t, c, context.Background(), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := retries(evs)
	if len(rs) != 1 || rs[0].Attempt != 1 || rs[0].Max != DefaultMaxRetries || rs[0].Status != 0 || !strings.Contains(rs[0].Reason, "finish_reason") {
		t.Fatalf("retries %+v", rs)
	}
	m := c.Messages()
	if len(m) != 2 || m[1].Content != "Whole sentence." || m[1].Interrupted {
		t.Errorf("history %+v", m)
	}
	if len(infos) != 1 || infos[0].Retries != 1 || infos[0].FinishReason != "stop" || infos[0].Error != "" {
		t.Errorf("request infos %+v", infos)
	}
}

func TestCutOffToolCallIsNotRun(t *testing.T) {
	var rec recorder
	cut := step{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{"text":"a b c"}`}}, Cut: true}
	srv := newServer(t, cut, cut, cut)
	c := newCycle(t, srv, Config{Limits: Limits{MaxRetryWait: -1}})
	_, err := collect(t, c, context.Background(), "x", newRegistry(t, rec.tool("t")))
	if !errors.Is(err, ErrIncompleteStream) || KindOf(err) != KindProvider {
		t.Fatalf("err = %v (kind %q)", err, KindOf(err))
	}
	if len(srv.Requests()) != 1+DefaultMaxRetries {
		t.Errorf("%d requests", len(srv.Requests()))
	}
	if got := rec.got(); len(got) != 0 {
		t.Errorf("the cut call ran: %v", got)
	}
	if m := c.Messages(); len(m) != 1 {
		t.Errorf("history %+v", m)
	}
}

// finish_reason ends a reply, [DONE] does not: a stream with [DONE] but no
// finish_reason is incomplete, one with finish_reason but no [DONE] is not.
func TestFinishReasonNotDoneEndsTheReply(t *testing.T) {
	srv := newServer(t, sseChunks(textChunk("no finish")))
	c := newCycle(t, srv, Config{Limits: Limits{MaxRetries: -1}})
	if _, err := collect(t, c, context.Background(), "x", nil); !errors.Is(err, ErrIncompleteStream) {
		t.Fatalf("err = %v", err)
	}
	srv = newServer(t, step{Events: "data: [DONE]\n\n"})
	c = newCycle(t, srv, Config{Limits: Limits{MaxRetries: -1}})
	if _, err := collect(t, c, context.Background(), "x", nil); !errors.Is(err, ErrIncompleteStream) || !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), "without any event") {
		t.Fatalf("err = %v", err)
	}
	srv = newServer(t, step{Events: "data: " + textChunk("finished") + "\n\ndata: " + stopChunk + "\n\n"})
	c = newCycle(t, srv, Config{Limits: Limits{MaxRetries: -1}})
	if _, err := collect(t, c, context.Background(), "x", nil); err != nil {
		t.Fatal(err)
	}
	if m := c.Messages(); len(m) != 2 || m[1].Content != "finished" {
		t.Errorf("history %+v", m)
	}
}

func TestStalledStream(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		gone := make(chan struct{})
		srv := newServer(t, step{Text: "x", Stall: true, Gone: gone}, streamText("ok"))
		c := newCycle(t, srv, Config{Limits: Limits{StreamIdleTimeout: 100 * time.Millisecond}})
		evs, err := collect(t, c, context.Background(), "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		waitGone(t, gone)
		if rs := retries(evs); len(rs) != 1 || !strings.Contains(rs[0].Reason, "stalled") {
			t.Errorf("retries %+v", rs)
		}
		if m := c.Messages(); len(m) != 2 || m[1].Content != "ok" {
			t.Errorf("history %+v", m)
		}
	})
	t.Run("headers then nothing", func(t *testing.T) {
		srv := newServer(t, step{Chunks: []string{}, Stall: true})
		c := newCycle(t, srv, Config{Limits: Limits{StreamIdleTimeout: 100 * time.Millisecond, MaxRetries: -1}})
		start := time.Now()
		_, err := collect(t, c, context.Background(), "x", nil)
		if !errors.Is(err, ErrStreamIdle) || KindOf(err) != KindStreamIdle || !strings.Contains(err.Error(), "stream_idle_timeout") {
			t.Fatalf("err = %v (kind %q)", err, KindOf(err))
		}
		if time.Since(start) > waitLong {
			t.Errorf("took %s", time.Since(start))
		}
	})
}

func TestRetryAfter(t *testing.T) {
	slow := `{"error":{"message":"slow down","type":"rate_limit"}}`
	t.Run("within the budget", func(t *testing.T) {
		srv := newServer(t, status(http.StatusTooManyRequests, slow, "Retry-After-Ms", "30"), streamText("done"))
		c := newCycle(t, srv, Config{})
		evs, err := collect(t, c, context.Background(), "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		rs := retries(evs)
		if len(rs) != 1 || rs[0].Wait != 30*time.Millisecond || rs[0].Status != 429 {
			t.Fatalf("retries %+v", rs)
		}
		b, _ := json.Marshal(rs[0])
		if want := `{"type":"retry","attempt":1,"max":2,"wait_ms":30,"reason":"429 Too Many Requests: slow down"}`; string(b) != want {
			t.Errorf("json %s, want %s", b, want)
		}
	})
	t.Run("longer than the budget", func(t *testing.T) {
		srv := newServer(t, status(http.StatusTooManyRequests, slow, "Retry-After", "120"), streamText("never"))
		c := newCycle(t, srv, Config{})
		start := time.Now()
		evs, err := collect(t, c, context.Background(), "x", nil)
		var api *APIError
		if !errors.As(err, &api) || api.StatusCode != 429 || KindOf(err) != KindProvider || !strings.Contains(err.Error(), "max_retry_wait") || !strings.Contains(err.Error(), "2m0s") {
			t.Fatalf("err = %v (kind %q)", err, KindOf(err))
		}
		if time.Since(start) > 5*time.Second || len(srv.Requests()) != 1 || len(retries(evs)) != 0 {
			t.Errorf("waited %s, %d requests", time.Since(start), len(srv.Requests()))
		}
	})
	t.Run("the budget is shared by the retries", func(t *testing.T) {
		srv := newServer(t,
			status(http.StatusServiceUnavailable, slow, "Retry-After-Ms", "300"),
			status(http.StatusServiceUnavailable, slow, "Retry-After-Ms", "300"),
			streamText("never"))
		c := newCycle(t, srv, Config{Limits: Limits{MaxRetries: 5, MaxRetryWait: 500 * time.Millisecond}})
		evs, err := collect(t, c, context.Background(), "x", nil)
		if err == nil || !strings.Contains(err.Error(), "max_retry_wait") || len(retries(evs)) != 1 || len(srv.Requests()) != 2 {
			t.Fatalf("err = %v, %d retries, %d requests", err, len(retries(evs)), len(srv.Requests()))
		}
	})
	t.Run("the backoff is shortened to the budget", func(t *testing.T) {
		down := status(http.StatusServiceUnavailable, `{"error":{"message":"down"}}`)
		srv := newServer(t, down, down, down)
		c := newCycle(t, srv, Config{Limits: Limits{MaxRetries: 5, MaxRetryWait: 20 * time.Millisecond}})
		evs, err := collect(t, c, context.Background(), "x", nil)
		rs := retries(evs)
		if err == nil || !strings.Contains(err.Error(), "max_retry_wait, is spent") || len(rs) != 1 || rs[0].Wait != 20*time.Millisecond {
			t.Fatalf("err = %v, retries %+v", err, rs)
		}
	})
	t.Run("non-streamed too", func(t *testing.T) {
		srv := newServer(t, status(http.StatusTooManyRequests, slow, "Retry-After-Ms", "1"), jsonReply("fine", "stop"))
		var infos []RequestInfo
		c := newCycle(t, srv, Config{Hooks: Hooks{OnRequest: func(i RequestInfo) { infos = append(infos, i) }}})
		if resp, err := c.Submit(context.Background(), "x"); err != nil || resp.Text != "fine" {
			t.Fatalf("resp %+v err %v", resp, err)
		}
		if len(infos) != 1 || infos[0].Retries != 1 {
			t.Errorf("infos %+v", infos)
		}
	})
}

func TestReasoningDeltas(t *testing.T) {
	srv := newServer(t,
		sseChunks(chattest.ReasoningChunk("reasoning_content", "Let me think."), chattest.ReasoningChunk("reasoning", " Done."),
			textChunk("Answer."), stopChunk),
		expect(func(t testing.TB, got received) {
			// Sent back on the message it came with, under the field the
			// provider used first (DeepSeek refuses a turn without it).
			if !strings.Contains(string(got.Raw), `"reasoning_content":"Let me think. Done."`) {
				t.Errorf("reasoning not sent back: %s", got.Raw)
			}
		}, streamText("ok")),
	)
	c := newCycle(t, srv, Config{})
	evs, err := collect(t, c, context.Background(), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	var reasoning []string
	for _, ev := range evs {
		if r, ok := ev.(*ReasoningDelta); ok {
			reasoning = append(reasoning, r.Text)
		}
	}
	if strings.Join(reasoning, "|") != "Let me think.| Done." {
		t.Fatalf("reasoning %q", reasoning)
	}
	if b, _ := json.Marshal(&ReasoningDelta{Text: "a"}); string(b) != `{"type":"reasoning_delta","text":"a"}` {
		t.Errorf("json %s", b)
	}
	if m := c.Messages(); len(m) != 2 || m[1].Content != "Answer." {
		t.Errorf("history %+v", m)
	}
	if _, err := collect(t, c, context.Background(), "y", nil); err != nil {
		t.Fatal(err)
	}
}

// A reply cut short by a cancellation is kept as the user saw it and sent
// back as a valid assistant message that says so.
func TestInterruptedReplyIsSentBack(t *testing.T) {
	gone := make(chan struct{})
	srv := newServer(t, streamThenHang(gone),
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if roles(got.Messages) != "user,assistant,user" || str(got.Messages[1].Content) != "partial [interrupted by the user]" {
				t.Errorf("sent %s", got.Raw)
			}
		}, streamText("again")))
	var saved []Message
	c := newCycle(t, srv, Config{Hooks: Hooks{OnMessage: func(m Message) { saved = append(saved, m) }}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for ev := range c.SubmitStreamWithTools(ctx, "x", nil) {
		if _, ok := ev.(*TextDelta); ok {
			cancel()
		}
	}
	waitGone(t, gone)
	if len(saved) != 2 || !saved[1].Interrupted {
		t.Fatalf("saved %+v", saved)
	}
	b, _ := json.Marshal(saved[1])
	var back Message
	if json.Unmarshal(b, &back); !strings.Contains(string(b), `"interrupted":true`) || !back.Interrupted {
		t.Errorf("json %s", b)
	}
	c2 := newCycle(t, srv, Config{History: saved})
	if _, err := collect(t, c2, context.Background(), "go on", nil); err != nil {
		t.Fatal(err)
	}
}

func TestRequestInfo(t *testing.T) {
	srv := newServer(t, step{Text: "hi", Usage: &chattest.Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, CachedTokens: 64, ReasoningTokens: 8}})
	var infos []RequestInfo
	c := newCycle(t, srv, Config{Hooks: Hooks{OnRequest: func(i RequestInfo) { infos = append(infos, i) }}})
	evs, err := collect(t, c, context.Background(), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 {
		t.Fatalf("infos %+v", infos)
	}
	want := Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, CachedTokens: 64, ReasoningTokens: 8}
	if i := infos[0]; i.Model != "test" || i.Usage != want || i.FinishReason != "stop" || i.Retries != 0 || i.Duration <= 0 {
		t.Errorf("info %+v", i)
	}
	if tc := evs[len(evs)-1].(*TurnComplete); tc.Usage != want {
		t.Errorf("turn usage %+v", tc.Usage)
	}
	infos[0].Duration = 3 * time.Millisecond
	b, _ := json.Marshal(infos[0])
	if w := `{"model":"test","response_id":"chatcmpl-test","usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"cached_tokens":64,"reasoning_tokens":8},"duration_ms":3,"retries":0,"finish_reason":"stop"}`; string(b) != w {
		t.Errorf("json %s\nwant %s", b, w)
	}

	// A failed request is reported too.
	srv = newServer(t, status(http.StatusBadRequest, `{"error":{"message":"bad"}}`))
	infos = nil
	c = newCycle(t, srv, Config{Hooks: Hooks{OnRequest: func(i RequestInfo) { infos = append(infos, i) }}})
	if _, err := collect(t, c, context.Background(), "x", nil); err == nil || len(infos) != 1 || !strings.Contains(infos[0].Error, "bad") || infos[0].Model != "test-model" {
		t.Errorf("err %v, infos %+v", err, infos)
	}
}

func TestTokenBudget(t *testing.T) {
	var rec recorder
	callStep := func(id string) step {
		return step{ToolCalls: []chattest.Call{{ID: id, Name: "t", Args: `{"n":"` + id + `"}`}}}
	}
	srv := newServer(t, callStep("a"), callStep("b"), expect(func(t testing.TB, got received) { checkWireHistory(t, got.Messages) }, streamText("resumed")))
	c := newCycle(t, srv, Config{Limits: Limits{MaxTotalTokens: 20}}) // each reply uses 15
	reg := newRegistry(t, rec.tool("t"))
	_, err := collect(t, c, context.Background(), "x", reg)
	var be *BudgetError
	if !errors.Is(err, ErrTokenBudget) || !errors.As(err, &be) || be.Used != 30 || be.Limit != 20 || KindOf(err) != KindMaxTokens {
		t.Fatalf("err = %v (kind %q)", err, KindOf(err))
	}
	if len(srv.Requests()) != 2 || len(rec.got()) != 2 {
		t.Errorf("%d requests, calls %v", len(srv.Requests()), rec.got())
	}
	if m := c.Messages(); len(m) != 5 || m[4].Role != RoleTool {
		t.Errorf("history %+v", m)
	}
	// The next run has its own budget.
	if _, err := collect(t, c, context.Background(), "go on", reg); err != nil {
		t.Fatal(err)
	}
}

// TestSpendCountsInTheRun: tokens a tool spends for the run (an MCP
// server's sampling) count in the run's budget, its Response.Usage and
// RunUsage; outside a run, in Usage only.
func TestSpendCountsInTheRun(t *testing.T) {
	srv := newServer(t, step{ToolCalls: []chattest.Call{{ID: "a", Name: "t", Args: `{}`}}}, streamText("never"))
	var during Usage
	var c *Cycle
	spender := &funcTool{name: "t", desc: "t", fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		c.Spend(Usage{PromptTokens: 20, CompletionTokens: 10, TotalTokens: 30})
		during, _, _ = c.RunUsage()
		return json.RawMessage(`1`), nil
	}}
	c = newCycle(t, srv, Config{Limits: Limits{MaxTotalTokens: 40}}) // the reply uses 15: 15 + 30 is past 40
	_, err := collect(t, c, context.Background(), "x", newRegistry(t, spender))
	var be *BudgetError
	if !errors.As(err, &be) || be.Used != 45 || be.Limit != 40 {
		t.Fatalf("err = %v; want the token budget with 45 used", err)
	}
	if during.Total() != 45 || len(srv.Requests()) != 1 {
		t.Errorf("RunUsage during the call %+v, %d requests", during, len(srv.Requests()))
	}
	if _, _, running := c.RunUsage(); running {
		t.Error("RunUsage says running after the run")
	}
	c.Spend(Usage{TotalTokens: 5})
	if u := c.Usage(); u.Total() != 50 {
		t.Errorf("Usage %+v; want 50 tokens", u)
	}
}

func TestToolCallBudget(t *testing.T) {
	var rec recorder
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{{ID: "a", Name: "t", Args: `{"n":1}`}, {ID: "b", Name: "t", Args: `{"n":2}`}}},
		expect(func(t testing.TB, got received) { checkWireHistory(t, got.Messages) }, streamText("ok")),
	)
	c := newCycle(t, srv, Config{Limits: Limits{MaxToolCalls: 1}})
	evs, err := collect(t, c, context.Background(), "x", newRegistry(t, rec.tool("t")))
	if !errors.Is(err, ErrToolCallBudget) || KindOf(err) != KindMaxToolCalls || !strings.Contains(err.Error(), "2 tool calls, 1 are allowed") {
		t.Fatalf("err = %v (kind %q)", err, KindOf(err))
	}
	if got := rec.got(); len(got) != 1 {
		t.Errorf("calls run: %v", got)
	}
	var done []*ToolExecutionCompleted
	for _, ev := range evs {
		if e, ok := ev.(*ToolExecutionCompleted); ok {
			done = append(done, e)
		}
	}
	if len(done) != 2 || done[0].IsError || !done[1].IsError || !strings.Contains(string(done[1].Output), "budget") {
		t.Errorf("completed %+v", done)
	}
	m := c.Messages()
	if len(m) != 4 || !strings.Contains(m[3].Content, "budget of 1 tool calls") {
		t.Errorf("history %+v", m)
	}
	if _, err := collect(t, c, context.Background(), "go on", nil); err != nil {
		t.Fatal(err)
	}
}

// DeepSeek's thinking mode with tools: the tool-call turn goes back with
// its reasoning_content (the server refuses the next request without
// it), in every later request; a Cycle for another model drops it.
func TestDeepSeekThinkingWithTools(t *testing.T) {
	srv := newServer(t,
		chattest.Reply{Reasoning: "I should count.", ToolCalls: []chattest.Call{{ID: "call_a", Name: "wc", Args: `{}`}}},
		chattest.Reply{Reasoning: "Now answer.", Text: "Four."},
		chattest.Reply{Text: "Still four."},
	)
	srv.RequireReasoning()
	reg := newRegistry(t, constTool("wc", `{"words":4}`, nil))
	c := newCycle(t, srv, Config{})
	if resp, err := c.SubmitWithTools(context.Background(), "count", reg); err != nil || resp.Text != "Four." {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	if resp, err := c.SubmitWithTools(context.Background(), "sure?", reg); err != nil || resp.Text != "Still four." {
		t.Fatalf("the next turn: resp %+v err %v", resp, err)
	}
	msgs := c.Messages()
	if r := msgs[1].Reasoning; r == nil || r.Text != "I should count." || r.API != "chat" || r.Model != "test-model" {
		t.Errorf("reasoning kept %+v", msgs[1].Reasoning)
	}

	// The same history on another model: the reasoning is not sent.
	other := newServer(t, expect(func(t testing.TB, got received) {
		if strings.Contains(string(got.Raw), "reasoning_content") {
			t.Errorf("reasoning sent to another model: %s", got.Raw)
		}
	}, jsonReply("fine", "")))
	c2 := newCycleWith(t, other, TestProviderConfig{Model: "another-model"}, Config{History: msgs})
	if _, err := c2.SubmitWithTools(context.Background(), "again", reg); err != nil {
		t.Fatal(err)
	}
}
