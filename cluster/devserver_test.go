package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
)

// TestRunOnARealServer runs a session on a real Temporal server (the dev
// server) with a real worker: the run continues as new after each tool
// step (ContinueAfterEvents 1) and still answers, with the transcript in
// the session store.
func TestRunOnARealServer(t *testing.T) {
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{}`}}},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c2", Name: "t", Args: `{"again":true}`}}},
		chattest.Reply{Text: "answered"},
	)
	a, st := newActivities(t, srv, &fakeTool{name: "t", source: "wasm", perms: []permission.Permission{permission.Read}})
	tc := devtemporal.Client(t, addr)
	q := QueuesFor("test-")
	ctx, cancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	go func() { werr <- RunWorker(ctx, tc, a, WorkerOptions{Queues: q}) }()
	defer func() {
		cancel()
		if err := <-werr; err != nil {
			t.Error(err)
		}
	}()
	cl := &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: RunInput{Queues: q, ContinueAfterEvents: 1}}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	res, err := cl.Run(rctx, "s1", "go")
	if err != nil {
		t.Fatal(err)
	}
	text, err := cl.Text(rctx, res)
	if err != nil || text != "answered" || res.Turns != 3 || res.ContinuedAsNew != 2 {
		t.Fatalf("result %+v %q %v", res, text, err)
	}
	recs, _ := st.Load(rctx, "s1", 0)
	h, _ := jsonRecords{}.History(recs)
	if len(h) != 6 || res.Seq != int64(len(recs)) {
		b, _ := json.Marshal(h)
		t.Fatalf("history %s (seq %d, %d records)", b, res.Seq, len(recs))
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d model requests", n)
	}

	// One run of a session at a time, cluster-wide: a second start while
	// one is going on (here: queued for a queue nobody serves) is refused.
	idle := &Client{Temporal: tc, Sessions: st, Defaults: RunInput{Queues: QueuesFor("nobody-")}}
	run, _, err := idle.Start(rctx, "s2", "x")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.TerminateWorkflow(context.Background(), run.GetID(), run.GetRunID(), "test over")
	if _, _, err := idle.Start(rctx, "s2", "y"); !errors.Is(err, ErrSessionBusy) {
		t.Fatalf("a second run of a running session: %v", err)
	}
}

// TestSlowModelKeepsItsStep: a model that takes longer to answer than
// the heartbeat timeout does not lose its step (the step heartbeats on a
// clock, not on tokens): one request, and the answer.
func TestSlowModelKeepsItsStep(t *testing.T) {
	addr := devtemporal.Start(t)
	srv := chattest.New(t, chattest.Reply{Text: "late but here", Delay: 3 * time.Second})
	a, st := newActivities(t, srv)
	tc := devtemporal.Client(t, addr)
	q := QueuesFor("slow-")
	ctx, cancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	go func() { werr <- RunWorker(ctx, tc, a, WorkerOptions{Queues: q}) }()
	defer func() { cancel(); <-werr }()
	cl := &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: RunInput{Queues: q, HeartbeatTimeout: time.Second}}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	res, err := cl.Run(rctx, "slow", "take your time")
	if err != nil || res.ErrorKind != "" || string(res.Text.Data) != "late but here" {
		t.Fatalf("result %+v %v", res, err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d model requests: the step was given up and retried", n)
	}
}

// TestFollowShowsOnlyItsRun (issue 28, 2): a run started with a stale
// seq (its starter read the session's length before the previous run
// stored its records) is followed from where its records begin, the seq
// the run published: the previous run's records, its answer included,
// are not shown as this run's.
func TestFollowShowsOnlyItsRun(t *testing.T) {
	addr := devtemporal.Start(t)
	srv := chattest.New(t, chattest.Reply{Text: "first answer"}, chattest.Reply{Text: "second answer"})
	a, st := newActivities(t, srv)
	a.Records = nil // session.Codec: what Follow replays
	tc := devtemporal.Client(t, addr)
	q := QueuesFor("follow-")
	ctx, cancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	go func() { werr <- RunWorker(ctx, tc, a, WorkerOptions{Queues: q}) }()
	defer func() { cancel(); <-werr }()
	cl := &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: RunInput{Queues: q}}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	if res, err := cl.Run(rctx, "f", "one"); err != nil || string(res.Text.Data) != "first answer" {
		t.Fatalf("first run %+v %v", res, err)
	}
	// The second run as its starter began it before the first had
	// stored anything: at seq 0.
	run, err := tc.ExecuteWorkflow(rctx, client.StartWorkflowOptions{ID: WorkflowID("f"), TaskQueue: q.Sessions}, WorkflowName,
		RunInput{Session: "f", Prompt: "two", Seq: 0, Queues: q})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for ev, err := range cl.Follow(rctx, run, "f", 0) {
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := ev.(*loop.TextDelta); ok {
			texts = append(texts, d.Text)
		}
	}
	if strings.Join(texts, "|") != "second answer" {
		t.Fatalf("followed texts %q, want only the second run's", texts)
	}
}

// TestCallsOfACancelledStepAreNotRun (issue 28, 3): a run cancelled while
// its model step finishes (the step completes anyway: here it ignores
// the cancellation) hands none of the reply's calls on: the tool never
// runs, and the session says "not run: the run was cancelled by the user
// before the call started", not "never decided".
func TestCallsOfACancelledStepAreNotRun(t *testing.T) {
	addr := devtemporal.Start(t)
	asked := make(chan struct{})
	srv := chattest.New(t, chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "w", Args: `{}`}}, Delay: 2 * time.Second, Started: asked})
	var ran atomic.Int32
	a, st := newActivities(t, srv, &fakeTool{name: "w", source: "wasm", perms: []permission.Permission{permission.Write},
		run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			ran.Add(1)
			return json.RawMessage(`1`), nil
		}})
	tc := devtemporal.Client(t, addr)
	q := QueuesFor("cancel-")
	opts := worker.Options{MaxHeartbeatThrottleInterval: time.Second, DefaultHeartbeatThrottleInterval: time.Second}
	sopts := opts
	sopts.LocalActivityWorkerOnly = true
	sw := worker.New(tc, q.Sessions, sopts)
	sw.RegisterWorkflowWithOptions(SessionWorkflow, workflow.RegisterOptions{Name: WorkflowName})
	sw.RegisterActivityWithOptions(a.Seq, activity.RegisterOptions{Name: SeqActivity})
	lw := worker.New(tc, q.LLM, opts)
	lw.RegisterActivityWithOptions(func(ctx context.Context, in ModelStep) (ModelOutput, error) {
		return a.Model(context.WithoutCancel(ctx), in)
	}, activity.RegisterOptions{Name: ModelActivity})
	lw.RegisterActivityWithOptions(a.Tool, activity.RegisterOptions{Name: ToolActivity})
	ww := worker.New(tc, q.WASM, opts)
	ww.RegisterActivityWithOptions(a.Tool, activity.RegisterOptions{Name: ToolActivity})
	for _, w := range []worker.Worker{sw, lw, ww} {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
	}
	cl := &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: RunInput{Queues: q, HeartbeatTimeout: 3 * time.Second}}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	run, _, err := cl.Start(rctx, "c", "write it")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-rctx.Done():
		t.Fatal("the model step never asked")
	}
	if err := tc.CancelWorkflow(rctx, run.GetID(), run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	var res RunResult
	if err := run.Get(rctx, &res); err != nil {
		t.Fatal(err)
	}
	recs, _ := st.Load(rctx, "c", 0)
	h, _ := jsonRecords{}.History(recs)
	if ran.Load() != 0 || res.ErrorKind != "cancelled" || len(h) != 3 || h[2].Role != loop.RoleTool ||
		h[2].Content != "error (cancelled): "+cancelledBeforeCall {
		b, _ := json.Marshal(h)
		t.Fatalf("ran %d, result %+v, history %s", ran.Load(), res, b)
	}
}

// TestCancelRunSparesALaterRun: cancelling a run that has ended (a
// client that leaves just as its run ends) does not cancel the run of the
// same session started after it; cancelling a run in progress does.
func TestCancelRunSparesALaterRun(t *testing.T) {
	addr := devtemporal.Start(t)
	second, third := make(chan struct{}), make(chan struct{})
	srv := chattest.New(t,
		chattest.Reply{Text: "one"},
		chattest.Reply{Text: "two", Delay: 2 * time.Second, Started: second},
		chattest.Reply{Text: "three", Delay: 5 * time.Second, Started: third},
	)
	a, st := newActivities(t, srv)
	tc := devtemporal.Client(t, addr)
	q := QueuesFor("cancelrun-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wctx, wstop := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- RunWorker(wctx, tc, a, WorkerOptions{Queues: q}) }()
	defer func() { wstop(); <-werr }()
	cl := &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: RunInput{Queues: q}}
	r1, _, err := cl.Start(ctx, "k", "first")
	if err != nil {
		t.Fatal(err)
	}
	var res RunResult
	if err := r1.Get(ctx, &res); err != nil || res.ErrorKind != "" {
		t.Fatalf("the first run: %+v %v", res, err)
	}
	r2, _, err := cl.Start(ctx, "k", "second")
	if err != nil {
		t.Fatal(err)
	}
	<-second
	if err := cl.CancelRun(ctx, r1); err != nil {
		t.Fatalf("cancelling the ended run: %v", err)
	}
	if err := r2.Get(ctx, &res); err != nil || res.ErrorKind != "" || string(res.Text.Data) != "two" {
		t.Fatalf("the later run was touched by the ended run's cancel: %+v %v", res, err)
	}
	r3, _, err := cl.Start(ctx, "k", "third")
	if err != nil {
		t.Fatal(err)
	}
	<-third
	if err := cl.CancelRun(ctx, r3); err != nil {
		t.Fatal(err)
	}
	if err := r3.Get(ctx, &res); err != nil || res.ErrorKind != "cancelled" {
		t.Fatalf("the run in progress was not cancelled: %+v %v", res, err)
	}
}
