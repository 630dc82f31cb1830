package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestLoopAdapter: a run fed from the loop's events, messages and request
// infos has its spans under the run's, the tool's audit, the request's
// tokens; Finish sets the run's error kind; a direct call is traced
// alone.
func TestLoopAdapter(t *testing.T) {
	for _, capture := range []bool{false, true} {
		tel, rec, _ := record(t, Config{CaptureContent: capture})
		loopRun(tel)
		spans := rec.Ended()
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		if strings.Join(names, ",") != "chat m,execute_tool word_count,chat m,invoke_agent agrun" {
			t.Fatalf("capture %v: spans %v", capture, names)
		}
		run := spans[3]
		for _, s := range spans[:3] {
			if s.Parent().SpanID() != run.SpanContext().SpanID() {
				t.Errorf("%s is not under the run", s.Name())
			}
		}
		wantAttrs(t, spans[1], map[string]any{"agrun.sandbox.memory.peak": 2 << 20, "gen_ai.tool.call.id": "call_1"})
		wantAttrs(t, spans[0], map[string]any{"gen_ai.usage.input_tokens": 50, "openai.api.type": "chat_completions", "server.address": "api.openai.com"})
		wantAttrs(t, spans[2], map[string]any{"gen_ai.usage.output_tokens": 9})
		if _, ok := attrs(spans[2])["gen_ai.output.messages"]; ok != capture {
			t.Errorf("capture %v: output messages %v", capture, ok)
		}
	}

	tel, rec, _ := record(t, Config{})
	_, r := tel.StartRun(context.Background(), RunInfo{Session: "s", Provider: deepseek})
	r.LoopRequest(loop.RequestInfo{Model: "m", Duration: time.Millisecond, Error: "loop: 401 Unauthorized", ErrorKind: loop.KindProvider})
	r.Finish(errors.New("failed"))
	spans := rec.Ended()
	if len(spans) != 2 || attrs(spans[0])["error.type"].AsString() != string(loop.KindProvider) || attrs(spans[1])["error.type"].AsString() != "_OTHER" {
		t.Fatalf("failed run: %v", spans)
	}
	// A direct call (serve): its span under ctx, the policy's decision,
	// no agent.
	tel, rec, _ = record(t, Config{})
	tel.Call(context.Background(), time.Now(), []byte(`{}`), Tool{Name: "get_weather", ErrorKind: "permission_denied"})
	tel.Call(context.Background(), time.Now(), []byte(`{}`), Tool{Name: "nosuch", ErrorKind: "not_found"})
	spans = rec.Ended()
	if len(spans) != 2 || attrs(spans[0])["agrun.permission.decision"].AsString() != "denied" || attrs(spans[1])["agrun.permission.decision"].Type() != 0 {
		t.Fatalf("direct calls: %v %v", attrs(spans[0]), attrs(spans[1]))
	}
	noAttrs(t, spans[0], "gen_ai.tool.call.id", "gen_ai.agent.name")
	// Off: a nil Run takes every call.
	var off *Telemetry
	_, nr := off.StartRun(context.Background(), RunInfo{})
	nr.Event(&loop.TextDelta{Text: "x"})
	nr.Message(loop.Message{Role: loop.RoleUser})
	nr.LoopRequest(loop.RequestInfo{})
	nr.Finish(nil)
	off.Call(context.Background(), time.Now(), nil, Tool{Name: "x"})
}

// checkMessages fails unless raw is messages in the shape of the GenAI
// conventions' JSON schemas (gen-ai-input-messages.json,
// gen-ai-output-messages.json): an array of {"role", "parts"} (output
// messages with a "finish_reason"), each part a {"type"} with what its
// type requires: text and reasoning a string "content", tool_call a
// string "name" (an "id" string when set, any "arguments"),
// tool_call_response a "response" (an "id" string when set). It returns
// the messages.
func checkMessages(t *testing.T, raw string, output bool) []map[string]any {
	t.Helper()
	var msgs []map[string]any
	if err := json.Unmarshal([]byte(raw), &msgs); err != nil {
		t.Fatalf("not a JSON array of objects: %v: %s", err, raw)
	}
	for i, m := range msgs {
		role, ok := m["role"].(string)
		if !ok || !slices.Contains([]string{"system", "user", "assistant", "tool"}, role) {
			t.Errorf("message %d: role %v", i, m["role"])
		}
		if output {
			f, ok := m["finish_reason"].(string)
			if !ok || !slices.Contains([]string{"stop", "length", "content_filter", "tool_call", "error"}, f) {
				t.Errorf("message %d: finish_reason %v", i, m["finish_reason"])
			}
		}
		parts, ok := m["parts"].([]any)
		if !ok {
			t.Errorf("message %d: parts %v", i, m["parts"])
			continue
		}
		for j, p := range parts {
			p, _ := p.(map[string]any)
			str := func(k string, required bool) {
				v, ok := p[k]
				if _, isStr := v.(string); (required && !ok) || (ok && !isStr) {
					t.Errorf("message %d part %d (%v): %s %v", i, j, p["type"], k, v)
				}
			}
			switch p["type"] {
			case "text", "reasoning":
				str("content", true)
			case "tool_call":
				str("name", true)
				str("id", false)
			case "tool_call_response":
				if _, ok := p["response"]; !ok {
					t.Errorf("message %d part %d: tool_call_response without response: %v", i, j, p)
				}
				str("id", false)
			default:
				t.Errorf("message %d part %d: type %v", i, j, p["type"])
			}
		}
	}
	return msgs
}

// parts is message m's parts of the given type.
func parts(m map[string]any, typ string) []map[string]any {
	var out []map[string]any
	ps, _ := m["parts"].([]any)
	for _, p := range ps {
		if p, _ := p.(map[string]any); p["type"] == typ {
			out = append(out, p)
		}
	}
	return out
}

// TestCaptureContent: with the opt-in, each request's input is the whole
// conversation in the conventions' role/parts shape (a resumed session's
// history first, the prompt, the tool call with its arguments as JSON,
// the tool's response), its output the reply (reasoning as streamed,
// text, tool calls, finish_reason), the system prompt and the tools as
// gen_ai.system_instructions and gen_ai.tool.definitions; everything
// cleaned; tool arguments and results as JSON; a schema re-ask's reason.
func TestCaptureContent(t *testing.T) {
	tel, rec, _ := record(t, Config{CaptureContent: true})
	info := runInfo()
	info.History = []loop.Message{{Role: loop.RoleUser, Content: "earlier question"}, {Role: loop.RoleAssistant, Content: "earlier answer"}}
	aRun(tel, info, errors.New("boom"))
	spans := rec.Ended()
	chats := byName(spans)["chat m1"]
	if len(chats) != 3 {
		t.Fatalf("%d chat spans", len(chats))
	}
	a := attrs(chats[0])
	in := checkMessages(t, a["gen_ai.input.messages"].AsString(), false)
	if len(in) != 3 || in[0]["role"] != "user" || parts(in[0], "text")[0]["content"] != "earlier question" || in[1]["role"] != "assistant" ||
		in[2]["role"] != "user" || parts(in[2], "text")[0]["content"] != "count: secret words [31m" {
		t.Errorf("first input %s", a["gen_ai.input.messages"].AsString())
	}
	out := checkMessages(t, a["gen_ai.output.messages"].AsString(), true)
	if len(out) != 1 || out[0]["role"] != "assistant" || out[0]["finish_reason"] != "tool_call" ||
		len(parts(out[0], "reasoning")) != 1 || parts(out[0], "reasoning")[0]["content"] != "Counting needs the tool." ||
		len(parts(out[0], "tool_call")) != 1 || parts(out[0], "tool_call")[0]["id"] != "call_1" || parts(out[0], "tool_call")[0]["name"] != "word_count" ||
		fmt.Sprint(parts(out[0], "tool_call")[0]["arguments"]) != "map[text:secret words]" {
		t.Errorf("first output %s", a["gen_ai.output.messages"].AsString())
	}
	var sys []map[string]any
	if err := json.Unmarshal([]byte(a["gen_ai.system_instructions"].AsString()), &sys); err != nil || len(sys) != 1 || sys[0]["type"] != "text" || sys[0]["content"] != "Be brief." {
		t.Errorf("system instructions %s", a["gen_ai.system_instructions"].AsString())
	}
	var tools []map[string]any
	if err := json.Unmarshal([]byte(a["gen_ai.tool.definitions"].AsString()), &tools); err != nil || len(tools) != 1 || tools[0]["type"] != "function" ||
		tools[0]["name"] != "word_count" || tools[0]["description"] != wordCount.Description || tools[0]["parameters"].(map[string]any)["type"] != "object" {
		t.Errorf("tool definitions %s", a["gen_ai.tool.definitions"].AsString())
	}

	// The third request's input is the whole conversation again, with the
	// tool call and its response; its output the streamed text.
	a = attrs(chats[2])
	in = checkMessages(t, a["gen_ai.input.messages"].AsString(), false)
	if len(in) != 5 || in[3]["role"] != "assistant" || len(parts(in[3], "tool_call")) != 1 || in[4]["role"] != "tool" ||
		parts(in[4], "tool_call_response")[0]["id"] != "call_1" || fmt.Sprint(parts(in[4], "tool_call_response")[0]["response"]) != "map[words:2]" {
		t.Errorf("third input %s", a["gen_ai.input.messages"].AsString())
	}
	out = checkMessages(t, a["gen_ai.output.messages"].AsString(), true)
	if len(out) != 1 || out[0]["finish_reason"] != "stop" || parts(out[0], "text")[0]["content"] != "Two words." || len(parts(out[0], "reasoning")) != 0 {
		t.Errorf("third output %s", a["gen_ai.output.messages"].AsString())
	}
	if failed := attrs(chats[1]); failed["gen_ai.input.messages"].AsString() != a["gen_ai.input.messages"].AsString() {
		t.Errorf("the refused request's input %s", failed["gen_ai.input.messages"].AsString())
	}
	for _, s := range spans {
		for k, v := range attrs(s) {
			if strings.ContainsRune(v.String(), 0x1b) {
				t.Errorf("%s: %s not cleaned", s.Name(), k)
			}
		}
	}
	tool := attrs(byName(spans)["execute_tool word_count"][0])
	if tool["gen_ai.tool.call.arguments"].AsString() != `{"text":"secret words"}` || tool["gen_ai.tool.call.result"].AsString() != `{"words":2}` {
		t.Errorf("tool content %v", tool)
	}
	root := spans[len(spans)-1]
	if root.Status().Code.String() != "Error" || attrs(root)["error.type"].AsString() != "_OTHER" {
		t.Errorf("run status %v", root.Status())
	}

	// Resume gives the history once the run has started; a schema re-ask
	// says why.
	tel, rec, _ = record(t, Config{CaptureContent: true})
	_, r := tel.StartRun(context.Background(), runInfo())
	r.Resume([]loop.Message{{Role: loop.RoleUser, Content: "before"}, {Role: loop.RoleAssistant, Content: "cut off", Interrupted: true}})
	r.Message(loop.Message{Role: loop.RoleUser, Content: "now"})
	r.LoopRequest(loop.RequestInfo{Duration: time.Millisecond, FinishReason: "stop"})
	r.Event(&loop.TurnComplete{Reason: "stop"}) // no message came: the span is made anyway
	r.Event(&loop.StructuredOutput{Error: "not JSON", Retry: true})
	r.Finish(nil)
	spans = rec.Ended()
	in = checkMessages(t, attrs(spans[0])["gen_ai.input.messages"].AsString(), false)
	if len(in) != 3 || parts(in[0], "text")[0]["content"] != "before" || parts(in[1], "text")[0]["content"] != "cut off [interrupted by the user]" {
		t.Errorf("resumed input %v", in)
	}
	checkMessages(t, attrs(spans[0])["gen_ai.output.messages"].AsString(), true)
	if e, ok := event(spans[1], "agrun.schema_retry"); !ok || len(e.Attributes) != 1 || e.Attributes[0].Value.AsString() != "not JSON" {
		t.Errorf("schema retry event %+v", e)
	}
}

// TestCaptureBounds: captured content is valid JSON of at most
// MaxContent bytes whatever the conversation: the oldest messages are
// dropped (and counted), long texts cut, arguments and results too long
// for their JSON recorded as cut strings, a message of very many tool
// calls cut to a note, the tool definitions shortened.
func TestCaptureBounds(t *testing.T) {
	tel, rec, _ := record(t, Config{CaptureContent: true})
	var defs []registry.Definition
	for i := range 200 {
		defs = append(defs, registry.Definition{Name: fmt.Sprintf("tool_%d", i), Description: strings.Repeat("d", 500), Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	info := runInfo()
	info.Tools, info.System = defs, strings.Repeat("s", 3*MaxContent)
	for i := range 40 {
		info.History = append(info.History, loop.Message{Role: loop.RoleUser, Content: fmt.Sprintf("old %d %s", i, strings.Repeat("x", 1000))})
	}
	_, r := tel.StartRun(context.Background(), info)
	r.Message(loop.Message{Role: loop.RoleUser, Content: "latest " + strings.Repeat("é", 3*MaxContent)})
	r.Event(&loop.TextDelta{Text: strings.Repeat("\"quoted\" ", MaxContent)})
	r.LoopRequest(loop.RequestInfo{Duration: time.Millisecond, FinishReason: "tool_calls"})
	var calls []loop.ToolCall
	for i := range 300 {
		calls = append(calls, loop.ToolCall{ID: fmt.Sprintf("call_%d_%s", i, strings.Repeat("i", 100)), Name: strings.Repeat("n", 100), Arguments: `{"a":"` + strings.Repeat("v", 200) + `"}`})
	}
	r.Message(loop.Message{Role: loop.RoleAssistant, Content: strings.Repeat("<&>", MaxContent), ToolCalls: calls})
	big := `{"text":"` + strings.Repeat("w", 2*MaxContent) + `"}`
	r.ToolStarted("call_0", "word_count", []byte(big))
	r.ToolCompleted(Tool{ID: "call_0", Name: "word_count", Output: []byte(big)})
	r.LoopRequest(loop.RequestInfo{Duration: time.Millisecond, FinishReason: "stop"})
	r.Finish(nil)
	spans := rec.Ended()
	for _, s := range spans {
		for k, v := range attrs(s) {
			if !strings.HasPrefix(string(k), "gen_ai.") || v.Type().String() != "STRING" || !strings.ContainsAny(v.AsString()[:1], "[{\"") {
				continue
			}
			if len(v.AsString()) > MaxContent || !json.Valid([]byte(v.AsString())) {
				t.Errorf("%s: %s is %d bytes, valid JSON %v", s.Name(), k, len(v.AsString()), json.Valid([]byte(v.AsString())))
			}
		}
	}
	first := attrs(spans[0])
	in := checkMessages(t, first["gen_ai.input.messages"].AsString(), false)
	latest := parts(in[len(in)-1], "text")[0]["content"].(string)
	if dropped := first["agrun.input.messages.dropped"].AsInt64(); dropped == 0 || int(dropped)+len(in) != 41 || !strings.HasPrefix(latest, "latest ") || len(latest) > MaxPartContent {
		t.Errorf("input: %d messages, %d dropped, the latest %d bytes", len(in), dropped, len(latest))
	}
	if !strings.Contains(in[0]["parts"].([]any)[0].(map[string]any)["content"].(string), fmt.Sprintf("old %d ", 41-len(in))) {
		t.Errorf("the oldest kept is not the one after the dropped ones: %v", in[0])
	}
	out := checkMessages(t, first["gen_ai.output.messages"].AsString(), true)
	if ps := out[0]["parts"].([]any); len(ps) == 0 || len(ps) > 301 || !strings.Contains(fmt.Sprint(ps[len(ps)-1]), "more parts not recorded") {
		t.Errorf("output of 300 calls: %d parts", len(ps))
	}
	var tools []map[string]any
	json.Unmarshal([]byte(first["gen_ai.tool.definitions"].AsString()), &tools)
	if len(tools) == 0 || tools[0]["type"] != "function" || tools[0]["name"] != "tool_0" {
		t.Errorf("tool definitions %v", tools)
	}
	var tool sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "execute_tool word_count" {
			tool = s
		}
	}
	var args string
	if err := json.Unmarshal([]byte(attrs(tool)["gen_ai.tool.call.arguments"].AsString()), &args); err != nil || !strings.HasPrefix(args, `{"text":"www`) {
		t.Errorf("cut arguments: %v %.40q", err, args)
	}
}
