// Package providertest is one suite of behaviour that every loop.Provider
// adapter must pass through the loop, against a fake server of its API
// that validates requests as the real API does (chattest,
// responsestest, anthropictest, geminitest). An adapter's test supplies a
// Kit: how to start its fake server with a script of neutral Steps, and
// how to make its provider.
//
//	func TestSuite(t *testing.T) { providertest.Run(t, kit) }
//
// The suite asserts, for each API: a streamed and a non-streamed tool round
// trip, parallel calls answered in call order, usage numbers, reasoning
// shown only as ReasoningDelta events and sent back (the fake refuses a
// turn without it), retryable errors retried within max_retry_wait, a 400
// ending the run with kind provider, a cut stream retried and never run,
// a provider's context-overflow error recognised, a reply over the reply
// limit or reasoning over MaxReasoningBytes refused, and the API key sent
// in the API's own header.
package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// Call is a tool call of a scripted reply.
type Call struct{ ID, Name, Args string }

// Usage is a scripted reply's usage; the Kit maps it onto its API's
// fields, and Want is what loop.Usage must then say.
type Usage struct {
	Input, Output, Cached, Reasoning int
}

// Step is one scripted answer, in no API's words.
type Step struct {
	Text      string
	Calls     []Call
	Reasoning string // the model reasons first (thinking, a summary, reasoning_content), with whatever opaque part the API signs
	Usage     *Usage
	// Fail, if set, is the answer instead: "429" (rate limited, asking
	// for a 1 s wait), "overloaded" (the API's overload: 529, 503),
	// "400" (a request the API refuses), "overflow" (the API's "too
	// long for the context window"), "cut" (the stream breaks off
	// before its end marker).
	Fail string
}

// Fake is a started fake server.
type Fake interface {
	// URL is the base URL to give the provider.
	URL() string
	// Requests is how many requests arrived.
	Requests() int
	// Header is the headers of request i.
	Header(i int) http.Header
	// Body is the body of request i.
	Body(i int) []byte
}

// Kit is what an adapter's test gives the suite.
type Kit struct {
	// API is the adapter's ProviderInfo.API.
	API string
	// Serve starts a fake server with the script, stopped when t ends.
	Serve func(t testing.TB, steps ...Step) Fake
	// Provider makes the adapter's provider for baseURL and key, with
	// reasoning on when reasoning is set.
	Provider func(t testing.TB, baseURL, key string, reasoning bool) loop.Provider
	// KeyHeader is the header the key travels in, and KeyValue how it
	// reads for key ("Bearer " + key, or the key).
	KeyHeader string
	KeyValue  func(key string) string
	// WantUsage is the loop.Usage a step's Usage must become.
	WantUsage func(Usage) loop.Usage
}

// tool is a registry tool written in Go for the suite's runs.
type tool struct {
	name  string
	delay time.Duration
	mu    sync.Mutex
	calls []string
}

func (t *tool) Name() string        { return t.name }
func (t *tool) Description() string { return "echoes its argument" }
func (t *tool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)
}
func (t *tool) Permissions() []permission.Permission { return nil }
func (t *tool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	var in struct{ X string }
	_ = json.Unmarshal(args, &in)
	time.Sleep(t.delay)
	t.mu.Lock()
	t.calls = append(t.calls, in.X)
	t.mu.Unlock()
	return json.Marshal(map[string]string{"echo": in.X})
}

func registryWith(t *testing.T, tools ...registry.Tool) *registry.Registry {
	t.Helper()
	reg := registry.New()
	for _, tl := range tools {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// cycle is a Cycle for the kit's provider at f, with fast retries.
func (k Kit) cycle(t *testing.T, f Fake, reasoning bool, cfg loop.Config) *loop.Cycle {
	t.Helper()
	cfg.Provider = k.Provider(t, f.URL(), "sk-suite-secret", reasoning)
	if cfg.MaxRetryWait == 0 {
		cfg.MaxRetryWait = 10 * time.Second
	}
	c, err := loop.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// collect runs one streamed prompt and returns its events and error.
func collect(ctx context.Context, c *loop.Cycle, prompt string, reg *registry.Registry) ([]loop.Event, error) {
	var evs []loop.Event
	for ev, err := range c.SubmitStreamWithTools(ctx, prompt, reg) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Run runs the suite.
func Run(t *testing.T, k Kit) {
	ctx := context.Background()

	t.Run("streamed tool round trip", func(t *testing.T) {
		echo := &tool{name: "echo"}
		f := k.Serve(t, Step{Calls: []Call{{ID: "call_1", Name: "echo", Args: `{"x":"hi"}`}}}, Step{Text: "It said hi."})
		c := k.cycle(t, f, false, loop.Config{System: "Use tools."})
		evs, err := collect(ctx, c, "call echo", registryWith(t, echo))
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		var completed []*loop.ToolExecutionCompleted
		for _, ev := range evs {
			switch e := ev.(type) {
			case *loop.TextDelta:
				text.WriteString(e.Text)
			case *loop.ToolExecutionCompleted:
				completed = append(completed, e)
			}
		}
		if text.String() != "It said hi." || len(completed) != 1 || completed[0].IsError || string(completed[0].Output) != `{"echo":"hi"}` {
			t.Errorf("text %q, completed %+v", text.String(), completed)
		}
		if msgs := c.Messages(); len(msgs) != 4 || msgs[3].Content != "It said hi." {
			t.Errorf("history %+v", msgs)
		}
		if f.Requests() != 2 {
			t.Errorf("%d requests", f.Requests())
		}
	})

	t.Run("non-streamed tool round trip", func(t *testing.T) {
		echo := &tool{name: "echo"}
		f := k.Serve(t, Step{Calls: []Call{{ID: "call_1", Name: "echo", Args: `{"x":"hi"}`}}}, Step{Text: "done"})
		c := k.cycle(t, f, false, loop.Config{})
		resp, err := c.SubmitWithTools(ctx, "call echo", registryWith(t, echo))
		if err != nil || resp.Text != "done" || resp.Turns != 2 {
			t.Fatalf("resp %+v err %v", resp, err)
		}
		if len(echo.calls) != 1 || echo.calls[0] != "hi" {
			t.Errorf("calls %v", echo.calls)
		}
	})

	t.Run("parallel calls answered in call order", func(t *testing.T) {
		slow, fast := &tool{name: "slow", delay: 50 * time.Millisecond}, &tool{name: "fast"}
		f := k.Serve(t, Step{Calls: []Call{
			{ID: "call_a", Name: "slow", Args: `{"x":"a"}`},
			{ID: "call_b", Name: "fast", Args: `{"x":"b"}`},
			{ID: "call_c", Name: "slow", Args: `{"x":"c"}`},
		}}, Step{Text: "ok"})
		c := k.cycle(t, f, false, loop.Config{})
		if _, err := c.SubmitWithTools(ctx, "go", registryWith(t, slow, fast)); err != nil {
			t.Fatal(err)
		}
		msgs := c.Messages()
		var order []string
		calls := msgs[1].ToolCalls
		for _, m := range msgs[2:5] {
			order = append(order, m.Content)
			if m.Role != loop.RoleTool {
				t.Fatalf("history %+v", msgs)
			}
		}
		want := []string{`{"echo":"a"}`, `{"echo":"b"}`, `{"echo":"c"}`}
		if strings.Join(order, ",") != strings.Join(want, ",") || len(calls) != 3 {
			t.Errorf("tool messages %v, want %v", order, want)
		}
		for i, m := range msgs[2:5] {
			if m.ToolCallID != calls[i].ID {
				t.Errorf("tool message %d answers %s, want %s", i, m.ToolCallID, calls[i].ID)
			}
		}
	})

	t.Run("usage", func(t *testing.T) {
		u := Usage{Input: 1200, Output: 80, Cached: 1000, Reasoning: 30}
		f := k.Serve(t, Step{Text: "hi", Usage: &u})
		var infos []loop.RequestInfo
		c := k.cycle(t, f, false, loop.Config{Hooks: loop.Hooks{OnRequest: func(i loop.RequestInfo) { infos = append(infos, i) }}})
		evs, err := collect(ctx, c, "hello", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := k.WantUsage(u)
		var tc *loop.TurnComplete
		for _, ev := range evs {
			if e, ok := ev.(*loop.TurnComplete); ok {
				tc = e
			}
		}
		if tc == nil || tc.Usage != want {
			t.Errorf("turn usage %+v, want %+v", tc, want)
		}
		if len(infos) != 1 || infos[0].Usage != want || !infos[0].Stream || infos[0].TimeToFirstChunk <= 0 {
			t.Errorf("request info %+v", infos)
		}
		if c.Usage() != want {
			t.Errorf("cycle usage %+v", c.Usage())
		}
	})

	t.Run("reasoning hidden, shown as events, sent back", func(t *testing.T) {
		echo := &tool{name: "echo"}
		f := k.Serve(t,
			Step{Reasoning: "Let me call echo.", Calls: []Call{{ID: "call_r", Name: "echo", Args: `{"x":"r"}`}}},
			Step{Reasoning: "Now answer.", Text: "Echoed r."},
			Step{Text: "Still r."})
		c := k.cycle(t, f, true, loop.Config{})
		evs, err := collect(ctx, c, "go", registryWith(t, echo))
		if err != nil {
			t.Fatalf("the turn after the tool call failed (reasoning not sent back as the API wants?): %v", err)
		}
		var reasoning, text strings.Builder
		for _, ev := range evs {
			switch e := ev.(type) {
			case *loop.ReasoningDelta:
				reasoning.WriteString(e.Text)
			case *loop.TextDelta:
				text.WriteString(e.Text)
			}
		}
		if !strings.Contains(reasoning.String(), "Let me call echo.") || strings.Contains(text.String(), "Let me") {
			t.Errorf("reasoning %q, text %q", reasoning.String(), text.String())
		}
		msgs := c.Messages()
		if r := msgs[1].Reasoning; r == nil || r.API != k.API {
			t.Errorf("the reply's reasoning was not kept: %+v", msgs[1])
		}
		if strings.Contains(msgs[1].Content+msgs[3].Content, "Let me") {
			t.Errorf("reasoning in the content: %+v", msgs)
		}
		// The session continues, reasoning and all.
		if resp, err := c.SubmitWithTools(ctx, "again", registryWith(t, echo)); err != nil || resp.Text != "Still r." {
			t.Errorf("the next turn: %+v, %v", resp, err)
		}
	})

	t.Run("reasoning of another provider is not sent", func(t *testing.T) {
		history := []loop.Message{
			{Role: loop.RoleUser, Content: "before"},
			{Role: loop.RoleAssistant, Content: "", ToolCalls: []loop.ToolCall{{ID: "call_x", Name: "echo", Arguments: `{"x":"x"}`}},
				Reasoning: &loop.Reasoning{API: "not-" + k.API, Endpoint: "http://elsewhere", Model: "m", Text: "SECRET-THOUGHT", Opaque: json.RawMessage(`{"sig":"SECRET-SIG"}`)}},
			{Role: loop.RoleTool, ToolCallID: "call_x", Name: "echo", Content: `{"echo":"x"}`},
			{Role: loop.RoleAssistant, Content: "done before"},
		}
		f := k.Serve(t, Step{Text: "fine"})
		c := k.cycle(t, f, false, loop.Config{History: history})
		if _, err := c.SubmitWithTools(ctx, "go on", registryWith(t, &tool{name: "echo"})); err != nil {
			t.Fatal(err)
		}
		if b := string(f.Body(0)); strings.Contains(b, "SECRET") || !strings.Contains(b, "done before") {
			t.Errorf("request %s", b)
		}
	})

	for _, fail := range []string{"429", "overloaded", "cut"} {
		t.Run("retried: "+fail, func(t *testing.T) {
			echo := &tool{name: "echo"}
			steps := []Step{{Fail: fail}, {Text: "recovered"}}
			if fail == "cut" {
				steps[0] = Step{Fail: "cut", Calls: []Call{{ID: "call_cut", Name: "echo", Args: `{"x":"never"}`}}}
			}
			f := k.Serve(t, steps...)
			c := k.cycle(t, f, false, loop.Config{})
			evs, err := collect(ctx, c, "go", registryWith(t, echo))
			if err != nil {
				t.Fatal(err)
			}
			var retries []*loop.Retry
			for _, ev := range evs {
				if r, ok := ev.(*loop.Retry); ok {
					retries = append(retries, r)
				}
			}
			if len(retries) != 1 || f.Requests() != 2 {
				t.Errorf("retries %+v, %d requests", retries, f.Requests())
			}
			if fail == "429" && (len(retries) != 1 || retries[0].Wait != time.Second) {
				t.Errorf("the wait the provider asked for was not kept: %+v", retries)
			}
			if len(echo.calls) != 0 {
				t.Errorf("a call of a cut stream ran: %v", echo.calls)
			}
			if msgs := c.Messages(); len(msgs) != 2 || msgs[1].Content != "recovered" {
				t.Errorf("history %+v", msgs)
			}
		})
	}

	t.Run("a retry wait beyond max_retry_wait fails at once", func(t *testing.T) {
		f := k.Serve(t, Step{Fail: "429"}, Step{Text: "never"})
		c := k.cycle(t, f, false, loop.Config{Limits: loop.Limits{MaxRetryWait: 100 * time.Millisecond}})
		_, err := collect(ctx, c, "go", nil)
		if err == nil || !strings.Contains(err.Error(), "max_retry_wait") || f.Requests() != 1 {
			t.Errorf("err %v, %d requests", err, f.Requests())
		}
	})

	t.Run("400 ends the run with kind provider", func(t *testing.T) {
		f := k.Serve(t, Step{Fail: "400"}, Step{Text: "never"})
		c := k.cycle(t, f, false, loop.Config{})
		_, err := collect(ctx, c, "go", nil)
		var api *loop.APIError
		if loop.KindOf(err) != loop.KindProvider || !errors.As(err, &api) || api.StatusCode != 400 || api.Message == "" || f.Requests() != 1 {
			t.Errorf("err %v (kind %q), %d requests", err, loop.KindOf(err), f.Requests())
		}
		if err != nil && strings.Contains(err.Error(), "sk-suite-secret") {
			t.Errorf("the key is in the error: %v", err)
		}
	})

	t.Run("context overflow recognised", func(t *testing.T) {
		f := k.Serve(t, Step{Fail: "overflow"}, Step{Text: "never"})
		c := k.cycle(t, f, false, loop.Config{})
		_, err := collect(ctx, c, "go", nil)
		if loop.KindOf(err) != loop.KindContextOverflow || f.Requests() != 1 {
			t.Errorf("err %v (kind %q), %d requests (nothing to trim: no resend)", err, loop.KindOf(err), f.Requests())
		}
	})

	t.Run("a reply over the reply limit fails, bounded", func(t *testing.T) {
		// 2 MiB of text against an 8 KiB limit: a stream stops at the
		// limit; a whole reply is not read past four times it (and 1 MiB).
		for _, stream := range []bool{true, false} {
			f := k.Serve(t, Step{Text: strings.Repeat("x", 2<<20)})
			p := k.Provider(t, f.URL(), "k", false)
			req := &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, Stream: stream, MaxReplyBytes: 8 << 10}
			rep, err := p.Request(ctx, req)
			if !errors.Is(err, loop.ErrBadResponse) || !strings.Contains(err.Error(), "reply") {
				t.Errorf("stream %v: err %v", stream, err)
			}
			if rep != nil && len(rep.Content) >= 2<<20 {
				t.Errorf("stream %v: the provider read the whole reply (%d bytes) past its limit", stream, len(rep.Content))
			}
		}
	})

	t.Run("context overflow: trimmed and sent again, smaller", func(t *testing.T) {
		big := `{"echo":"` + strings.Repeat("y", 60000) + `"}`
		history := []loop.Message{
			{Role: loop.RoleUser, Content: "before"},
			{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "call_old", Name: "echo", Arguments: `{"x":"y"}`}}},
			{Role: loop.RoleTool, ToolCallID: "call_old", Name: "echo", Content: big},
			{Role: loop.RoleAssistant, Content: "done before"},
		}
		f := k.Serve(t, Step{Fail: "overflow"}, Step{Text: "fits now"})
		c := k.cycle(t, f, false, loop.Config{History: history, Limits: loop.Limits{MaxToolMessageBytes: -1}})
		evs, err := collect(ctx, c, "again", registryWith(t, &tool{name: "echo"}))
		if err != nil {
			t.Fatal(err)
		}
		var retried bool
		for _, ev := range evs {
			if r, ok := ev.(*loop.Retry); ok && strings.Contains(r.Reason, "too long") {
				retried = true
			}
		}
		if !retried || f.Requests() != 2 || len(f.Body(1)) >= len(f.Body(0)) || strings.Contains(string(f.Body(1)), strings.Repeat("y", 1000)) {
			t.Errorf("retried %v, %d requests, sizes %d then %d", retried, f.Requests(), len(f.Body(0)), len(f.Body(f.Requests()-1)))
		}
	})

	t.Run("reasoning over MaxReasoningBytes fails the request", func(t *testing.T) {
		f := k.Serve(t, Step{Reasoning: strings.Repeat("r", loop.MaxReasoningBytes+1024), Text: "x"}, Step{Text: "never"})
		c := k.cycle(t, f, true, loop.Config{Limits: loop.Limits{MaxRetries: -1}})
		_, err := collect(ctx, c, "go", nil)
		if loop.KindOf(err) != loop.KindProvider || !errors.Is(err, loop.ErrBadResponse) {
			t.Errorf("err %v (kind %q)", err, loop.KindOf(err))
		}
		if len(c.Messages()) != 1 {
			t.Errorf("the reply was kept: %d messages", len(c.Messages()))
		}
	})

	t.Run("the key in the API's own header", func(t *testing.T) {
		f := k.Serve(t, Step{Text: "hi"})
		c := k.cycle(t, f, false, loop.Config{})
		if _, err := collect(ctx, c, "go", nil); err != nil {
			t.Fatal(err)
		}
		h := f.Header(0)
		if got := h.Get(k.KeyHeader); got != k.KeyValue("sk-suite-secret") {
			t.Errorf("%s: %q", k.KeyHeader, got)
		}
		for name, v := range h {
			if !strings.EqualFold(name, k.KeyHeader) && strings.Contains(strings.Join(v, " "), "sk-suite-secret") {
				t.Errorf("the key is also in %s", name)
			}
		}
		if strings.Contains(string(f.Body(0)), "sk-suite-secret") {
			t.Errorf("the key is in the body")
		}
	})
}
