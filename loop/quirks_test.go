package loop

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agcore/agrun/registry"
)

// One test per provider quirk (see the reference notes): each streams a
// fixture from testdata/ that reproduces the provider's shape, checks what
// the tools were called with, and checks that the next request the server
// receives carries a valid history with the right ids.
func TestProviderQuirks(t *testing.T) {
	type wantCall struct{ id, args string } // id "" means "synthesized: non-empty"
	tests := []struct {
		name    string
		fixture string
		calls   []wantCall
		// answers are the tool message contents the server must receive,
		// as prefixes, in call order.
		answers []string
		usage   Usage
	}{
		{"whole call in one chunk, finish_reason stop", "ollama_whole_call_stop.sse",
			[]wantCall{{"call_ol1", `{"text":"one two three"}`}}, []string{`{"words":3}`}, Usage{PromptTokens: 30, CompletionTokens: 8, TotalTokens: 38}},
		{"all calls at index 0 with different ids", "index0_different_ids.sse",
			[]wantCall{{"call_A", `{"text":"alpha"}`}, {"call_B", `{"text":"beta gamma"}`}}, []string{`{"words":1}`, `{"words":2}`}, Usage{}},
		{"indices start at 1", "index_starts_at_1.sse",
			[]wantCall{{"toolu_01XYZ", `{"text": "a b c d"}`}}, []string{`{"words":4}`}, Usage{}},
		{"no index, no type, finish_reason in the call's chunk", "mistral_no_index_no_type.sse",
			[]wantCall{{"Xy12AbC9d", `{"text": "x y"}`}, {"Pq34RsT8u", `{"text": "z"}`}}, []string{`{"words":2}`, `{"words":1}`}, Usage{PromptTokens: 50, CompletionTokens: 20, TotalTokens: 70}},
		{"missing and empty ids", "missing_ids.sse",
			[]wantCall{{"", `{"text":"first"}`}, {"", `{"text":"second one"}`}}, []string{`{"words":1}`, `{"words":2}`}, Usage{}},
		{"whole calls without index or id", "no_index_no_id.sse",
			[]wantCall{{"", `{"text":"p"}`}, {"", `{"text":"q r"}`}}, []string{`{"words":1}`, `{"words":2}`}, Usage{}},
		{"name repeated in every chunk", "name_repeated.sse",
			[]wantCall{{"call_N", `{"text":"n1 n2 n3"}`}}, []string{`{"words":3}`}, Usage{}},
		{"empty arguments mean {}", "empty_arguments.sse",
			[]wantCall{{"call_clock", `{}`}}, []string{`{"now":"noon"}`}, Usage{}},
		{"invalid JSON arguments", "invalid_arguments.sse",
			[]wantCall{{"call_bad", `{"text": "unterminated`}},
			[]string{`error (invalid_arguments): `}, Usage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var executed []string
			wc := wordCount()
			inner := wc.fn
			wc.fn = func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
				mu.Lock()
				executed = append(executed, string(args))
				mu.Unlock()
				return inner(ctx, args)
			}
			clock := &funcTool{name: "clock", desc: "time", params: `{"type":"object","properties":{}}`,
				fn: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
					mu.Lock()
					executed = append(executed, string(args))
					mu.Unlock()
					return json.RawMessage(`{"now":"noon"}`), nil
				}}
			srv := newServer(t, sseFile(tt.fixture),
				expect(func(t testing.TB, got received) {
					checkWireHistory(t, got.Messages)
					m := got.Messages
					if len(m) != 2+len(tt.calls) {
						t.Errorf("roles %s", roles(m))
						return
					}
					a := m[1]
					if len(a.ToolCalls) != len(tt.calls) {
						t.Errorf("assistant calls %+v", a.ToolCalls)
						return
					}
					for i, w := range tt.calls {
						sent := a.ToolCalls[i]
						if w.id != "" && sent.ID != w.id {
							t.Errorf("call %d id %q, want %q", i, sent.ID, w.id)
						}
						if json.Valid([]byte(w.args)) && sent.Function.Arguments != w.args {
							t.Errorf("call %d arguments sent back %q, want %q", i, sent.Function.Arguments, w.args)
						}
						if !json.Valid([]byte(w.args)) && sent.Function.Arguments != "{}" {
							t.Errorf("invalid arguments sent back as %q, want {}", sent.Function.Arguments)
						}
						tm := m[2+i]
						if tm.ToolCallID != sent.ID {
							t.Errorf("tool message %d answers %q, call id %q", i, tm.ToolCallID, sent.ID)
						}
						if !strings.HasPrefix(str(tm.Content), tt.answers[i]) {
							t.Errorf("tool message %d = %q, want prefix %q", i, str(tm.Content), tt.answers[i])
						}
					}
				}, streamText("done")))
			c := newCycle(t, srv, Config{})
			var turns []*TurnComplete
			for ev, err := range c.SubmitStreamWithTools(context.Background(), "go", newRegistry(t, wc, clock)) {
				if err != nil {
					t.Fatal(err)
				}
				if tc, ok := ev.(*TurnComplete); ok {
					turns = append(turns, tc)
				}
			}
			if len(turns) != 2 || turns[0].Reason != "tool_calls" || turns[0].Usage != tt.usage {
				t.Errorf("turns %+v %+v", turns[0], turns[len(turns)-1])
			}
			// What the history stores: the model's own arguments ("" as {}).
			stored := c.Messages()[1].ToolCalls
			for i, w := range tt.calls {
				if stored[i].Arguments != w.args {
					t.Errorf("stored arguments %q, want %q", stored[i].Arguments, w.args)
				}
			}
			wantExec := 0
			for _, w := range tt.calls {
				if json.Valid([]byte(w.args)) {
					wantExec++
				}
			}
			if len(executed) != wantExec {
				t.Errorf("tools executed with %q, want %d calls", executed, wantExec)
			}
		})
	}
}

func TestQuirkInvalidArgumentsMessage(t *testing.T) {
	srv := newServer(t, sseFile("invalid_arguments.sse"), expect(func(t testing.TB, got received) {
		c := str(got.Messages[2].Content)
		if !strings.Contains(c, `the arguments were: {"text": "unterminated`) {
			t.Errorf("tool message does not show the bad arguments: %q", c)
		}
	}, streamText("ok")))
	c := newCycle(t, srv, Config{})
	var kinds []registry.Kind
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "go", newRegistry(t, wordCount())) {
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := ev.(*ToolExecutionCompleted); ok {
			kinds = append(kinds, e.ErrorKind)
			if !e.IsError {
				t.Error("invalid arguments reported as success")
			}
			line, err := json.Marshal(e)
			if err != nil || !json.Valid(line) {
				t.Errorf("event JSON %s %v", line, err)
			}
		}
	}
	if !slices.Equal(kinds, []registry.Kind{registry.InvalidArguments}) {
		t.Errorf("kinds %v", kinds)
	}
}

func TestQuirkEmptyChoicesChunk(t *testing.T) {
	srv := newServer(t, sseFile("azure_empty_choices.sse"))
	c := newCycle(t, srv, Config{})
	var text strings.Builder
	var last *TurnComplete
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "hi", nil) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *TextDelta:
			text.WriteString(e.Text)
		case *TurnComplete:
			last = e
		}
	}
	if text.String() != "Hello there." || last == nil || last.Reason != "stop" || last.Usage != (Usage{PromptTokens: 11, CompletionTokens: 3, TotalTokens: 14}) {
		t.Errorf("text %q turn %+v", text.String(), last)
	}
	if c.Usage() != (Usage{PromptTokens: 11, CompletionTokens: 3, TotalTokens: 14}) {
		t.Errorf("usage %+v", c.Usage())
	}
}

func TestQuirkToolCallsFinishWithoutCalls(t *testing.T) {
	srv := newServer(t, sseFile("tool_calls_empty_list.sse"))
	c := newCycle(t, srv, Config{})
	var reasons []string
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "hi", newRegistry(t, wordCount())) {
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := ev.(*TurnComplete); ok {
			reasons = append(reasons, e.Reason)
		}
	}
	if !slices.Equal(reasons, []string{"stop"}) {
		t.Errorf("reasons %v", reasons)
	}
	if m := c.Messages(); len(m) != 2 || m[1].Content != "Nothing to do." || len(m[1].ToolCalls) != 0 {
		t.Errorf("history %+v", m)
	}
}

func TestQuirkGroqErrorEvent(t *testing.T) {
	srv := newServer(t, sseFile("groq_error_event.sse"))
	c := newCycle(t, srv, Config{})
	var err error
	for _, e := range c.SubmitStreamWithTools(context.Background(), "hi", newRegistry(t, wordCount())) {
		err = e
	}
	var api *APIError
	if !errors.As(err, &api) {
		t.Fatalf("err = %v", err)
	}
	if api.StatusCode != 0 || api.Code != "tool_use_failed" || !strings.HasPrefix(api.Message, "Failed to call a function.") {
		t.Errorf("api error %+v", api)
	}
	if KindOf(err) != KindProvider || !strings.Contains(err.Error(), "tool_use_failed") {
		t.Errorf("kind %q, message %q", KindOf(err), err)
	}
	// The failed reply left nothing half-done in the history.
	if m := c.Messages(); len(m) != 1 || m[0].Role != RoleUser {
		t.Errorf("history %+v", m)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("an error event was retried: %d requests", n)
	}
}

// Non-streamed replies have quirks too: no ids, no type, finish_reason
// "stop" with calls.
func TestQuirkJSONReplyWithoutIDsOrType(t *testing.T) {
	srv := newServer(t,
		step{Status: http.StatusOK, Body: `{"id":"x","object":"chat.completion","created":1,"model":"m",` +
			`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"","tool_calls":[` +
			`{"function":{"name":"word_count","arguments":"{\"text\":\"a\"}"}},` +
			`{"id":"","function":{"name":"word_count","arguments":"{\"text\":\"b c\"}"}}]}}]}`},
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if c := str(got.Messages[3].Content); c != `{"words":2}` {
				t.Errorf("second answer %q", c)
			}
		}, jsonReply("ok", "stop")),
	)
	c := newCycle(t, srv, Config{})
	if _, err := c.SubmitWithTools(context.Background(), "x", newRegistry(t, wordCount())); err != nil {
		t.Fatal(err)
	}
	ids := []string{c.Messages()[1].ToolCalls[0].ID, c.Messages()[1].ToolCalls[1].ID}
	if ids[0] != "call_1" || ids[1] != "call_2" {
		t.Errorf("synthesized ids %v", ids)
	}
}
