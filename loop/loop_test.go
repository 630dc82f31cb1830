package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agcore/agrun/registry"
)

func TestOneToolCallThenAnswer(t *testing.T) {
	srv := newServer(t,
		expect(func(t testing.TB, got received) {
			if got.Model != "test-model" || got.Stream {
				t.Errorf("model %q stream %v", got.Model, got.Stream)
			}
			if h := got.Header.Get("Authorization"); h != "Bearer sk-test" {
				t.Errorf("authorization %q", h)
			}
			if roles(got.Messages) != "system,user" || str(got.Messages[0].Content) != "Be brief." ||
				str(got.Messages[1].Content) != "count: a b c" {
				t.Errorf("messages %s", got.Raw)
			}
			if len(got.Tools) != 1 {
				t.Errorf("tools %s", got.Raw)
				return
			}
			tl := got.Tools[0]
			if tl.Type != "function" || tl.Function.Name != "word_count" || tl.Function.Description != "Count the words of a text" {
				t.Errorf("tool %+v", tl)
			}
			var schema map[string]any
			_ = json.Unmarshal(tl.Function.Parameters, &schema)
			if schema["type"] != "object" || schema["required"] == nil {
				t.Errorf("parameters %s", tl.Function.Parameters)
			}
			if got.ParallelToolCalls != nil || got.Temperature != nil {
				t.Errorf("unset options were sent: %s", got.Raw)
			}
		}, jsonReply("", "tool_calls", call("call_abc", "word_count", `{"text":"a b c"}`))),
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if roles(got.Messages) != "system,user,assistant,tool" {
				t.Errorf("roles %s", roles(got.Messages))
				return
			}
			a := got.Messages[2]
			if len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "call_abc" || a.ToolCalls[0].Function.Name != "word_count" ||
				a.ToolCalls[0].Function.Arguments != `{"text":"a b c"}` {
				t.Errorf("assistant %+v", a)
			}
			tm := got.Messages[3]
			if tm.ToolCallID != "call_abc" || str(tm.Content) != `{"words":3}` {
				t.Errorf("tool message %+v %s", tm, str(tm.Content))
			}
		}, jsonReply("There are 3 words.", "stop")),
	)
	var seen []Message
	c := newCycle(t, srv, Config{System: "Be brief.", Hooks: Hooks{OnMessage: func(m Message) { seen = append(seen, m) }}})
	resp, err := c.SubmitWithTools(context.Background(), "count: a b c", newRegistry(t, wordCount()))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "There are 3 words." || resp.Turns != 2 || resp.FinishReason != "stop" {
		t.Errorf("response %+v", resp)
	}
	if resp.Usage != (Usage{PromptTokens: 20, CompletionTokens: 10, TotalTokens: 30}) || c.Usage() != resp.Usage {
		t.Errorf("usage %+v / %+v", resp.Usage, c.Usage())
	}
	want := []Message{
		{Role: RoleUser, Content: "count: a b c"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_abc", Name: "word_count", Arguments: `{"text":"a b c"}`}}},
		{Role: RoleTool, ToolCallID: "call_abc", Name: "word_count", Content: `{"words":3}`},
		{Role: RoleAssistant, Content: "There are 3 words."},
	}
	if !equalMessages(c.Messages(), want) || !equalMessages(seen, want) {
		t.Errorf("history\n got %+v\n hook %+v\nwant %+v", c.Messages(), seen, want)
	}
}

func equalMessages(a, b []Message) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Two rounds of tools, streamed: events come in the documented order and
// the second request carries the whole trail.
func TestStreamTwoRoundsEventOrder(t *testing.T) {
	var rec recorder
	srv := newServer(t,
		expect(func(t testing.TB, got received) {
			if !got.Stream || got.StreamOptions == nil || !got.StreamOptions.IncludeUsage {
				t.Errorf("stream options %s", got.Raw)
			}
		}, sseFile("openai_parallel.sse")),
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if roles(got.Messages) != "user,assistant,tool,tool" {
				t.Errorf("roles %s", roles(got.Messages))
			}
			ids := []string{got.Messages[2].ToolCallID, got.Messages[3].ToolCallID}
			if ids[0] != "call_Q1" || ids[1] != "call_Q2" {
				t.Errorf("tool_call_ids %v", ids)
			}
		}, sseChunks(textChunk("Checking "), callChunk(0, "call_R1", "lookup", `{"q":"third"}`), toolCallsFinishChunk)),
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if roles(got.Messages) != "user,assistant,tool,tool,assistant,tool" {
				t.Errorf("roles %s", roles(got.Messages))
			}
			if str(got.Messages[4].Content) != "Checking " {
				t.Errorf("assistant text %q", str(got.Messages[4].Content))
			}
		}, streamText("All ", "done.")),
	)
	c := newCycle(t, srv, Config{})
	reg := newRegistry(t, rec.tool("weather"), rec.tool("lookup"))
	var trace []string
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "go", reg) {
		if err != nil {
			t.Fatal(err)
		}
		trace = append(trace, describe(ev))
	}
	want := []string{
		"turn_complete tool_calls 149/60",
		"started call_Q1 weather {\"city\": \"Edinburgh\",\"country\":\"UK\"}",
		"started call_Q2 weather {\"city\":\"New York\",\"country\":\"US\"}",
		"completed call_Q1 weather ok",
		"completed call_Q2 weather ok",
		"text Checking ",
		"turn_complete tool_calls 0/0",
		"started call_R1 lookup {\"q\":\"third\"}",
		"completed call_R1 lookup ok",
		"text All ",
		"text done.",
		"turn_complete stop 0/0",
	}
	// The two calls of the first turn run in parallel and each completion
	// is emitted as it happens: either may come first.
	if len(trace) > 4 && trace[3] == want[4] && trace[4] == want[3] {
		trace[3], trace[4] = trace[4], trace[3]
	}
	if strings.Join(trace, "\n") != strings.Join(want, "\n") {
		t.Errorf("events\n%s\nwant\n%s", strings.Join(trace, "\n"), strings.Join(want, "\n"))
	}
	if len(rec.got()) != 3 {
		t.Errorf("tool calls %v", rec.got())
	}
	msgs := c.Messages()
	if len(msgs) != 7 || msgs[6].Content != "All done." {
		t.Errorf("history %+v", msgs)
	}
}

func describe(ev Event) string {
	switch e := ev.(type) {
	case *TextDelta:
		return "text " + e.Text
	case *ToolExecutionStarted:
		return fmt.Sprintf("started %s %s %s", e.ID, e.Name, e.Input)
	case *ToolExecutionCompleted:
		if e.IsError {
			return fmt.Sprintf("completed %s %s error %s %s", e.ID, e.Name, e.ErrorKind, e.Output)
		}
		return fmt.Sprintf("completed %s %s ok", e.ID, e.Name)
	case *TurnComplete:
		return fmt.Sprintf("turn_complete %s %d/%d", e.Reason, e.Usage.PromptTokens, e.Usage.CompletionTokens)
	}
	return fmt.Sprintf("unknown %T", ev)
}

func TestMaxTurnsKeepsHistory(t *testing.T) {
	var steps []step
	for i := range 3 {
		steps = append(steps, jsonReply("", "tool_calls", call(fmt.Sprintf("call_%d", i), "step", fmt.Sprintf(`{"n":%d}`, i))))
	}
	srv := newServer(t, steps...)
	var rec recorder
	c := newCycle(t, srv, Config{Limits: Limits{MaxTurns: 3}})
	_, err := c.SubmitWithTools(context.Background(), "loop forever", newRegistry(t, rec.tool("step")))
	if !errors.Is(err, ErrMaxTurns) || KindOf(err) != KindMaxTurns {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("requests = %d", n)
	}
	msgs := c.Messages()
	if len(msgs) != 7 || msgs[6].Role != RoleTool || msgs[6].ToolCallID != "call_2" || msgs[6].Content != `{"ok":3}` {
		t.Errorf("history %+v", msgs)
	}
	if len(rec.got()) != 3 {
		t.Errorf("tool calls %v", rec.got())
	}
}

func TestToolErrorsGoBackToModel(t *testing.T) {
	failing := &funcTool{name: "fails", desc: "always fails", fn: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
		return nil, registry.Errorf(registry.ExecutionFailed, "fails", "disk on fire")
	}}
	srv := newServer(t,
		jsonReply("", "tool_calls",
			call("c1", "fails", `{}`),
			call("c2", "nope", `{}`),
			call("c3", "word_count", `{"txt":"x"}`),
			call("c4", "word_count", `{"text":"one two"}`)),
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			m := got.Messages
			want := []string{
				`error (execution_failed): disk on fire`,
				`error (not_found): no tool named "nope"`,
				`error (invalid_arguments): `,
				`{"words":2}`,
			}
			for i, w := range want {
				if c := str(m[2+i].Content); !strings.HasPrefix(c, w) {
					t.Errorf("tool message %d = %q, want prefix %q", i, c, w)
				}
			}
		}, jsonReply("Sorry.", "stop")),
	)
	c := newCycle(t, srv, Config{})
	resp, err := c.SubmitWithTools(context.Background(), "x", newRegistry(t, failing, wordCount()))
	if err != nil || resp.Text != "Sorry." {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}

func TestSubmitWithoutTools(t *testing.T) {
	temp := 0.25
	par := true
	srv := newServer(t,
		expect(func(t testing.TB, got received) {
			if strings.Contains(string(got.Raw), `"tools"`) || strings.Contains(string(got.Raw), "parallel_tool_calls") {
				t.Errorf("tools sent by Submit: %s", got.Raw)
			}
			if got.Temperature == nil || *got.Temperature != 0.25 {
				t.Errorf("temperature %s", got.Raw)
			}
		}, jsonReply("Hi!", "stop")),
		// A model that asks for a tool without tools gets not_found, and
		// the history stays valid.
		jsonReply("", "stop", call("x1", "ghost", `{}`)),
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if c := str(got.Messages[4].Content); !strings.HasPrefix(c, "error (not_found): ") {
				t.Errorf("tool message %q", c)
			}
		}, jsonReply("ok", "stop")),
	)
	c := newCycleWith(t, srv, TestProviderConfig{Temperature: &temp, ParallelToolCalls: &par}, Config{})
	resp, err := c.Submit(context.Background(), "hello")
	if err != nil || resp.Text != "Hi!" || resp.Turns != 1 {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	resp, err = c.Submit(context.Background(), "use ghost")
	if err != nil || resp.Text != "ok" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}

func TestParallelToolCallsSent(t *testing.T) {
	par := false
	srv := newServer(t, expect(func(t testing.TB, got received) {
		if got.ParallelToolCalls == nil || *got.ParallelToolCalls {
			t.Errorf("parallel_tool_calls %s", got.Raw)
		}
	}, jsonReply("ok", "stop")))
	c := newCycleWith(t, srv, TestProviderConfig{ParallelToolCalls: &par}, Config{})
	if _, err := c.SubmitWithTools(context.Background(), "x", newRegistry(t, wordCount())); err != nil {
		t.Fatal(err)
	}
}

func TestMaxToolCallsPerTurn(t *testing.T) {
	var rec recorder
	srv := newServer(t,
		jsonReply("", "tool_calls", call("a", "t", `{"i":1}`), call("b", "t", `{"i":2}`), call("c", "t", `{"i":3}`)),
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if c := str(got.Messages[4].Content); !strings.HasPrefix(c, "error (other): not run: more than 2 tool calls") {
				t.Errorf("third call answered %q", c)
			}
		}, jsonReply("ok", "stop")),
	)
	c := newCycle(t, srv, Config{Limits: Limits{MaxToolCallsPerTurn: 2}})
	if _, err := c.SubmitWithTools(context.Background(), "x", newRegistry(t, rec.tool("t"))); err != nil {
		t.Fatal(err)
	}
	if got := rec.got(); len(got) != 2 {
		t.Errorf("ran %v", got)
	}
}

// Run is the one entry: a prompt, decisions or results, one at a time;
// Whole asks for whole replies (no deltas), the events otherwise the same.
func TestRunTurns(t *testing.T) {
	c := newCycle(t, newServer(t), Config{})
	for _, bad := range []Turn{
		{Prompt: "x", Decisions: map[string]Decision{}},
		{Prompt: "x", Results: map[string]registry.Invocation{}},
		{Decisions: map[string]Decision{}, Results: map[string]registry.Invocation{}},
		{Results: nil, AnswerOnly: true},
	} {
		for _, err := range c.Run(context.Background(), bad) {
			if !errors.Is(err, ErrBadTurn) {
				t.Errorf("%+v: %v", bad, err)
			}
		}
	}
	for _, err := range c.Run(context.Background(), Turn{}) {
		if !errors.Is(err, ErrNothingPending) {
			t.Errorf("nothing waiting: %v", err)
		}
	}
	srv := newServer(t, jsonReply("whole answer", "stop"))
	c = newCycle(t, srv, Config{})
	var types []string
	for ev, err := range c.Run(context.Background(), Turn{Prompt: "hi", Whole: true}) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.EventType())
	}
	if strings.Join(types, ",") != "turn_complete" || srv.Requests()[0].Stream {
		t.Errorf("events %v, streamed %v", types, srv.Requests()[0].Stream)
	}
	if m := c.Messages(); m[len(m)-1].Content != "whole answer" {
		t.Errorf("history %+v", m)
	}
}
