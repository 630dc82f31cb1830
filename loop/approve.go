package loop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// Answer is what a person decided about a tool call.
type Answer string

// The answers. ApproveOnce runs this call; ApproveSession runs it and
// every later call of the same tool in this Cycle without asking;
// ApproveAlways is ApproveSession that the Approver is expected to
// persist (the loop treats both alike: the Approver remembers "always"
// across Cycles, e.g. agrun's approvals file); Deny does not run the call.
const (
	ApproveOnce    Answer = "once"
	ApproveSession Answer = "session"
	ApproveAlways  Answer = "always"
	Deny           Answer = "deny"
)

// Approved reports whether a runs the call.
func (a Answer) Approved() bool {
	return a == ApproveOnce || a == ApproveSession || a == ApproveAlways
}

// Decision is an Approver's answer about one call.
type Decision struct {
	// Answer is the decision. Any value other than the approving ones
	// denies the call.
	Answer Answer `json:"answer"`
	// Reason is why (a denial's reason reaches the model as
	// "error (denied_by_user): <reason>"). Empty: "denied by the user".
	Reason string `json:"reason,omitempty"`
	// By says who decided, for the record: e.g. "user" (a person at a
	// terminal), "policy" (a configured rule), "non-interactive" (no one
	// could be asked). Free text.
	By string `json:"by,omitempty"`
}

// ApprovalRequest is what an Approver is asked about: one tool call the
// model made, and what the call will be able to touch.
type ApprovalRequest struct {
	// CallID is the call's id in the history.
	CallID string `json:"call_id"`
	// Tool is the registry name of the tool.
	Tool string `json:"tool"`
	// Arguments are the call's arguments as the model sent them, cleaned
	// of unsafe runes (textsafe) but otherwise raw: they may not be valid
	// JSON.
	Arguments string `json:"arguments"`
	// Grant is what the call will run with (registry.DescribeGrant of the
	// tool).
	Grant registry.Grant `json:"grant"`
}

// An Approver decides which tool calls need a person's yes and gives the
// decision. The loop calls it from the goroutine running a Submit
// method, one call at a time, for the calls of a reply in call order.
//
// NeedsApproval is asked about each call the run would otherwise run
// (calls not run anyway — unknown tool, over a budget — are not asked
// about); a call it says no to runs at once, in parallel with the
// questions about the others. Approve is then asked about the calls that
// need it, unless the tool was approved for the session (ApproveSession,
// ApproveAlways) earlier in this Cycle. An error from Approve denies the
// call (kind denied_by_user, "no decision: <error>") and is recorded like
// a decision; a cancelled ctx answers the call "cancelled".
type Approver interface {
	NeedsApproval(req ApprovalRequest) bool
	Approve(ctx context.Context, req ApprovalRequest) (Decision, error)
}

// DecisionRecord is one decision as Config.OnDecision receives it: who
// decided what about which call, when, and with which grant in view.
type DecisionRecord struct {
	ApprovalRequest
	Decision
	// Time is when the decision was made.
	Time time.Time `json:"time"`
	// Remembered: the tool was approved for the session earlier in this
	// Cycle, so no one was asked (Decision.By is "session").
	Remembered bool `json:"remembered,omitempty"`
}

// approvalRequest describes call c for the Approver.
func (r *runState) approvalRequest(c ToolCall) (ApprovalRequest, bool) {
	t, ok := r.reg.Get(c.Name)
	if !ok {
		return ApprovalRequest{}, false // answered not_found by the registry
	}
	return ApprovalRequest{
		CallID:    c.ID,
		Tool:      c.Name,
		Arguments: textsafe.Clean(c.Arguments, 0),
		Grant:     registry.DescribeGrant(t),
	}, true
}

// needsApproval splits the runnable calls (toRun, runIdx: indices in the
// batch) into those that run at once and those (ask: their requests, by
// batch index) an Approver must decide.
func (r *runState) needsApproval(ctx context.Context, b *toolBatch, toRun []registry.Call, runIdx []int) (now []registry.Call, nowIdx []int, ask map[int]ApprovalRequest) {
	if r.supplied != nil {
		return toRun, runIdx, nil // ran elsewhere (Turn.Results)
	}
	if r.c.cfg.DeferCalls {
		return r.deferCalls(ctx, b, toRun, runIdx)
	}
	a := r.c.cfg.Approver
	if a == nil && r.decisions == nil {
		return toRun, runIdx, nil
	}
	for k, call := range toRun {
		i := runIdx[k]
		req, ok := r.approvalRequest(b.calls[i])
		_, decided := r.decisions[req.CallID]
		if ok && (decided || (a != nil && a.NeedsApproval(req))) {
			if ask == nil {
				ask = map[int]ApprovalRequest{}
			}
			ask[i] = req
			continue
		}
		now = append(now, call)
		nowIdx = append(nowIdx, i)
	}
	return now, nowIdx, ask
}

// deferCalls is needsApproval with Config.DeferCalls: the calls that
// need no yes are deferred; those that need one are decided here, at once
// and in call order (a decision cannot wait for a run that runs
// elsewhere: ErrApprovalPending denies the call, unless
// Config.DeferDecisions defers it undecided), the approved ones deferred
// and the denied ones answered, like the calls of unknown tools
// (not_found). Nothing is left to run here.
func (r *runState) deferCalls(ctx context.Context, b *toolBatch, toRun []registry.Call, runIdx []int) (now []registry.Call, nowIdx []int, _ map[int]ApprovalRequest) {
	a := r.c.cfg.Approver
	var order []int
	ask := map[int]ApprovalRequest{}
	deferred := map[int]ApprovalRequest{}
	for k, call := range toRun {
		i := runIdx[k]
		req, ok := r.approvalRequest(b.calls[i])
		switch {
		case !ok:
			// Answered here, not by the registry: a tool registered in
			// between would otherwise run here, undecided.
			b.fail(i, registry.NotFound, fmt.Sprintf("no tool named %q", call.Name))
		case a != nil && a.NeedsApproval(req):
			ask[i] = req
			order = append(order, i)
		default:
			deferred[i] = req
		}
	}
	if len(order) > 0 {
		waiting := len(r.paused)
		_, approved := r.decide(ctx, b, order, ask)
		for _, req := range r.paused[waiting:] {
			i := slices.IndexFunc(b.calls, func(c ToolCall) bool { return c.ID == req.CallID })
			if r.c.cfg.DeferDecisions {
				// Left open, undecided: whoever runs the deferred calls
				// asks for the decision and records it.
				deferred[i] = req
				r.undecided = append(r.undecided, req)
				continue
			}
			b.fail(i, registry.DeniedByUser, "no decision: the call needs a person's approval and this run cannot wait for one")
		}
		r.paused = r.paused[:waiting]
		for _, i := range approved {
			deferred[i] = ask[i]
		}
	}
	for i := range b.calls { // in call order
		if req, ok := deferred[i]; ok {
			r.paused = append(r.paused, req)
			r.deferred = true
		}
	}
	return now, nowIdx, nil
}

// decide asks the Approver about the calls of ask in call order (order:
// the batch indices of ask, ascending), records each decision, answers
// the denied calls and returns the approved ones. It returns ok false if
// ctx ended (the undecided calls are answered "cancelled").
func (r *runState) decide(ctx context.Context, b *toolBatch, order []int, ask map[int]ApprovalRequest) (run []registry.Call, runIdx []int) {
	for _, i := range order {
		req := ask[i]
		if err := ctx.Err(); err != nil {
			b.fail(i, registry.Cancelled, "the run was cancelled before the call was decided")
			continue
		}
		rec := DecisionRecord{ApprovalRequest: req}
		given, decided := r.decisions[req.CallID]
		if !decided && r.c.sessionApproved(req) {
			rec.Decision = Decision{Answer: ApproveSession, By: "session"}
			rec.Remembered = true
		} else {
			d, err := given, error(nil)
			if !decided {
				d, err = r.c.cfg.Approver.Approve(ctx, req)
			}
			switch {
			case errors.Is(err, ErrApprovalPending):
				r.paused = append(r.paused, req)
				continue
			case err != nil && ctx.Err() != nil:
				b.fail(i, registry.Cancelled, "the run was cancelled before the call was decided")
				continue
			case err != nil:
				d = Decision{Answer: Deny, Reason: "no decision: " + err.Error(), By: d.By}
			}
			d.Reason = textsafe.Clean(d.Reason, 1024)
			d.By = textsafe.Clean(d.By, 64)
			rec.Decision = d
		}
		rec.Time = time.Now()
		if rec.Answer == ApproveSession || rec.Answer == ApproveAlways {
			r.c.approveSession(req)
		}
		if f := r.c.cfg.OnDecision; f != nil {
			f(rec)
		}
		if !rec.Answer.Approved() {
			reason := rec.Reason
			if reason == "" {
				reason = "denied by the user"
			}
			b.fail(i, registry.DeniedByUser, reason)
			continue
		}
		run = append(run, registry.Call{ID: req.CallID, Name: req.Tool, Args: json.RawMessage(b.calls[i].Arguments)})
		runIdx = append(runIdx, i)
	}
	return run, runIdx
}

// sessionApproved reports whether req's tool was approved for the
// session with the grant req shows: a grant that changed since (an MCP
// server's new hints, a tool replaced under the same name) is asked about
// again.
func (c *Cycle) sessionApproved(req ApprovalRequest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.approved[approvalKey(req)]
}

func (c *Cycle) approveSession(req ApprovalRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.approved == nil {
		c.approved = map[string]bool{}
	}
	c.approved[approvalKey(req)] = true
}

// approvalKey names what a session approval holds for: the tool and the
// grant it was shown with.
func approvalKey(req ApprovalRequest) string {
	g, _ := json.Marshal(req.Grant)
	sum := sha256.Sum256(g)
	return req.Tool + "\x00" + hex.EncodeToString(sum[:])
}

// ErrApprovalPending, returned (wrapped) by an Approver's Approve, says
// that the decision will come later, from outside this run (a script, an
// HTTP client): the call is neither run nor answered. The other calls of
// the reply run as usual; then the run emits an ApprovalRequired event
// per call waiting and ends with an *ApprovalPendingError. The history
// then ends with those calls unanswered: Run with Decisions continues
// the run with the decisions, without a new model request (for a saved
// session, with Config.ResumePending). A Submit method instead answers
// them "cancelled" and starts a new run.
var ErrApprovalPending = errors.New("approval pending")

// ApprovalPendingError ends a run whose calls wait for a decision; it
// matches ErrApprovalPending.
type ApprovalPendingError struct {
	// Calls are the calls waiting, in call order.
	Calls []ApprovalRequest
}

// Error names the waiting calls.
func (e *ApprovalPendingError) Error() string {
	return "the run waits for approval of " + callList(e.Calls)
}

// callList names calls: "call_1 (write_note), call_2 (read_file)".
func callList(calls []ApprovalRequest) string {
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.CallID + " (" + c.Tool + ")"
	}
	return strings.Join(ids, ", ")
}

// Is makes errors.Is(err, ErrApprovalPending) true.
func (e *ApprovalPendingError) Is(target error) bool { return target == ErrApprovalPending }

// ApprovalRequired is the event of a call that waits for a decision
// (ErrApprovalPending), emitted after the reply's other calls completed.
type ApprovalRequired struct {
	ApprovalRequest
}

// EventType implements Event.
func (*ApprovalRequired) EventType() string { return "approval_required" }

// MarshalJSON gives {"type":"approval_required","call_id":...,"tool":...,
// "input":<JSON>,"grant":{...}}; input that is not valid JSON is given as
// a JSON string.
func (e *ApprovalRequired) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type   string          `json:"type"`
		CallID string          `json:"call_id"`
		Tool   string          `json:"tool"`
		Input  json.RawMessage `json:"input"`
		Grant  registry.Grant  `json:"grant"`
	}{e.EventType(), e.CallID, e.Tool, safeJSON(json.RawMessage(e.Arguments)), e.Grant})
}

// ErrNothingPending is returned by Run, given decisions or results, when
// no call waits, or a decision or a result names a call that does not.
var ErrNothingPending = errors.New("no tool call waits for a decision")

// Pending returns the calls waiting for a decision (see
// ErrApprovalPending), in call order; nil if none. Safe to call at any
// time.
func (c *Cycle) Pending() []ToolCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pending)
}

// resumeArgs is how a resume answers the waiting calls: by decisions
// (Run with Turn.Decisions), or by results run elsewhere (results non-nil);
// goOn: then the next model request.
type resumeArgs struct {
	decisions map[string]Decision
	results   map[string]registry.Invocation
	goOn      bool
	stream    bool // streamed replies (Turn.Whole false)
}

func (c *Cycle) resume(ctx context.Context, reg *registry.Registry, args resumeArgs, emit func(Event) bool) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrBusy
	}
	defer c.running.Store(false)
	c.startUsage()
	pending := c.Pending()
	if len(pending) == 0 {
		return ErrNothingPending
	}
	waits := func(id string) bool {
		return slices.ContainsFunc(pending, func(tc ToolCall) bool { return tc.ID == id })
	}
	// A wrong id names the ones that wait, so that the caller can retry.
	waiting := make([]string, len(pending))
	for i, tc := range pending {
		waiting[i] = strconv.Quote(tc.ID) + " (" + tc.Name + ")"
	}
	for id := range args.decisions {
		if !waits(id) {
			return fmt.Errorf("%w with the id %q; waiting: %s", ErrNothingPending, id, strings.Join(waiting, ", "))
		}
	}
	if args.results != nil {
		for _, tc := range pending {
			if _, ok := args.results[tc.ID]; !ok {
				return fmt.Errorf("%w: no result for call %q", ErrNothingPending, tc.ID)
			}
		}
		for id := range args.results {
			if !waits(id) {
				return fmt.Errorf("%w with the id %q; waiting: %s", ErrNothingPending, id, strings.Join(waiting, ", "))
			}
		}
	}
	c.mu.Lock()
	c.pending = nil
	c.mu.Unlock()
	// open is a copy: answer() edits it in place while runTools ranges
	// over pending.
	r := &runState{c: c, reg: reg, emit: emit, decisions: args.decisions, open: slices.Clone(pending), supplied: args.results}
	defer r.closeOpen(ctx)
	if err := r.runTools(ctx, pending); err != nil {
		return err
	}
	if !args.goOn {
		return nil
	}
	// The decisions and results were for the waiting calls only: a later
	// call that reuses one of their ids is asked about (and run) like any
	// other.
	r.decisions, r.supplied = nil, nil
	_, err := r.turns(ctx, args.stream)
	return err
}

// ErrCallsDeferred is matched by the *CallsDeferredError that ends a run
// of a Cycle with Config.DeferCalls whose reply asked for tool calls.
var ErrCallsDeferred = errors.New("tool calls deferred")

// CallsDeferredError ends a run whose calls are to run elsewhere
// (Config.DeferCalls). The history ends with those calls unanswered, as
// with ErrApprovalPending; Run with Turn.Results answers them.
type CallsDeferredError struct {
	// Calls are the deferred calls, in call order, each with the grant
	// it will run with (its Source says which kind of tool it is).
	Calls []ApprovalRequest
	// Undecided are the calls among Calls that need a person's yes and
	// have no decision yet (Config.DeferDecisions), in call order.
	Undecided []ApprovalRequest
}

// Error names the deferred calls.
func (e *CallsDeferredError) Error() string { return "tool calls deferred: " + callList(e.Calls) }

// Is makes errors.Is(err, ErrCallsDeferred) true.
func (e *CallsDeferredError) Is(target error) bool { return target == ErrCallsDeferred }

// cancelPending answers the calls left waiting by an earlier run
// "cancelled", before a new run starts.
func (c *Cycle) cancelPending() {
	c.mu.Lock()
	open := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, tc := range open {
		c.appendMessage(toolMessage(tc, errorContent(string(registry.Cancelled), "the call was never decided: a new prompt came first")))
	}
}

// pause keeps the calls still open (those waiting for a decision) for
// Resume; closeOpen calls it when the run paused.
func (r *runState) pause() {
	r.c.mu.Lock()
	r.c.pending = r.open
	r.c.mu.Unlock()
	r.open = nil
}

// pausedError emits an ApprovalRequired per waiting call and returns the
// error that ends the run.
func (r *runState) pausedError() error {
	if r.deferred {
		return &CallsDeferredError{Calls: slices.Clone(r.paused), Undecided: slices.Clone(r.undecided)}
	}
	for i := range r.paused {
		if !r.emit(&ApprovalRequired{ApprovalRequest: r.paused[i]}) {
			return errStopped
		}
	}
	return &ApprovalPendingError{Calls: slices.Clone(r.paused)}
}
