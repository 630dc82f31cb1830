//go:build cluster

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/agcore/agrun/cluster/s3store"
	"github.com/agcore/agrun/session/pgstore"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/internal/testing/pgtest"
	"github.com/agcore/agrun/internal/testing/s3test"
	"github.com/agcore/agrun/internal/testing/syncbuf"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/wasmtools"
)

// clusterTestEnv writes a config whose [cluster] is the dev server at addr,
// with the hostile guest as tool "hostile" (pure compute: no side effects,
// so a call whose worker is lost is retried) and a short heartbeat
// timeout.
func clusterTestEnv(t *testing.T, llmURL, addr string) *testEnv {
	t.Helper()
	dir := t.TempDir()
	wasm, manifest := hostileTool(t, dir, "json")
	extra := fmt.Sprintf(`
[tools.hostile]
wasm = %q
manifest = %q
timeout = "30s"
`, wasm, manifest)
	if addr != "" {
		extra += fmt.Sprintf(`
[cluster]
temporal_address = %q
task_queue_prefix = "e2e-"
heartbeat_timeout = "2s"
module_store = "objects"
`, addr)
	}
	return newTestEnv(t, llmURL, extra)
}

// ownVars numbers the variables of setenvOwn.
var ownVars atomic.Int64

// setenvOwn sets a variable that only this test reads, named prefix and a
// number of its own, for the test's in-process runs and the processes it
// starts, and returns its name (for the config key that names it, as
// [cluster] postgres_dsn_env). Unlike t.Setenv it works in a parallel
// test: no other test reads the variable. It is unset when the test ends.
func setenvOwn(t *testing.T, prefix, value string) string {
	name := fmt.Sprintf("%s_%d", prefix, ownVars.Add(1))
	os.Setenv(name, value)
	t.Cleanup(func() { os.Unsetenv(name) })
	return name
}

// The fake S3 servers' credentials, the same for each (s3test.Credentials),
// are set for the whole package: a test that reaches its fake in-process
// (an in-process agrun run, an s3store client) can then be parallel,
// which s3test.Start's t.Setenv would forbid.
func init() {
	for _, kv := range s3test.Credentials {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
}

// startWorker starts `agrun worker` and waits until it serves.
func startWorker(t *testing.T, e *testEnv, name string) *exec.Cmd {
	t.Helper()
	cmd := e.cmd("worker", "--identity", name)
	startDaemon(t, cmd, "agrun: worker serving", false)
	return cmd
}

// startDaemon starts cmd (an agrun that serves until SIGTERM) and waits
// for the stderr line containing ready, which it returns; the test ends
// it with SIGTERM (cleanExit: it must exit 0 then; a test may also have
// stopped or killed it itself).
func startDaemon(t *testing.T, cmd *exec.Cmd, ready string, cleanExit bool) string {
	t.Helper()
	name := strings.Join(cmd.Args[1:], " ")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if cleanExit && err != nil {
				t.Errorf("%s did not exit cleanly on SIGTERM: %v", name, err)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("%s did not stop on SIGTERM", name)
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var seen strings.Builder
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), ready) {
				lines <- sc.Text()
				io.Copy(io.Discard, stderr)
				return
			}
		}
		lines <- "exited: " + seen.String()
	}()
	select {
	case line := <-lines:
		if !strings.Contains(line, ready) {
			t.Fatalf("%s: %s", name, line)
		}
		return line
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not start", name)
	}
	return ""
}

// backgroundRun is an `agrun run` process running while the test acts.
type backgroundRun struct {
	stdout, stderr syncbuf.Buffer
	done           chan error // its Wait's result
}

// startRun starts `agrun run` with args in e's config.
func startRun(t *testing.T, e *testEnv, args ...string) *backgroundRun {
	t.Helper()
	r := &backgroundRun{done: make(chan error, 1)}
	cmd := e.cmd(append([]string{"run"}, args...)...)
	cmd.Stdout, cmd.Stderr = &r.stdout, &r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- cmd.Wait() }()
	return r
}

// messagesOf returns a session's messages as JSON, for comparison.
func messagesOf(t *testing.T, dir, id string) []loop.Message {
	t.Helper()
	st, err := session.OpenFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := st.Messages(id)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := session.Decode[loop.Message](raw)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestClusterSurvivesAWorkerKilledMidCall is the end-to-end test of issue
// 21: a real Temporal server, two `agrun worker` processes, a scripted
// model; `agrun run` on the cluster asks for a slow tool call; the worker
// running it (a local call, in the session's workflow task) is killed
// with SIGKILL; the call is run again on the other worker once the
// workflow task times out, and the run completes there. The
// model server saw each request once (the completed model step was not
// repeated), and the session holds the same history a local run of the
// same script produces.
func TestClusterSurvivesAWorkerKilledMidCall(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	script := func() []chattest.Reply {
		return []chattest.Reply{
			{ToolCalls: []chattest.Call{{ID: "call_1", Name: "hostile", Args: `{"op":"sleep","n":5000}`}}},
			{Text: "slept well"},
		}
	}
	srv := chattest.New(t, script()...)
	e := clusterTestEnv(t, srv.URL, addr)
	workers := map[string]*exec.Cmd{"w1": startWorker(t, e, "w1"), "w2": startWorker(t, e, "w2")}

	run := startRun(t, e, "--json", "--session", "e2e", "sleep, please")
	tc := devtemporal.Client(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The worker running the tool call: the pending activity's.
	victim := runningToolWorker(ctx, t, tc, "e2e", run)
	w, ok := workers[victim]
	if !ok {
		t.Fatalf("the call runs on %q", victim)
	}
	time.Sleep(300 * time.Millisecond) // well inside the call
	if err := w.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-run.done:
		if err != nil {
			t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, run.stdout.String(), run.stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the run did not finish\nstdout:\n%s\nstderr:\n%s", run.stdout.String(), run.stderr.String())
	}
	stdout, stderr := run.stdout.String(), run.stderr.String()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last struct {
		Type, Session, Text string
	}
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if last.Type != "done" || last.Session != "e2e" || last.Text != "slept well" {
		t.Fatalf("last line %s\nstderr:\n%s", lines[len(lines)-1], stderr)
	}
	if !strings.Contains(stdout, `{"type":"tool_completed","id":"call_1","name":"hostile","output":{"ok":true,"n":5000}`) {
		t.Errorf("no tool_completed event for the call:\n%s", stdout)
	}
	// Each model request once: the first (which asked for the call) was
	// not repeated when the call moved to the other worker.
	if n := len(srv.Requests()); n != 2 {
		t.Fatalf("the model server saw %d requests, want 2", n)
	}
	// The call (read-only: a local call of the worker running the
	// session's workflow task) ran again on the survivor once the
	// victim's workflow task timed out, and only the survivor's run of it
	// was recorded.
	var survivor string
	for name := range workers {
		if name != victim {
			survivor = name
		}
	}
	if got := callRuns(ctx, t, tc, "e2e"); got != survivor+"@local" {
		t.Errorf("call runs %q: want the one call recorded as %s's local call", got, survivor)
	}

	// The same script on the local path: the same history.
	local := chattest.New(t, script()...)
	le := clusterTestEnv(t, local.URL, "")
	if r := le.run("", "run", "--session", "local", "sleep, please"); r.code != 0 {
		t.Fatalf("local run: %+v", r)
	}
	got, want := messagesOf(t, filepath.Join(e.dir, "sessions"), "e2e"), messagesOf(t, filepath.Join(le.dir, "sessions"), "local")
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("cluster history\n%s\nlocal history\n%s", gb, wb)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "sessions")); err != nil {
		t.Fatal(err)
	}
}

// TestClusterChatAndErrors: `agrun chat` on the cluster answers each
// prompt as a run of one session (the second run sees the first's
// history); a provider error ends `run --json` with the loop's error
// kind and the session id, exit 1; an unsupported flag is a usage error.
func TestClusterChatAndErrors(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{Text: "first answer"},
		chattest.Reply{Text: "second answer", Check: func(t testing.TB, r chattest.Request) {
			if len(r.Messages) < 3 || *r.Messages[len(r.Messages)-2].Content != "first answer" {
				t.Errorf("the second run does not see the first: %+v", r.Messages)
			}
		}},
		chattest.Reply{Status: 401, Text: "bad key"},
	)
	e := clusterTestEnv(t, srv.URL, addr)
	startWorker(t, e, "w1")
	r := e.run("hello\nagain\n", "chat", "--session", "chat1")
	if r.code != 0 || !strings.Contains(r.stdout, "first answer") || !strings.Contains(r.stdout, "second answer") {
		t.Fatalf("chat: %+v", r)
	}
	msgs := messagesOf(t, filepath.Join(e.dir, "sessions"), "chat1")
	if len(msgs) != 4 || msgs[2].Content != "again" {
		t.Fatalf("chat session %+v", msgs)
	}
	r = e.run("", "run", "--json", "--session", "bad", "x")
	if r.code != 1 || !strings.Contains(r.stdout, `"type":"error","kind":"provider"`) || !strings.Contains(r.stdout, `"session":"bad"`) {
		t.Fatalf("provider error: %+v", r)
	}
	if strings.Contains(r.stderr, "reading the session's progress") {
		t.Fatalf("a new session's missing records were taken for a failure: %s", r.stderr)
	}
	r = e.run("", "run", "--base-url", "http://127.0.0.1:1/v1", "x")
	if r.code != 2 || !strings.Contains(r.stderr, "--base-url is not supported with [cluster]") {
		t.Fatalf("unsupported flag: %+v", r)
	}
}

// TestClusterOnS3AndPostgres runs a session on the cluster with the
// shared stores of a multi-machine setup: modules and payloads in S3
// (gofakes3 in the test process), sessions in PostgreSQL (a real server).
// The tool's 300 KiB result goes through the workflow by reference to the
// bucket; the transcript, whole, is in PostgreSQL.
func TestClusterOnS3AndPostgres(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	s3 := s3test.StartQuiet(t) // its credentials: init below
	dsn := pgtest.Start(t)
	dsnEnv := setenvOwn(t, "AGRUN_TEST_DSN", dsn)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "hostile", Args: `{"op":"big","n":307200}`}}},
		chattest.Reply{Text: "that was big"},
	)
	dir := t.TempDir()
	wasm, manifest := hostileTool(t, dir, "json")
	e := newTestEnv(t, srv.URL, fmt.Sprintf(`
[tools.hostile]
wasm = %q
manifest = %q
max_output = "1MiB"

[cluster]
temporal_address = %q
task_queue_prefix = "pg-"
module_store = "s3://%s/shared"
s3_endpoint = %q
s3_path_style = true
session_store = "postgres"
postgres_dsn_env = %q
`, wasm, manifest, addr, s3test.Bucket, s3.URL, dsnEnv))
	startWorker(t, e, "w1")
	r := e.run("", "run", "--json", "--session", "pg1", "make it big")
	if r.code != 0 || !strings.Contains(r.stdout, `"type":"done","session":"pg1","text":"that was big"`) {
		t.Fatalf("run: %+v", r)
	}
	ctx := context.Background()
	pg, err := pgstore.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	recs, err := pg.Load(ctx, "pg1", 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := session.Codec{}.History(recs)
	if err != nil || len(h) != 4 || h[2].Role != loop.RoleTool || len(h[2].FullContent) < 307200 {
		t.Fatalf("the PostgreSQL transcript: %d messages, %v", len(h), err)
	}
	objs, err := s3store.New(ctx, s3store.Config{Bucket: s3test.Bucket, Prefix: "shared", Endpoint: s3.URL, UsePathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := objs.List(ctx, "blobs/")
	if err != nil || len(blobs) == 0 {
		t.Fatalf("no payload went by reference to the bucket: %v %v", blobs, err)
	}
	// Nothing of it in the local sessions folder.
	if _, err := os.Stat(filepath.Join(e.dir, "sessions", "pg1.jsonl")); !os.IsNotExist(err) {
		t.Fatalf("a local session file: %v", err)
	}
	// agrun sessions reads the cluster's store.
	if r := e.run("", "sessions"); r.code != 0 || !strings.Contains(r.stdout, "pg1") || !strings.Contains(r.stdout, "make it big") {
		t.Fatalf("sessions: %+v", r)
	}
	if r := e.run("", "sessions", "show", "pg1"); r.code != 0 || !strings.Contains(r.stdout, "that was big") || !strings.HasPrefix(r.stdout, "# session pg1: 1 turns, model ") || !strings.Contains(r.stdout, ", last used ") {
		t.Fatalf("sessions show: %+v", r)
	}
	if r := e.run("", "sessions", "show", "nope"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("sessions show of an unknown session: %+v", r)
	}
}

// TestClusterRunUsesAnUploadedTool: a tool uploaded through `agrun serve`
// in cluster mode is offered to the model by the workers (fetched from
// the module store by digest, run with [serve.uploads]'s grant), and a
// run on the cluster calls it.
func TestClusterRunUsesAnUploadedTool(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "uploaded_ok", Args: `{}`}}, Check: func(t testing.TB, r chattest.Request) {
			var names []string
			for _, tl := range r.Tools {
				names = append(names, tl.Function.Name)
			}
			if !slices.Contains(names, "uploaded_ok") {
				t.Errorf("the uploaded tool is not offered: %v", names)
			}
		}},
		chattest.Reply{Text: "it said ok"},
	)
	e := clusterTestEnv(t, srv.URL, addr)
	base := startServeReplica(t, e.config, []string{"AGRUN_TOKENS="})
	packed, err := wasmtools.Pack(testguest.WAT(t, filepath.Join("..", "..", "server", "testdata", "ok.wat")),
		wasmtools.Manifest{Name: "uploaded_ok", Description: "answers ok"})
	if err != nil {
		t.Fatal(err)
	}
	if st, body := httpDo(t, "POST", base+"/v1/tools", "application/wasm", packed); st != 201 {
		t.Fatalf("upload: %d %s", st, body)
	}
	startWorker(t, e, "w1")
	r := e.run("", "run", "--json", "--session", "up1", "use the uploaded tool")
	if r.code != 0 || !strings.Contains(r.stdout, `"name":"uploaded_ok","output":{"ok":true}`) || !strings.Contains(r.stdout, `"text":"it said ok"`) {
		t.Fatalf("run: %+v", r)
	}
}

// TestClusterInterruptThenRerun: Ctrl-C during a slow tool call of a run
// on the cluster exits 130 after cancelling the run there (its step stops
// at its next heartbeat, and the session is free by the time agrun
// exits); the next run of the session works, and its history is valid
// (the interrupted call is answered "cancelled by the user ... may or
// may not have taken effect", never "never decided").
func TestClusterInterruptThenRerun(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "hostile", Args: `{"op":"sleep","n":20000}`}}},
		chattest.Reply{Text: "second run"},
	)
	e := clusterTestEnv(t, srv.URL, addr)
	startWorker(t, e, "w1")
	run := e.cmd("run", "--session", "int1", "sleep long")
	var stderr syncbuf.Buffer
	run.Stderr = &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(stderr.String(), "session int1") || len(srv.Requests()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the run did not start: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // the call is running
	start := time.Now()
	run.Process.Signal(os.Interrupt)
	err := run.Wait()
	if code := run.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "interrupted") || !strings.Contains(stderr.String(), "agrun: cancelling the run on the cluster (waiting up to") {
		t.Fatalf("exit %d (%v): %s", code, err, stderr.String())
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("agrun took %v to stop", time.Since(start))
	}
	r := e.run("", "run", "--json", "--session", "int1", "again")
	if r.code != 0 || !strings.Contains(r.stdout, `"text":"second run"`) {
		t.Fatalf("rerun: %+v", r)
	}
	msgs := messagesOf(t, filepath.Join(e.dir, "sessions"), "int1")
	var roles []string
	for _, m := range msgs {
		roles = append(roles, string(m.Role))
	}
	if strings.Join(roles, ",") != "user,assistant,tool,user,assistant" || !strings.HasPrefix(msgs[2].Content, "error (cancelled): cancelled by the user") ||
		strings.Contains(msgs[2].Content, "never decided") {
		t.Fatalf("history %v: %+v", roles, msgs)
	}
}

// runningToolWorker waits until a tool call of session's run is running
// and returns the identity of the worker running it: a started tool
// activity's worker, or — a local call (cluster.LocalToolActivity) runs
// inside a workflow task — the worker of the workflow task in progress
// once the model step that asked for the call is done (run has printed
// its tool_started; when run is nil, the caller's ready says so).
func runningToolWorker(ctx context.Context, t *testing.T, tc client.Client, session string, run *backgroundRun) string {
	t.Helper()
	return runningCallWorker(ctx, t, tc, session, run, func() bool {
		return strings.Contains(run.stdout.String(), `"type":"tool_started"`)
	})
}

// runningCallWorker is runningToolWorker for any run: ready reports that
// the model step asking for the call is done.
func runningCallWorker(ctx context.Context, t *testing.T, tc client.Client, session string, run *backgroundRun, ready func() bool) string {
	t.Helper()
	for {
		var done <-chan error
		if run != nil {
			done = run.done
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended before the call was seen running: %v\n%s\n%s", err, run.stdout.String(), run.stderr.String())
		case <-ctx.Done():
			t.Fatal("the tool call never started")
		case <-time.After(100 * time.Millisecond):
		}
		if !ready() {
			continue
		}
		d, err := tc.DescribeWorkflow(ctx, cluster.WorkflowID(session), "")
		if err != nil {
			continue
		}
		for _, pa := range d.RawResponse.GetPendingActivities() {
			if pa.GetActivityType().GetName() == cluster.ToolActivity && pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
				return pa.GetLastWorkerIdentity()
			}
		}
		if len(d.RawResponse.GetPendingActivities()) > 0 {
			continue
		}
		// No activity pending: the call is local, in the workflow task
		// that started last and has not completed.
		it := tc.GetWorkflowHistory(ctx, cluster.WorkflowID(session), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var last *historypb.HistoryEvent
		for it.HasNext() {
			if last, err = it.Next(); err != nil {
				break
			}
		}
		if a := last.GetWorkflowTaskStartedEventAttributes(); err == nil && a != nil {
			return a.GetIdentity()
		}
	}
}

// callRuns lists where a session's tool calls ran, comma-separated, from
// its workflow's history: IDENTITY#ATTEMPT for each start of a tool
// activity, IDENTITY@local for each local call recorded (the worker whose
// workflow task recorded it: the one that ran it).
func callRuns(ctx context.Context, t *testing.T, tc client.Client, session string) string {
	t.Helper()
	it := tc.GetWorkflowHistory(ctx, cluster.WorkflowID(session), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var runs []string
	var task string           // the identity of the last completed workflow task
	tools := map[int64]bool{} // the tool activities' scheduled event ids
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return ""
		}
		if a := ev.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			task = a.GetIdentity()
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == cluster.ToolActivity {
			tools[ev.GetEventId()] = true
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && tools[a.GetScheduledEventId()] {
			runs = append(runs, fmt.Sprintf("%s#%d", a.GetIdentity(), a.GetAttempt()))
		}
		if a := ev.GetMarkerRecordedEventAttributes(); a != nil && strings.Contains(a.GetDetails()["data"].String(), cluster.LocalToolActivity) {
			runs = append(runs, task+"@local")
		}
	}
	return strings.Join(runs, ",")
}

// TestClusterWorkerStopsGracefully: SIGTERM to the worker running a
// read-only call: it stops taking tasks, gives the call a moment, then
// fails it as an attempt (not as a result for the model), and the other
// worker runs it again; the run completes and the worker exits 0.
func TestClusterWorkerStopsGracefully(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "hostile", Args: `{"op":"sleep","n":9000}`}}},
		chattest.Reply{Text: "done after all"},
	)
	e := clusterTestEnv(t, srv.URL, addr)
	workers := map[string]*exec.Cmd{"w1": startWorker(t, e, "w1"), "w2": startWorker(t, e, "w2")}
	run := startRun(t, e, "--json", "--session", "term1", "sleep")
	tc := devtemporal.Client(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	victim := runningToolWorker(ctx, t, tc, "term1", run)
	w := workers[victim]
	if err := w.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Wait() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("the worker did not exit cleanly: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the worker did not stop")
	}
	select {
	case err := <-run.done:
		if out := run.stdout.String(); err != nil || !strings.Contains(out, `"output":{"ok":true,"n":9000}`) || !strings.Contains(out, `"text":"done after all"`) {
			t.Fatalf("run: %v\n%s\n%s", err, out, run.stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the run did not finish\n%s\n%s", run.stdout.String(), run.stderr.String())
	}
}
