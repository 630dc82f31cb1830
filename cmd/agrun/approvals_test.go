package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/agcore/agrun/session"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testguest"
)

// runTTY runs the CLI in-process as run does, with stdin taken for a
// terminal: the approval questions are asked on stderr and answered by
// the lines of stdin.
func (e *testEnv) runTTY(stdin string, args ...string) result {
	e.t.Helper()
	var out, errb bytes.Buffer
	c := &cli{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, terminal: func(any) bool { return true }}
	code := c.main(context.Background(), append([]string{"-c", e.config}, args...))
	return result{out.String(), errb.String(), code}
}

// approvalEnv is a test env whose [approvals] ask about writes, with a
// scripted model that first calls write_note and word_count in one reply.
func approvalEnv(t *testing.T, extra string, replies ...chattest.Reply) (*testEnv, *chattest.Server) {
	t.Helper()
	script := append([]chattest.Reply{{ToolCalls: []chattest.Call{
		{ID: "call_w", Name: "write_note", Args: `{"name":"n1","text":"hi"}`},
		{ID: "call_c", Name: "word_count", Args: `{"text":"a b"}`},
	}}}, replies...)
	srv := chattest.New(t, script...)
	return newTestEnv(t, srv.URL, "\n[approvals]\nask = [\"write\"]\n"+extra), srv
}

// toolMessage returns the content of the tool message answering id in
// request i.
func toolMessage(t *testing.T, srv *chattest.Server, i int, id string) string {
	t.Helper()
	reqs := srv.Requests()
	if len(reqs) <= i {
		t.Fatalf("%d requests, want more than %d", len(reqs), i)
	}
	for _, m := range reqs[i].Messages {
		if m.Role == "tool" && m.ToolCallID == id && m.Content != nil {
			return *m.Content
		}
	}
	t.Fatalf("request %d has no tool message for %s", i, id)
	return ""
}

// decisions returns the decision records of a session.
func decisions(t *testing.T, e *testEnv, id string) []map[string]any {
	t.Helper()
	r := e.run("", "sessions", "show", "--json", id).wantCode(t, exitOK)
	var recs []struct {
		Decision map[string]any `json:"decision"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil {
		t.Fatalf("sessions show --json: %v: %s", err, r.stdout)
	}
	var out []map[string]any
	for _, r := range recs {
		if r.Decision != nil {
			out = append(out, r.Decision)
		}
	}
	return out
}

// TestApprovalPromptOnce: on a terminal, the call that writes is asked
// about with its grant shown concretely (the mount's host path and mode,
// the write limit, the arguments); the call that needs no yes runs
// anyway; "y" runs the call once, through the real mount; the decision
// is in the session.
func TestApprovalPromptOnce(t *testing.T) {
	t.Parallel()
	e, srv := approvalEnv(t, "", chattest.Reply{Text: "Written."})
	r := e.runTTY("y\n", "run", "--session", "a1", "write a note").wantCode(t, exitOK)
	notes := filepath.Join(e.dir, "notes")
	want := `agrun: write_note wants to write to /notes (host ` + notes + `, rw, max 64MiB) with {"name":"n1","text":"hi"}`
	if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "[y] once, [s] for this session, [a] always for this tool, [n] no (say why)") ||
		!strings.Contains(r.stderr, "permissions: filesystem, write; limits: timeout 10s, memory 64MiB, output 1MiB") {
		t.Fatalf("question not shown as expected:\n%s", r.stderr)
	}
	if n := strings.Count(r.stderr, "approve? "); n != 1 {
		t.Fatalf("asked %d times (word_count needs no approval)", n)
	}
	if b, err := os.ReadFile(filepath.Join(notes, "n1.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("note: %q %v", b, err)
	}
	if m := toolMessage(t, srv, 1, "call_c"); !strings.Contains(m, `"words":2`) {
		t.Fatalf("word_count: %s", m)
	}
	d := decisions(t, e, "a1")
	if len(d) != 1 || d[0]["answer"] != "once" || d[0]["by"] != "user" || d[0]["tool"] != "write_note" || d[0]["time"] == nil {
		t.Fatalf("decisions %v", d)
	}
	if g, _ := d[0]["grant"].(map[string]any); g == nil || !strings.Contains(mustJSON(g["mounts"]), `"mode":"rw"`) {
		t.Fatalf("decision's grant %v", d[0]["grant"])
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestApprovalPromptDeny: "n" with a reason (on the same line or the
// next) denies the call: nothing is written, the model reads
// "error (denied_by_user): <reason>", the run goes on to its answer.
func TestApprovalPromptDeny(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ stdin, reason string }{
		{"n not in my notes\n", "not in my notes"},
		{"no\nwrong folder\n", "wrong folder"},
		{"maybe\nn\n\n", "denied by the user"}, // a bad answer is asked again; no reason given
	} {
		t.Run(tc.reason, func(t *testing.T) {
			e, srv := approvalEnv(t, "", chattest.Reply{Text: "OK, not written."})
			r := e.runTTY(tc.stdin, "run", "--session", "d1", "write a note").wantCode(t, exitOK)
			if !strings.HasSuffix(r.stdout, "OK, not written.\n") || !strings.Contains(r.stderr, "error (denied_by_user)") {
				t.Fatalf("stdout %q stderr %s", r.stdout, r.stderr)
			}
			if m := toolMessage(t, srv, 1, "call_w"); m != "error (denied_by_user): "+tc.reason {
				t.Fatalf("tool message %q", m)
			}
			if ents, _ := os.ReadDir(filepath.Join(e.dir, "notes")); len(ents) != 0 {
				t.Fatalf("a denied call wrote %v", ents)
			}
			if d := decisions(t, e, "d1"); len(d) != 1 || d[0]["answer"] != "deny" {
				t.Fatalf("decisions %v", d)
			}
			if r := e.run("", "sessions", "show", "d1"); !strings.Contains(r.stdout, "# approval: write_note call_w: deny by user") {
				t.Fatalf("sessions show: %s", r.stdout)
			}
			if r := e.run("", "sessions", "show", "d1"); tc.reason != "denied by the user" && !strings.Contains(r.stdout, "("+tc.reason+")") {
				t.Fatalf("sessions show: %s", r.stdout)
			}
		})
	}
}

// TestApprovalSessionAndNonTTY: "s" approves the tool for the rest of the
// session (a second call is not asked about); without a terminal the
// call is denied, said on stderr and recorded as non-interactive.
func TestApprovalSessionAndNonTTY(t *testing.T) {
	t.Parallel()
	again := chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_w2", Name: "write_note", Args: `{"name":"n2","text":"again"}`}}}
	e, srv := approvalEnv(t, "", again, chattest.Reply{Text: "Both written."})
	r := e.runTTY("s\n", "run", "--session", "s1", "write two notes").wantCode(t, exitOK)
	if n := strings.Count(r.stderr, "approve? "); n != 1 {
		t.Fatalf("asked %d times:\n%s", n, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "notes", "n2.txt")); err != nil {
		t.Fatal(err)
	}
	if d := decisions(t, e, "s1"); len(d) != 2 || d[0]["answer"] != "session" || d[1]["remembered"] != true {
		t.Fatalf("decisions %v", d)
	}

	e2, srv2 := approvalEnv(t, "", chattest.Reply{Text: "Could not write."})
	r = e2.run("", "run", "--session", "n1", "write a note").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "write_note needs approval and there is no terminal to ask: denied") {
		t.Fatalf("stderr %s", r.stderr)
	}
	if m := toolMessage(t, srv2, 1, "call_w"); !strings.HasPrefix(m, "error (denied_by_user): the call needs a person's approval") {
		t.Fatalf("tool message %q", m)
	}
	if d := decisions(t, e2, "n1"); len(d) != 1 || d[0]["by"] != "non-interactive" || d[0]["answer"] != "deny" {
		t.Fatalf("decisions %v", d)
	}
	_ = srv
}

// TestApprovalAlwaysPersists: "a" approves the tool for this grant in
// later runs too (the approvals file, no terminal needed), `approvals
// list` shows it, `approvals revoke` ends it.
func TestApprovalAlwaysPersists(t *testing.T) {
	t.Parallel()
	first := []chattest.Call{{ID: "call_w", Name: "write_note", Args: `{"name":"n1","text":"hi"}`}}
	e, srv := approvalEnv(t, "", chattest.Reply{Text: "one"},
		chattest.Reply{ToolCalls: first}, chattest.Reply{Text: "two"},
		chattest.Reply{ToolCalls: first}, chattest.Reply{Text: "three"})
	e.runTTY("a\n", "run", "write").wantCode(t, exitOK)
	file := filepath.Join(e.dir, "sessions", "approvals.json")
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("approvals file: %v %v", fi, err)
	}
	r := e.run("", "run", "--session", "p2", "write again").wantCode(t, exitOK) // no terminal
	if strings.Contains(r.stderr, "denied") || toolMessage(t, srv, 3, "call_w") != `{"path":"/notes/n1.txt","bytes":2}` {
		t.Fatalf("standing approval not used: %s", r.stderr)
	}
	if d := decisions(t, e, "p2"); len(d) != 1 || d[0]["answer"] != "always" || d[0]["by"] != "approvals file" {
		t.Fatalf("decisions %v", d)
	}
	r = e.run("", "approvals", "list").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "write_note") || !strings.Contains(r.stdout, "/notes="+filepath.Join(e.dir, "notes")+":rw") {
		t.Fatalf("approvals list: %s", r.stdout)
	}
	r = e.run("", "approvals", "list", "--json").wantCode(t, exitOK)
	var list []session.StandingApproval
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].Tool != "write_note" || list[0].By != "user" {
		t.Fatalf("approvals list --json: %s %v", r.stdout, err)
	}
	// What was done goes to stdout, as sessions rm's; a second revoke fails.
	if r := e.run("", "approvals", "revoke", "write_note").wantCode(t, exitOK); r.stdout != "revoked write_note\n" || r.stderr != "" {
		t.Fatalf("revoke: %+v", r)
	}
	e.run("", "approvals", "revoke", "write_note").wantCode(t, exitFailure)
	r = e.run("", "run", "write a third time").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "no terminal to ask: denied") {
		t.Fatalf("revoked approval still used: %s", r.stderr)
	}
	e.run("", "approvals", "nope").wantCode(t, exitUsage)
	for _, sub := range []string{"list", "revoke"} {
		if r := e.run("", "approvals", sub, "-h").wantCode(t, exitOK); !strings.HasPrefix(r.stdout, cmdDocs["approvals "+sub].summary) {
			t.Fatalf("approvals %s -h: %s", sub, r.stdout)
		}
	}
}

// TestApprovalPolicyKeys: approve = "never" denies without asking, even
// on a terminal; approve = "ask" asks about a tool that uses nothing in
// [approvals] ask; approve = "always" runs a writing tool unasked.
func TestApprovalPolicyKeys(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{
			{ID: "call_w", Name: "write_note", Args: `{"name":"n1","text":"hi"}`},
			{ID: "call_c", Name: "word_count", Args: `{"text":"a b"}`},
		}},
		chattest.Reply{Text: "done"})
	e := newTestEnv(t, srv.URL, "")
	cfg, _ := os.ReadFile(e.config)
	cfg = bytes.Replace(cfg, []byte("[tools.word_count]\n"), []byte("[tools.word_count]\napprove = \"ask\"\n"), 1)
	cfg = bytes.Replace(cfg, []byte("[tools.write_note]\n"), []byte("[tools.write_note]\napprove = \"never\"\n"), 1)
	os.WriteFile(e.config, cfg, 0o644)
	r := e.runTTY("y\n", "run", "go").wantCode(t, exitOK)
	if n := strings.Count(r.stderr, "approve? "); n != 1 || !strings.Contains(r.stderr, "agrun: word_count wants to run with") {
		t.Fatalf("asked %d times:\n%s", n, r.stderr)
	}
	if m := toolMessage(t, srv, 1, "call_w"); !strings.Contains(m, `error (denied_by_user): the configuration does not allow this tool (approve = "never")`) {
		t.Fatalf("tool message %q", m)
	}
	if m := toolMessage(t, srv, 1, "call_c"); !strings.Contains(m, `"words":2`) {
		t.Fatalf("tool message %q", m)
	}
}

// TestApprovalChat: in chat the question is answered by the next line of
// the same input, and the conversation goes on.
func TestApprovalChat(t *testing.T) {
	t.Parallel()
	e, srv := approvalEnv(t, "", chattest.Reply{Text: "Written."})
	r := e.runTTY("write a note\ny\n/exit\n", "chat", "--session", "c1").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "write_note wants to write to /notes") || !strings.Contains(r.stdout, "Written.") {
		t.Fatalf("stdout %q stderr %s", r.stdout, r.stderr)
	}
	if m := toolMessage(t, srv, 1, "call_w"); m != `{"path":"/notes/n1.txt","bytes":2}` {
		t.Fatalf("tool message %q", m)
	}
}

// TestApprovalQuestionIsClean: text from the model in the question is
// escaped, newlines included, so it cannot forge a line of the question.
func TestApprovalQuestionIsClean(t *testing.T) {
	t.Parallel()
	e, _ := approvalEnv(t, "", chattest.Reply{Text: "ok"})
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_w", Name: "write_note", Args: "{\"name\":\"x\",\n\"text\":\"\x1b[2J\\n[y] is safe\"}"}}},
		chattest.Reply{Text: "ok"})
	cfg, _ := os.ReadFile(e.config)
	cfg = bytes.Replace(cfg, []byte(strings.Split(string(cfg), "\n")[1]), []byte("base_url = \""+srv.URL+"\""), 1)
	os.WriteFile(e.config, cfg, 0o644)
	r := e.runTTY("n\n\n", "run", "go").wantCode(t, exitOK)
	if strings.Contains(r.stderr, "\x1b") || strings.Contains(r.stderr, "\n[y] is safe") {
		t.Fatalf("unsafe question:\n%q", r.stderr)
	}
}

// TestApprovalJSONPauseAndResume: `run --json` prints an
// approval_required event for the call that needs a yes (the call that
// needs none runs), then approval_pending with the session, and exits 3;
// `--approve` resumes the saved session from the waiting call without
// repeating the model request; `--deny ID:reason` sends the reason.
func TestApprovalJSONPauseAndResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, flag, want string
	}{
		{"approve", "--approve=call_w", `{"path":"/notes/n1.txt","bytes":2}`},
		{"deny", "--deny=call_w:not today", "error (denied_by_user): not today"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, srv := approvalEnv(t, "", chattest.Reply{Text: "Finished."})
			r := e.run("", "run", "--json", "--session", "j1", "write a note").wantCode(t, exitApproval)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			var ev struct {
				Type, CallID, Tool string
				Input              map[string]any
				Grant              struct {
					Mounts []struct{ Guest, Host, Mode string }
				}
			}
			var req, last map[string]any
			for _, l := range lines {
				if strings.HasPrefix(l, `{"type":"approval_required"`) {
					json.Unmarshal([]byte(l), &req)
					if err := json.Unmarshal([]byte(strings.ReplaceAll(l, `"call_id"`, `"callid"`)), &ev); err != nil {
						t.Fatal(err)
					}
				}
			}
			json.Unmarshal([]byte(lines[len(lines)-1]), &last)
			if req["call_id"] != "call_w" || ev.Tool != "write_note" || ev.Input["name"] != "n1" || len(ev.Grant.Mounts) != 1 || ev.Grant.Mounts[0].Mode != "rw" {
				t.Fatalf("approval_required: %v\n%s", req, r.stdout)
			}
			if last["type"] != "approval_pending" || last["session"] != "j1" || !strings.Contains(mustJSON(last["calls"]), "call_w") {
				t.Fatalf("last line %v", last)
			}
			if !strings.Contains(r.stdout, `"type":"tool_completed","id":"call_c"`) {
				t.Fatalf("word_count did not run: %s", r.stdout)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Fatalf("%d requests", n)
			}

			r = e.run("", "run", "--json", "--session", "j1", tc.flag).wantCode(t, exitOK)
			if n := len(srv.Requests()); n != 2 {
				t.Fatalf("%d requests after resume: the model request was repeated or not made", n)
			}
			if m := toolMessage(t, srv, 1, "call_w"); m != tc.want {
				t.Fatalf("tool message %q", m)
			}
			if m := toolMessage(t, srv, 1, "call_c"); !strings.Contains(m, `"words":2`) {
				t.Fatalf("word_count's answer lost: %q", m)
			}
			if !strings.Contains(r.stdout, `"type":"done","session":"j1","text":"Finished."`) {
				t.Fatalf("resume output %s", r.stdout)
			}
			if d := decisions(t, e, "j1"); len(d) != 1 || !strings.HasPrefix(d[0]["by"].(string), "--") {
				t.Fatalf("decisions %v", d)
			}
			// Nothing waits any more.
			r = e.run("", "run", "--json", "--session", "j1", tc.flag).wantCode(t, exitFailure)
			if !strings.Contains(r.stdout, "no tool call waits") {
				t.Fatalf("second resume: %s", r.stdout)
			}
		})
	}
	e, _ := approvalEnv(t, "")
	e.run("", "run", "--approve", "call_1").wantCode(t, exitUsage)
	e.run("", "run", "--session", "x", "--approve", "call_1", "a prompt").wantCode(t, exitUsage)
}

// TestApprovalServeAsksClient: an `agrun serve` run asks its client about
// a call that needs a yes: the stream carries approval_required (the grant
// without the operator's host directories), GET /v1/runs/ID lists the
// pending call, POST /v1/runs/ID/approvals decides it and the run goes on;
// a denial reaches the model as denied_by_user and nothing is written; a
// decision about no pending call is a 404, a bad answer a 400.
func TestApprovalServeAsksClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		answer, wantTool string
		written          bool
	}{
		{"once", "", true},
		{"deny", "not today", false},
	} {
		t.Run(tc.answer, func(t *testing.T) {
			e, srv := approvalEnv(t, "", chattest.Reply{Text: "Done."})
			base := startServe(t, e)
			type sseEvent struct{ typ, data string }
			events := make(chan sseEvent, 64)
			go func() {
				defer close(events)
				resp, err := http.Post(base+"/v1/runs", "application/json", strings.NewReader(`{"prompt":"write a note","session":"srv1"}`))
				if err != nil {
					return
				}
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				var typ string
				for sc.Scan() {
					line := sc.Text()
					if v, ok := strings.CutPrefix(line, "event: "); ok {
						typ = v
					} else if v, ok := strings.CutPrefix(line, "data: "); ok {
						events <- sseEvent{typ, v}
					}
				}
			}()
			var asked string
			for ev := range events {
				if ev.typ == "approval_required" {
					asked = ev.data
					break
				}
			}
			if !strings.Contains(asked, `"call_id":"call_w"`) || !strings.Contains(asked, `"tool":"write_note"`) || strings.Contains(asked, e.dir) {
				t.Fatalf("approval_required: %s", asked)
			}
			get := func(path string) (int, string) {
				resp, err := http.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			post := func(body string) (int, string) {
				resp, err := http.Post(base+"/v1/runs/srv1/approvals", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			if code, body := get("/v1/runs/srv1"); code != 200 || !strings.Contains(body, `"state":"awaiting_approval"`) || !strings.Contains(body, `"call_id":"call_w"`) {
				t.Fatalf("GET run: %d %s", code, body)
			}
			if code, _ := get("/v1/runs/nosuch"); code != 404 {
				t.Fatalf("GET unknown run: %d", code)
			}
			if code, _ := post(`{"call_id":"call_w","answer":"always"}`); code != 400 {
				t.Fatalf("always over the API: %d", code)
			}
			if code, _ := post(`{"call_id":"call_x","answer":"once"}`); code != 404 {
				t.Fatalf("no such pending call: %d", code)
			}
			if code, body := post(fmt.Sprintf(`{"call_id":"call_w","answer":%q,"reason":%q}`, tc.answer, tc.wantTool)); code != 200 {
				t.Fatalf("decide: %d %s", code, body)
			}
			// A second decision finds the call taken: 404, as docs/API.md says.
			if code, body := post(`{"call_id":"call_w","answer":"once"}`); code != 404 || !strings.Contains(body, `"kind":"not_found"`) {
				t.Fatalf("a second decision: %d %s", code, body)
			}
			var rest strings.Builder
			for ev := range events {
				rest.WriteString(ev.typ + " " + ev.data + "\n")
			}
			if !strings.Contains(rest.String(), "done ") {
				t.Fatalf("the run did not finish: %s", rest.String())
			}
			m := toolMessage(t, srv, 1, "call_w")
			ents, _ := os.ReadDir(filepath.Join(e.dir, "notes"))
			if tc.written {
				if strings.HasPrefix(m, "error") || len(ents) != 1 {
					t.Fatalf("approved: tool message %q, notes %v", m, ents)
				}
			} else if !strings.Contains(m, "denied_by_user") || !strings.Contains(m, "not today") || len(ents) != 0 {
				t.Fatalf("denied: tool message %q, notes %v", m, ents)
			}
			if code, _ := get("/v1/runs/srv1"); code != 404 {
				t.Fatalf("the finished run is still listed: %d", code)
			}
		})
	}
}

// startServe runs `agrun serve` on e's config on a free loopback port and
// returns its base URL; it stops with the test. Its data directory (its
// runs' sessions) is the test's own, a [serve] data_dir added to the
// config; $AGRUN_TOKENS is unset for the package (TestMain): serve trusts
// loopback clients.
func startServe(t *testing.T, e *testEnv) string {
	t.Helper()
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), "\n[serve]\n") {
		t.Fatal("startServe adds the [serve] table; the config has one")
	}
	if err := os.WriteFile(e.config, fmt.Appendf(cfg, "\n[serve]\ndata_dir = %q\n", t.TempDir()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-c", e.config, "serve", "--addr", "127.0.0.1:0"}, strings.NewReader(""), io.Discard, pw)
		pw.Close()
	}()
	t.Cleanup(func() { cancel(); <-done })
	sc := bufio.NewScanner(pr)
	var base string
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving on "); ok {
			base, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	if base == "" {
		t.Fatal("no serving line")
	}
	go io.Copy(io.Discard, pr)
	return base
}

// TestApprovalMCPAnnotations: a real stdio MCP server's annotations
// decide what is asked: with ask = ["delete"], its destructive tool (no
// destructiveHint: MCP's default) is asked about, shown as running on
// that server with its hints, and its read-only tool runs unasked.
func TestApprovalMCPAnnotations(t *testing.T) {
	t.Parallel()
	server := testguest.BuildNative(t, filepath.Join("testdata", "mcp-annotated"))
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{
			{ID: "call_rm", Name: "files__rm", Args: `{"path":"/x"}`},
			{ID: "call_read", Name: "files__read", Args: `{"path":"/y"}`},
		}},
		chattest.Reply{Text: "done"})
	e := newTestEnv(t, srv.URL, fmt.Sprintf("\n[approvals]\nask = [\"delete\"]\n\n[mcp.files]\ncommand = %q\npermissions = [\"read\"]\n", server))
	r := e.runTTY("n keep it\n", "run", "tidy up").wantCode(t, exitOK)
	if n := strings.Count(r.stderr, "approve? "); n != 1 || !strings.Contains(r.stderr, "agrun: files__rm wants to run on MCP server files (it says: destructive) with {\"path\":\"/x\"}") {
		t.Fatalf("asked %d times:\n%s", n, r.stderr)
	}
	if m := toolMessage(t, srv, 1, "call_rm"); m != "error (denied_by_user): keep it" {
		t.Fatalf("rm: %q", m)
	}
	if m := toolMessage(t, srv, 1, "call_read"); !strings.Contains(m, "contents of /y") {
		t.Fatalf("read: %q", m)
	}
}

// TestDevNullIsNotATerminal: `agrun run ... </dev/null` (what `run -h`
// recommends for scripts) asks nobody: /dev/null is a character device
// but no terminal, so the call is denied and recorded non-interactive.
func TestDevNullIsNotATerminal(t *testing.T) {
	t.Parallel()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Fatalf("%s is taken for a terminal", os.DevNull)
	}
	e, _ := approvalEnv(t, "", chattest.Reply{Text: "Could not write."})
	r := e.runWith(context.Background(), null, nil, "run", "--session", "d1", "write a note").wantCode(t, exitOK)
	if strings.Contains(r.stderr, "approve? ") {
		t.Fatalf("asked with stdin from %s:\n%s", os.DevNull, r.stderr)
	}
	if d := decisions(t, e, "d1"); len(d) != 1 || d[0]["by"] != "non-interactive" {
		t.Fatalf("decisions %v", d)
	}
}
