package responsestest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

func client(s *Server) *responses.ResponseService {
	c := responses.NewResponseService(option.WithBaseURL(s.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
	return &c
}

var wordCount = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name:       "word_count",
	Parameters: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}},
	Strict:     openai.Bool(false),
}}

func input(items ...responses.ResponseInputItemUnionParam) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfInputItemList: items}
}

func user(text string) responses.ResponseInputItemUnionParam {
	return responses.ResponseInputItemParamOfMessage(text, responses.EasyInputMessageRoleUser)
}

func callOutput(callID, out string) responses.ResponseInputItemUnionParam {
	p := responses.ResponseInputItemParamOfFunctionCallOutput(out)
	p.OfFunctionCallOutput.CallID = openai.String(callID)
	return p
}

// asInput is an output item as the next request's input item.
func asInput(t *testing.T, it responses.ResponseOutputItemUnion) responses.ResponseInputItemUnionParam {
	t.Helper()
	switch it.Type {
	case "reasoning":
		p := it.AsReasoning().ToParam()
		return responses.ResponseInputItemUnionParam{OfReasoning: &p}
	case "function_call":
		p := it.AsFunctionCall().ToParam()
		return responses.ResponseInputItemUnionParam{OfFunctionCall: &p}
	case "message":
		p := it.AsMessage().ToParam()
		return responses.ResponseInputItemUnionParam{OfOutputMessage: &p}
	}
	t.Fatalf("output item of type %q", it.Type)
	return responses.ResponseInputItemUnionParam{}
}

func apiError(t *testing.T, err error, status int, code string) *openai.Error {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want an *openai.Error", err, err)
	}
	if e.StatusCode != status || e.Code != code {
		t.Fatalf("error %d %q, want %d %q: %s", e.StatusCode, e.Code, status, code, e.RawJSON())
	}
	return e
}

func TestStreamedThroughSDK(t *testing.T) {
	s := New(t, Reply{
		Reasoning: "Count the words, then answer.",
		Text:      "Let me count — that's 3.",
		ToolCalls: []Call{{Name: "word_count", Args: `{"text":"a b c"}`}},
		Usage:     &Usage{InputTokens: 20, OutputTokens: 7, CachedTokens: 3, ReasoningTokens: 4},
	})
	stream := client(s).NewStreaming(context.Background(), responses.ResponseNewParams{
		Model:        "gpt-5",
		Instructions: openai.String("Be brief."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("How many words in 'a b c'?")},
		Tools:        []responses.ToolUnionParam{wordCount},
		Store:        openai.Bool(false),
		Include:      []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
		Reasoning:    shared.ReasoningParam{Summary: shared.ReasoningSummaryAuto},
	})
	var types []string
	var text, summary, args strings.Builder
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		if int(ev.SequenceNumber) != len(types) {
			t.Errorf("event %d (%s) has sequence_number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.reasoning_summary_text.delta":
			summary.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.completed":
			final = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.reasoning_summary_part.added",
		"response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(types, "\n"), strings.Join(want, "\n"))
	}
	if text.String() != "Let me count — that's 3." || summary.String() != "Count the words, then answer." || args.String() != `{"text":"a b c"}` {
		t.Errorf("text %q, summary %q, args %q", text.String(), summary.String(), args.String())
	}
	if final.Status != "completed" || !strings.HasPrefix(final.ID, "resp_") || len(final.Output) != 3 {
		t.Fatalf("completed response: %s", final.RawJSON())
	}
	rs, msg, fc := final.Output[0].AsReasoning(), final.Output[1].AsMessage(), final.Output[2].AsFunctionCall()
	if !strings.HasPrefix(rs.ID, "rs_") || !strings.HasPrefix(rs.EncryptedContent, "gAAAAA") || len(rs.Summary) != 1 || rs.Summary[0].Text != "Count the words, then answer." {
		t.Errorf("reasoning item %s", rs.RawJSON())
	}
	if !strings.HasPrefix(msg.ID, "msg_") || msg.Content[0].Text != "Let me count — that's 3." || final.OutputText() != "Let me count — that's 3." {
		t.Errorf("message item %s", msg.RawJSON())
	}
	if !strings.HasPrefix(fc.ID, "fc_") || !strings.HasPrefix(fc.CallID, "call_") || fc.Name != "word_count" || fc.Arguments != `{"text":"a b c"}` {
		t.Errorf("function call item %s", fc.RawJSON())
	}
	u := final.Usage
	if u.InputTokens != 20 || u.OutputTokens != 7 || u.TotalTokens != 27 || u.InputTokensDetails.CachedTokens != 3 || u.OutputTokensDetails.ReasoningTokens != 4 {
		t.Errorf("usage %s", u.RawJSON())
	}
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Model != "gpt-5" || !r.Stream || r.Store == nil || *r.Store || r.Include[0] != "reasoning.encrypted_content" ||
		r.Instructions != "Be brief." || r.Tools[0].Name != "word_count" || r.Tools[0].Type != "function" || r.Tools[0].Parameters == nil ||
		len(r.Input) != 1 || r.Input[0].Role != "user" || r.Input[0].Type != "message" || r.Auth != "Bearer k" {
		t.Errorf("request %+v", r)
	}
}

func TestNoEncryptedContentWithoutInclude(t *testing.T) {
	s := New(t, Reply{Reasoning: "think", Text: "hi"})
	res, err := client(s).New(context.Background(), responses.ResponseNewParams{
		Model: "gpt-5", Input: input(user("hi")), Store: openai.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if rs := res.Output[0].AsReasoning(); rs.Type != "reasoning" || rs.EncryptedContent != "" || rs.JSON.EncryptedContent.Valid() {
		t.Errorf("reasoning item %s", rs.RawJSON())
	}
}

// Non-streamed, and stored (store left out): previous_response_id
// continues it, with the function call's output.
func TestNonStreamedAndPreviousResponse(t *testing.T) {
	s := New(t,
		Reply{Reasoning: "Use the tool.", ToolCalls: []Call{{ID: "call_1", Name: "word_count", Args: `{"text":"a b"}`}}},
		Reply{Text: "There are 2 words.", Status: "incomplete"},
	)
	c := client(s)
	ctx := context.Background()
	first, err := c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(user("count a b")), Tools: []responses.ToolUnionParam{wordCount}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != "completed" || len(first.Output) != 2 || first.Output[1].CallID != "call_1" || first.Usage.TotalTokens != 15 ||
		first.Usage.InputTokens != 10 || first.Usage.OutputTokens != 5 {
		t.Fatalf("first response %s", first.RawJSON())
	}
	// Without the call's output, the stored conversation has an unanswered call.
	_, err = c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", PreviousResponseID: openai.String(first.ID), Input: input(user("well?"))})
	if e := apiError(t, err, 400, ""); e.Message != "No tool output found for function call call_1." || e.Param != "input" {
		t.Errorf("%s", e.RawJSON())
	}
	second, err := c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", PreviousResponseID: openai.String(first.ID),
		Input: input(callOutput("call_1", "2"))})
	if err != nil {
		t.Fatal(err)
	}
	if second.OutputText() != "There are 2 words." || second.Status != "incomplete" || second.IncompleteDetails.Reason != "max_output_tokens" ||
		second.PreviousResponseID != first.ID {
		t.Errorf("second response %s", second.RawJSON())
	}
	if r := s.Requests()[2]; r.PreviousResponseID != first.ID || r.Input[0].Type != "function_call_output" || r.Input[0].CallID != "call_1" || r.Input[0].Output != "2" {
		t.Errorf("request %+v", r)
	}
}

func TestPreviousResponseNotStored(t *testing.T) {
	s := New(t, Reply{Text: "a"}, Reply{Text: "b"})
	c := client(s)
	ctx := context.Background()
	first, err := c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(user("x")), Store: openai.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(user("y")), PreviousResponseID: openai.String(first.ID)})
	e := apiError(t, err, 400, "previous_response_not_found")
	if e.Message != "Previous response with id '"+first.ID+"' not found." || e.Param != "previous_response_id" || e.Type != "invalid_request_error" {
		t.Errorf("%s", e.RawJSON())
	}
	// The refused request used no reply.
	if res, err := c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(user("y"))}); err != nil || res.OutputText() != "b" {
		t.Errorf("%v %v", res, err)
	}
}

// The stateless round trip: store false, the reasoning item sent back with
// its encrypted_content, then the function call and its output.
func TestStatelessRoundTrip(t *testing.T) {
	s := New(t,
		Reply{Reasoning: "I need the tool.", ToolCalls: []Call{{Name: "word_count", Args: `{"text":"a b"}`}}},
		Reply{Text: "2 words.", Check: func(t testing.TB, got Request) {
			if len(got.Input) != 4 || got.Input[1].Type != "reasoning" || got.Input[1].EncryptedContent == "" ||
				got.Input[2].Type != "function_call" || got.Input[3].Type != "function_call_output" || got.Input[3].CallID != got.Input[2].CallID {
				t.Errorf("input %+v", got.Input)
			}
		}},
	)
	c := client(s)
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "gpt-5", Store: openai.Bool(false), Tools: []responses.ToolUnionParam{wordCount},
		Include: []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}}
	params.Input = input(user("count a b"))
	first, err := c.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	rs, fc := first.Output[0], first.Output[1]
	if rs.EncryptedContent == "" || fc.CallID == "" {
		t.Fatalf("first response %s", first.RawJSON())
	}
	raw := func(v any) map[string]any { // an item as JSON, to change it
		b, _ := json.Marshal(v)
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}
	rsJSON, fcJSON := raw(asInput(t, rs)), raw(asInput(t, fc))
	out := map[string]any{"type": "function_call_output", "call_id": fc.CallID, "output": "2"}
	usr := map[string]any{"role": "user", "content": "count a b"}
	body := func(store bool, items ...map[string]any) string {
		b, _ := json.Marshal(map[string]any{"model": "gpt-5", "store": store, "input": items})
		return string(b)
	}
	with := func(m map[string]any, k string, v any) map[string]any {
		c := map[string]any{}
		for kk, vv := range m {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	for _, tc := range []struct {
		name, body string
		code, msg  string
	}{
		{"reasoning without encrypted_content", body(false, usr, with(rsJSON, "encrypted_content", nil), fcJSON, out),
			"", "Item with id '" + rs.ID + "' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."},
		{"changed encrypted_content", body(false, usr, with(rsJSON, "encrypted_content", rs.EncryptedContent[:len(rs.EncryptedContent)-4]+"AAA="), fcJSON, out),
			"invalid_encrypted_content", "could not be verified"},
		{"encrypted_content of another id", body(false, usr, with(rsJSON, "id", "rs_other"), fcJSON, out),
			"invalid_encrypted_content", "could not be verified"},
		{"reasoning without its following item", body(false, usr, rsJSON, with(fcJSON, "id", nil), out),
			"", "Item '" + rs.ID + "' of type 'reasoning' was provided without its required following item."},
		{"reasoning last", body(false, usr, rsJSON),
			"", "Item '" + rs.ID + "' of type 'reasoning' was provided without its required following item."},
		{"function call without its reasoning", body(false, usr, fcJSON, out),
			"", "Item '" + fc.ID + "' of type 'function_call' was provided without its required 'reasoning' item: '" + rs.ID + "'."},
		{"output without its call", body(false, usr, out),
			"", "No tool call found for function call output with call_id " + fc.CallID + "."},
		{"the server's call item with another call_id", body(false, usr, rsJSON, with(fcJSON, "call_id", "call_made_up"), with(out, "call_id", "call_made_up")),
			"", "No tool call found for function call output with call_id call_made_up."},
		{"call without its output", body(false, usr, rsJSON, fcJSON),
			"", "No tool output found for function call " + fc.CallID + "."},
		{"the same item twice", body(false, usr, rsJSON, fcJSON, fcJSON, out),
			"", "Duplicate item found with id " + fc.ID + "."},
	} {
		code, got := post(t, s, tc.body)
		e := decodeErr(t, got)
		if code != 400 || e.Type != "invalid_request_error" || strOf(e.Code) != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: %d %s", tc.name, code, got)
		}
	}
	// The well-formed round trip, through the SDK.
	params.Input = input(user("count a b"), asInput(t, rs), asInput(t, fc), callOutput(fc.CallID, "2"))
	second, err := c.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if second.OutputText() != "2 words." {
		t.Errorf("second response %s", second.RawJSON())
	}
	if n := len(s.Requests()); n != 12 {
		t.Errorf("%d requests recorded", n)
	}
}

// With store true, output items may come back by id alone.
func TestStoredItemsByID(t *testing.T) {
	s := New(t, Reply{Reasoning: "think", Text: "hello"}, Reply{Text: "again"}, Reply{Text: "third"})
	c := client(s)
	ctx := context.Background()
	first, err := c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(user("hi"))})
	if err != nil {
		t.Fatal(err)
	}
	rs, msg := first.Output[0], first.Output[1]
	summary := []responses.ResponseReasoningItemSummaryParam{{Text: "think"}}
	_, err = c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(user("hi"),
		responses.ResponseInputItemParamOfReasoning(rs.ID, summary), asInput(t, msg), user("again"))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(user("hi"),
		responses.ResponseInputItemParamOfItemReference(rs.ID), responses.ResponseInputItemParamOfItemReference(msg.ID), user("third"))})
	if err != nil {
		t.Fatal(err)
	}
	// Not with store false, nor for an item this server never sent.
	_, err = c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Store: openai.Bool(false), Input: input(user("hi"),
		responses.ResponseInputItemParamOfReasoning(rs.ID, summary), asInput(t, msg))})
	if e := apiError(t, err, 400, ""); !strings.Contains(e.Message, "Items are not persisted when `store` is set to false") {
		t.Errorf("%s", e.RawJSON())
	}
	_, err = c.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(responses.ResponseInputItemParamOfItemReference("msg_nope"))})
	if e := apiError(t, err, 400, ""); e.Message != "Item with id 'msg_nope' not found." {
		t.Errorf("%s", e.RawJSON())
	}
}

func post(t *testing.T, s *Server, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/responses", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

type errObj struct {
	Message     string
	Type        string
	Param, Code *string
}

func decodeErr(t *testing.T, body string) errObj {
	t.Helper()
	var e struct{ Error *errObj }
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == nil {
		t.Fatalf("not an error body: %s", body)
	}
	return *e.Error
}

func strOf(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func TestRefused(t *testing.T) {
	s := New(t, Reply{Text: "ok"})
	long := strings.Repeat("a", 65)
	for _, tc := range []struct {
		name, body       string
		param, code, msg string
	}{
		{"not JSON", `{"model":`, "", "", "We could not parse the JSON body of your request."},
		{"no model", `{"input":"hi"}`, "model", "missing_required_parameter", "Missing required parameter: 'model'."},
		{"no input", `{"model":"gpt-5"}`, "input", "missing_required_parameter", "Missing required parameter: 'input'."},
		{"chat completions body", `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`, "messages", "unknown_parameter", "Unknown parameter: 'messages'."},
		{"store of the wrong type", `{"model":"gpt-5","input":"hi","store":"no"}`, "store", "invalid_type", "Invalid type for 'store': expected a boolean, but got a string instead."},
		{"max_output_tokens too low", `{"model":"gpt-5","input":"hi","max_output_tokens":5}`, "max_output_tokens", "integer_below_min_value", "Expected a value >= 16"},
		{"unknown include", `{"model":"gpt-5","input":"hi","include":["reasoning.encrypted"]}`, "include[0]", "invalid_value", "Invalid value: 'reasoning.encrypted'."},
		{"role tool", `{"model":"gpt-5","input":[{"role":"tool","content":"1"}]}`, "input[0].role", "invalid_value", "Invalid value: 'tool'. Supported values are: 'assistant', 'system', 'developer', and 'user'."},
		{"unknown item type", `{"model":"gpt-5","input":[{"type":"bogus"}]}`, "input[0].type", "invalid_value", "Invalid value: 'bogus'."},
		{"message without content", `{"model":"gpt-5","input":[{"type":"message","role":"user"}]}`, "input[0].content", "missing_required_parameter", "Missing required parameter: 'input[0].content'."},
		{"assistant with input_text", `{"model":"gpt-5","input":[{"role":"assistant","content":[{"type":"input_text","text":"x"}]}]}`, "input[0].content[0]", "invalid_value", "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'."},
		{"chat completions field in an item", `{"model":"gpt-5","input":[{"role":"assistant","content":"x","tool_calls":[]}]}`, "input[0].tool_calls", "unknown_parameter", "Unknown parameter: 'input[0].tool_calls'."},
		{"function_call without call_id", `{"model":"gpt-5","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id", "missing_required_parameter", ""},
		{"function_call arguments as an object", `{"model":"gpt-5","input":[{"type":"function_call","call_id":"c","name":"f","arguments":{}}]}`, "input[0].arguments", "invalid_type", "expected a string, but got an object instead."},
		{"function_call_output without output", `{"model":"gpt-5","input":[{"type":"function_call_output","call_id":"c"}]}`, "input[0].output", "missing_required_parameter", ""},
		{"reasoning without summary", `{"model":"gpt-5","input":[{"type":"reasoning","id":"rs_1"}]}`, "input[0].summary", "missing_required_parameter", ""},
		{"chat completions tool", `{"model":"gpt-5","input":"hi","tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`, "tools[0].name", "missing_required_parameter", "Missing required parameter: 'tools[0].name'."},
		{"tool name with a space", `{"model":"gpt-5","input":"hi","tools":[{"type":"function","name":"word count","parameters":{}}]}`, "tools[0].name", "invalid_value", "string does not match pattern"},
		{"tool name too long", `{"model":"gpt-5","input":"hi","tools":[{"type":"function","name":"` + long + `","parameters":{}}]}`, "tools[0].name", "string_above_max_length", "got a string with length 65"},
		{"tool without parameters", `{"model":"gpt-5","input":"hi","tools":[{"type":"function","name":"f"}]}`, "tools[0].parameters", "missing_required_parameter", ""},
		{"unknown previous response", `{"model":"gpt-5","input":"hi","previous_response_id":"resp_x"}`, "previous_response_id", "previous_response_not_found", "Previous response with id 'resp_x' not found."},
		{"unknown item reference", `{"model":"gpt-5","input":[{"type":"item_reference","id":"msg_x"}]}`, "input", "", "Item with id 'msg_x' not found."},
	} {
		code, body := post(t, s, tc.body)
		e := decodeErr(t, body)
		if code != 400 || e.Type != "invalid_request_error" || strOf(e.Param) != tc.param || strOf(e.Code) != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: %d %s", tc.name, code, body)
		}
	}
	// No API key.
	res, err := http.Post(s.URL+"/responses", "application/json", strings.NewReader(`{"model":"gpt-5","input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if e := decodeErr(t, string(b)); res.StatusCode != 401 || !strings.HasPrefix(e.Message, "You didn't provide an API key.") || e.Code != nil {
		t.Errorf("no key: %d %s", res.StatusCode, b)
	}
	// None of them used the reply.
	if code, body := post(t, s, `{"model":"gpt-5","input":"hi"}`); code != 200 || !strings.Contains(body, `"text":"ok"`) {
		t.Errorf("well-formed: %d %s", code, body)
	}
	if code, body := post(t, s, `{"model":"gpt-5","input":"hi"}`); code != 400 || !strings.Contains(body, "script exhausted") {
		t.Errorf("past the script: %d %s", code, body)
	}
	if n := len(s.Requests()); n != 25 {
		t.Errorf("%d requests recorded", n)
	}
}

func TestCut(t *testing.T) {
	s := New(t, Reply{Text: "Counting.", ToolCalls: []Call{{ID: "call_cut", Name: "word_count", Args: `{"text":"a b c d"}`}}, Cut: true})
	stream := client(s).NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-5", Input: input(user("count"))})
	var types []string
	var args, id string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.created" {
			id = ev.Response.ID
		}
		if ev.Type == "response.function_call_arguments.delta" {
			args += ev.Delta
		}
	}
	if len(types) == 0 || types[len(types)-1] != "response.function_call_arguments.delta" || strings.Contains(strings.Join(types, " "), "response.completed") {
		t.Errorf("events %v", types)
	}
	if full := `{"text":"a b c d"}`; args != full[:len(full)/2] {
		t.Errorf("arguments %q", args)
	}
	// A cut response is not remembered.
	code, body := post(t, s, `{"model":"gpt-5","previous_response_id":"`+id+`","input":[{"type":"function_call_output","call_id":"call_cut","output":"4"}]}`)
	if code != 400 || !strings.Contains(body, "Previous response with id '"+id+"' not found.") {
		t.Errorf("%d %s", code, body)
	}
}

func TestStallAndGone(t *testing.T) {
	gone, started := make(chan struct{}), make(chan struct{})
	s := New(t, Reply{Text: "partial answer", Stall: true, Gone: gone, Started: started})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := client(s).NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input(user("q"))})
	<-started
	var text string
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.output_text.delta" {
			text += ev.Delta
			if text == "partial answer" {
				cancel()
			}
		}
	}
	if text != "partial answer" {
		t.Errorf("text %q", text)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("Gone not closed")
	}
}

func TestFailedAndIncomplete(t *testing.T) {
	s := New(t,
		Reply{Failed: &APIErr{Code: "server_error", Message: "The model had an error."}},
		Reply{Text: "Once upon", Status: "incomplete"},
	)
	last := func() responses.ResponseStreamEventUnion {
		stream := client(s).NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-5", Input: input(user("q"))})
		var ev responses.ResponseStreamEventUnion
		for stream.Next() {
			ev = stream.Current()
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	if ev := last(); ev.Type != "response.failed" || ev.Response.Status != "failed" || ev.Response.Error.Code != "server_error" || ev.Response.Error.Message != "The model had an error." {
		t.Errorf("failed: %s", ev.RawJSON())
	}
	ev := last()
	if ev.Type != "response.incomplete" || ev.Response.Status != "incomplete" || ev.Response.IncompleteDetails.Reason != "max_output_tokens" ||
		ev.Response.Output[0].Status != "incomplete" || ev.Response.OutputText() != "Once upon" {
		t.Errorf("incomplete: %s", ev.RawJSON())
	}
}

func TestHTTPErrors(t *testing.T) {
	s := New(t, RateLimited("2"), ContextTooLong(), InvalidAPIKey("sk-proj-abcdefgh1234"))
	c := client(s)
	p := responses.ResponseNewParams{Model: "gpt-5", Input: input(user("q"))}
	_, err := c.New(context.Background(), p)
	e := apiError(t, err, 429, "rate_limit_exceeded")
	if e.Response.Header.Get("Retry-After") != "2" || e.Type != "tokens" || !strings.Contains(e.Message, "Please try again in 2s.") {
		t.Errorf("429: %v %s", e.Response.Header, e.RawJSON())
	}
	_, err = c.New(context.Background(), p)
	if e := apiError(t, err, 400, "context_length_exceeded"); e.Message != "Your input exceeds the context window of this model. Please adjust your input and try again." || e.Param != "input" {
		t.Errorf("400: %s", e.RawJSON())
	}
	_, err = c.New(context.Background(), p)
	if e := apiError(t, err, 401, "invalid_api_key"); !strings.HasPrefix(e.Message, "Incorrect API key provided: sk-*") || !strings.Contains(e.Message, "*1234. You can find your API key") {
		t.Errorf("401: %s", e.RawJSON())
	}
}

func TestEventsHoldAdd(t *testing.T) {
	hold := make(chan struct{})
	events := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_raw\"}}\n\n"
	s := New(t, Reply{Events: events, Hold: hold})
	s.Add(Reply{Text: "added", Delay: time.Millisecond})
	done := make(chan string)
	go func() {
		stream := client(s).NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-5", Input: input(user("q"))})
		var id string
		for stream.Next() {
			id = stream.Current().Response.ID
		}
		done <- id
	}()
	select {
	case <-done:
		t.Fatal("answered during Hold")
	case <-time.After(20 * time.Millisecond):
	}
	close(hold)
	if id := <-done; id != "resp_raw" {
		t.Errorf("raw events gave %q", id)
	}
	res, err := client(s).New(context.Background(), responses.ResponseNewParams{Model: "gpt-5", Input: input(user("q"))})
	if err != nil || res.OutputText() != "added" {
		t.Errorf("%v %v", res, err)
	}
}
