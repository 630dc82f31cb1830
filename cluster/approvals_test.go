package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// askPerson is the worker's Approver of the approval tests: a call of a
// tool in ask needs a person's yes, which only a person can give
// (loop.ErrApprovalPending: the workflow waits for it).
type askPerson struct{ ask map[string]bool }

func (a askPerson) NeedsApproval(req loop.ApprovalRequest) bool { return a.ask[req.Tool] }
func (askPerson) Approve(context.Context, loop.ApprovalRequest) (loop.Decision, error) {
	return loop.Decision{}, loop.ErrApprovalPending
}

// approvalCluster is a worker on a real dev server whose tool "w"
// (writes: needs a yes) and "r" (reads: needs none) count their runs.
type approvalCluster struct {
	cl         *Client
	st         *session.Mem
	srv        *chattest.Server
	wRan, rRan atomic.Int32
	remembered []string
	mu         sync.Mutex
}

func newApprovalCluster(t *testing.T, addr, prefix string, in RunInput, replies ...chattest.Reply) *approvalCluster {
	t.Helper()
	ac := &approvalCluster{srv: chattest.New(t, replies...)}
	a, st := newActivities(t, ac.srv,
		&fakeTool{name: "w", source: "wasm", perms: []permission.Permission{permission.Write},
			run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
				ac.wRan.Add(1)
				return json.RawMessage(`"written"`), nil
			}},
		&fakeTool{name: "r", source: "wasm", perms: []permission.Permission{permission.Read},
			run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
				ac.rRan.Add(1)
				return json.RawMessage(`"read"`), nil
			}})
	a.Records = nil // session.Codec: what Follow replays and agrun reads
	a.Loop.Approver = askPerson{ask: map[string]bool{"w": true}}
	a.Remember = func(_ context.Context, tool string, _ registry.Grant, sess string) error {
		ac.mu.Lock()
		defer ac.mu.Unlock()
		ac.remembered = append(ac.remembered, tool+"@"+sess)
		return nil
	}
	ac.st = st
	tc := devtemporal.Client(t, addr)
	in.Queues = QueuesFor(prefix)
	ctx, cancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	go func() { werr <- RunWorker(ctx, tc, a, WorkerOptions{Queues: in.Queues}) }()
	t.Cleanup(func() { cancel(); <-werr })
	ac.cl = &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: in}
	return ac
}

// pendingOf follows run until it yields ApprovalsPending, and returns it.
func (ac *approvalCluster) pendingOf(ctx context.Context, t *testing.T, run client.WorkflowRun, id string) *ApprovalsPending {
	t.Helper()
	for ev, err := range ac.cl.Follow(ctx, run, id, 0) {
		if err != nil {
			t.Fatalf("the run ended without waiting: %v", err)
		}
		if p, ok := ev.(*ApprovalsPending); ok {
			return p
		}
	}
	t.Fatal("the run ended without waiting for a decision")
	return nil
}

// decisionsIn returns the decision records of session id, in order.
func (ac *approvalCluster) decisionsIn(t *testing.T, id string) []loop.DecisionRecord {
	t.Helper()
	recs, err := ac.st.Load(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []loop.DecisionRecord
	for _, b := range recs {
		var r session.Record
		if json.Unmarshal(b, &r) != nil || len(r.Decision) == 0 {
			continue
		}
		var d loop.DecisionRecord
		if err := json.Unmarshal(r.Decision, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// toolAnswer is the tool message about call id in the model's request i.
func toolAnswer(t *testing.T, srv *chattest.Server, i int, id string) string {
	t.Helper()
	reqs := srv.Requests()
	if len(reqs) <= i {
		t.Fatalf("%d model requests, want more than %d", len(reqs), i)
	}
	for _, m := range reqs[i].Messages {
		if m.Role == "tool" && m.ToolCallID == id && m.Content != nil {
			return *m.Content
		}
	}
	t.Fatalf("request %d answers no call %s", i, id)
	return ""
}

// TestApprovalsWaitOnTheCluster (issue 28, 5): on a real Temporal server,
// a call that needs a person's yes waits in the workflow for a decision
// (DecideUpdate) while the reply's other call runs at once; the client
// learns of it from Follow (ApprovalsPending, with the grant) and
// Pending; a decision about no waiting call is refused naming the one
// that waits; an approval is stored as a decision record before the call
// runs (the tool activity checks it), and the model sees the call's
// result; a denial reaches the model as denied_by_user with its reason
// and the tool never runs; no decision within the run's approval timeout
// denies the call (by "timeout"), through a workflow timer.
func TestApprovalsWaitOnTheCluster(t *testing.T) {
	addr := devtemporal.Start(t)
	calls := chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "w", Args: `{"n":1}`}, {ID: "c2", Name: "r", Args: `{}`}}}
	for _, tc := range []struct {
		name     string
		decide   map[string]loop.Decision // nil: no decision (the timeout)
		answer   string                   // what the model is told of c1
		ran      int32
		by       string
		decision loop.Answer
	}{
		{"approve", map[string]loop.Decision{"c1": {Answer: loop.ApproveOnce, By: "user"}}, `"written"`, 1, "user", loop.ApproveOnce},
		{"deny", map[string]loop.Decision{"c1": {Answer: loop.Deny, By: "user", Reason: "not today"}}, "error (denied_by_user): not today", 0, "user", loop.Deny},
		{"timeout", nil, "error (denied_by_user): no decision within 2s: the call was denied", 0, "timeout", loop.Deny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ac := newApprovalCluster(t, addr, "appr-"+tc.name+"-", RunInput{ApprovalTimeout: 2 * time.Second}, calls, chattest.Reply{Text: "done"})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run, _, err := ac.cl.Start(ctx, "s", "write")
			if err != nil {
				t.Fatal(err)
			}
			p := ac.pendingOf(ctx, t, run, "s")
			if len(p.Calls) != 1 || p.Calls[0].CallID != "c1" || p.Calls[0].Tool != "w" || p.Calls[0].Arguments != `{"n":1}` ||
				p.Calls[0].Grant.Source != "wasm" || len(p.Calls[0].Grant.Permissions) != 1 {
				t.Fatalf("pending %+v", p.Calls)
			}
			if got, err := ac.cl.Pending(ctx, "s"); err != nil || len(got) != 1 || got[0].CallID != "c1" {
				t.Fatalf("Pending: %+v %v", got, err)
			}
			// What agrun serve's GET /v1/runs/{id} shows: since when the
			// run runs, and since when the call waits.
			if got, err := ac.cl.PendingCalls(ctx, "s"); err != nil || len(got) != 1 || got[0].CallID != "c1" ||
				got[0].Asked.IsZero() || got[0].Asked.After(time.Now()) || time.Since(got[0].Asked) > time.Minute {
				t.Fatalf("PendingCalls: %+v %v", got, err)
			}
			if started, ok, err := ac.cl.Running(ctx, "s"); err != nil || !ok || started.IsZero() || time.Since(started) > time.Minute {
				t.Fatalf("Running: %v %v %v", started, ok, err)
			}
			// The call that needs no yes ran meanwhile; the other did not.
			for deadline := time.Now().Add(30 * time.Second); ac.rRan.Load() == 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the call that needs no decision did not run while the other waited")
				}
			}
			if ac.wRan.Load() != 0 {
				t.Fatal("the call ran before its decision")
			}
			err = ac.cl.Decide(ctx, "s", map[string]loop.Decision{"c9": {Answer: loop.ApproveOnce}})
			if !errors.Is(err, loop.ErrNothingPending) || !strings.Contains(err.Error(), `"c9"`) || !strings.Contains(err.Error(), `"c1" (w)`) {
				t.Fatalf("a decision about no waiting call: %v", err)
			}
			if tc.decide != nil {
				if err := ac.cl.Decide(ctx, "s", tc.decide); err != nil {
					t.Fatal(err)
				}
				if got, _ := ac.cl.Pending(ctx, "s"); len(got) != 0 {
					t.Fatalf("still pending after the decision: %+v", got)
				}
			}
			var res RunResult
			if err := run.Get(ctx, &res); err != nil || string(res.Text.Data) != "done" {
				t.Fatalf("result %+v %v", res, err)
			}
			if got := toolAnswer(t, ac.srv, 1, "c1"); got != tc.answer {
				t.Fatalf("the model was told %q, want %q", got, tc.answer)
			}
			if got := toolAnswer(t, ac.srv, 1, "c2"); got != `"read"` {
				t.Fatalf("the other call's answer %q", got)
			}
			if ac.wRan.Load() != tc.ran {
				t.Fatalf("the tool ran %d times, want %d", ac.wRan.Load(), tc.ran)
			}
			d := ac.decisionsIn(t, "s")
			if len(d) != 1 || d[0].CallID != "c1" || d[0].Answer != tc.decision || d[0].By != tc.by || d[0].Arguments != `{"n":1}` ||
				d[0].Grant.Source != "wasm" || d[0].Time.IsZero() {
				t.Fatalf("decisions %+v", d)
			}
			// After the run, nothing waits and nothing runs.
			if err := ac.cl.Decide(ctx, "s", map[string]loop.Decision{"c1": {Answer: loop.ApproveOnce}}); !errors.Is(err, loop.ErrNothingPending) || errors.Is(err, ErrBeingDecided) {
				t.Fatalf("a decision after the run: %v", err)
			}
			if _, ok, err := ac.cl.Running(ctx, "s"); err != nil || ok {
				t.Fatalf("Running after the run: %v %v", ok, err)
			}
			if _, ok, err := ac.cl.Running(ctx, "nosuch"); err != nil || ok {
				t.Fatalf("Running of no session: %v %v", ok, err)
			}
		})
	}
}

// TestSessionApprovalOnTheCluster: a person's "session" answer approves
// the tool (with its grant) for the rest of the run, as the local Cycle
// does: the same reply's other call of it is approved without asking
// (recorded by "session", remembered), and so is a later reply's, in
// the run continued as new; an
// "always" answer is also handed to Activities.Remember; a cancelled run
// answers its undecided call "cancelled before the call was decided".
func TestSessionApprovalOnTheCluster(t *testing.T) {
	addr := devtemporal.Start(t)
	t.Run("session", func(t *testing.T) {
		// Continuing as new after each step: the approval is carried.
		ac := newApprovalCluster(t, addr, "sess-", RunInput{ContinueAfterEvents: 1},
			chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "w", Args: `{"n":1}`}, {ID: "c2", Name: "w", Args: `{"n":2}`}}},
			chattest.Reply{ToolCalls: []chattest.Call{{ID: "c3", Name: "w", Args: `{"n":3}`}}},
			chattest.Reply{Text: "done"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		run, _, err := ac.cl.Start(ctx, "s", "write thrice")
		if err != nil {
			t.Fatal(err)
		}
		if p := ac.pendingOf(ctx, t, run, "s"); len(p.Calls) != 2 {
			t.Fatalf("pending %+v", p.Calls)
		}
		if err := ac.cl.Decide(ctx, "s", map[string]loop.Decision{"c1": {Answer: loop.ApproveSession, By: "user"}}); err != nil {
			t.Fatal(err)
		}
		var res RunResult
		if err := run.Get(ctx, &res); err != nil || string(res.Text.Data) != "done" || ac.wRan.Load() != 3 {
			t.Fatalf("result %+v %v, the tool ran %d times", res, err, ac.wRan.Load())
		}
		d := ac.decisionsIn(t, "s")
		var got []string
		for _, r := range d {
			got = append(got, r.CallID+":"+string(r.Answer)+":"+r.By)
			if r.CallID != "c1" && !r.Remembered {
				t.Fatalf("decision %+v not marked remembered", r)
			}
		}
		if strings.Join(got, ",") != "c1:session:user,c2:session:session,c3:session:session" {
			t.Fatalf("decisions %v", got)
		}
		if len(res.Approved) != 1 || res.ContinuedAsNew != 2 {
			t.Fatalf("the run's approved tools %v", res.Approved)
		}
	})
	t.Run("always", func(t *testing.T) {
		ac := newApprovalCluster(t, addr, "always-", RunInput{},
			chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "w", Args: `{}`}}}, chattest.Reply{Text: "done"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		run, _, err := ac.cl.Start(ctx, "a", "write")
		if err != nil {
			t.Fatal(err)
		}
		ac.pendingOf(ctx, t, run, "a")
		if err := ac.cl.Decide(ctx, "a", map[string]loop.Decision{"c1": {Answer: loop.ApproveAlways, By: "user"}}); err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil || ac.wRan.Load() != 1 {
			t.Fatalf("%v, ran %d", err, ac.wRan.Load())
		}
		ac.mu.Lock()
		defer ac.mu.Unlock()
		if strings.Join(ac.remembered, ",") != "w@a" {
			t.Fatalf("remembered %v", ac.remembered)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ac := newApprovalCluster(t, addr, "cancelwait-", RunInput{},
			chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "w", Args: `{}`}}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		run, _, err := ac.cl.Start(ctx, "x", "write")
		if err != nil {
			t.Fatal(err)
		}
		ac.pendingOf(ctx, t, run, "x")
		if err := ac.cl.Temporal.CancelWorkflow(ctx, run.GetID(), run.GetRunID()); err != nil {
			t.Fatal(err)
		}
		var res RunResult
		if err := run.Get(ctx, &res); err != nil || res.ErrorKind != "cancelled" || ac.wRan.Load() != 0 {
			t.Fatalf("result %+v %v, ran %d", res, err, ac.wRan.Load())
		}
		recs, _ := ac.st.Load(ctx, "x", 0)
		h, err := session.Codec{}.History(recs)
		if err != nil || len(h) != 3 || h[2].Content != "error (cancelled): the run was cancelled before the call was decided" {
			t.Fatalf("history %+v %v", h, err)
		}
	})
}
