package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agcore/agrun/registry"
)

// bigText is about n bytes of distinct lines, so that any slice of it
// shows where it came from.
func bigText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %06d: é the quick brown fox\n", i)
	}
	return b.String()[:n]
}

func toolNames(got received) []string {
	var names []string
	for _, tl := range got.Tools {
		names = append(names, tl.Function.Name)
	}
	return names
}

// lastTool is the content of the last tool message of a request.
func lastTool(t testing.TB, got received) string {
	t.Helper()
	for i := len(got.Messages) - 1; i >= 0; i-- {
		if got.Messages[i].Role == "tool" {
			return str(got.Messages[i].Content)
		}
	}
	t.Fatal("no tool message in the request")
	return ""
}

type pageResult struct {
	CallID     string `json:"call_id"`
	Offset     int    `json:"offset"`
	Length     int    `json:"length"`
	Total      int    `json:"total"`
	NextOffset *int   `json:"next_offset"`
	Text       string `json:"text"`
}

// A 1 MB tool result reaches the model cut to the cap, head and tail with
// a note; the whole result stays in the history (FullContent), and the
// model pages through it with the built-in tool, which is offered only
// once a result was cut, also after the session is resumed. Bad page
// calls are tool errors.
func TestBigToolResultIsCutAndPaged(t *testing.T) {
	text := bigText(1_000_002)
	full, _ := json.Marshal(text)
	big := constTool("dump", string(full), nil)
	reg := newRegistry(t, big)

	var page1, page2 pageResult
	srv := newServer(t,
		expect(func(t testing.TB, got received) {
			if slices.Contains(toolNames(got), PageToolName) {
				t.Errorf("page tool offered before any result was cut: %v", toolNames(got))
			}
		}, jsonReply("", "", call("c1", "dump", `{}`))),
		expect(func(t testing.TB, got received) {
			c := lastTool(t, got)
			var s string
			if len(c) > DefaultMaxToolMessageBytes || json.Unmarshal([]byte(c), &s) != nil {
				t.Fatalf("cut result: %d bytes, valid string %v", len(c), json.Unmarshal([]byte(c), &s) == nil)
			}
			if !strings.HasPrefix(s, "line 000000") || !strings.HasSuffix(s, text[len(text)-100:]) || !strings.Contains(s, "this tool result is 1000002 bytes") {
				t.Errorf("cut result does not show head, tail and size: %.200q", s)
			}
			if !slices.Contains(toolNames(got), PageToolName) {
				t.Errorf("page tool not offered after a cut: %v", toolNames(got))
			}
		}, jsonReply("", "", call("p1", PageToolName, `{"call_id":"c1","offset":500000,"length":100}`),
			call("p2", PageToolName, `{"call_id":"c1","offset":999990}`),
			call("p3", PageToolName, `{"call_id":"nope"}`),
			call("p4", PageToolName, `{"call_id":"c1","offset":2000000}`),
			call("p5", PageToolName, `{"call_id":"c1","bogus":1}`))),
		expect(func(t testing.TB, got received) {
			var tools []string
			for _, m := range got.Messages {
				if m.Role == "tool" {
					tools = append(tools, str(m.Content))
				}
			}
			if len(tools) != 6 {
				t.Fatalf("%d tool messages", len(tools))
			}
			if err := json.Unmarshal([]byte(tools[1]), &page1); err != nil {
				t.Fatalf("page 1: %v: %s", err, tools[1])
			}
			if err := json.Unmarshal([]byte(tools[2]), &page2); err != nil {
				t.Fatalf("page 2: %v", err)
			}
			for i, want := range []string{"error (not_found): ", "error (invalid_arguments): offset 2000000", "error (invalid_arguments): "} {
				if !strings.HasPrefix(tools[3+i], want) {
					t.Errorf("bad page call %d: %q, want %q...", i, tools[3+i], want)
				}
			}
		}, jsonReply("read it", "")),
	)
	c := newCycle(t, srv, Config{})
	resp, err := c.SubmitWithTools(context.Background(), "dump it", reg)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "read it" {
		t.Errorf("text %q", resp.Text)
	}
	if page1.Offset != 500000 || page1.Length != 100 || page1.Text != text[500000:500100] || page1.Total != len(text) || page1.NextOffset == nil || *page1.NextOffset != 500100 {
		t.Errorf("page 1 = %+v", page1)
	}
	if page2.Text != text[999990:] || page2.NextOffset != nil {
		t.Errorf("page 2 = %+v", page2)
	}
	msgs := c.Messages()
	if msgs[2].Role != RoleTool || msgs[2].FullContent != string(full) {
		t.Fatalf("history does not keep the whole result: %d bytes", len(msgs[2].FullContent))
	}

	// Resumed from its JSON form, the session can still be paged.
	b, _ := json.Marshal(msgs)
	var saved []Message
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}
	var again pageResult
	srv2 := newServer(t,
		expect(func(t testing.TB, got received) {
			if !slices.Contains(toolNames(got), PageToolName) {
				t.Errorf("page tool not offered after resume: %v", toolNames(got))
			}
			for _, m := range got.Messages {
				if m.Role == "tool" && len(str(m.Content)) > DefaultMaxToolMessageBytes {
					t.Errorf("a resumed tool message is sent whole: %d bytes", len(str(m.Content)))
				}
			}
		}, jsonReply("", "", call("p9", PageToolName, `{"call_id":"c1","offset":1000}`))),
		expect(func(t testing.TB, got received) {
			if err := json.Unmarshal([]byte(lastTool(t, got)), &again); err != nil {
				t.Error(err)
			}
		}, jsonReply("again", "")),
	)
	c2 := newCycle(t, srv2, Config{History: saved})
	if _, err := c2.SubmitWithTools(context.Background(), "more", reg); err != nil {
		t.Fatal(err)
	}
	if again.Offset != 1000 || again.Text != text[1000:1000+again.Length] || again.Length != pageMax(DefaultMaxToolMessageBytes) {
		t.Errorf("page after resume = offset %d length %d", again.Offset, again.Length)
	}
}

// A per-tool cap overrides the default, and a registry tool cannot take
// the page tool's name.
func TestPerToolLimitAndReservedName(t *testing.T) {
	out, _ := json.Marshal(bigText(5000))
	impostor := constTool(PageToolName, `"impostor"`, nil)
	srv := newServer(t,
		jsonReply("", "", call("a", "small", `{}`), call("b", "large", `{}`)),
		expect(func(t testing.TB, got received) {
			var contents []string
			for _, m := range got.Messages {
				if m.Role == "tool" {
					contents = append(contents, str(m.Content))
				}
			}
			if len(contents[0]) > 2000 || !strings.Contains(contents[0], "agrun_result_page") {
				t.Errorf("small cap: %d bytes", len(contents[0]))
			}
			if contents[1] != string(out) {
				t.Errorf("uncapped tool was cut: %d bytes", len(contents[1]))
			}
			if n := strings.Count(strings.Join(toolNames(got), ","), PageToolName); n != 1 {
				t.Errorf("%d tools named %s offered", n, PageToolName)
			}
		}, jsonReply("", "", call("p", PageToolName, `{"call_id":"a","length":10}`))),
		expect(func(t testing.TB, got received) {
			if c := lastTool(t, got); strings.Contains(c, "impostor") || !strings.Contains(c, `"text":"line 0000`) {
				t.Errorf("page call answered by %s", c)
			}
		}, jsonReply("ok", "")),
	)
	c := newCycle(t, srv, Config{Limits: Limits{ToolResultLimit: func(name string) int {
		return map[string]int{"small": 2000, "large": -1}[name]
	}}})
	reg := newRegistry(t, constTool("small", string(out), nil), constTool("large", string(out), nil), impostor)
	if _, err := c.SubmitWithTools(context.Background(), "go", reg); err != nil {
		t.Fatal(err)
	}
}

// With a context window, a request over seven eighths of it is trimmed:
// the oldest tool results become stubs, then old turns go; every tool
// call keeps its tool message; the history stays whole.
func TestContextWindowTrimsTheRequest(t *testing.T) {
	blob, _ := json.Marshal(bigText(12000)) // about 4,000 tokens
	var history []Message
	for i := range 3 {
		id := fmt.Sprintf("old%d", i)
		history = append(history,
			Message{Role: RoleUser, Content: fmt.Sprintf("question %d", i)},
			Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Name: "dump", Arguments: "{}"}}},
			Message{Role: RoleTool, ToolCallID: id, Name: "dump", Content: string(blob)},
			Message{Role: RoleAssistant, Content: fmt.Sprintf("answer %d", i)},
		)
	}
	srv := newServer(t,
		expect(func(t testing.TB, got received) {
			checkWireHistory(t, got.Messages)
			if len(got.Raw) > 6000*3 {
				t.Errorf("request of %d bytes for a 6000-token window", len(got.Raw))
			}
			first := ""
			for _, m := range got.Messages {
				if m.Role == "tool" && first == "" {
					first = str(m.Content)
				}
			}
			if !strings.Contains(string(got.Raw), "question 2") || !strings.Contains(string(got.Raw), "now") {
				t.Errorf("the latest turns are missing")
			}
			if !strings.HasPrefix(first, "[agrun: the result of call old") || !strings.Contains(first, "left out to fit the context window") {
				t.Errorf("oldest result %.120q, want a stub", first)
			}
			if !slices.Contains(toolNames(got), PageToolName) {
				t.Errorf("page tool not offered with stubs")
			}
		}, jsonReply("fits", "")),
	)
	c := newCycle(t, srv, Config{Limits: Limits{ContextWindow: 6000}, History: history})
	if _, err := c.SubmitWithTools(context.Background(), "now", newRegistry(t)); err != nil {
		t.Fatal(err)
	}
	if got := c.Messages(); len(got) != len(history)+2 || got[2].Content != string(blob) {
		t.Errorf("history changed: %d messages", len(got))
	}
}

const overflowBody = `{"error":{"message":"This model's maximum context length is 4000 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`

// A provider's context_length_exceeded (with no context window set) is
// answered by trimming and retrying once; a second refusal fails the run
// with kind context_overflow, and the session can still continue.
func TestContextOverflowThenContinue(t *testing.T) {
	blob, _ := json.Marshal(bigText(24000))
	reg := newRegistry(t, constTool("dump", string(blob), nil))
	var sizes []int
	size := func(t testing.TB, got received) { sizes = append(sizes, len(got.Raw)) }
	srv := newServer(t,
		jsonReply("", "", call("c1", "dump", `{}`)),
		jsonReply("", "", call("c2", "dump", `{}`)),
		expect(size, status(400, overflowBody)),
		expect(func(t testing.TB, got received) {
			size(t, got)
			checkWireHistory(t, got.Messages)
		}, jsonReply("trimmed", "")),
	)
	c := newCycle(t, srv, Config{Limits: Limits{MaxToolMessageBytes: -1}})
	resp, err := c.SubmitWithTools(context.Background(), "go", reg)
	if err != nil {
		t.Fatalf("overflow was not recovered: %v", err)
	}
	if resp.Text != "trimmed" || len(sizes) != 2 || sizes[1] >= sizes[0]/2 {
		t.Errorf("text %q, request sizes %v", resp.Text, sizes)
	}

	// Refused twice: context_overflow, history valid, and the next run works.
	srv2 := newServer(t, status(400, overflowBody), status(400, overflowBody), jsonReply("alive", ""))
	c2 := newCycle(t, srv2, Config{History: c.Messages()})
	_, err = c2.SubmitWithTools(context.Background(), "again", reg)
	if !errors.Is(err, ErrContextOverflow) || KindOf(err) != KindContextOverflow {
		t.Fatalf("err = %v, kind %q", err, KindOf(err))
	}
	if resp, err := c2.SubmitWithTools(context.Background(), "and again", reg); err != nil || resp.Text != "alive" {
		t.Fatalf("the session did not continue: %v", err)
	}
}

// The common ways providers say a request is too long are all context
// overflows; other errors are not.
func TestContextOverflowVariants(t *testing.T) {
	yes := []*APIError{
		{StatusCode: 400, Code: "context_length_exceeded"},
		{StatusCode: 400, Message: "This model's maximum context length is 8192 tokens. However, you requested 8203 tokens"},
		{StatusCode: 400, Message: "prompt is too long: 208000 tokens > 200000 maximum"},
		{StatusCode: 400, Message: "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000"},
		{StatusCode: 400, Type: "exceed_context_size_error", Message: "the request exceeds the available context size"},
		{StatusCode: 400, Message: "The decoder prompt (length 163840) is longer than the maximum model length of 131072."},
		{StatusCode: 413, Message: "request entity too large"},
		{StatusCode: 0, Message: "context window exceeded"},
	}
	no := []*APIError{
		{StatusCode: 400, Message: "invalid model"},
		{StatusCode: 413, Code: "rate_limit_exceeded", Message: "Request too large for tokens per minute"},
		{StatusCode: 429, Message: "too many tokens per minute"},
		{StatusCode: 401, Message: "bad key"},
	}
	for _, e := range yes {
		if KindOf(e) != KindContextOverflow {
			t.Errorf("%v: kind %q", e, KindOf(e))
		}
	}
	for _, e := range no {
		if KindOf(e) == KindContextOverflow {
			t.Errorf("%v: counted as an overflow", e)
		}
	}
}

// Compact stubs the big results of old turns and drops the kept copies;
// the last turn stays; the history stays valid to resume.
func TestCompact(t *testing.T) {
	blob := `"` + strings.Repeat("x", 5000) + `"`
	h := []Message{
		{Role: RoleUser, Content: "one"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a", Name: "t", Arguments: "{}"}, {ID: "b", Name: "t", Arguments: "{}"}}},
		{Role: RoleTool, ToolCallID: "a", Name: "t", Content: "cut", FullContent: blob},
		{Role: RoleTool, ToolCallID: "b", Name: "t", Content: `{"small":1}`},
		{Role: RoleAssistant, Content: "done"},
		{Role: RoleUser, Content: "two"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "t", Arguments: "{}"}}},
		{Role: RoleTool, ToolCallID: "c", Name: "t", Content: blob},
	}
	out := Compact(h, 1)
	if len(out) != len(h) || !strings.Contains(out[2].Content, "removed when the session was compacted") || out[2].FullContent != "" {
		t.Errorf("old big result: %+v", out[2])
	}
	if out[3].Content != `{"small":1}` || out[7].Content != blob || h[2].FullContent != blob {
		t.Errorf("compact changed what it should keep")
	}
	if _, err := New(Config{Provider: offline(t), History: out}); err != nil {
		t.Errorf("compacted history does not resume: %v", err)
	}
}

// --- structured output ---

const personSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name","age"],"additionalProperties":false}`

func structuredEvents(t *testing.T, c *Cycle, reg *registry.Registry) ([]*StructuredOutput, error) {
	var evs []*StructuredOutput
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "who?", reg) {
		if err != nil {
			return evs, err
		}
		if e, ok := ev.(*StructuredOutput); ok {
			evs = append(evs, e)
		}
	}
	return evs, nil
}

// A schema is sent as a strict response_format; an answer that matches
// ends the run with its JSON; one that does not is sent back once with the
// validator's error.
func TestResponseSchema(t *testing.T) {
	srv := newServer(t,
		expect(func(t testing.TB, got received) {
			var rf struct {
				Type       string `json:"type"`
				JSONSchema struct {
					Name   string          `json:"name"`
					Strict bool            `json:"strict"`
					Schema json.RawMessage `json:"schema"`
				} `json:"json_schema"`
			}
			if err := json.Unmarshal(got.ResponseFormat, &rf); err != nil || rf.Type != "json_schema" || !rf.JSONSchema.Strict || !strings.Contains(string(rf.JSONSchema.Schema), `"age"`) {
				t.Errorf("response_format = %s (%v)", got.ResponseFormat, err)
			}
		}, streamText(`{"name":"Ada","age":-1}`)),
		expect(func(t testing.TB, got received) {
			last := got.Messages[len(got.Messages)-1]
			if last.Role != "user" || !strings.Contains(str(last.Content), "/age") {
				t.Errorf("correction = %s %q", last.Role, str(last.Content))
			}
		}, streamText("```json\n", `{"name":"Ada","age":36}`, "\n```")),
	)
	c := newCycle(t, srv, Config{ResponseSchema: json.RawMessage(personSchema)})
	evs, err := structuredEvents(t, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Valid || !evs[0].Retry || !evs[1].Valid || string(evs[1].Output) != `{"name":"Ada","age":36}` {
		t.Fatalf("events %+v", evs)
	}
	line, _ := json.Marshal(evs[1])
	if string(line) != `{"type":"structured_output","valid":true,"output":{"name":"Ada","age":36}}` {
		t.Errorf("event JSON %s", line)
	}

	// Twice wrong: invalid_output.
	srv2 := newServer(t, jsonReply("not json", ""), jsonReply(`{"name":"Ada"}`, ""))
	c2 := newCycle(t, srv2, Config{ResponseSchema: json.RawMessage(personSchema)})
	_, err = c2.SubmitWithTools(context.Background(), "who?", nil)
	if !errors.Is(err, ErrInvalidOutput) || KindOf(err) != KindInvalidOutput {
		t.Fatalf("err = %v, kind %q", err, KindOf(err))
	}

	// A schema the registry refuses is refused by New.
	if _, err := New(Config{Provider: offline(t), ResponseSchema: json.RawMessage(`{"type":"string"}`)}); !errors.Is(err, registry.ErrInvalidSchema) {
		t.Errorf("non-object schema: %v", err)
	}
}

// A provider that refuses response_format gets the schema in the system
// prompt instead (SchemaAuto), for the rest of the Cycle; a non-strict
// schema is sent without "strict".
func TestResponseSchemaFallsBackToPrompt(t *testing.T) {
	loose := `{"type":"object","properties":{"n":{"type":"integer"}}}`
	srv := newServer(t,
		expect(func(t testing.TB, got received) {
			if !strings.Contains(string(got.ResponseFormat), "json_schema") || strings.Contains(string(got.ResponseFormat), "strict") {
				t.Errorf("response_format = %s", got.ResponseFormat)
			}
		}, status(400, `{"error":{"message":"response_format json_schema is not supported by this model"}}`)),
		expect(func(t testing.TB, got received) {
			if got.ResponseFormat != nil || got.Messages[0].Role != "system" || !strings.Contains(str(got.Messages[0].Content), `"n"`) {
				t.Errorf("fallback request: response_format %s, first message %s %.80q", got.ResponseFormat, got.Messages[0].Role, str(got.Messages[0].Content))
			}
		}, jsonReply(`{"n":3}`, "")),
		expect(func(t testing.TB, got received) {
			if got.ResponseFormat != nil {
				t.Errorf("the fallback was not kept")
			}
		}, jsonReply(`{"n":4}`, "")),
	)
	c := newCycle(t, srv, Config{ResponseSchema: json.RawMessage(loose), System: "be brief"})
	for _, want := range []string{`{"n":3}`, `{"n":4}`} {
		resp, err := c.SubmitWithTools(context.Background(), "count", nil)
		if err != nil || resp.Text != want {
			t.Fatalf("resp %+v, err %v", resp, err)
		}
	}
}

// A cut result is valid JSON within the cap for every cap and content:
// escape-heavy, multibyte, string or not; its head and tail are the
// result's own ends (of the text of an object that is mostly one text
// member, with the other members); it names the call to page.
func TestBoundOutputFits(t *testing.T) {
	texts := []string{
		strings.Repeat(`"\`, 40000),
		strings.Repeat("é€😀", 10000),
		strings.Repeat("a\n\tb", 20000),
		bigText(100000),
	}
	for _, text := range texts {
		str, _ := json.Marshal(text)
		obj, _ := json.Marshal(map[string]any{"k": text, "n": []int{1, 2, 3}})
		list, _ := json.Marshal(map[string]any{"parts": []string{text[:len(text)/2], text[len(text)/2:]}}) // no member is mostly text
		for _, out := range [][]byte{str, obj, list} {
			for _, limit := range []int{1024, 1500, 4096, 10000, 32 << 10} {
				c, cut := boundOutput(out, limit, "call_9")
				if !cut || len(c) > limit || !json.Valid([]byte(c)) || !strings.Contains(c, `call_9`) {
					t.Fatalf("limit %d: cut %v, %d bytes, valid %v: %.100s", limit, cut, len(c), json.Valid([]byte(c)), c)
				}
				var s string
				if json.Unmarshal([]byte(c), &s) == nil {
					head, _, _ := strings.Cut(s, "\n[agrun: ")
					if !strings.HasPrefix(text, head) {
						t.Errorf("limit %d: the head is not the text's start", limit)
					}
				} else {
					var o struct {
						Head, Tail, Field string
						Others            map[string]any
					}
					json.Unmarshal([]byte(c), &o)
					// An object that is mostly one text shows that text's
					// ends (not its JSON, escaped); any other its JSON's.
					whole, wantField := string(out), ""
					if bytes.Equal(out, obj) {
						whole, wantField = text, "k"
					}
					if o.Field != wantField || !strings.HasPrefix(whole, o.Head) || !strings.HasSuffix(whole, o.Tail) || len(o.Head)+len(o.Tail) < limit/8 {
						t.Errorf("limit %d: field %q, head %d and tail %d bytes are not the ends of %.20q", limit, o.Field, len(o.Head), len(o.Tail), whole)
					}
					if wantField != "" && limit >= 4096 && o.Others["n"] == nil {
						t.Errorf("limit %d: the other members are not shown: %+v", limit, o.Others)
					}
				}
			}
		}
	}
	if c, cut := boundOutput(json.RawMessage(`{"a":1}`), 1024, "x"); cut || c != `{"a":1}` {
		t.Errorf("a result that fits: %s %v", c, cut)
	}
}

// TestOverflowRetryIsSeen: the retry after a context overflow is a Retry
// event, as other retries are.
func TestOverflowRetryIsSeen(t *testing.T) {
	blob, _ := json.Marshal(bigText(6000))
	history := []Message{
		{Role: RoleUser, Content: "before"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "old", Name: "dump", Arguments: "{}"}}},
		{Role: RoleTool, ToolCallID: "old", Name: "dump", Content: string(blob)},
		{Role: RoleAssistant, Content: "done"},
	}
	srv := newServer(t, status(400, overflowBody), jsonReply("trimmed", ""))
	c := newCycle(t, srv, Config{History: history})
	var retries []*Retry
	var err error
	for ev, e := range c.SubmitStreamWithTools(context.Background(), "go", nil) {
		if r, ok := ev.(*Retry); ok {
			retries = append(retries, r)
		}
		if e != nil {
			err = e
		}
	}
	if err != nil || len(retries) != 1 || !strings.Contains(retries[0].Reason, "too long") || retries[0].Max != 1 {
		t.Fatalf("err %v, retries %+v", err, retries)
	}
}

// A refusal as too long when nothing can be trimmed (a system prompt and
// one prompt) ends the run at once: the same request, or a larger one
// with the page tool, would be refused again.
func TestOverflowWithNothingToTrimEndsAtOnce(t *testing.T) {
	srv := newServer(t, status(400, overflowBody), jsonReply("never", ""))
	c := newCycle(t, srv, Config{System: "You are terse."})
	_, err := c.SubmitWithTools(context.Background(), bigText(3000), newRegistry(t, constTool("dump", `"x"`, nil)))
	if KindOf(err) != KindContextOverflow || !errors.Is(err, ErrContextOverflow) {
		t.Fatalf("err = %v (kind %q)", err, KindOf(err))
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1: the refused request was sent again", n)
	}
	if !strings.Contains(err.Error(), "nothing in the conversation can be trimmed") {
		t.Errorf("err = %v", err)
	}
}

// When the result the current turn is waiting on is what does not fit,
// the resend shows its head and tail (as much as fits, valid JSON, with
// the note saying how to read the rest), not a bare pointer.
func TestOverflowCurrentResultBecomesAnExcerpt(t *testing.T) {
	text := bigText(60000)
	blob, _ := json.Marshal(text)
	reg := newRegistry(t, constTool("dump", string(blob), nil))
	var sizes []int
	var sent string
	srv := newServer(t,
		jsonReply("", "", call("c1", "dump", `{}`)),
		expect(func(t testing.TB, got received) { sizes = append(sizes, len(got.Raw)) }, status(400, overflowBody)),
		expect(func(t testing.TB, got received) {
			sizes = append(sizes, len(got.Raw))
			checkWireHistory(t, got.Messages)
			for _, m := range got.Messages {
				if m.Role == "tool" {
					sent = str(m.Content)
				}
			}
		}, jsonReply("got it", "")),
	)
	c := newCycle(t, srv, Config{Limits: Limits{MaxToolMessageBytes: -1}})
	if _, err := c.SubmitWithTools(context.Background(), "go", reg); err != nil {
		t.Fatal(err)
	}
	var shown string
	if err := json.Unmarshal([]byte(sent), &shown); err != nil {
		t.Fatalf("the resent result is not a JSON string: %.200q", sent)
	}
	if !strings.HasPrefix(shown, text[:200]) || !strings.HasSuffix(shown, text[len(text)-200:]) || !strings.Contains(shown, "too long to show whole") {
		t.Errorf("the resent result is not a head/tail excerpt: %.300q", shown)
	}
	if len(shown) < 2000 {
		t.Errorf("the excerpt is only %d bytes", len(shown))
	}
	if len(sizes) != 2 || sizes[1] >= sizes[0] {
		t.Errorf("request sizes %v: the resend is not smaller", sizes)
	}
	if got := c.Messages(); got[2].Content == sent {
		t.Errorf("the history kept the excerpt instead of the result")
	}
}
