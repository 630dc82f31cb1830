package session_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// TestReplayEvents feeds a run's records, written by Codec as a cluster
// worker writes them, to a Replay and checks the events it gives back:
// the reply's text, a turn_complete with the request's usage, the call's
// start with its arguments and its completion with duration, kind and
// output, the last turn's "length"; a record that does not decode and a
// decision give none.
func TestReplayEvents(t *testing.T) {
	var c session.Codec
	must := func(b json.RawMessage, err error) json.RawMessage {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	recs := []json.RawMessage{
		must(c.Message(loop.Message{Role: loop.RoleUser, Content: "count"})),
		must(c.Request(loop.RequestInfo{Usage: loop.Usage{TotalTokens: 7}, FinishReason: "tool_calls"})),
		must(c.Message(loop.Message{Role: loop.RoleAssistant, Content: "let me see", ToolCalls: []loop.ToolCall{
			{ID: "c1", Name: "word_count", Arguments: `{"text":"a b"}`}, {ID: "c2", Name: "broken", Arguments: `not json`}}})),
		must(c.Call(&loop.ToolExecutionCompleted{ID: "c1", Name: "word_count", Duration: 12 * time.Millisecond})),
		must(c.Message(loop.Message{Role: loop.RoleTool, ToolCallID: "c1", Name: "word_count", Content: `{"words":2}`})),
		must(c.Call(&loop.ToolExecutionCompleted{ID: "c2", Name: "broken", IsError: true, ErrorKind: registry.ExecutionFailed})),
		must(c.Message(loop.Message{Role: loop.RoleTool, ToolCallID: "c2", Content: "error (execution_failed): it broke"})),
		must(c.Decision(loop.DecisionRecord{ApprovalRequest: loop.ApprovalRequest{Tool: "word_count", CallID: "c1"}, Decision: loop.Decision{Answer: loop.ApproveOnce, By: "user"}})),
		json.RawMessage(`{"message":`),
		must(c.Request(loop.RequestInfo{FinishReason: "length"})),
		must(c.Message(loop.Message{Role: loop.RoleAssistant, Content: "two words"})),
	}
	var r session.Replay
	var got []string
	for _, b := range recs {
		for _, ev := range r.Feed(b) {
			line, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(line))
		}
	}
	want := []string{
		`{"type":"text_delta","text":"let me see"}`,
		`{"type":"turn_complete","reason":"tool_calls","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":7}}`,
		`{"type":"tool_started","id":"c1","name":"word_count","input":{"text":"a b"}}`,
		`{"type":"tool_started","id":"c2","name":"broken","input":"not json"}`,
		`{"type":"tool_completed","id":"c1","name":"word_count","output":{"words":2},"is_error":false,"error_kind":"","duration_ms":12}`,
		`{"type":"tool_completed","id":"c2","name":"broken","output":"it broke","is_error":true,"error_kind":"execution_failed","duration_ms":0}`,
		`{"type":"text_delta","text":"two words"}`,
		`{"type":"turn_complete","reason":"length","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWriteMarkdownFences checks that a tool result holding a run of
// backticks cannot close its fence, and that terminal controls from the
// model are escaped.
func TestWriteMarkdownFences(t *testing.T) {
	var b bytes.Buffer
	session.WriteMarkdown(&b, session.Info{ID: "s1"}, []loop.Message{
		{Role: loop.RoleAssistant, Content: "hi\x1b[2J"},
		{Role: loop.RoleTool, Name: "t", ToolCallID: "c1", Content: "````\n# not a heading"},
	})
	out := b.String()
	if strings.Contains(out, "\x1b") {
		t.Errorf("an escape sequence reached the export: %q", out)
	}
	if !strings.Contains(out, "`````\n````\n# not a heading\n`````\n") {
		t.Errorf("the tool result is not fenced by a longer fence:\n%s", out)
	}
	if !strings.Contains(out, "- model: -\n") {
		t.Errorf("an unknown model is not shown as -:\n%s", out)
	}
}

// TestPrune removes a session last used before the cutoff, keeps a
// recent one, and skips one another process holds open.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	st, err := session.OpenFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old", "new", "busy"} {
		s, _, _, err := st.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		s.Record(loop.Message{Role: loop.RoleUser, Content: "hi"})
		if id == "busy" {
			defer s.Close()
		} else {
			s.Close()
		}
	}
	old := time.Now().Add(-48 * time.Hour)
	for _, id := range []string{"old", "busy"} {
		if err := os.Chtimes(filepath.Join(dir, id+".jsonl"), old, old); err != nil {
			t.Fatal(err)
		}
	}
	p, err := st.Prune(time.Now().Add(-24 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Removed) != 1 || p.Removed[0].ID != "old" || p.Kept != 1 {
		t.Fatalf("removed %+v, kept %d; want old removed, 1 kept", p.Removed, p.Kept)
	}
	if err := p.Skipped["busy"]; err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("skipped %v: want busy, in use", p.Skipped)
	}
	if _, err := os.Stat(filepath.Join(dir, "old.jsonl")); !os.IsNotExist(err) {
		t.Fatalf("old session still there: %v", err)
	}
}
