package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/session"
)

// edit replaces old with new in the test config.
func (e *testEnv) edit(old, new string) {
	e.t.Helper()
	b, err := os.ReadFile(e.config)
	if err != nil || !strings.Contains(string(b), old) {
		e.t.Fatalf("config lacks %q", old)
	}
	os.WriteFile(e.config, []byte(strings.Replace(string(b), old, new, 1)), 0o644)
}

func hasTool(r chattest.Request, name string) bool {
	for _, tl := range r.Tools {
		if tl.Function.Name == name {
			return true
		}
	}
	return false
}

// A tool result over its cap ([tools.X] max_tool_result) reaches the
// model cut; the session keeps it whole; the model pages through it with
// agrun_result_page, in this run and after `run --session` resumes it;
// `sessions compact` then shrinks the file, and refuses a session in use.
func TestRunBigToolResultIsPagedAndCompacted(t *testing.T) {
	t.Parallel()
	var page struct {
		Field      string `json:"field"`
		Text       string `json:"text"`
		Total      int    `json:"total"`
		NextOffset *int   `json:"next_offset"`
	}
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "read_file", Args: `{"path":"/docs/big.txt","max_bytes":524288}`}}},
		chattest.Reply{Check: func(t testing.TB, got chattest.Request) {
			last := got.Messages[len(got.Messages)-1]
			if len(*last.Content) > 8<<10 || !strings.Contains(*last.Content, "agrun_result_page") || !hasTool(got, "agrun_result_page") {
				t.Errorf("cut result: %d bytes, page tool offered %v", len(*last.Content), hasTool(got, "agrun_result_page"))
			}
		}, ToolCalls: []chattest.Call{{ID: "call_2", Name: "agrun_result_page", Args: `{"call_id":"call_1","offset":300000,"length":64}`}}},
		chattest.Reply{Check: func(t testing.TB, got chattest.Request) {
			if err := json.Unmarshal([]byte(*got.Messages[len(got.Messages)-1].Content), &page); err != nil {
				t.Errorf("page: %v", err)
			}
		}, Text: "Read it."},
		chattest.Reply{Check: func(t testing.TB, got chattest.Request) {
			if !hasTool(got, "agrun_result_page") {
				t.Errorf("page tool not offered after resume")
			}
		}, ToolCalls: []chattest.Call{{ID: "call_3", Name: "agrun_result_page", Args: `{"call_id":"call_1","offset":1000,"length":10}`}}},
		chattest.Reply{Check: func(t testing.TB, got chattest.Request) {
			if c := *got.Messages[len(got.Messages)-1].Content; !strings.Contains(c, `"offset":1000,"length":10`) {
				t.Errorf("page after resume: %s", c)
			}
		}, Text: "Again."},
	)
	e := newTestEnv(t, srv.URL, "")
	e.edit(`mounts = ["./docs:/docs:ro"]`, "mounts = [\"./docs:/docs:ro\"]\nmax_tool_result = \"8KiB\"")
	e.edit(`timeout = "10s"`, "timeout = \"10s\"\nmax_output = \"4MiB\"")
	var b strings.Builder
	for b.Len() < 600000 {
		b.WriteString("the quick brown fox jumps over the lazy dog 0123456789\n")
	}
	big := b.String()
	os.WriteFile(filepath.Join(e.dir, "docs", "big.txt"), []byte(big), 0o644)

	r := e.run("", "run", "--session", "big", "read big.txt").wantCode(t, exitOK)
	if !strings.HasSuffix(r.stdout, "Read it.\n") {
		t.Fatalf("stdout %q", r.stdout)
	}
	// The page is a piece of the file itself: read_file's result is
	// mostly its "content" text, which is paged, not the JSON escaping it.
	if page.Field != "content" || len(page.Text) != 64 || !strings.Contains(big, page.Text) || page.Total > len(big) {
		t.Errorf("page = %+v", page)
	}
	file := filepath.Join(e.dir, "sessions", "big.jsonl")
	fi, _ := os.Stat(file)
	if fi == nil || fi.Size() < 500000 {
		t.Fatalf("the session does not keep the whole result: %v", fi)
	}
	e.run("", "run", "--session", "big", "again").wantCode(t, exitOK)

	// Compact: refused while in use, then the file shrinks and resumes.
	st, _ := session.OpenFiles(filepath.Join(e.dir, "sessions"))
	s, _, _, err := st.Open("big")
	if err != nil {
		t.Fatal(err)
	}
	r = e.run("", "sessions", "compact", "big").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "locked") {
		t.Errorf("compact of a locked session: %q", r.stderr)
	}
	s.Close()
	r = e.run("", "sessions", "compact", "--json", "--keep", "0", "big").wantCode(t, exitOK)
	var res struct {
		Before int64 `json:"bytes_before"`
		After  int64 `json:"bytes_after"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.After >= res.Before/10 {
		t.Fatalf("compact: %s %v", r.stdout, err)
	}
	if fi, _ := os.Stat(file); fi.Size() != res.After {
		t.Errorf("file is %d bytes, compact said %d", fi.Size(), res.After)
	}
	r = e.run("", "sessions", "show", "big").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "removed when the session was compacted") || !strings.Contains(r.stdout, "Again.") {
		t.Errorf("compacted session: %s", r.stdout)
	}
	e.run("", "sessions", "compact", "nope").wantCode(t, exitFailure)
}

// A provider's context_length_exceeded is trimmed and retried once; a
// run refused twice fails with kind context_overflow, and the session
// continues on the next run.
func TestRunContextOverflowThenContinue(t *testing.T) {
	t.Parallel()
	overflow := chattest.Reply{Status: 400, Body: `{"error":{"message":"This model's maximum context length is 1000 tokens. However, your messages resulted in 5000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`}
	srv := chattest.New(t,
		chattest.Reply{Text: "first"},
		overflow, overflow,
		overflow, chattest.Reply{Text: "continued"},
	)
	e := newTestEnv(t, srv.URL, "")
	e.run("", "run", "--session", "ov", "hello").wantCode(t, exitOK)
	r := e.run("", "run", "--json", "--session", "ov", "more").wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, `"kind":"context_overflow"`) {
		t.Fatalf("--json: %s", r.stdout)
	}
	r = e.run("", "run", "--session", "ov", "still there?").wantCode(t, exitOK)
	if !strings.HasSuffix(r.stdout, "continued\n") {
		t.Fatalf("stdout %q", r.stdout)
	}
}

// `run --schema` asks for JSON matching the schema, prints just the JSON,
// retries a wrong answer once, and fails with invalid_output after two;
// a schema that is not one is a usage error.
func TestRunSchema(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","properties":{"words":{"type":"integer"}},"required":["words"],"additionalProperties":false}`
	srv := chattest.New(t,
		chattest.Reply{Check: func(t testing.TB, got chattest.Request) {
			if !strings.Contains(string(got.ResponseFormat), `"json_schema"`) {
				t.Errorf("response_format %s", got.ResponseFormat)
			}
		}, Text: "There are 3 words."},
		chattest.Reply{Text: `{"words": 3}`},
		chattest.Reply{Text: `{"words":"three"}`}, chattest.Reply{Text: `{}`},
	)
	e := newTestEnv(t, srv.URL, "")
	file := filepath.Join(e.dir, "schema.json")
	os.WriteFile(file, []byte(schema), 0o644)
	r := e.run("", "run", "--schema", file, "count a b c").wantCode(t, exitOK)
	if r.stdout != "{\"words\": 3}\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "does not match the schema") {
		t.Errorf("stderr %q", r.stderr)
	}
	r = e.run("", "run", "--json", "--schema", schema, "count").wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, `"type":"structured_output","valid":false`) || !strings.Contains(r.stdout, `"kind":"invalid_output"`) {
		t.Fatalf("--json: %s", r.stdout)
	}
	e.run("", "run", "--schema", `{"type":"array"}`, "x").wantCode(t, exitUsage)
	e.run("", "run", "--schema", filepath.Join(e.dir, "missing.json"), "x").wantCode(t, exitUsage)
}

// In `agrun chat` a refused-as-too-long turn fails with the provider's
// message and the next line goes on in the same session; a cut result is
// paged with the built-in tool.
func TestChatOverflowAndPaging(t *testing.T) {
	t.Parallel()
	overflow := chattest.Reply{Status: 400, Body: `{"error":{"message":"prompt is too long: 9000 tokens > 4000 maximum","type":"invalid_request_error"}}`}
	// The first line overflows with nothing to trim: it ends at once (one
	// request), and the chat goes on.
	srv := chattest.New(t,
		overflow,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "read_file", Args: `{"path":"/docs/big.txt","max_bytes":100000}`}}},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c2", Name: "agrun_result_page", Args: `{"call_id":"c1","offset":50000,"length":20}`}}},
		chattest.Reply{Check: func(t testing.TB, got chattest.Request) {
			if c := *got.Messages[len(got.Messages)-1].Content; !strings.Contains(c, `"offset":50000,"length":20`) {
				t.Errorf("page: %s", c)
			}
		}, Text: "paged"},
	)
	e := newTestEnv(t, srv.URL, "")
	e.edit(`max_turns = 5`, "max_turns = 5\nmax_tool_result = \"4KiB\"")
	os.WriteFile(filepath.Join(e.dir, "docs", "big.txt"), []byte(strings.Repeat("0123456789abcdef\n", 8000)), 0o644)
	r := e.run("first\nsecond\n", "chat", "--session", "ch").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "prompt is too long") || !strings.Contains(r.stdout, "paged") {
		t.Fatalf("stdout %q\nstderr %q", r.stdout, r.stderr)
	}
}
