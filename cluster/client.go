package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"time"

	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// ErrSessionBusy is returned by Client.Run when a run of the session is
// already going on somewhere in the cluster.
var ErrSessionBusy = errors.New("the session is running elsewhere in the cluster")

// Client starts runs of sessions on a cluster and reads their results.
type Client struct {
	Temporal client.Client
	Sessions session.Store
	Blobs    store.ObjectStore
	// Defaults holds the run settings (Queues, MaxTurns, timeouts,
	// RetrySideEffects) each run starts from.
	Defaults RunInput
	// Logger receives Follow's warnings (a failed poll of the session
	// store); nil: slog.Default().
	Logger *slog.Logger
}

// Start starts a run of session with prompt, at the session's next
// record, and returns its handle and that record's seq as read before the
// start (for Follow; the run itself reads where its records begin once it
// has started, so a run of the session ending meanwhile is not taken for
// this one). A run of the same session already going on is
// ErrSessionBusy.
func (c *Client) Start(ctx context.Context, id, prompt string) (client.WorkflowRun, int64, error) {
	return c.StartServed(ctx, "", id, prompt, nil)
}

// StartServed is Start for a run of agrun serve: of its tenant
// (RunSettings.Tenant, "": none), whose workers offer it the tools their
// config gives that tenant's runs, and with the answer schema the client
// asked for (RunSettings.Schema, nil: the Defaults').
func (c *Client) StartServed(ctx context.Context, tenant, id, prompt string, schema json.RawMessage) (client.WorkflowRun, int64, error) {
	in := c.Defaults
	if tenant != "" || len(schema) > 0 {
		st := RunSettings{}
		if in.Settings != nil {
			st = *in.Settings
		}
		if tenant != "" {
			st.Tenant = tenant
		}
		if len(schema) > 0 {
			st.Schema = schema
		}
		in.Settings = &st
	}
	if err := in.Settings.Check(); err != nil {
		return nil, 0, err
	}
	recs, err := c.Sessions.Load(ctx, id, 0)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		return nil, 0, err
	}
	in.Session, in.Prompt, in.Seq = id, prompt, int64(len(recs))
	if len(prompt) > DefaultInlineLimit {
		p, err := blobs{store: c.Blobs}.put(ctx, []byte(prompt))
		if err != nil {
			return nil, 0, err
		}
		in.Prompt, in.PromptRef = "", &p
	}
	if in.Queues == (Queues{}) {
		in.Queues = QueuesFor("")
	}
	run, err := c.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       WorkflowID(id),
		TaskQueue:                in.Queues.Sessions,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		// Without it the SDK hands back the running run's handle.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		WorkflowTaskTimeout:                      workflowTaskTimeout(in.HeartbeatTimeout),
	}, WorkflowName, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil, 0, fmt.Errorf("%w: %s", ErrSessionBusy, id)
	}
	return run, in.Seq, err
}

// Run starts a run and waits for its result.
func (c *Client) Run(ctx context.Context, id, prompt string) (RunResult, error) {
	run, _, err := c.Start(ctx, id, prompt)
	if err != nil {
		return RunResult{}, err
	}
	var res RunResult
	err = run.Get(ctx, &res)
	return res, err
}

// Text returns the final answer of res (fetched from the blob store when
// it was passed by reference).
func (c *Client) Text(ctx context.Context, res RunResult) (string, error) {
	b, err := blobs{store: c.Blobs}.get(ctx, res.Text)
	return string(b), err
}

// Waiting is the event Follow yields once when no step of a run has been
// done WaitingAfter after it started: no worker may be serving the
// run's queues.
type Waiting struct {
	// For is how long the run has waited.
	For time.Duration
}

// EventType implements loop.Event.
func (*Waiting) EventType() string { return "waiting" }

// Cancelling is the event Follow yields when its context ends: the run is
// being cancelled on the cluster, and Follow waits (up to CancelWait) for
// it to stop.
type Cancelling struct{}

// EventType implements loop.Event.
func (*Cancelling) EventType() string { return "cancelling" }

// RunError is a run that ended on the cluster without an answer; Kind is
// the loop's kind (provider, max_turns, ...), Message cleaned.
type RunError struct {
	Kind    string
	Message string
}

// Error implements error: the kind and the run's message.
func (e *RunError) Error() string {
	return "run failed on the cluster (" + e.Kind + "): " + e.Message
}

// WaitingAfter is how long Follow waits for a run's first record before
// it yields a Waiting event.
const WaitingAfter = 10 * time.Second

// CancelWait bounds how long Follow waits for a cancelled run to stop.
const CancelWait = 10 * time.Second

// Follow yields the events of run, which Start began (from: the seq Start
// read, used only for a run of a worker that does not publish its own,
// MemoSeq): the records the workers append to the session store from the
// run's seq on, replayed as the
// loop's events (session.Replay), plus Waiting and Cancelling. A model
// reply's text comes live as the model writes it when the session store
// is a LiveBus (PostgreSQL), reconciled with the reply stored: the text
// deltas yielded for a reply concatenate to the stored reply, but for a
// ReplyRestated, after which the reply follows whole; with another
// store, a reply arrives whole. It ends when the run does: with
// a *RunError if the run ended without an answer, or an error if it
// could not be followed. When ctx ends, the run is cancelled on the
// cluster (its steps see the cancellation at their next heartbeat),
// Follow waits up to CancelWait for it to stop — so that the session is
// free when the caller exits — and yields ctx's error.
func (c *Client) Follow(ctx context.Context, run client.WorkflowRun, id string, from int64) iter.Seq2[loop.Event, error] {
	return c.follow(ctx, run, id, from, false)
}

// FollowFrom is Follow from record from exactly (not from where the run's
// records begin): what a client that resumes a run (Resume) has not
// shown yet.
func (c *Client) FollowFrom(ctx context.Context, run client.WorkflowRun, id string, from int64) iter.Seq2[loop.Event, error] {
	return c.follow(ctx, run, id, from, true)
}

func (c *Client) follow(ctx context.Context, run client.WorkflowRun, id string, from int64, exact bool) iter.Seq2[loop.Event, error] {
	return func(yield func(loop.Event, error) bool) {
		log := c.Logger
		if log == nil {
			log = slog.Default()
		}
		bg := context.WithoutCancel(ctx)
		var res RunResult
		done := make(chan error, 1)
		// A handle of our own: Get follows continue-as-new by writing
		// the handle's current run, so waiting on the caller's run would
		// race with whatever the caller does with it after leaving the
		// loop early (its own Get, GetRunID).
		own := c.Temporal.GetWorkflow(bg, run.GetID(), run.GetRunID())
		go func() { done <- own.Get(bg, &res) }()
		var replay session.Replay
		// The reply's text live, if the session store carries it
		// (LiveBus): shown as it comes, reconciled with the stored reply
		// (liveView).
		var live <-chan []byte
		view := liveView{seq: -1}
		if bus, ok := c.Sessions.(LiveBus); ok {
			lctx, cancel := context.WithCancel(bg)
			defer cancel()
			var err error
			if live, err = bus.Listen(lctx, id); err != nil {
				log.Warn("listening for the reply's text: replies arrive whole", "session", id, "err", err)
				live = nil
			}
		}
		// known: next is where the run's records begin (the run's
		// MemoSeq), or the run is of a worker that does not publish it;
		// got: a record of the run was read.
		next, started, known, got := from, exact, exact, false
		// mayWait: a call may wait for a decision (a reply asked for
		// calls, or the run is resumed); asked: the calls already yielded
		// in an ApprovalsPending.
		mayWait, asked := exact, map[string]bool{}
		// waiting yields an ApprovalsPending for the calls that newly wait
		// for a decision (the run's memo lists them); false: the caller
		// stopped.
		waiting := func() bool {
			if !mayWait {
				return true
			}
			ids, err := c.waitingIDs(bg, run)
			if err != nil {
				log.Warn("reading the calls waiting for a decision", "session", id, "err", err)
				return true
			}
			fresh := slices.ContainsFunc(ids, func(id string) bool { return !asked[id] })
			if !fresh {
				return true
			}
			pending, err := c.Pending(bg, id)
			if err != nil || len(pending) == 0 {
				if err != nil {
					log.Warn("reading the calls waiting for a decision", "session", id, "err", err)
				}
				return true
			}
			for _, p := range pending {
				asked[p.CallID] = true
			}
			return yield(&ApprovalsPending{Calls: pending}, nil)
		}
		// drain yields the records appended since the last; false: the
		// caller stopped.
		drain := func() (bool, error) {
			if !known {
				seq, ok, legacy := c.runStart(bg, run)
				switch {
				case ok:
					next, started, known = seq, true, true
				case legacy:
					known = true
				default:
					return true, nil // the run has not begun: nothing of it is stored
				}
			}
			recs, err := c.Sessions.Load(bg, id, next)
			if errors.Is(err, session.ErrNotFound) {
				return true, nil
			}
			if err != nil {
				return true, err
			}
			base := next
			next += int64(len(recs))
			for i, b := range recs {
				if !started {
					// A run of a worker that does not publish its seq:
					// its records begin with its prompt; records before
					// it at from are the previous run's tail (a seq read
					// as that run ended), not this run's.
					if started = isUserMessage(b); !started {
						continue
					}
				}
				got = true
				for _, ev := range replay.Feed(b) {
					if _, ok := ev.(*loop.ToolExecutionStarted); ok {
						mayWait = true
					}
					evs := []loop.Event{ev}
					if td, ok := ev.(*loop.TextDelta); ok {
						evs = view.stored(base+int64(i), td.Text)
					}
					for _, ev := range evs {
						if !yield(ev, nil) {
							return false, nil
						}
					}
				}
			}
			return true, nil
		}
		// Poll quickly at first, then every second: a poll of the
		// JSON-lines store reads the session's file.
		start, wait, told := time.Now(), 150*time.Millisecond, false
		tick := time.NewTimer(wait)
		defer tick.Stop()
		for {
			select {
			case runErr := <-done:
				more, err := drain()
				if !more {
					return
				}
				switch {
				case runErr != nil:
					yield(nil, fmt.Errorf("the run on the cluster: %w", runErr))
				case err != nil:
					yield(nil, err)
				case res.ErrorKind != "":
					yield(nil, &RunError{Kind: res.ErrorKind, Message: textsafe.Clean(res.Error, 4096)})
				}
				return
			case b, ok := <-live:
				if !ok {
					live = nil // lost: the records go on
					continue
				}
				var d liveDelta
				if json.Unmarshal(b, &d) != nil || d.Session != id {
					continue
				}
				if d.Seq > next {
					// The records before the step are stored (the step
					// read them): shown first, in order.
					more, err := drain()
					if !more {
						return
					}
					if err != nil {
						continue // not shown out of order
					}
				}
				if d.Seq > next {
					continue
				}
				if ev := view.take(d, next); ev != nil && !yield(ev, nil) {
					return
				}
			case <-tick.C:
				more, err := drain()
				if !more {
					return
				}
				if err != nil {
					log.Warn("reading the session's progress", "session", id, "err", err)
				}
				if !waiting() {
					return
				}
				if !told && !got && time.Since(start) > WaitingAfter {
					told = true
					if !yield(&Waiting{For: time.Since(start)}, nil) {
						return
					}
				}
				wait = min(wait*2, time.Second)
				tick.Reset(wait)
			case <-ctx.Done():
				if !yield(&Cancelling{}, nil) {
					return
				}
				cctx, cancel := context.WithTimeout(bg, CancelWait)
				// The workflow's current run: the one followed, after any
				// continue-as-new (the first run's id is closed by then).
				err := c.CancelRun(cctx, run)
				if err == nil {
					select {
					case <-done:
					case <-cctx.Done():
					}
				}
				cancel()
				if more, _ := drain(); !more {
					return
				}
				if err != nil {
					yield(nil, fmt.Errorf("%w (the run could not be cancelled on the cluster, and goes on: %s)", ctx.Err(), textsafe.Clean(err.Error(), 500)))
					return
				}
				yield(nil, ctx.Err())
				return
			}
		}
	}
}

// ApprovalsPending is the event Follow yields when calls of the run wait
// for a person's decision (each call once): Decide answers them, and the
// run goes on; undecided, they are denied after the run's
// ApprovalTimeout.
type ApprovalsPending struct {
	// Calls are the calls waiting, in call order, as an Approver is asked
	// about them.
	Calls []loop.ApprovalRequest
}

// EventType implements loop.Event.
func (*ApprovalsPending) EventType() string { return "approvals_pending" }

// waitingIDs reads the ids of run's calls waiting for a decision from
// its memo (MemoWaiting).
func (c *Client) waitingIDs(ctx context.Context, run client.WorkflowRun) ([]string, error) {
	// The current run of the workflow (""): the one that waits, after
	// any continue-as-new.
	desc, err := c.Temporal.DescribeWorkflow(ctx, run.GetID(), "")
	if err != nil {
		return nil, err
	}
	if desc.RawResponse == nil {
		return nil, nil
	}
	p := desc.RawResponse.GetWorkflowExecutionInfo().GetMemo().GetFields()[MemoWaiting]
	if p == nil {
		return nil, nil
	}
	var ids []string
	err = converter.GetDefaultDataConverter().FromPayload(p, &ids)
	return ids, err
}

// Pending returns the calls of session's running run that wait for a
// person's decision, in call order (none: nil). It asks the run
// (PendingQuery), which a workflow worker answers.
func (c *Client) Pending(ctx context.Context, session string) ([]loop.ApprovalRequest, error) {
	calls, err := c.PendingCalls(ctx, session)
	out := make([]loop.ApprovalRequest, len(calls))
	for i, w := range calls {
		out[i] = w.ApprovalRequest
	}
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// WaitingCall is a call that waits for a person's decision, and since
// when (zero: a worker that predates PendingApproval.Asked).
type WaitingCall struct {
	loop.ApprovalRequest
	Asked time.Time
}

// PendingCalls is Pending with the time each call began to wait.
func (c *Client) PendingCalls(ctx context.Context, session string) ([]WaitingCall, error) {
	v, err := c.Temporal.QueryWorkflow(ctx, WorkflowID(session), "", PendingQuery)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ps []PendingApproval
	if err := v.Get(&ps); err != nil {
		return nil, err
	}
	out := make([]WaitingCall, 0, len(ps))
	for _, p := range ps {
		args, err := blobs{store: c.Blobs}.get(ctx, p.Args)
		if err != nil {
			return nil, err
		}
		out = append(out, WaitingCall{ApprovalRequest: loop.ApprovalRequest{CallID: textsafe.Clean(p.CallID, 256), Tool: textsafe.Clean(p.Tool, 256),
			Arguments: textsafe.Clean(string(args), 0), Grant: p.Grant}, Asked: p.Asked})
	}
	return out, nil
}

// Running reports whether a run of session is going on on the cluster,
// and when it started (its current workflow run's start: a run that
// continued as new gives the time it did). ok false: none.
func (c *Client) Running(ctx context.Context, session string) (started time.Time, ok bool, err error) {
	desc, err := c.Temporal.DescribeWorkflow(ctx, WorkflowID(session), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return time.Time{}, false, nil
	}
	return info.GetStartTime().AsTime(), true, nil
}

// Cancel asks session's running run to stop (its steps see the
// cancellation at their next heartbeat, calls still undecided are
// answered "cancelled"); it does not wait. No run: nil.
func (c *Client) Cancel(ctx context.Context, session string) error {
	err := c.Temporal.CancelWorkflow(ctx, WorkflowID(session), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil
	}
	return err
}

// CancelRun cancels run — the workflow's current execution if it is one
// that run's chain of continue-as-new began, so a run of the same session
// started after run ended is never the one cancelled (a client that
// leaves just as its run ends, while another starts). A run already over
// is no error.
func (c *Client) CancelRun(ctx context.Context, run client.WorkflowRun) error {
	for range 2 {
		desc, err := c.Temporal.DescribeWorkflow(ctx, run.GetID(), "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil
		}
		if err != nil {
			return err
		}
		info := desc.RawResponse.GetWorkflowExecutionInfo()
		// A handle without a run id (GetWorkflow(id, "")) names the
		// current run, whichever it is.
		if first := info.GetFirstRunId(); first != "" && run.GetRunID() != "" && first != run.GetRunID() {
			return nil // another run's: run is over
		}
		if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return nil
		}
		err = c.Temporal.CancelWorkflow(ctx, run.GetID(), info.GetExecution().GetRunId())
		if err == nil || !errors.As(err, &nf) {
			return err
		}
		// That execution closed meanwhile (it continued as new, or
		// ended): look again once.
	}
	return nil
}

// Decide answers calls of session's running run that wait for a
// decision (decisions by call id) and returns once the run has stored
// them; the run then runs the approved calls and goes on. A call id that
// does not wait (or no run waiting at all) is an error matching
// loop.ErrNothingPending that names the calls that do wait; one that
// another decision is being stored for matches ErrBeingDecided too.
func (c *Client) Decide(ctx context.Context, session string, decisions map[string]loop.Decision) error {
	h, err := c.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   WorkflowID(session),
		UpdateName:   DecideUpdate,
		Args:         []any{Decisions{Decisions: decisions}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var nf *serviceerror.NotFound
	switch msg, ok, race := errorsIsNotWaiting(err); {
	case err == nil:
		return nil
	case race:
		return fmt.Errorf("%w: %w: %s", loop.ErrNothingPending, ErrBeingDecided, textsafe.Clean(msg, 1024))
	case ok:
		return fmt.Errorf("%w: %s", loop.ErrNothingPending, textsafe.Clean(msg, 1024))
	case errors.As(err, &nf):
		return fmt.Errorf("%w: session %s has no run on the cluster", loop.ErrNothingPending, session)
	}
	return err
}

// Resume decides calls that session id's running run waits for (Decide)
// and returns the run's handle and the session's length as it was just
// before the decisions, for FollowFrom.
func (c *Client) Resume(ctx context.Context, id string, decisions map[string]loop.Decision) (client.WorkflowRun, int64, error) {
	recs, err := c.Sessions.Load(ctx, id, 0)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		return nil, 0, err
	}
	if err := c.Decide(ctx, id, decisions); err != nil {
		return nil, 0, err
	}
	return c.Temporal.GetWorkflow(ctx, WorkflowID(id), ""), int64(len(recs)), nil
}

// runStart reads where run's records begin from its memo (MemoSeq). ok
// false: the run has not published it yet (no workflow task of it has
// run) or never will: legacy, a run whose worker predates MemoSeq (it has
// scheduled a step or ended without one) or that cannot be described.
func (c *Client) runStart(ctx context.Context, run client.WorkflowRun) (seq int64, ok, legacy bool) {
	desc, err := c.Temporal.DescribeWorkflow(ctx, run.GetID(), run.GetRunID())
	if err != nil || desc.RawResponse == nil {
		return 0, false, true
	}
	d := desc.RawResponse
	info := d.GetWorkflowExecutionInfo()
	if p := info.GetMemo().GetFields()[MemoSeq]; p != nil {
		if converter.GetDefaultDataConverter().FromPayload(p, &seq) == nil {
			return seq, true, false
		}
		return 0, false, true
	}
	return 0, false, len(d.GetPendingActivities()) > 0 || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
}

// isUserMessage reports whether session record b is a user's message.
func isUserMessage(b []byte) bool {
	var r session.Record
	if json.Unmarshal(b, &r) != nil || len(r.Message) == 0 {
		return false
	}
	var m loop.Message
	return json.Unmarshal(r.Message, &m) == nil && m.Role == loop.RoleUser
}

// Running reports whether a run of session id is going on in the cluster:
// its workflow (WorkflowID, the current run after a continue-as-new) is
// open. `agrun sessions rm`, `prune` and `compact` refuse such a session
// (session.Guarded), as the local path refuses one another process has
// open.
func Running(ctx context.Context, tc client.Client, id string) (bool, error) {
	d, err := tc.DescribeWorkflow(ctx, WorkflowID(id), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// workflowTaskTimeout is a run's workflow task timeout: the heartbeat
// timeout (default 20 s), within Temporal's 10 s default and its 120 s
// ceiling. A local call (LocalToolActivity) runs inside a workflow task,
// so this is how long a lost worker goes unnoticed there, as the
// heartbeat timeout is for an activity task; the SDK keeps a longer call's
// task alive by completing it every 0.8 × this and taking the next.
func workflowTaskTimeout(hb time.Duration) time.Duration {
	if hb <= 0 {
		hb = 20 * time.Second
	}
	return min(max(hb, 10*time.Second), 120*time.Second)
}
