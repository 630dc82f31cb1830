package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/textsafe"
)

// invisibleAttack is text that hides from a person reading it: bidi
// isolates and overrides, zero-width characters, tag characters spelling
// an instruction, a BOM, variation selectors, a Hangul filler and private
// use characters.
const invisibleAttack = "safe\u2066\u202e txet \u202c\u2069\u200b\u200d\U000E0069\U000E0067\U000E006E\ufeff\ufe0f\u3164\ue000\U000F0000 end"

// checkSafeText asserts that s, text the model or a terminal reads, holds
// no rune textsafe calls unsafe.
func checkSafeText(t testing.TB, what, s string) {
	t.Helper()
	if i := textsafe.IndexUnsafe(s); i >= 0 {
		t.Errorf("%s holds an unsafe rune at byte %d: %q", what, i, hostile.Truncate(s[i:], 200))
	}
}

// checkToolMessageSafe asserts a tool message is safe text and, where it
// is JSON, that every string inside it is too once decoded (a "\u001b"
// escape is an ESC to whoever decodes it).
func checkToolMessageSafe(t testing.TB, what, content string) {
	t.Helper()
	checkSafeText(t, what, content)
	var v any
	if json.Unmarshal([]byte(content), &v) != nil {
		return
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			checkSafeText(t, what+" (decoded string)", x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				checkSafeText(t, what+" (decoded key)", k)
				walk(e)
			}
		}
	}
	walk(v)
}

// TestRunToolTextReachesModelClean: through `agrun run`, what tools print
// (terminal escapes, raw or as JSON escapes, C1 controls, invisible
// characters) and their error messages reach the model's request without
// any rune textsafe calls unsafe, the JSON results still JSON; the session
// file holds the same clean messages.
func TestRunToolTextReachesModelClean(t *testing.T) {
	jsonOut, _ := json.Marshal(map[string]any{"x": hostile.TerminalAttack, "inv": invisibleAttack, invisibleAttack: 1})
	calls := []chattest.Call{
		{ID: "a", Name: "out_json", Args: string(hostile.ArgsJSON(t, hostile.Emit(t, string(jsonOut), "", 0)))},
		{ID: "b", Name: "out_text", Args: string(hostile.ArgsJSON(t, hostile.Emit(t, hostile.TerminalAttack+invisibleAttack, "", 0)))},
		{ID: "c", Name: "out_json", Args: string(hostile.ArgsJSON(t, hostile.Emit(t, "", hostile.TerminalAttack+invisibleAttack, 1)))},
		{ID: "d", Name: "out_json", Args: string(hostile.ArgsJSON(t, hostile.Emit(t, `{"error":"\u001b]0;pwned\u0007\u009b31m\u202e`+strings.ReplaceAll(invisibleAttack, `"`, ``)+`"}`, "", 1)))},
	}
	srv := chattest.New(t, chattest.Reply{ToolCalls: calls}, chattest.Reply{Text: "done"})
	e := hostile.NewCLIEnv(t, srv.URL, "")
	r := e.Run("", "run", "--session", "clean", "hi")
	if r.Code != 0 {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", r.Code, hostile.Truncate(string(r.Stdout), 500), hostile.Truncate(string(r.Stderr), 500))
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	var tools int
	for _, m := range reqs[1].Messages {
		if m.Role != "tool" || m.Content == nil {
			continue
		}
		tools++
		checkToolMessageSafe(t, "tool message "+m.ToolCallID, *m.Content)
	}
	if tools != len(calls) {
		t.Errorf("%d tool messages for %d calls", tools, len(calls))
	}
	b, err := os.ReadFile(filepath.Join(e.Dir, "sessions", "clean.jsonl"))
	hostile.Must(t, err)
	checkSafeText(t, "session file", string(b))
}

// TestSessionWithHugeLine: a session whose file got a 100 MB tool message
// line (as agrun wrote before tool messages were capped, or a hand-edited
// file) still lists, shows and continues: the line is kept with its
// content cut and a warning, the model is not sent 100 MB, and the lines
// after it are intact. It used to fail every command with "bufio: buffer
// full".
func TestSessionWithHugeLine(t *testing.T) {
	srv := chattest.New(t, chattest.Reply{Text: "continued"})
	e := hostile.NewCLIEnv(t, srv.URL, "")
	dir := filepath.Join(e.Dir, "sessions")
	hostile.Must(t, os.MkdirAll(dir, 0o700))
	f, err := os.OpenFile(filepath.Join(dir, "huge.jsonl"), os.O_CREATE|os.O_WRONLY, 0o600)
	hostile.Must(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	line := func(msg string) {
		b, err := json.Marshal(map[string]any{"time": time.Unix(1700000000, 0).UTC(), "message": json.RawMessage(msg)})
		hostile.Must(t, err)
		w.Write(append(b, '\n'))
	}
	line(`{"role":"user","content":"first prompt"}`)
	line(`{"role":"assistant","tool_calls":[{"id":"c1","name":"out_json","arguments":"{}"}]}`)
	// The 100 MB line, written in pieces: a trap's text, escapes and all.
	w.WriteString(`{"time":"2023-11-14T22:13:20Z","message":{"role":"tool","content":"error (execution_failed): trap `)
	chunk := strings.Repeat(`\u001b]0;x\u0007\t.$f(i32) `, 1<<12)
	for n := 0; n < 100<<20; n += len(chunk) {
		w.WriteString(chunk)
	}
	w.WriteString(`","tool_call_id":"c1","name":"out_json"}}` + "\n")
	line(`{"role":"assistant","content":"after the huge line"}`)
	hostile.Must(t, w.Flush())
	hostile.Must(t, f.Close())

	r := e.Run("", "sessions")
	if r.Code != 0 || !bytes.Contains(r.Stdout, []byte("huge")) {
		t.Errorf("sessions: exit %d\nstdout %q\nstderr %q", r.Code, r.Stdout, hostile.Truncate(string(r.Stderr), 500))
	}
	r = e.Run("", "sessions", "show", "huge")
	if r.Code != 0 || !bytes.Contains(r.Stdout, []byte("after the huge line")) || !bytes.Contains(r.Stderr, []byte("line 3")) {
		t.Errorf("sessions show: exit %d\nstdout %q\nstderr %q", r.Code, hostile.Truncate(string(r.Stdout), 500), hostile.Truncate(string(r.Stderr), 500))
	}
	hostile.CheckTerminalSafe(t, "sessions show stdout", r.Stdout)
	hostile.CheckTerminalSafe(t, "sessions show stderr", r.Stderr)

	r = e.Run("", "run", "--session", "huge", "go on")
	if r.Code != 0 || !bytes.Contains(r.Stdout, []byte("continued")) {
		t.Fatalf("run --session huge: exit %d\nstdout %q\nstderr %q", r.Code, hostile.Truncate(string(r.Stdout), 500), hostile.Truncate(string(r.Stderr), 500))
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests", len(reqs))
	}
	if n := len(reqs[0].Raw); n > 1<<20 {
		t.Errorf("the model request is %d bytes: the huge line went to the model", n)
	}
	var roles []string
	for _, m := range reqs[0].Messages {
		roles = append(roles, m.Role)
		if m.Role == "tool" && m.Content != nil {
			checkToolMessageSafe(t, "resumed tool message", *m.Content)
		}
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,tool,assistant,user" && got != "user,assistant,tool,assistant,user" {
		t.Errorf("resumed history roles %s", got)
	}
	r = e.Run("", "sessions", "show", "huge")
	if r.Code != 0 || !bytes.Contains(r.Stdout, []byte("continued")) {
		t.Errorf("show after continuing: exit %d\nstdout %q", r.Code, hostile.Truncate(string(r.Stdout), 500))
	}
}
