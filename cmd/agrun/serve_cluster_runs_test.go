//go:build cluster

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
)

// sseEvent is one event of a run's stream.
type sseEvent struct {
	typ  string
	data map[string]any
	raw  string
}

// streamRun POSTs body to base/v1/runs as token and returns the status
// and, for a 200, the stream's events as they arrive (the channel is
// closed at the stream's end); for another status, the body. hangUp
// closes the connection.
func streamRun(t *testing.T, base, token, body string) (_ int, _ <-chan sseEvent, _ string, hangUp func()) {
	t.Helper()
	ctx, hangUp := context.WithCancel(context.Background())
	t.Cleanup(hangUp)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/runs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, nil, b.String(), hangUp
	}
	ch := make(chan sseEvent, 64)
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.raw = strings.TrimPrefix(line, "data: ")
				json.Unmarshal([]byte(ev.raw), &ev.data)
			case line == "" && ev.typ != "":
				ch <- ev
				ev = sseEvent{}
			}
		}
	}()
	return http.StatusOK, ch, "", hangUp
}

// until reads events until one of type typ (returned), failing on the
// stream's end or after a minute.
func until(t *testing.T, ch <-chan sseEvent, typ string, seen *[]sseEvent) sseEvent {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before a %s event; it had %v", typ, types(*seen))
			}
			*seen = append(*seen, ev)
			if ev.typ == typ {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event within a minute; the stream had %v", typ, types(*seen))
		}
	}
}

func types(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.typ
	}
	return out
}

// sameAsMissing checks that what tenant token gets for another tenant's
// object at path (naming id) is exactly what it gets for a missing one
// (named missing): 404 not_found, one body but for the name.
func sameAsMissing(t *testing.T, token, method, base, path, id, missing, body string) {
	t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	st1, other := httpAs(t, token, method, base+strings.ReplaceAll(path, "ID", id), ct, []byte(body))
	st2, none := httpAs(t, token, method, base+strings.ReplaceAll(path, "ID", missing), ct, []byte(body))
	if st1 != http.StatusNotFound || st2 != st1 || strings.ReplaceAll(other, id, missing) != none || !strings.Contains(none, `"not_found"`) {
		t.Errorf("%s %s of another tenant: %d %s; of a missing one: %d %s", method, path, st1, other, st2, none)
	}
}

// TestServeClusterRuns (issue 28, 5): `agrun serve` with [cluster] and
// two tenants, one `agrun worker`, a real Temporal dev server and a
// scripted model, black box through HTTP. A run's tool call is answered
// (the stream as a local run's: started, tool_started, tool_completed,
// text, done); its session is read back. A run needing approval shows
// approval_required, GET /v1/runs/ID lists the call, a second run of the
// session is 409, malformed and wrong decisions are refused, POST
// /v1/runs/ID/approvals approves it on the cluster and the run goes on;
// a second decision is 404. Through a replica whose [cluster]
// approval_timeout is 5s, an undecided call is denied and the model told
// so. A client that hangs up cancels its run on the cluster; the
// session's next run goes on from it. Another tenant's run, session and
// approval answer exactly what missing ones do. A run with a schema
// carries it to the workers: its answer comes as structured_output and
// done; a schema that does not compile is 400.
func TestServeClusterRuns(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_c", Name: "word_count", Args: `{"text":"one two three"}`}}},
		chattest.Reply{Text: "There are 3 words."},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_w", Name: "write_note", Args: `{"name":"n1","text":"hi"}`}}},
		chattest.Reply{Text: "Noted."},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_t", Name: "write_note", Args: `{"name":"n2","text":"late"}`}}},
		chattest.Reply{Text: "Gave up."},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_x", Name: "write_note", Args: `{"name":"n3","text":"gone"}`}}},
		chattest.Reply{Text: "Back."},
		chattest.Reply{Text: `{"words":3}`},
	)
	clusterTOML := `
[approvals]
ask = ["write"]
[serve.tenants.acme]
tokens_env = "ACME_TOKENS"
[serve.tenants.globex]
tokens_env = "GLOBEX_TOKENS"
[cluster]
temporal_address = %q
task_queue_prefix = "serve-runs-"
heartbeat_timeout = "2s"
approval_timeout = %q
module_store = "objects"
`
	e := newTestEnv(t, srv.URL, fmt.Sprintf(clusterTOML, addr, "10m"))
	base, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(e.dir, "short.toml") // the same cluster and stores, a 5s approval timeout
	if err := os.WriteFile(short, bytes.Replace(base, []byte(`approval_timeout = "10m"`), []byte(`approval_timeout = "5s"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	acme, globex := strings.Repeat("a", 32), strings.Repeat("g", 32)
	serve := func(cfg string) string {
		cmd := exec.Command(binary(t), "-c", cfg, "serve", "--addr", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "AGRUN_TEST_KEY=k", "ACME_TOKENS="+acme, "GLOBEX_TOKENS="+globex)
		line := startDaemon(t, cmd, "serving on ", true)
		_, rest, _ := strings.Cut(line, "serving on ")
		u, _, _ := strings.Cut(rest, " ")
		return u
	}
	startWorker(t, e, "w1")
	a := serve(e.config)
	b := serve(short)

	// A run with a tool call, answered.
	st, events, body, _ := streamRun(t, a, acme, `{"prompt":"How many words in \"one two three\"?","session":"s1"}`)
	if st != http.StatusOK {
		t.Fatalf("POST /v1/runs: %d %s", st, body)
	}
	var seen []sseEvent
	if ev := until(t, events, "started", &seen); ev.data["session"] != "s1" {
		t.Fatalf("started: %s", ev.raw)
	}
	if ev := until(t, events, "tool_started", &seen); ev.data["id"] != "call_c" || ev.data["name"] != "word_count" {
		t.Fatalf("tool_started: %s", ev.raw)
	}
	if ev := until(t, events, "tool_completed", &seen); ev.data["is_error"] != false || !strings.Contains(ev.raw, `"words":3`) {
		t.Fatalf("tool_completed: %s", ev.raw)
	}
	if ev := until(t, events, "done", &seen); ev.data["session"] != "s1" || ev.data["text"] != "There are 3 words." {
		t.Fatalf("done: %s", ev.raw)
	}
	if m := toolMessage(t, srv, 1, "call_c"); !strings.Contains(m, `"words":3`) {
		t.Fatalf("the model was told %q", m)
	}
	// Its session, read through the other replica.
	if st, body := httpAs(t, acme, "GET", b+"/v1/sessions/s1", "", nil); st != http.StatusOK || !strings.Contains(body, `"id":"s1"`) ||
		!strings.Contains(body, `"content":"How many words`) || !strings.Contains(body, `"content":"There are 3 words."`) {
		t.Fatalf("GET /v1/sessions/s1: %d %s", st, body)
	}
	// Stored under the tenant's name on the cluster.
	if _, err := os.Stat(filepath.Join(e.dir, "sessions", "acme.s1.jsonl")); err != nil {
		t.Errorf("the run's session on the cluster: %v", err)
	}
	sameAsMissing(t, globex, "GET", a, "/v1/sessions/ID", "s1", "nosuch", "")

	// A run that needs a yes.
	st, events, body, _ = streamRun(t, a, acme, `{"prompt":"write a note","session":"a1"}`)
	if st != http.StatusOK {
		t.Fatalf("POST /v1/runs: %d %s", st, body)
	}
	seen = nil
	ev := until(t, events, "approval_required", &seen)
	if ev.data["session"] != "a1" || ev.data["call_id"] != "call_w" || ev.data["tool"] != "write_note" || !strings.Contains(ev.raw, `"input":{"name":"n1","text":"hi"}`) ||
		!strings.Contains(ev.raw, `"guest":"/notes"`) || strings.Contains(ev.raw, e.dir) {
		t.Fatalf("approval_required: %s", ev.raw)
	}
	// Listed through either replica, as the local server lists it.
	st, body = httpAs(t, acme, "GET", b+"/v1/runs/a1", "", nil)
	var state struct {
		Session, State string
		Started        time.Time
		Pending        []map[string]any
	}
	json.Unmarshal([]byte(body), &state)
	if st != http.StatusOK || state.Session != "a1" || state.State != "awaiting_approval" || state.Started.IsZero() ||
		len(state.Pending) != 1 || state.Pending[0]["call_id"] != "call_w" || state.Pending[0]["asked"] != ev.data["asked"] {
		t.Fatalf("GET /v1/runs/a1: %d %s", st, body)
	}
	if st, body := httpAs(t, acme, "POST", a+"/v1/runs", "application/json", []byte(`{"prompt":"again","session":"a1"}`)); st != http.StatusConflict || !strings.Contains(body, `"session_locked"`) {
		t.Errorf("a second run of a1: %d %s", st, body)
	}
	sameAsMissing(t, globex, "GET", b, "/v1/runs/ID", "a1", "nosuch", "")
	sameAsMissing(t, globex, "POST", a, "/v1/runs/ID/approvals", "a1", "nosuch", `{"call_id":"call_w","answer":"once"}`)
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{"call_id":"call_w","answer":"always"}`, http.StatusBadRequest, `must be \"once\", \"session\" or \"deny\"`},
		{`{"call_id":"call_w","answer":"once","extra":1}`, http.StatusBadRequest, "the body must be"},
		{`not json`, http.StatusBadRequest, "the body must be"},
		{`{"call_id":"call_zz","answer":"once"}`, http.StatusNotFound, `run \"a1\" has no call \"call_zz\" waiting for a decision`},
	} {
		if st, body := httpAs(t, acme, "POST", b+"/v1/runs/a1/approvals", "application/json", []byte(tc.body)); st != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("decision %s: %d %s; want %d with %s", tc.body, st, body, tc.code, tc.want)
		}
	}
	if st, body := httpAs(t, acme, "POST", b+"/v1/runs/a1/approvals", "application/json", []byte(`{"call_id":"call_w","answer":"once"}`)); st != http.StatusOK || body != `{"session":"a1","call_id":"call_w","answer":"once"}`+"\n" {
		t.Fatalf("the decision: %d %s", st, body)
	}
	if st, body := httpAs(t, acme, "POST", a+"/v1/runs/a1/approvals", "application/json", []byte(`{"call_id":"call_w","answer":"deny"}`)); st != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
		t.Errorf("a second decision: %d %s", st, body)
	}
	if ev := until(t, events, "tool_completed", &seen); ev.data["id"] != "call_w" || ev.data["is_error"] != false {
		t.Fatalf("tool_completed after the approval: %s", ev.raw)
	}
	if ev := until(t, events, "done", &seen); ev.data["text"] != "Noted." {
		t.Fatalf("done: %s", ev.raw)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "notes", "n1.txt")); err != nil {
		t.Fatalf("the approved call did not write: %v", err)
	}
	// The decision is recorded in the session, by the API's client.
	recs, err := os.ReadFile(filepath.Join(e.dir, "sessions", "acme.a1.jsonl"))
	if err != nil || !strings.Contains(string(recs), `"decision":{"call_id":"call_w"`) || !strings.Contains(string(recs), `"by":"api client"`) {
		t.Errorf("the session's decision record: %v\n%s", err, recs)
	}
	if st, body := httpAs(t, acme, "GET", a+"/v1/runs/a1", "", nil); st != http.StatusNotFound || !strings.Contains(body, `no run in progress on session \"a1\"`) {
		t.Errorf("GET /v1/runs/a1 after the run: %d %s", st, body)
	}

	// Nobody decides: the replica's [cluster] approval_timeout denies.
	st, events, body, _ = streamRun(t, b, globex, `{"prompt":"write another","session":"a1"}`) // globex's own a1
	if st != http.StatusOK {
		t.Fatalf("POST /v1/runs: %d %s", st, body)
	}
	seen = nil
	if ev := until(t, events, "approval_required", &seen); ev.data["call_id"] != "call_t" {
		t.Fatalf("approval_required: %s", ev.raw)
	}
	if ev := until(t, events, "tool_completed", &seen); ev.data["is_error"] != true || ev.data["error_kind"] != "denied_by_user" {
		t.Fatalf("tool_completed of the undecided call: %s", ev.raw)
	}
	if ev := until(t, events, "done", &seen); ev.data["text"] != "Gave up." {
		t.Fatalf("done: %s", ev.raw)
	}
	if m := toolMessage(t, srv, 5, "call_t"); m != "error (denied_by_user): no decision within 5s: the call was denied" {
		t.Fatalf("the model was told %q", m)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "notes", "n2.txt")); err == nil {
		t.Fatal("the denied call wrote its note")
	}

	// A client that hangs up cancels its run on the cluster, as locally:
	// the call waiting is never run, the session is free for the next.
	st, events, body, hangUp := streamRun(t, a, acme, `{"prompt":"write and leave","session":"h1"}`)
	if st != http.StatusOK {
		t.Fatalf("POST /v1/runs: %d %s", st, body)
	}
	seen = nil
	until(t, events, "approval_required", &seen)
	hangUp()
	deadline := time.Now().Add(time.Minute)
	for {
		st, body := httpAs(t, acme, "GET", b+"/v1/runs/h1", "", nil)
		if st == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run goes on after its client left: %d %s", st, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st, events, body, _ = streamRun(t, b, acme, `{"prompt":"back","session":"h1"}`)
	if st != http.StatusOK {
		t.Fatalf("the next run of h1: %d %s", st, body)
	}
	seen = nil
	if ev := until(t, events, "done", &seen); ev.data["text"] != "Back." {
		t.Fatalf("done: %s", ev.raw)
	}
	if m := toolMessage(t, srv, 7, "call_x"); !strings.HasPrefix(m, "error (cancelled): ") {
		t.Errorf("the model was told of the call cut off %q", m)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "notes", "n3.txt")); err == nil {
		t.Error("the call of the run whose client left wrote its note")
	}

	// What cluster mode refuses, and ids that name nothing.
	schema := `{"type":"object","properties":{"words":{"type":"integer"}},"required":["words"],"additionalProperties":false}`
	st, events, body, _ = streamRun(t, a, acme, `{"prompt":"count, as JSON","session":"j1","schema":`+schema+`}`)
	if st != http.StatusOK {
		t.Fatalf("a run with a schema: %d %s", st, body)
	}
	seen = nil
	if ev := until(t, events, "structured_output", &seen); ev.data["valid"] != true || !strings.Contains(ev.raw, `"output":{"words":3}`) {
		t.Fatalf("structured_output: %s", ev.raw)
	}
	if ev := until(t, events, "done", &seen); ev.data["text"] != `{"words":3}` {
		t.Fatalf("done of the run with a schema: %s", ev.raw)
	}
	if rf := srv.Requests()[8].ResponseFormat; !strings.Contains(string(rf), `"words"`) {
		t.Errorf("the model was not asked for the schema: %s", rf)
	}
	if st, body := httpAs(t, acme, "POST", a+"/v1/runs", "application/json", []byte(`{"prompt":"x","schema":{"type":"nope"}}`)); st != http.StatusBadRequest || !strings.Contains(body, `"bad_request"`) {
		t.Errorf("a run with a schema that does not compile: %d %s", st, body)
	}
	if st, body := httpAs(t, acme, "POST", a+"/v1/runs", "application/json", []byte(`{"prompt":"x","session":"`+strings.Repeat("x", 60)+`"}`)); st != http.StatusBadRequest || !strings.Contains(body, "at most 59 characters") {
		t.Errorf("a session id too long for the tenant: %d %s", st, body)
	}
	if st, body := httpAs(t, acme, "GET", a+"/v1/runs/nosuch", "", nil); st != http.StatusNotFound || !strings.Contains(body, `no run in progress on session \"nosuch\"`) {
		t.Errorf("GET /v1/runs/nosuch: %d %s", st, body)
	}
	if n := len(srv.Requests()); n != 9 {
		t.Errorf("%d model requests, want 9", n)
	}
}
