//go:build cluster

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/internal/testing/pgtest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/session/pgstore"
)

// execIn runs the agrun binary with args in e's config (and e.env), as
// a user's shell does.
func execIn(t *testing.T, e *testEnv, args ...string) result {
	t.Helper()
	cmd := e.cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestClusterSessionsOnPostgres (issue 28, 5): with [cluster]
// session_store = "postgres", every `agrun sessions` subcommand works on
// the cluster's PostgreSQL, each a real agrun process, with the file
// store's output and exit codes: export (Markdown and JSON), compact (in
// place: the old turn's big tool result becomes a note, the records and
// their number stay), prune (by the records' last append), rm (several
// ids, one unknown: exit 1) and the list. A session whose run waits on
// the cluster (a call that needs a yes) is in use: rm and compact refuse
// it (exit 1, nothing changed) and prune skips it, until the run ends.
func TestClusterSessionsOnPostgres(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	dsn := pgtest.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "hostile", Args: `{"op":"big","n":6000}`}}},
		chattest.Reply{Text: "one"},
		chattest.Reply{Text: "two"},
		chattest.Reply{Text: "three"},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_w", Name: "write_note", Args: `{"name":"n1","text":"hi"}`}}},
		chattest.Reply{Text: "denied, fine"},
	)
	wasm, manifest := hostileTool(t, t.TempDir(), "json")
	e := newTestEnv(t, srv.URL, fmt.Sprintf(`
[tools.hostile]
wasm = %q
manifest = %q

[approvals]
ask = ["write"]

[cluster]
temporal_address = %q
task_queue_prefix = "pgsessions-"
module_store = "objects"
session_store = "postgres"
postgres_dsn_env = "AGRUN_SESSIONS_TEST_DSN"
`, wasm, manifest, addr))
	e.env = []string{"AGRUN_SESSIONS_TEST_DSN=" + dsn}
	startWorker(t, e, "w1")
	want := func(r result, code int, what string) result {
		t.Helper()
		if r.code != code {
			t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
		}
		return r
	}
	want(execIn(t, e, "run", "--session", "pg1", "first"), 0, "run pg1")
	want(execIn(t, e, "run", "--session", "pg1", "second"), 0, "run pg1 again")
	want(execIn(t, e, "run", "--session", "pg2", "other"), 0, "run pg2")

	r := want(execIn(t, e, "sessions"), 0, "the list")
	if rows := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(rows) != 3 || !strings.HasPrefix(rows[1], "pg2 ") || !strings.HasPrefix(rows[2], "pg1 ") || !strings.Contains(rows[2], "first") {
		t.Fatalf("the list (most recently used first):\n%s", r.stdout)
	}
	ctx := context.Background()
	pg, err := pgstore.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()

	// export, as the file store's.
	r = want(execIn(t, e, "sessions", "export", "pg1"), 0, "export")
	if !strings.HasPrefix(r.stdout, "# ") || !strings.Contains(r.stdout, "first") || !strings.Contains(r.stdout, "two") {
		t.Fatalf("export (Markdown):\n%s", r.stdout)
	}
	r = want(execIn(t, e, "sessions", "export", "--format", "json", "pg1"), 0, "export --format json")
	var exp struct {
		session.Info
		History []loop.Message `json:"history"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &exp); err != nil || exp.ID != "pg1" || exp.Turns != 2 || len(exp.History) != 6 || exp.Updated.IsZero() {
		t.Fatalf("export --format json: %v %+v\n%s", err, exp.Info, r.stdout)
	}
	if r := execIn(t, e, "sessions", "export", "nope"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("export of an unknown session: %+v", r)
	}

	// compact: in place, smaller, as many records.
	before, err := pg.Load(ctx, "pg1", 0)
	if err != nil {
		t.Fatal(err)
	}
	r = want(execIn(t, e, "sessions", "compact", "pg1"), 0, "compact")
	m := regexp.MustCompile(`^session pg1: (\d+) → (\d+) bytes\n$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("compact said %q", r.stdout)
	}
	if b, _ := strconv.Atoi(m[1]); b < 6000 {
		t.Fatalf("compact: %s bytes before", m[1])
	}
	if b, a := atoi(m[1]), atoi(m[2]); a >= b {
		t.Fatalf("compact: %d → %d bytes", b, a)
	}
	after, err := pg.Load(ctx, "pg1", 0)
	if err != nil || len(after) != len(before) {
		t.Fatalf("compact left %d records of %d (%v)", len(after), len(before), err)
	}
	h, _ := session.Codec{}.History(after)
	if h[2].Role != loop.RoleTool || len(h[2].Content) > 1000 || h[2].FullContent != "" {
		t.Fatalf("the first turn's tool result after compact: %d bytes", len(h[2].Content))
	}
	r = want(execIn(t, e, "sessions", "compact", "--json", "pg1"), 0, "compact --json")
	if !strings.Contains(r.stdout, `{"session":"pg1","bytes_before":`) {
		t.Fatalf("compact --json: %s", r.stdout)
	}

	// A run that waits on the cluster for a yes keeps its session in use.
	want(execIn(t, e, "run", "--json", "--session", "pg3", "write a note"), exitApproval, "run pg3")
	r = want(execIn(t, e, "sessions", "rm", "pg3"), 1, "rm of a session in use")
	if r.stdout != "" || !strings.Contains(r.stderr, "agrun: session pg3 is in use by another agrun process: not removed") {
		t.Fatalf("rm of a session in use: %+v", r)
	}
	r = want(execIn(t, e, "sessions", "compact", "pg3"), 1, "compact of a session in use")
	if !strings.Contains(r.stderr, "in use") {
		t.Fatalf("compact of a session in use: %+v", r)
	}
	if recs, err := pg.Load(ctx, "pg3", 0); err != nil || len(recs) == 0 {
		t.Fatalf("a session in use lost its records: %d, %v", len(recs), err)
	}

	// prune: pg2 and pg3 last used two days ago; pg3 is in use.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE session_events SET created_at = now() - interval '2 days' WHERE session_id IN ('pg2', 'pg3')`); err != nil {
		t.Fatal(err)
	}
	r = want(execIn(t, e, "sessions", "prune", "--older-than", "1d"), 0, "prune")
	if !regexp.MustCompile(`^removed pg2 \(last used \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)\n$`).MatchString(r.stdout) ||
		!strings.Contains(r.stderr, "agrun: session pg3 is in use by another agrun process: not removed\n") ||
		!strings.Contains(r.stderr, "agrun: 1 sessions removed, 1 kept (used within 1d), 1 in use skipped\n") {
		t.Fatalf("prune: %+v", r)
	}

	// The run ends; rm removes what it can and says why not the rest.
	want(execIn(t, e, "run", "--json", "--session", "pg3", "--deny", "call_w:no"), 0, "deny pg3")
	r = want(execIn(t, e, "sessions", "rm", "pg3", "nope", "pg1"), 1, "rm")
	if r.stdout != "removed pg3\nremoved pg1\n" || !strings.Contains(r.stderr, "agrun: session nope not found\n") || !strings.Contains(r.stderr, "1 of 3 sessions not removed") {
		t.Fatalf("rm: %+v", r)
	}
	if ids, err := pg.List(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("sessions left: %q, %v", ids, err)
	}
	r = want(execIn(t, e, "sessions"), 0, "the list")
	if r.stdout != "" || !strings.Contains(r.stderr, "agrun: no saved sessions in the cluster's session store") {
		t.Fatalf("the list of no sessions: %+v", r)
	}
	if r := execIn(t, e, "sessions", "rm", "../x"); r.code != 2 {
		t.Fatalf("rm of a bad id: %+v", r)
	}
}

// TestClusterRunFlags (issue 28, 5): `agrun run`'s per-run flags work on
// the cluster, each a real agrun process with a real worker, within the
// worker's config: -m a model of its [cluster] models, -s, --tools,
// --max-tool-calls and --schema reach the model request; -c continues
// the cluster's most recently used session; --no-tools offers none; a
// model the worker does not name ends the run (permission_denied, exit
// 1) without a request; --base-url stays refused (exit 2), as it would
// send the worker's API key elsewhere.
func TestClusterRunFlags(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "word_count", Args: `{"text":"a b"}`}}},
		chattest.Reply{Text: "two words"},
		chattest.Reply{Text: "continued"},
		chattest.Reply{Text: `{"n":2}`},
	)
	e := clusterTestEnv(t, srv.URL, addr)
	if err := appendFile(e.config, "models = [\"other-model\"]\n"); err != nil {
		t.Fatal(err)
	}
	startWorker(t, e, "w1")
	r := execIn(t, e, "run", "--json", "--session", "f1", "-m", "other-model", "-s", "be brief", "--tools", "word_count", "--max-tool-calls", "1", "count a b")
	if r.code != 0 || !strings.Contains(r.stdout, `"type":"done","session":"f1","text":"two words"`) {
		t.Fatalf("run with flags: %+v", r)
	}
	reqs := srv.Requests()
	for i, q := range reqs {
		var names []string
		for _, tl := range q.Tools {
			names = append(names, tl.Function.Name)
		}
		if q.Model != "other-model" || len(q.Messages) == 0 || q.Messages[0].Content == nil || *q.Messages[0].Content != "be brief" || strings.Join(names, ",") != "word_count" {
			t.Fatalf("request %d: model %q, tools %v, messages %+v", i, q.Model, names, q.Messages)
		}
	}
	r = execIn(t, e, "run", "--json", "-c", "--no-tools", "again")
	if r.code != 0 || !strings.Contains(r.stdout, `"type":"done","session":"f1","text":"continued"`) {
		t.Fatalf("run -c: %+v", r)
	}
	if q := srv.Requests()[2]; len(q.Tools) != 0 || len(q.Messages) < 5 || q.Model != "test-model" {
		t.Fatalf("run -c --no-tools: %d tools, %d messages, model %q", len(q.Tools), len(q.Messages), q.Model)
	}
	r = execIn(t, e, "run", "--json", "--schema", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`, "how many")
	if r.code != 0 || !strings.Contains(r.stdout, `"text":"{\"n\":2}"`) || len(srv.Requests()[3].ResponseFormat) == 0 {
		t.Fatalf("run --schema: %+v (response_format %s)", r, srv.Requests()[3].ResponseFormat)
	}
	r = execIn(t, e, "run", "--json", "-m", "expensive-model", "x")
	if r.code != 1 || !strings.Contains(r.stdout, `"type":"error","kind":"permission_denied"`) || !strings.Contains(r.stdout, `model \"expensive-model\" is not allowed`) {
		t.Fatalf("run -m with a model the worker does not name: %+v", r)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Fatalf("%d requests, want 4: a refused model was asked", n)
	}
	r = execIn(t, e, "run", "--base-url", "http://127.0.0.1:1/v1", "x")
	if r.code != 2 || !strings.Contains(r.stderr, "--base-url is not supported with [cluster]") {
		t.Fatalf("run --base-url: %+v", r)
	}
}

// appendFile appends s to the file at path.
func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestClusterSessionsInUseOnFiles: with [cluster] and the default
// session store (the sessions folder), a session whose run waits on the
// cluster for a yes is in use although no worker holds its file (they
// lock it only while they append): rm and compact refuse it (exit 1,
// the file kept), as on PostgreSQL.
func TestClusterSessionsInUseOnFiles(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_w", Name: "write_note", Args: `{"name":"n1","text":"hi"}`}}},
		chattest.Reply{Text: "denied, fine"},
	)
	e := newTestEnv(t, srv.URL, fmt.Sprintf(`
[approvals]
ask = ["write"]

[cluster]
temporal_address = %q
task_queue_prefix = "filesessions-"
module_store = "objects"
`, addr))
	startWorker(t, e, "w1")
	if r := execIn(t, e, "run", "--json", "--session", "fs3", "write a note"); r.code != exitApproval {
		t.Fatalf("run fs3: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	file := filepath.Join(e.dir, "sessions", "fs3.jsonl")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the run's session file: %v", err)
	}
	r := execIn(t, e, "sessions", "rm", "fs3")
	if r.code != 1 || !strings.Contains(r.stderr, "agrun: session fs3 is in use by another agrun process: not removed") {
		t.Fatalf("rm of a session whose run waits: %+v", r)
	}
	if r := execIn(t, e, "sessions", "compact", "fs3"); r.code != 1 || !strings.Contains(r.stderr, "in use") {
		t.Fatalf("compact of a session whose run waits: %+v", r)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("a session in use lost its file: %v", err)
	}
	// Decided, the run ends, and the session can go.
	if r := execIn(t, e, "run", "--json", "--session", "fs3", "--deny", "call_w:no"); r.code != 0 {
		t.Fatalf("deny: %+v", r)
	}
	if r := execIn(t, e, "sessions", "rm", "fs3"); r.code != 0 {
		t.Fatalf("rm after the run: %+v", r)
	}
}
