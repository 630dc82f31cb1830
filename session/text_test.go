package session_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// A session's records as `agrun sessions show` prints them: the
// messages, the tool call and its result, and the approval decision.
func ExampleWriteTranscript() {
	var codec session.Codec
	call := loop.ToolCall{ID: "call_1", Name: "write_note", Arguments: `{"text":"hi"}`}
	var raw []json.RawMessage
	for _, m := range []loop.Message{
		{Role: loop.RoleUser, Content: "note that I said hi"},
		{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{call}},
	} {
		b, _ := codec.Message(m)
		raw = append(raw, b)
	}
	d, _ := codec.Decision(loop.DecisionRecord{
		ApprovalRequest: loop.ApprovalRequest{CallID: "call_1", Tool: "write_note"},
		Decision:        loop.Decision{Answer: loop.Answer("deny"), By: "user", Reason: "not now\nor ever"},
	})
	result, _ := codec.Message(loop.Message{Role: loop.RoleTool, Name: "write_note", ToolCallID: "call_1", Content: "error (denied_by_user): not now"})
	recs, _ := session.DecodeRecords(append(raw, d, result))
	session.WriteTranscript(os.Stdout, recs)
	// Output:
	// user: note that I said hi
	// assistant: -> write_note({"text":"hi"}) [call_1]
	// # approval: write_note call_1: deny by user (not now\nor ever)
	// [tool write_note call_1] error (denied_by_user): not now
}

// TestWriteList: one row per session, text from a model or a user
// escaped and on its line, "-" for what the store does not know.
func TestWriteList(t *testing.T) {
	var b strings.Builder
	err := session.WriteList(&b, []session.Info{
		{ID: "s1", FirstPrompt: "\x1b[31mred\nsecond line", Turns: 2, Model: "", Tokens: 99},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one row, got:\n%s", b.String())
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "ID LAST USED TURNS MODEL TOKENS FIRST PROMPT" {
		t.Errorf("header %q", lines[0])
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != `s1 - 2 - 99 \x1b[31mred` {
		t.Errorf("row %q", got)
	}
}

// TestCompact: the big tool results of the turns before the last keep
// are cut, the last turn stays whole, and a session in use is refused.
func TestCompact(t *testing.T) {
	st, err := session.OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 4*loop.CompactThreshold)
	s, _, _, err := st.Open("c1")
	if err != nil {
		t.Fatal(err)
	}
	for turn := range 2 {
		id := fmt.Sprintf("call_%d", turn)
		for _, m := range []loop.Message{
			{Role: loop.RoleUser, Content: "read it"},
			{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: id, Name: "read", Arguments: "{}"}}},
			{Role: loop.RoleTool, Name: "read", ToolCallID: id, Content: big},
			{Role: loop.RoleAssistant, Content: "done"},
		} {
			s.Record(m)
		}
	}
	if _, _, err := st.Compact("c1", 1); err == nil {
		t.Fatal("Compact of a session in use: no error")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, after, err := st.Compact("c1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if after >= before || after < int64(len(big)) {
		t.Errorf("compacted %d -> %d bytes: want the first result cut and the last kept (%d bytes)", before, after, len(big))
	}
	raw, _, err := st.Messages("c1")
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := session.Decode[loop.Message](raw)
	if err != nil || len(msgs) != 8 {
		t.Fatalf("after compact: %d messages, %v", len(msgs), err)
	}
	if msgs[2].Content == big || msgs[6].Content != big {
		t.Errorf("the first turn's result is %d bytes, the last's %d: want it cut, and the last whole", len(msgs[2].Content), len(msgs[6].Content))
	}
}

// TestWriteApprovals: one row per standing approval, what came from a
// server or a person kept on its line.
func TestWriteApprovals(t *testing.T) {
	var b strings.Builder
	err := session.WriteApprovals(&b, []session.StandingApproval{
		{Tool: "fs__write", By: "user\nforged row", Grant: registry.Grant{Source: "mcp", Server: "fs"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "TOOL APPROVED BY GRANT" {
		t.Fatalf("table:\n%s", b.String())
	}
	if !strings.HasPrefix(lines[1], "fs__write ") || !strings.Contains(lines[1], `user\nforged row`) || !strings.HasSuffix(lines[1], "  mcp fs") {
		t.Errorf("row %q", lines[1])
	}
}
