package loop

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/textsafe"
)

// toolMessages runs one turn that calls each tool once and returns the
// tool messages the provider received in the next request, and the events'
// outputs.
func toolMessages(t *testing.T, cfg Config, tools ...*funcTool) (contents []string, events map[string]*ToolExecutionCompleted) {
	t.Helper()
	var chunks []string
	for i, tl := range tools {
		chunks = append(chunks, callChunk(i, "c"+string(rune('a'+i)), tl.name, `{}`))
	}
	srv := newServer(t,
		sseChunks(append(chunks, toolCallsFinishChunk)...),
		expect(func(t testing.TB, got received) {
			for _, m := range got.Messages {
				if m.Role == "tool" {
					contents = append(contents, str(m.Content))
				}
			}
		}, streamText("done")),
	)
	c := newCycle(t, srv, cfg)
	var regTools []*funcTool
	regTools = append(regTools, tools...)
	reg := newRegistry(t)
	for _, tl := range regTools {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	events = map[string]*ToolExecutionCompleted{}
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "go", reg) {
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := ev.(*ToolExecutionCompleted); ok {
			events[e.Name] = e
		}
	}
	if len(contents) != len(tools) {
		t.Fatalf("%d tool messages for %d tools", len(contents), len(tools))
	}
	// The history holds what the provider got.
	var hist []string
	for _, m := range c.Messages() {
		if m.Role == RoleTool {
			hist = append(hist, m.Content)
		}
	}
	for i := range contents {
		if hist[i] != contents[i] {
			t.Errorf("history's tool message %d differs from the request's", i)
		}
	}
	return contents, events
}

func constTool(name, out string, err error) *funcTool {
	return &funcTool{name: name, desc: "returns a fixed result", fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		if err != nil {
			return nil, err
		}
		return json.RawMessage(out), nil
	}}
}

// Strings in a tool's JSON result lose every unsafe rune — raw or written
// as a JSON escape — before the model reads them; the JSON stays valid,
// and a clean result reaches the model byte for byte.
func TestToolOutputIsCleanedForTheModel(t *testing.T) {
	contents, events := toolMessages(t, Config{},
		constTool("esc", `{"a":"\u001b]0;pwned\u0007red\u009b2J","k\u200b":"x\u202ey","n":1.50}`, nil),
		constTool("raw", "{\"a\":\"tag\U000E0041s\u2066 and \ufeffBOM\x7f\"}", nil),
		constTool("clean", `{"b": [1, "two"], "a": "é"}`, nil),
		constTool("text", `"\u001b[31mred"`, nil),
	)
	want := []string{`{"a":"]0;pwnedred2J","k":"xy","n":1.50}`, `{"a":"tags and BOM"}`, `{"b": [1, "two"], "a": "é"}`, `"[31mred"`}
	for i, c := range contents {
		if c != want[i] {
			t.Errorf("tool message %d = %s, want %s", i, c, want[i])
		}
		if name := []string{"esc", "raw", "clean", "text"}[i]; string(events[name].Output) != want[i] {
			t.Errorf("event %s output = %s, want %s", name, events[name].Output, want[i])
		}
	}
}

// A tool's error text is cleaned before the model reads it.
func TestToolErrorIsCleanedForTheModel(t *testing.T) {
	contents, _ := toolMessages(t, Config{}, constTool("boom", "", errors.New("trap\x1b]0;x\x07 \u009b31m\u202eend")))
	if want := "error (other): trap]0;x 31mend"; contents[0] != want {
		t.Errorf("tool message %q, want %q", contents[0], want)
	}
}

// A result or error over the cap is sent cut to a valid, marked message of
// at most MaxToolMessageBytes (default 32 KiB) showing its head and tail.
func TestToolMessagesAreBounded(t *testing.T) {
	big := strings.Repeat("a\"é\\", 1<<18) // 1.25 MiB, escapes included
	bigString, _ := json.Marshal(big)
	bigObject, _ := json.Marshal(map[string]any{"items": strings.Split(strings.Repeat("x,", 1<<18), ",")})
	contents, events := toolMessages(t, Config{},
		constTool("str", string(bigString), nil),
		constTool("obj", string(bigObject), nil),
		constTool("err", "", errors.New(strings.Repeat("e", 1<<20))),
		constTool("small", `{"ok":true}`, nil),
	)
	for i, c := range contents {
		if len(c) > DefaultMaxToolMessageBytes {
			t.Errorf("tool message %d is %d bytes, cap %d", i, len(c), DefaultMaxToolMessageBytes)
		}
		if !textsafe.IsSafe(c) {
			t.Errorf("tool message %d is not safe text", i)
		}
	}
	var s string
	if err := json.Unmarshal([]byte(contents[0]), &s); err != nil || !strings.HasPrefix(s, "a\"é\\a") || !strings.HasSuffix(s, "a\"é\\") ||
		!strings.Contains(s, "[agrun: this tool result is "+strconv.Itoa(len(big))+" bytes") || !strings.Contains(s, `agrun_result_page with {"call_id":"ca","offset":`) {
		t.Errorf("string result: %v, %q", err, textsafe.Truncate(contents[0], 200))
	}
	var obj struct {
		Truncated bool   `json:"truncated"`
		Bytes     int    `json:"bytes"`
		Head      string `json:"head"`
		Tail      string `json:"tail"`
		Note      string `json:"note"`
	}
	if err := json.Unmarshal([]byte(contents[1]), &obj); err != nil || !obj.Truncated || obj.Bytes != len(bigObject) || !strings.HasPrefix(obj.Head, `{"items":["x","x"`) ||
		!strings.HasSuffix(obj.Tail, `"x","x",""]}`) || !strings.Contains(obj.Note, `"call_id":"cb"`) {
		t.Errorf("object result: %v %+v", err, textsafe.Truncate(contents[1], 200))
	}
	if !strings.HasPrefix(contents[2], "error (other): eee") || !strings.HasSuffix(contents[2], "…") {
		t.Errorf("error: %q", textsafe.Truncate(contents[2], 100))
	}
	if contents[3] != `{"ok":true}` {
		t.Errorf("small result: %s", contents[3])
	}
	// The event keeps the whole result.
	if len(events["str"].Output) != len(bigString) {
		t.Errorf("event output is %d bytes, the result %d", len(events["str"].Output), len(bigString))
	}
	// The cap is configurable; negative means none.
	contents, _ = toolMessages(t, Config{Limits: Limits{MaxToolMessageBytes: -1}}, constTool("str", string(bigString), nil))
	if contents[0] != string(bigString) {
		t.Errorf("uncapped: %d bytes, want %d", len(contents[0]), len(bigString))
	}
	contents, _ = toolMessages(t, Config{Limits: Limits{MaxToolMessageBytes: 2000}}, constTool("obj", string(bigObject), nil))
	if len(contents[0]) > 2000 || !json.Valid([]byte(contents[0])) {
		t.Errorf("2000-byte cap: %d bytes, valid %v", len(contents[0]), json.Valid([]byte(contents[0])))
	}
}

// A saved history's tool messages (an older session file may hold raw
// escapes or megabytes) are cleaned and capped as new ones are.
func TestResumedToolMessagesAreCleaned(t *testing.T) {
	history := []Message{
		{Role: RoleUser, Content: "go"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a", Name: "t", Arguments: "{}"}, {ID: "b", Name: "t", Arguments: "{}"}}},
		{Role: RoleTool, ToolCallID: "a", Name: "t", Content: "error (execution_failed): trap\x1b]0;x\x07" + strings.Repeat("$f ", 1<<20)},
		{Role: RoleTool, ToolCallID: "b", Name: "t", Content: `{"k":"\u001b[31m\u202e"}`},
	}
	c, err := New(Config{Provider: offline(t), History: history})
	if err != nil {
		t.Fatal(err)
	}
	msgs := c.Messages()
	if got := msgs[2].Content; len(got) > DefaultMaxToolMessageBytes || !strings.HasPrefix(got, "error (execution_failed): trap]0;x$f") || !textsafe.IsSafe(got) {
		t.Errorf("error message: %d bytes, %q", len(got), textsafe.Truncate(got, 80))
	}
	if got := msgs[3].Content; got != `{"k":"[31m"}` {
		t.Errorf("result %s", got)
	}
}
