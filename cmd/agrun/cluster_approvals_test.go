//go:build cluster

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
)

// clusterApprovalEnv is approvalEnv ([approvals] ask about writes; the
// model first calls write_note and word_count) on a real Temporal dev
// server with one `agrun worker`: calls that need a yes wait in the
// workflow, approvalTimeout long at most.
func clusterApprovalEnv(t *testing.T, approvalTimeout string, replies ...chattest.Reply) (*testEnv, *chattest.Server) {
	t.Helper()
	addr := devtemporal.Start(t)
	e, srv := approvalEnv(t, fmt.Sprintf(`
[cluster]
temporal_address = %q
task_queue_prefix = "approvals-"
heartbeat_timeout = "2s"
approval_timeout = %q
module_store = "objects"
`, addr, approvalTimeout), replies...)
	startWorker(t, e, "w1")
	return e, srv
}

// approvalScript is one session's script of approvalEnv: the two calls
// (approvalEnv's first reply), then the answer.
func approvalScript(answer string) []chattest.Reply {
	return []chattest.Reply{{ToolCalls: []chattest.Call{
		{ID: "call_w", Name: "write_note", Args: `{"name":"n1","text":"hi"}`},
		{ID: "call_c", Name: "word_count", Args: `{"text":"a b"}`},
	}}, {Text: answer}}
}

// TestClusterApprovalJSONPauseAndResume (issue 28, 5): on the cluster,
// `run --json` stops where a call needs a yes exactly as locally: the
// approval_required event (call id, tool, input, grant with the rw
// mount), the approval_pending line last, exit 3 — while the run waits
// on the cluster; `run --session ID --approve CALL_ID` (or --deny
// CALL_ID:REASON) decides it there and shows the rest of the run: the
// model reads the call's result (or the denial's reason), the other
// call's result is kept, one decision record "--approve"/"--deny" is in
// the session, no model request is repeated; a second --approve is
// refused (nothing waits).
func TestClusterApprovalJSONPauseAndResume(t *testing.T) {
	t.Parallel()
	e, srv := clusterApprovalEnv(t, "10m", append([]chattest.Reply{{Text: "Finished."}}, approvalScript("Finished again.")...)...)
	for i, tc := range []struct {
		name, session, flag, want, done, by string
	}{
		{"approve", "j1", "--approve=call_w", `{"path":"/notes/n1.txt","bytes":2}`, "Finished.", "--approve"},
		{"deny", "j2", "--deny=call_w:not today", "error (denied_by_user): not today", "Finished again.", "--deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.run("", "run", "--json", "--session", tc.session, "write a note").wantCode(t, exitApproval)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			var req struct {
				Type   string         `json:"type"`
				CallID string         `json:"call_id"`
				Tool   string         `json:"tool"`
				Input  map[string]any `json:"input"`
				Grant  struct {
					Mounts []struct{ Guest, Host, Mode string }
				} `json:"grant"`
			}
			for _, l := range lines {
				if strings.HasPrefix(l, `{"type":"approval_required"`) {
					if err := json.Unmarshal([]byte(l), &req); err != nil {
						t.Fatal(err)
					}
				}
			}
			if req.CallID != "call_w" || req.Tool != "write_note" || req.Input["name"] != "n1" || len(req.Grant.Mounts) != 1 || req.Grant.Mounts[0].Mode != "rw" {
				t.Fatalf("approval_required: %+v\n%s", req, r.stdout)
			}
			var last map[string]any
			json.Unmarshal([]byte(lines[len(lines)-1]), &last)
			if last["type"] != "approval_pending" || last["session"] != tc.session || mustJSON(last["calls"]) != `["call_w"]` {
				t.Fatalf("last line %v", last)
			}
			if n := len(srv.Requests()); n != 2*i+1 {
				t.Fatalf("%d model requests", n)
			}

			r = e.run("", "run", "--json", "--session", tc.session, tc.flag).wantCode(t, exitOK)
			if n := len(srv.Requests()); n != 2*i+2 {
				t.Fatalf("%d requests after resume: the model request was repeated or not made", n)
			}
			if m := toolMessage(t, srv, 2*i+1, "call_w"); m != tc.want {
				t.Fatalf("tool message %q", m)
			}
			if m := toolMessage(t, srv, 2*i+1, "call_c"); !strings.Contains(m, `"words":2`) {
				t.Fatalf("word_count's answer lost: %q", m)
			}
			if !strings.Contains(r.stdout, `"type":"tool_completed","id":"call_w"`) ||
				!strings.Contains(r.stdout, `"type":"done","session":"`+tc.session+`","text":"`+tc.done+`"`) {
				t.Fatalf("resume output %s", r.stdout)
			}
			if d := decisions(t, e, tc.session); len(d) != 1 || d[0]["by"] != tc.by || d[0]["call_id"] != "call_w" {
				t.Fatalf("decisions %v", d)
			}
			r = e.run("", "run", "--json", "--session", tc.session, tc.flag).wantCode(t, exitFailure)
			if !strings.Contains(r.stdout, "no tool call waits") {
				t.Fatalf("second resume: %s", r.stdout)
			}
		})
	}
	_, err := os.Stat(filepath.Join(e.dir, "notes", "n1.txt"))
	if err != nil {
		t.Fatalf("the approved call did not write: %v", err)
	}
}

// TestClusterApprovalOnTheTerminal (issue 28, 5): `agrun run` on the
// cluster asks the person at the terminal with the local path's question
// (the grant shown concretely, the same answers): "y" runs the call once
// through the real mount, with a decision record "once" by "user"; "a"
// runs it and keeps the tool in the approvals file (agrun approvals
// lists it), so that the next run's call is not asked about; without a
// terminal the call is denied, said on stderr, and the model told why.
func TestClusterApprovalOnTheTerminal(t *testing.T) {
	t.Parallel()
	var script []chattest.Reply
	script = append(script, chattest.Reply{Text: "Written."})
	for _, a := range []string{"Denied.", "Always.", "Again."} {
		script = append(script, approvalScript(a)...)
	}
	e, srv := clusterApprovalEnv(t, "10m", script...)
	r := e.runTTY("y\n", "run", "--session", "t1", "write a note").wantCode(t, exitOK)
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
	if d := decisions(t, e, "t1"); len(d) != 1 || d[0]["answer"] != "once" || d[0]["by"] != "user" || d[0]["tool"] != "write_note" {
		t.Fatalf("decisions %v", d)
	}

	r = e.run("", "run", "--session", "t2", "write a note").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "agrun: write_note needs approval and there is no terminal to ask: denied") {
		t.Fatalf("no-terminal denial not said:\n%s", r.stderr)
	}
	if m := toolMessage(t, srv, 3, "call_w"); m != "error (denied_by_user): the call needs a person's approval and none could be asked (agrun runs without a terminal)" {
		t.Fatalf("the model was told %q", m)
	}
	if d := decisions(t, e, "t2"); len(d) != 1 || d[0]["answer"] != "deny" || d[0]["by"] != "non-interactive" {
		t.Fatalf("decisions %v", d)
	}

	r = e.runTTY("a\n", "run", "--session", "t3", "write a note").wantCode(t, exitOK)
	if n := strings.Count(r.stderr, "approve? "); n != 1 {
		t.Fatalf("asked %d times", n)
	}
	if out := e.run("", "approvals").wantCode(t, exitOK).stdout; !strings.Contains(out, "write_note") {
		t.Fatalf("agrun approvals: %s", out)
	}
	// The next run's call is approved by the approvals file, on the worker.
	r = e.runTTY("", "run", "--session", "t4", "write a note").wantCode(t, exitOK)
	if strings.Contains(r.stderr, "approve? ") {
		t.Fatalf("asked again after \"always\":\n%s", r.stderr)
	}
	if d := decisions(t, e, "t4"); len(d) != 1 || d[0]["answer"] != "always" || d[0]["by"] != "approvals file" {
		t.Fatalf("decisions %v", d)
	}
}

// TestClusterApprovalTimeoutDenies (issue 28, 5): a call nobody decides
// within [cluster] approval_timeout is denied by the workflow's timer:
// the run goes on without `run --approve`, the model is told, the
// decision is recorded by "timeout", and a late --approve is refused.
func TestClusterApprovalTimeoutDenies(t *testing.T) {
	t.Parallel()
	e, srv := clusterApprovalEnv(t, "2s", chattest.Reply{Text: "Gave up."})
	e.run("", "run", "--json", "--session", "to", "write a note").wantCode(t, exitApproval)
	deadline := time.Now().Add(time.Minute)
	for len(srv.Requests()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the run did not go on after the approval timeout")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m := toolMessage(t, srv, 1, "call_w"); m != "error (denied_by_user): no decision within 2s: the call was denied" {
		t.Fatalf("the model was told %q", m)
	}
	for time.Now().Before(deadline) {
		if d := decisions(t, e, "to"); len(d) == 1 {
			if d[0]["answer"] != "deny" || d[0]["by"] != "timeout" {
				t.Fatalf("decisions %v", d)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := e.run("", "run", "--json", "--session", "to", "--approve=call_w").wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, "no tool call waits") {
		t.Fatalf("a late --approve: %s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "notes", "n1.txt")); err == nil {
		t.Fatal("the denied call wrote its note")
	}
}
