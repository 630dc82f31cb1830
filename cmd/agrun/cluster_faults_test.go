//go:build cluster

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/internal/testing/s3test"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/wasmtools"
)

// The faults of issue 28 that the other cluster tests do not try. Each
// test names what agrun does when it happens; docs/SCALING.md, "Faults",
// says the same.

// waitRun waits for an `agrun run` started with startRun and returns its
// last --json line, failing the test if it did not exit 0.
func waitRun(ctx context.Context, t *testing.T, run *backgroundRun) map[string]any {
	t.Helper()
	select {
	case err := <-run.done:
		if err != nil {
			t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, run.stdout.String(), run.stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the run did not finish\nstdout:\n%s\nstderr:\n%s", run.stdout.String(), run.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(run.stdout.String()), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	return last
}

// TestClusterSurvivesTheTemporalServerKilled: the Temporal server (a dev
// server keeping its state in a SQLite file) is SIGKILLed while a tool
// call runs and started again on the same file a few seconds later. The
// worker and `agrun run` reconnect by themselves (the SDK retries its
// calls to the server), the call's result reaches the workflow, and the
// run ends with the model's answer; the model step before the kill is
// not asked again.
func TestClusterSurvivesTheTemporalServerKilled(t *testing.T) {
	t.Parallel()
	ts := devtemporal.StartPersistent(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "hostile", Args: `{"op":"sleep","n":3000}`}}},
		chattest.Reply{Text: "slept through it"},
	)
	e := clusterTestEnv(t, srv.URL, ts.Addr())
	startWorker(t, e, "w1")
	run := startRun(t, e, "--json", "--session", "crash1", "sleep, please")
	tc := devtemporal.Client(t, ts.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runningToolWorker(ctx, t, tc, "crash1", run)
	ts.Kill()
	time.Sleep(2 * time.Second) // down for a while: the call ends meanwhile
	ts.Start()

	last := waitRun(ctx, t, run)
	if last["type"] != "done" || last["text"] != "slept through it" {
		t.Fatalf("last line %v\nstderr:\n%s", last, run.stderr.String())
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("the model server saw %d requests, want 2 (the step before the kill is kept)", n)
	}
	msgs := messagesOf(t, filepath.Join(e.dir, "sessions"), "crash1")
	if got := len(msgs); got != 4 { // user, assistant's call, its result, answer
		b, _ := json.Marshal(msgs)
		t.Fatalf("session has %d messages, want 4: %s", got, b)
	}
}

// TestClusterContinueAsNewUnderAKill: a run that continues as new (here
// after a few events, as a long run does after thousands) loses the
// worker of a later call to SIGKILL; the call is retried on the other
// worker under the new run, and the run's result counts the
// continuation and holds the answer; the session has every call once.
func TestClusterContinueAsNewUnderAKill(t *testing.T) {
	t.Parallel()
	ts := devtemporal.Start(t)
	call := func(id string, ms int) chattest.Reply {
		return chattest.Reply{ToolCalls: []chattest.Call{{ID: id, Name: "hostile", Args: fmt.Sprintf(`{"op":"sleep","n":%d}`, ms)}}}
	}
	srv := chattest.New(t, call("call_1", 10), call("call_2", 10), call("call_3", 6000), chattest.Reply{Text: "three naps"})
	e := clusterTestEnv(t, srv.URL, ts)
	workers := map[string]*exec.Cmd{"w1": startWorker(t, e, "w1"), "w2": startWorker(t, e, "w2")}
	sessions, err := session.OpenFiles(filepath.Join(e.dir, "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	tc := devtemporal.Client(t, ts)
	in := cluster.RunInput{Queues: cluster.QueuesFor("e2e-"), HeartbeatTimeout: 2 * time.Second, ContinueAfterEvents: 10}
	cl := &cluster.Client{Temporal: tc, Sessions: sessions, Defaults: in}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, _, err := cl.Start(ctx, "can1", "three naps, please")
	if err != nil {
		t.Fatal(err)
	}
	// The third call's worker, once the run has continued as new.
	victim := runningCallWorker(ctx, t, tc, "can1", nil, func() bool {
		d, err := tc.DescribeWorkflow(ctx, cluster.WorkflowID("can1"), "")
		return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId() != run.GetRunID() && len(srv.Requests()) == 3
	})
	w, ok := workers[victim]
	if !ok {
		t.Fatalf("the call runs on %q", victim)
	}
	time.Sleep(300 * time.Millisecond)
	if err := w.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var res cluster.RunResult
	if err := tc.GetWorkflow(ctx, cluster.WorkflowID("can1"), run.GetRunID()).Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	text, err := cl.Text(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if res.ErrorKind != "" || text != "three naps" || res.ContinuedAsNew < 1 {
		t.Fatalf("result %+v (text %q), want the answer after at least one continue-as-new", res, text)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("the model server saw %d requests, want 4", n)
	}
	msgs := messagesOf(t, filepath.Join(e.dir, "sessions"), "can1")
	b, _ := json.Marshal(msgs)
	for _, id := range []string{"call_1", "call_2", "call_3"} {
		if n := strings.Count(string(b), `"tool_call_id":"`+id+`"`); n != 1 {
			t.Errorf("%s has %d results in the session, want 1: %s", id, n, b)
		}
	}
}

// TestClusterMCPToolWorkerKilled: a tool of an MCP server (here `agrun
// mcp serve` over stdio, serving the hostile guest) runs on the cluster's
// MCP queue; its worker is SIGKILLed mid call. The server's tools are
// granted read only, so the call has no side effects and is tried again
// on the other worker, whose own connection to the MCP server runs it;
// the run ends with the answer. (An MCP tool granted write, delete or
// shell follows retry_side_effects like a WASM tool: the model is told
// the worker was lost — cluster's TestLostWorkerRetriesBySideEffects,
// a rule that does not depend on where the tool comes from.)
func TestClusterMCPToolWorkerKilled(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "inner__hostile", Args: `{"op":"sleep","n":6000}`}}},
		chattest.Reply{Text: "slept over MCP"},
	)
	inner := t.TempDir()
	wasm, manifest := hostileTool(t, inner, "json")
	innerCfg := filepath.Join(inner, "agrun.toml")
	os.WriteFile(innerCfg, []byte(fmt.Sprintf(`[sandbox]
cache_dir = %q
[permissions]
allowed = ["read"]
[tools.hostile]
wasm = %q
manifest = %q
timeout = "30s"
`, testguest.CompilationCacheDir(t), wasm, manifest)), 0o644)
	e := clusterTestEnv(t, srv.URL, addr)
	e.edit("[cluster]", fmt.Sprintf("[mcp.inner]\ncommand = %q\nargs = [\"-c\", %q, \"mcp\", \"serve\"]\npermissions = [\"read\"]\n\n[cluster]", binary(t), innerCfg))
	workers := map[string]*exec.Cmd{"w1": startWorker(t, e, "w1"), "w2": startWorker(t, e, "w2")}
	run := startRun(t, e, "--json", "--session", "mcpkill", "sleep over MCP")
	tc := devtemporal.Client(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	victim := runningToolWorker(ctx, t, tc, "mcpkill", run)
	w, ok := workers[victim]
	if !ok {
		t.Fatalf("the call runs on %q", victim)
	}
	time.Sleep(300 * time.Millisecond)
	if err := w.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	last := waitRun(ctx, t, run)
	if last["type"] != "done" || last["text"] != "slept over MCP" {
		t.Fatalf("last line %v\nstderr:\n%s", last, run.stderr.String())
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model server saw %d requests, want 2", len(reqs))
	}
	told, _ := json.Marshal(reqs[1].Messages)
	if !strings.Contains(string(told), `{\"n\":6000,\"ok\":true}`) {
		t.Errorf("the model did not get the retried call's result: %s", told)
	}
	// A local call of the worker running the session's workflow task:
	// only the other worker's run of it is recorded.
	if runs := callRuns(ctx, t, tc, "mcpkill"); runs == "" || strings.Contains(runs, victim) {
		t.Errorf("call runs %q: the call's retry did not run on the other worker", runs)
	}
}

// TestClusterS3DownMidRun: the object store (S3) goes down once a run
// has started, before a tool call's 300 KiB result must go to it by
// reference. Each of the call's 3 attempts fails to store it (the store's
// SDK retries too), and the model is told so in a few lines — the
// store's own message, without Temporal's wrapping — and answers; the
// run ends normally. With the store back, the next prompt of the same
// session runs the call again and stores it: nothing of the session was
// lost.
func TestClusterS3DownMidRun(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	s3 := s3test.StartQuiet(t)
	// The model answers by where the conversation is (a request made
	// again — a model request is made at least once — gets the same
	// answer), and the store goes down when the model is first asked: the
	// run has started, and the call's result is the first object it must
	// write.
	big := func(id string) chattest.Reply {
		return chattest.Reply{ToolCalls: []chattest.Call{{ID: id, Name: "hostile", Args: `{"op":"big","n":307200}`}}}
	}
	text := func(s string) chattest.Reply { return chattest.Reply{Text: s} }
	answers := map[string]*chattest.Server{
		"user:make it big":   chattest.New(t, big("call_1"), big("call_1")),
		"tool:call_1":        chattest.New(t, text("it could not be stored"), text("it could not be stored")),
		"user:again, please": chattest.New(t, big("call_2"), big("call_2")),
		"tool:call_2":        chattest.New(t, text("stored at last"), text("stored at last")),
	}
	var once sync.Once
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { s3.SetDown(true) })
		raw, _ := io.ReadAll(r.Body)
		var req chattest.Request
		json.Unmarshal(raw, &req)
		key := ""
		if n := len(req.Messages); n > 0 {
			m := req.Messages[n-1]
			key = m.Role + ":" + m.ToolCallID
			if m.Role == "user" && m.Content != nil {
				key = "user:" + *m.Content
			}
		}
		target, ok := answers[key]
		if !ok {
			t.Errorf("a model request after %q", key)
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		u, _ := url.Parse(target.URL)
		u.Path = ""
		r.Body = io.NopCloser(bytes.NewReader(raw))
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	dir := t.TempDir()
	wasm, manifest := hostileTool(t, dir, "json")
	e := newTestEnv(t, front.URL+"/v1", fmt.Sprintf(`
[tools.hostile]
wasm = %q
manifest = %q
max_output = "1MiB"

[cluster]
temporal_address = %q
task_queue_prefix = "s3down-"
module_store = "s3://%s/shared"
s3_endpoint = %q
s3_path_style = true
`, wasm, manifest, addr, s3test.Bucket, s3.URL))
	e.env = s3.Env()
	startWorker(t, e, "w1")
	r := e.runBinary("run", "--json", "--session", "s3down", "make it big")
	if r.code != 0 || !strings.Contains(r.stdout, `"type":"done","session":"s3down","text":"it could not be stored"`) {
		t.Fatalf("run with the store down: %+v", r)
	}
	var failed struct {
		Output  string `json:"output"`
		IsError bool   `json:"is_error"`
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.Contains(line, `"type":"tool_completed"`) {
			json.Unmarshal([]byte(line), &failed)
		}
	}
	if !failed.IsError || !strings.HasPrefix(failed.Output, "the call failed on the cluster: put blobs/sha256/") ||
		!strings.HasSuffix(failed.Output, " after 3 attempts") || strings.Contains(failed.Output, "scheduledEventID") || len(failed.Output) > 600 {
		t.Fatalf("what the model was told of the call (%d bytes): %q", len(failed.Output), failed.Output)
	}

	s3.SetDown(false)
	r = e.runBinary("run", "--json", "--session", "s3down", "again, please")
	if r.code != 0 || !strings.Contains(r.stdout, `"type":"done","session":"s3down","text":"stored at last"`) {
		t.Fatalf("run with the store back: exit %d, stderr %s, stdout %.2000s", r.code, r.stderr, r.stdout)
	}
	h := messagesOf(t, filepath.Join(e.dir, "sessions"), "s3down")
	if len(h) != 8 || len(h[6].FullContent) < 307200 {
		t.Fatalf("the transcript: %d messages", len(h))
	}
}

// TestServeReplicaKilledMidUpload: a replica of `agrun serve` in cluster
// mode is SIGKILLed while it takes an upload that replaces a tool — in
// the middle of the request body, and at a few moments after the whole
// body was sent (in the checks, the compile or the store's writes). The
// client's request fails; the other replica then serves the tool whole,
// either the old module or the new one (never a record without its
// module, a module that does not load, or a name that cannot be uploaded
// again), and a new upload through it succeeds.
func TestServeReplicaKilledMidUpload(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agrun.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
[sandbox]
cache_dir = %q
[sessions]
dir = "sessions"
[serve]
data_dir = "served"
[cluster]
temporal_address = %q
task_queue_prefix = "killup-"
module_store = "objects"
`, testguest.CompilationCacheDir(t), addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	replica := func() (*exec.Cmd, string) {
		cmd := exec.Command(binary(t), "-c", cfg, "serve", "--addr", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "AGRUN_TOKENS=")
		line := startDaemon(t, cmd, "serving on ", false)
		_, rest, _ := strings.Cut(line, "serving on ")
		base, _, _ := strings.Cut(rest, " ")
		return cmd, base
	}
	_, b := replica()
	wc, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "word_count.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := wasmtools.Pack(testguest.WAT(t, filepath.Join("..", "..", "server", "testdata", "ok.wat")), wasmtools.Manifest{Name: "word_count", Description: "answers ok"})
	if err != nil {
		t.Fatal(err)
	}
	const old, replaced = `"words":2`, `"result":{"ok":true}`
	if st, body := httpDo(t, "POST", b+"/v1/tools", "application/wasm", wc); st != http.StatusCreated {
		t.Fatalf("first upload: %d %s", st, body)
	}
	for _, killAfter := range []time.Duration{-1, 0, 30 * time.Millisecond, 150 * time.Millisecond} {
		a, base := replica()
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("POST", base+"/v1/tools?replace=true", pr)
		req.Header.Set("Content-Type", "application/wasm")
		req.ContentLength = int64(len(other))
		done := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		if killAfter < 0 {
			pw.Write(other[:len(other)/2])
		} else {
			pw.Write(other)
			time.Sleep(killAfter)
		}
		a.Process.Kill()
		pw.CloseWithError(errors.New("the replica was killed"))
		<-done

		st, body := httpDo(t, "POST", b+"/v1/tools/word_count/call", "application/json", []byte(`{"text":"one two"}`))
		if st != http.StatusOK || !strings.Contains(body, old) && !strings.Contains(body, replaced) {
			t.Fatalf("kill %v: the tool through the other replica: %d %s", killAfter, st, body)
		}
		if killAfter < 0 && !strings.Contains(body, old) {
			t.Fatalf("kill in the body: the tool was replaced by half a module: %s", body)
		}
		if st, body := httpDo(t, "POST", b+"/v1/tools?replace=true", "application/wasm", wc); st != http.StatusCreated && st != http.StatusOK {
			t.Fatalf("kill %v: upload again through the other replica: %d %s", killAfter, st, body)
		}
		if st, body := httpDo(t, "POST", b+"/v1/tools/word_count/call", "application/json", []byte(`{"text":"one two"}`)); st != http.StatusOK || !strings.Contains(body, old) {
			t.Fatalf("kill %v: call after the new upload: %d %s", killAfter, st, body)
		}
	}
}

// runBinary runs the built agrun with e's config and environment (e.cmd)
// and returns what it printed and its exit code.
func (e *testEnv) runBinary(args ...string) result {
	e.t.Helper()
	cmd := e.cmd(args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}
