package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
)

// Names of the approval messages and activity, part of the wire contract
// (never renamed): DecideUpdate is the workflow Update that answers the
// calls waiting for a person's yes (its argument a Decisions); PendingQuery
// the workflow Query that lists them ([]PendingApproval); DecideActivity
// the activity that stores the decisions in the session.
const (
	DecideUpdate   = "agrun.decide"
	PendingQuery   = "agrun.pending"
	DecideActivity = "agrun.decide"
)

// MemoWaiting is the workflow memo field listing the ids of the calls
// that wait for a decision (empty: none), so that a follower learns of
// them from the server without a query.
const MemoWaiting = "agrun_waiting"

// DefaultApprovalTimeout is how long a call waits for a person's
// decision before it is denied (RunInput.ApprovalTimeout).
const DefaultApprovalTimeout = time.Hour

// errNotWaiting is the Temporal error type of a decision refused because
// no such call waits (Client.Decide turns it into loop.ErrNothingPending).
const errNotWaiting = "agrun.not_waiting"

// beingDecided is the detail of an errNotWaiting refusal of a call whose
// decision was given and is being stored (another client's came first):
// Client.Decide adds ErrBeingDecided. A detail, not a type of its own, so
// that a client that predates it still reads loop.ErrNothingPending.
const beingDecided = "being_decided"

// ErrBeingDecided is matched (beside loop.ErrNothingPending) by
// Client.Decide's error when another decision about the call came first
// and is being stored: a race between two deciders, where a call already
// decided is plain loop.ErrNothingPending.
var ErrBeingDecided = errors.New("the call is being decided by another decision")

// PendingApproval is a call that waits for a person's decision, as
// PendingQuery lists it: its id, tool, arguments (by reference when
// large) and the grant the call will run with.
type PendingApproval struct {
	CallID string         `json:"call_id"`
	Tool   string         `json:"tool"`
	Args   Payload        `json:"args"`
	Grant  registry.Grant `json:"grant"`
	// Asked is when the run began to wait for the call's decision
	// (workflow time; zero from a worker that predates it).
	Asked time.Time `json:"asked,omitempty"`
}

// Decisions is the argument of DecideUpdate: a decision per waiting
// call, by call id. A decision other than an approving one denies.
type Decisions struct {
	Decisions map[string]loop.Decision `json:"decisions"`
}

// DecideStep is the input of the decide activity: the decisions to
// store in the session at Seq, in call order.
type DecideStep struct {
	Session string        `json:"session"`
	Seq     int64         `json:"seq"`
	Calls   []DecidedCall `json:"calls"`
}

// DecidedCall is one decision about a waiting call, and when it came.
type DecidedCall struct {
	Call     PendingCall   `json:"call"`
	Decision loop.Decision `json:"decision"`
	Time     time.Time     `json:"time"`
	// Remembered: no one was asked; the tool was approved for the
	// session by an earlier decision (Decision.By is "session").
	Remembered bool `json:"remembered,omitempty"`
}

// Decide stores the decisions of in as decision records at in.Seq (the
// records a tool activity checks before it runs a call that needs a yes,
// and that `agrun sessions show` lists), and remembers the tools a
// person approved "always" (Remember). It returns the session's next
// seq. A retried attempt whose records an earlier one stored returns as
// if it had stored them.
func (a *Activities) Decide(ctx context.Context, in DecideStep) (int64, error) {
	recs := make([]json.RawMessage, 0, len(in.Calls))
	for _, d := range in.Calls {
		args, err := a.blobs().get(ctx, d.Call.Args)
		if err != nil {
			return 0, err
		}
		var g registry.Grant
		if d.Call.Undecided != nil {
			g = *d.Call.Undecided
		}
		b, err := a.records().Decision(loop.DecisionRecord{
			ApprovalRequest: loop.ApprovalRequest{CallID: d.Call.ID, Tool: d.Call.Tool, Arguments: textsafe.Clean(string(args), 0), Grant: g},
			Decision:        cleanDecision(d.Decision),
			Time:            d.Time,
			Remembered:      d.Remembered,
		})
		if err != nil {
			return 0, permanent(err)
		}
		recs = append(recs, b)
	}
	written, err := a.Sessions.Append(ctx, in.Session, in.Seq, recs)
	if err != nil {
		return 0, err
	}
	if !written {
		// An earlier attempt stored them (its worker was lost after the
		// write), or the session changed under the run.
		have, err := a.load(ctx, in.Session)
		if err != nil {
			return 0, err
		}
		if int64(len(have)) < in.Seq+int64(len(recs)) {
			return 0, permanent(fmt.Errorf("session %s changed while its run waited for a decision", in.Session))
		}
		for i, r := range recs {
			if string(have[in.Seq+int64(i)]) != string(r) {
				return 0, permanent(fmt.Errorf("session %s changed while its run waited for a decision", in.Session))
			}
		}
	}
	if a.Remember != nil {
		for _, d := range in.Calls {
			if d.Decision.Answer != loop.ApproveAlways || d.Call.Undecided == nil {
				continue
			}
			if err := a.Remember(ctx, d.Call.Tool, *d.Call.Undecided, in.Session); err != nil {
				activity.GetLogger(ctx).Warn("remembering an \"always\" approval", "tool", d.Call.Tool, "error", err)
			}
		}
	}
	return in.Seq + int64(len(recs)), nil
}

// cleanDecision bounds what a decision from outside carries, as the
// loop bounds an Approver's.
func cleanDecision(d loop.Decision) loop.Decision {
	d.Answer = loop.Answer(textsafe.Clean(string(d.Answer), 16))
	d.Reason = textsafe.Clean(d.Reason, 1024)
	d.By = textsafe.Clean(d.By, 64)
	return d
}

// deniedResult is what the model is told of a call a person (or the
// timeout) denied: as locally, "error (denied_by_user): <reason>".
func deniedResult(c PendingCall, d loop.Decision) ToolResult {
	reason := d.Reason
	if reason == "" {
		reason = "denied by the user"
	}
	return ToolResult{ID: c.ID, Kind: registry.DeniedByUser, Message: reason}
}

// waits is the workflow's state of the calls of one step that wait for a
// decision, shared by the run and its DecideUpdate and PendingQuery
// handlers.
type waits struct {
	calls      []PendingCall // the undecided calls of the step, in call order
	asked      time.Time     // when the step began to wait
	given      map[string]loop.Decision
	at         map[string]time.Time
	remembered map[string]bool
	stored     map[string]bool
	// done: the step is over; an update still waiting ends with failed
	// (the run ended before its decision was stored).
	done   bool
	failed string
}

// register sets the run's DecideUpdate and PendingQuery handlers.
func (w *waits) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, PendingQuery, func() ([]PendingApproval, error) {
		var out []PendingApproval
		for _, c := range w.calls {
			if _, ok := w.given[c.ID]; ok || w.stored[c.ID] {
				continue
			}
			var g registry.Grant
			if c.Undecided != nil {
				g = *c.Undecided
			}
			out = append(out, PendingApproval{CallID: c.ID, Tool: c.Tool, Args: c.Args, Grant: g, Asked: w.asked})
		}
		return out, nil
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, DecideUpdate, func(ctx workflow.Context, in Decisions) error {
		ids := make([]string, 0, len(in.Decisions))
		for id, d := range in.Decisions {
			w.given[id], w.at[id] = d, workflow.Now(ctx)
			ids = append(ids, id)
		}
		if err := workflow.Await(ctx, func() bool {
			return w.done || !slices.ContainsFunc(ids, func(id string) bool { return !w.stored[id] })
		}); err != nil {
			return err
		}
		for _, id := range ids {
			if !w.stored[id] {
				return temporal.NewApplicationError("the decision was not stored: "+w.failed, errNotWaiting)
			}
		}
		return nil
	}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, in Decisions) error {
		if len(in.Decisions) == 0 {
			return temporal.NewApplicationError("no decision given", errNotWaiting)
		}
		var waiting []string
		for _, c := range w.calls {
			if _, ok := w.given[c.ID]; !ok && !w.stored[c.ID] {
				waiting = append(waiting, strconv.Quote(c.ID)+" ("+c.Tool+")")
			}
		}
		for id := range in.Decisions {
			if !slices.ContainsFunc(w.calls, func(c PendingCall) bool { return c.ID == id }) || w.stored[id] {
				return temporal.NewApplicationError(notWaiting(id, waiting), errNotWaiting)
			}
			if _, ok := w.given[id]; ok {
				return temporal.NewApplicationError(fmt.Sprintf("call %q is being decided already", id), errNotWaiting, beingDecided)
			}
		}
		return nil
	}})
}

// notWaiting says that no call waits under id, naming those that do (as
// the local path's loop.ErrNothingPending does).
func notWaiting(id string, waiting []string) string {
	if len(waiting) == 0 {
		return fmt.Sprintf("no tool call waits for a decision with the id %q", id)
	}
	return fmt.Sprintf("no tool call waits for a decision with the id %q; waiting: %s", id, strings.Join(waiting, ", "))
}

// open starts waiting for the decisions about calls, and says so in the
// memo.
func (w *waits) open(ctx workflow.Context, calls []PendingCall) {
	w.calls, w.given, w.at, w.stored, w.remembered, w.done, w.failed = calls, map[string]loop.Decision{}, map[string]time.Time{}, map[string]bool{}, map[string]bool{}, false, ""
	w.asked = workflow.Now(ctx)
	w.publish(ctx)
}

// publish writes the ids still waiting to the memo.
func (w *waits) publish(ctx workflow.Context) {
	ids := []string{}
	for _, c := range w.calls {
		if !w.stored[c.ID] {
			ids = append(ids, c.ID)
		}
	}
	if err := workflow.UpsertMemo(ctx, map[string]any{MemoWaiting: ids}); err != nil {
		workflow.GetLogger(ctx).Warn("publishing the calls waiting for a decision", "error", err)
	}
}

// close ends the step's wait (why: for updates still waiting, "" if every
// decision was stored).
func (w *waits) close(ctx workflow.Context, why string) {
	w.done, w.failed = true, why
	w.calls = nil
	w.publish(ctx)
}

// fresh returns the decisions given and not yet stored, in call order.
func (w *waits) fresh() []DecidedCall {
	var out []DecidedCall
	for _, c := range w.calls {
		if d, ok := w.given[c.ID]; ok && !w.stored[c.ID] {
			out = append(out, DecidedCall{Call: c, Decision: d, Time: w.at[c.ID], Remembered: w.remembered[c.ID]})
		}
	}
	return out
}

// undecided returns the calls with no decision given yet.
func (w *waits) undecided() []PendingCall {
	var out []PendingCall
	for _, c := range w.calls {
		if _, ok := w.given[c.ID]; !ok {
			out = append(out, c)
		}
	}
	return out
}

// awaitDecisions waits for the decisions about the step's undecided calls
// (those of out.Calls with Undecided set) and runs each approved one as
// it is decided (start), after storing its decision at *seq; a denied one
// (or one undecided after timeout: denied by "timeout") gets its result
// here. A tool approved for the session ("session", "always") is added
// to approved, and the step's other calls of it waiting are approved
// with it (by "session", as the local loop does). A cancelled run
// answers the calls still undecided "cancelled".
func (w *waits) awaitDecisions(ctx workflow.Context, in RunInput, seq *int64, approved *[]string, calls []PendingCall, results []ToolResult, start func(i int)) {
	var undecided []PendingCall
	for _, c := range calls {
		if c.Undecided != nil {
			undecided = append(undecided, c)
		}
	}
	if len(undecided) == 0 {
		return
	}
	timeout := in.ApprovalTimeout
	if timeout <= 0 {
		timeout = DefaultApprovalTimeout
	}
	index := func(id string) int {
		return slices.IndexFunc(calls, func(c PendingCall) bool { return c.ID == id })
	}
	w.open(ctx, undecided)
	deadline := workflow.Now(ctx).Add(timeout)
	why := ""
	for len(w.undecided()) > 0 || len(w.fresh()) > 0 {
		if len(w.fresh()) == 0 {
			ok, err := workflow.AwaitWithTimeout(ctx, deadline.Sub(workflow.Now(ctx)), func() bool { return len(w.fresh()) > 0 })
			if err != nil || ctx.Err() != nil {
				why = "the run was cancelled"
				break
			}
			if !ok {
				now := workflow.Now(ctx)
				for _, c := range w.undecided() {
					w.given[c.ID], w.at[c.ID] = loop.Decision{Answer: loop.Deny, By: "timeout",
						Reason: fmt.Sprintf("no decision within %s: the call was denied", timeout)}, now
				}
			}
		}
		batch := w.fresh()
		next, err := recordDecisions(ctx, in, DecideStep{Session: in.Session, Seq: *seq, Calls: batch})
		for _, d := range batch {
			i := index(d.Call.ID)
			switch {
			case err != nil:
				// Not stored: the call must not run (its tool activity
				// would refuse it anyway).
				results[i] = ToolResult{ID: d.Call.ID, Kind: registry.DeniedByUser,
					Message: "no decision: the decision could not be stored: " + textsafe.Clean(err.Error(), 500)}
			case d.Decision.Answer.Approved():
				start(i)
			default:
				results[i] = deniedResult(d.Call, d.Decision)
			}
			w.stored[d.Call.ID] = err == nil
			if err != nil {
				why = "storing it failed"
			}
		}
		if err != nil {
			break
		}
		*seq = next
		now := workflow.Now(ctx)
		for _, d := range batch {
			if a := d.Decision.Answer; (a != loop.ApproveSession && a != loop.ApproveAlways) || d.Call.Undecided == nil {
				continue
			}
			key := approvalKey(d.Call.Tool, *d.Call.Undecided)
			if !slices.Contains(*approved, key) {
				*approved = append(*approved, key)
			}
			for _, c := range w.undecided() {
				if c.Undecided != nil && approvalKey(c.Tool, *c.Undecided) == key {
					w.given[c.ID], w.at[c.ID], w.remembered[c.ID] = loop.Decision{Answer: loop.ApproveSession, By: "session"}, now, true
				}
			}
		}
		w.publish(ctx)
	}
	for _, c := range w.undecided() {
		results[index(c.ID)] = ToolResult{ID: c.ID, Kind: registry.Cancelled, Message: "the run was cancelled before the call was decided"}
	}
	for _, d := range w.fresh() {
		if results[index(d.Call.ID)].ID == "" {
			results[index(d.Call.ID)] = ToolResult{ID: d.Call.ID, Kind: registry.Cancelled, Message: "the run was cancelled before the call was decided"}
		}
	}
	w.close(ctx, why)
}

// recordDecisions runs the decide activity; on a context the run's
// cancellation does not reach (a decision given is stored even so).
func recordDecisions(ctx workflow.Context, in RunInput, step DecideStep) (int64, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	dctx = workflow.WithActivityOptions(dctx, workflow.ActivityOptions{
		TaskQueue:              in.Queues.LLM,
		ScheduleToStartTimeout: scheduleToStart,
		StartToCloseTimeout:    time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
			MaximumAttempts: 6, NonRetryableErrorTypes: []string{errPermanent}},
	})
	var next int64
	err := workflow.ExecuteActivity(dctx, DecideActivity, step).Get(dctx, &next)
	return next, err
}

// approvalKey names a tool approved for the run ("session", "always"):
// its name and grant.
func approvalKey(tool string, g registry.Grant) string { return tool + "\x00" + grantDigest(g) }

// sessionApprover is the worker's Approver in one model step, with the
// tools a person approved for the run in earlier steps ("session",
// "always": RunInput.Approved) approved without asking, as the local
// path's Cycle remembers them.
type sessionApprover struct {
	loop.Approver
	approved map[string]bool
}

// Approve implements loop.Approver.
func (s sessionApprover) Approve(ctx context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
	if s.approved[approvalKey(req.Tool, req.Grant)] {
		return loop.Decision{Answer: loop.ApproveSession, By: "session"}, nil
	}
	return s.Approver.Approve(ctx, req)
}

// errorsIsNotWaiting reports whether err is an update refused because no
// such call waits, and whether that is because another decision about it
// is being stored (race).
func errorsIsNotWaiting(err error) (msg string, ok, race bool) {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() == errNotWaiting {
		var detail string
		race = ae.HasDetails() && ae.Details(&detail) == nil && detail == beingDecided
		return ae.Error(), true, race
	}
	return "", false, false
}
