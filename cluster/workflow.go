package cluster

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
)

// SessionWorkflow is one run of a session (registered as WorkflowName):
// a model step on the LLM queue; the calls it defers, in parallel, each
// on its tool's queue (WASM, MCP); their results, in call order, to the
// next model step; until a step answers or fails. It holds no transcript:
// the steps read and append the session store, and the workflow carries
// only the seq, the calls and their results (large ones by reference), so
// its history stays small; past ContinueAfterEvents events or 10 MB, or
// when the server suggests it, it continues as new between two steps.
//
// Retries: a model step is retried (up to 3 attempts, any worker) when its
// worker is lost or the provider failed transiently (5xx, 429, a broken
// stream) after the loop's own retries; a step that stored its records is
// never repeated (see Activities.Model). A tool call's errors (timeout,
// memory_limit, output_limit, permission_denied, invalid_arguments,
// not_found, ...) are results for the model, never retried. A call whose
// worker is lost (no heartbeat for HeartbeatTimeout) is retried on
// another worker up to ToolAttempts times if its tool has no side effects
// (SideEffects), or if RetrySideEffects; otherwise the model is told the
// worker was lost and that the call may or may not have taken effect.
func SessionWorkflow(ctx workflow.Context, in RunInput) (result RunResult, _ error) {
	maxTurns := in.MaxTurns
	if maxTurns <= 0 {
		maxTurns = 16
	}
	hb := in.HeartbeatTimeout
	if hb <= 0 {
		hb = 20 * time.Second
	}
	modelTimeout := in.ModelTimeout
	if modelTimeout <= 0 {
		modelTimeout = 15 * time.Minute
	}
	attempts := in.ToolAttempts
	if attempts <= 0 {
		attempts = 3
	}
	continueAfter := in.ContinueAfterEvents
	if continueAfter <= 0 {
		continueAfter = DefaultContinueAfterEvents
	}
	if in.Turns == 0 && len(in.Results) == 0 && in.ContinuedAsNew == 0 &&
		workflow.GetVersion(ctx, versionSeqFromStore, workflow.DefaultVersion, 1) == 1 {
		// A new run's records begin at the session's end as it is now,
		// read here rather than trusted from the starter: the starter read
		// it before the start, and a previous run that ended in between
		// added records since (issue 28, 2). Now that this run has started,
		// that run is over and the length is final until this run writes.
		seq, err := startSeq(ctx, in.Session)
		if err != nil {
			return RunResult{Session: in.Session, Seq: in.Seq, ErrorKind: activityKind(err),
				Error: "reading the session's length: " + err.Error()}, nil
		}
		in.Seq = seq
	}
	// Calls that need a person's yes wait in the workflow for the
	// decision: DecideUpdate gives it, PendingQuery lists them.
	w := &waits{}
	if err := w.register(ctx); err != nil {
		return RunResult{}, err
	}
	approved := slices.Clone(in.Approved)
	res := RunResult{Session: in.Session, Seq: in.Seq, Turns: in.Turns, Usage: in.Usage, ContinuedAsNew: in.ContinuedAsNew}
	defer func() {
		if result.Session != "" {
			result.Approved = approved
		}
	}()
	usedCalls := in.UsedCalls
	step := ModelStep{Session: in.Session, Seq: in.Seq, Prompt: in.Prompt, PromptRef: in.PromptRef, Results: in.Results, UsedTokens: in.Usage.TotalTokens, UsedCalls: usedCalls, Approved: approved, Settings: in.Settings, Turns: in.Turns}
	for {
		mctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: in.Queues.LLM,
			// No worker serving the queue for this long fails the run
			// (timeout) instead of leaving it waiting unseen.
			ScheduleToStartTimeout: scheduleToStart,
			StartToCloseTimeout:    modelTimeout,
			HeartbeatTimeout:       hb,
			// A cancelled run stays open until its step has stopped, so
			// that no step of it writes after the next run began.
			WaitForCancellation: true,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval:        time.Second,
				MaximumAttempts:        3,
				NonRetryableErrorTypes: []string{errPermanent},
			},
		})
		if res.Turns >= maxTurns {
			// The calls that ran are stored (as the local path stores them
			// before ErrMaxTurns), then the run ends.
			if len(step.Results) > 0 {
				step.Final = true
				var out ModelOutput
				if err := workflow.ExecuteActivity(mctx, ModelActivity, step).Get(ctx, &out); err != nil {
					res.ErrorKind, res.Error = activityKind(err), err.Error()
					return res, nil
				}
				res.Seq = out.Seq
			}
			res.ErrorKind, res.Error = string(loop.KindMaxTurns), fmt.Sprintf("%v (%d)", loop.ErrMaxTurns, maxTurns)
			return res, nil
		}
		var out ModelOutput
		if err := workflow.ExecuteActivity(mctx, ModelActivity, step).Get(ctx, &out); err != nil {
			res.ErrorKind, res.Error = activityKind(err), err.Error()
			if len(step.Results) > 0 {
				// The calls ran: their results must not vanish with the
				// failed step (a next run would tell the model they were
				// never decided, and a side effect be done twice).
				if seq, ok := keepResults(ctx, in, step); ok {
					res.Seq = seq
				}
			}
			return res, nil
		}
		res.Turns++
		res.Seq = out.Seq
		res.Usage = addUsage(res.Usage, out.Usage)
		switch {
		case out.ErrorKind != "":
			res.ErrorKind, res.Error = out.ErrorKind, out.Error
			return res, nil
		case out.Done || len(out.Calls) == 0:
			res.Text, res.FinishReason = out.Text, out.FinishReason
			return res, nil
		}
		futures := make([]workflow.Future, len(out.Calls))
		results := make([]ToolResult, len(out.Calls))
		start := func(i int) {
			c := out.Calls[i]
			if ctx.Err() != nil {
				// Cancelled before the call was handed on: it never ran.
				results[i] = ToolResult{ID: c.ID, Kind: registry.Cancelled, Message: cancelledBeforeCall}
				return
			}
			timeout := c.Timeout + time.Minute
			if c.Timeout <= 0 {
				timeout = 10 * time.Minute
			}
			n := attempts
			if c.SideEffects && !in.RetrySideEffects {
				n = 1
			}
			retry := &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: int32(n), NonRetryableErrorTypes: []string{errPermanent}}
			actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				TaskQueue:              in.Queues.forSource(c.Source),
				ScheduleToStartTimeout: scheduleToStart,
				StartToCloseTimeout:    timeout,
				HeartbeatTimeout:       hb,
				WaitForCancellation:    true,
				RetryPolicy:            retry,
			})
			ts := ToolStep{Session: in.Session, Call: c, RetrySideEffects: in.RetrySideEffects, Tenant: in.Settings.tenant()}
			if c.SideEffects && !in.RetrySideEffects || workflow.GetVersion(ctx, versionLocalCalls, workflow.DefaultVersion, 1) != 1 {
				// A call that must not run twice stays an activity task:
				// a lost worker's attempt is then known to Temporal (the
				// model is told, lostResult), where a local activity of a
				// lost worker would be run again by the next one.
				futures[i] = workflow.ExecuteActivity(actx, ToolActivity, ts)
				return
			}
			// Any other call runs where the workflow task runs if that
			// worker serves the call's queue (LocalToolActivity), else on
			// the queue: one round trip through the server fewer.
			f, set := workflow.NewFuture(ctx)
			futures[i] = f
			lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
				StartToCloseTimeout:    timeout,
				ScheduleToCloseTimeout: time.Duration(n) * (timeout + retry.InitialInterval),
				RetryPolicy:            retry,
			})
			workflow.Go(ctx, func(gctx workflow.Context) {
				var lc localCall
				err := workflow.ExecuteLocalActivity(lctx, LocalToolActivity, ts).Get(gctx, &lc)
				if err != nil || lc.Ran {
					set.Set(lc.Result, err)
					return
				}
				var r ToolResult
				err = workflow.ExecuteActivity(actx, ToolActivity, ts).Get(gctx, &r)
				set.Set(r, err)
			})
		}
		// The calls that need no decision run at once; those that wait
		// for a person's run as each is decided (its decision stored
		// first, after the step's records).
		for i, c := range out.Calls {
			if c.Undecided == nil {
				start(i)
			}
		}
		w.awaitDecisions(ctx, in, &res.Seq, &approved, out.Calls, results, start)
		for i, f := range futures {
			if f == nil {
				continue
			}
			if err := f.Get(ctx, &results[i]); err != nil {
				results[i] = lostResult(out.Calls[i], err, in.RetrySideEffects, attempts)
			}
			results[i].ID = out.Calls[i].ID
		}
		if ctx.Err() != nil {
			// Cancelled during the calls: the run ends here, with what
			// the calls did stored (those still running are answered
			// "cancelled"), so that no later run calls them never decided.
			res.ErrorKind, res.Error = string(loop.KindCancelled), "the run was cancelled"
			if seq, ok := keepResults(ctx, in, ModelStep{Session: in.Session, Seq: res.Seq, Results: results}); ok {
				res.Seq = seq
			}
			return res, nil
		}
		usedCalls += len(out.Calls)
		step = ModelStep{Session: in.Session, Seq: res.Seq, Results: results, UsedTokens: res.Usage.TotalTokens, UsedCalls: usedCalls, Approved: approved, Settings: in.Settings, Turns: res.Turns}
		if info := workflow.GetInfo(ctx); info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= continueAfter || info.GetCurrentHistorySize() >= continueAfterBytes {
			next := in
			next.Prompt, next.PromptRef, next.Seq, next.Turns, next.Results, next.Usage = "", nil, res.Seq, res.Turns, results, res.Usage
			next.ContinuedAsNew++
			// A decision's Update handler answers before the run goes on
			// in a new execution (its caller would see an error otherwise;
			// a cancelled run does not wait).
			_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
			next.UsedCalls = usedCalls
			next.Approved = approved
			return RunResult{}, workflow.NewContinueAsNewError(ctx, WorkflowName, next)
		}
	}
}

// versionSeqFromStore marks the workflow change that reads a new run's
// seq from the session store (workflow.GetVersion: runs begun before it
// replay as they were).
const versionSeqFromStore = "agrun.seq-from-store"

// versionLocalCalls marks the change that runs calls as local activities
// where they may be (runs begun before it replay their calls as activity
// tasks).
const versionLocalCalls = "agrun.local-calls"

// startSeq reads the session's next record with the local SeqActivity and
// publishes it as the run's MemoSeq (Client.Follow shows the run's records
// from there on). Both happen before the first model step is scheduled,
// in the same workflow task: no record of this run can be stored before
// the memo is visible.
func startSeq(ctx workflow.Context, session string) (int64, error) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 10 * time.Second, MaximumAttempts: 6, NonRetryableErrorTypes: []string{errPermanent}},
	})
	var seq int64
	if err := workflow.ExecuteLocalActivity(lctx, SeqActivity, session).Get(ctx, &seq); err != nil {
		return 0, err
	}
	if err := workflow.UpsertMemo(ctx, map[string]any{MemoSeq: seq}); err != nil {
		return 0, err
	}
	return seq, nil
}

// keepResults stores the tool messages of step's results without a model
// request (a Final step), after the step that was to store them with the
// model's reply failed for good — the provider failing past its retries,
// the session store down, the run cancelled. It runs on a context
// detached from the run's cancellation, and is retried until the store
// takes it (for up to keepResultsFor): the results of calls that ran are
// the one thing a run must not lose. A Final step is idempotent: one
// whose records are already there changes nothing. ok is false if the
// results could not be stored even so (the worker's log says why).
func keepResults(ctx workflow.Context, in RunInput, step ModelStep) (seq int64, ok bool) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	dctx = workflow.WithActivityOptions(dctx, workflow.ActivityOptions{
		TaskQueue:              in.Queues.LLM,
		ScheduleToCloseTimeout: keepResultsFor,
		StartToCloseTimeout:    2 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			MaximumAttempts: 0, NonRetryableErrorTypes: []string{errPermanent},
		},
	})
	step.Final = true
	var out ModelOutput
	if err := workflow.ExecuteActivity(dctx, ModelActivity, step).Get(dctx, &out); err != nil {
		workflow.GetLogger(ctx).Error("the results of calls that ran could not be stored", "session", in.Session, "error", err)
		return 0, false
	}
	return out.Seq, true
}

// keepResultsFor bounds how long a run retries storing the results of
// its calls after its model step failed.
const keepResultsFor = 24 * time.Hour

// scheduleToStart is how long a step may wait for a worker of its queue.
const scheduleToStart = 10 * time.Minute

// continueAfterBytes: a run continues as new once its history is this
// large (Temporal's limit is 50 MB).
const continueAfterBytes = 10 << 20

// What the model is told of a call that a cancellation of the run
// (Ctrl-C on agrun run, which cancels the workflow) cut short or kept
// from running: the truth, as the local path tells it, never "never
// decided".
const (
	cancelledDuringCall = "cancelled by the user: the run was cancelled while the call ran; it may or may not have taken effect"
	cancelledBeforeCall = "not run: the run was cancelled by the user before the call started"
)

// lostResult answers a call whose activity failed (its worker lost, or
// its attempts spent) for the model.
func lostResult(c PendingCall, err error, retrySE bool, attempts int) ToolResult {
	var te *temporal.TimeoutError
	var ce *temporal.CanceledError
	what := "the call failed on the cluster: " + failureText(err)
	switch {
	case errors.As(err, &ce):
		return ToolResult{ID: c.ID, Kind: registry.Cancelled, Message: cancelledDuringCall}
	case errors.As(err, &te):
		what = "the worker running the call was lost (" + te.TimeoutType().String() + ")"
	}
	switch {
	case c.SideEffects && !retrySE:
		what += "; it was not run again because the tool may have side effects, so it may or may not have taken effect"
	default:
		what += fmt.Sprintf(" after %d attempts", attempts)
	}
	return ToolResult{ID: c.ID, Kind: registry.Other, Message: what}
}

// failureText is what the model and the terminal are told of an activity's
// failure: the activity's own message (an ApplicationError's, without
// Temporal's wrapping of event ids and types), cleaned and capped — a
// store's SDK can say kilobytes of nested causes.
func failureText(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Message() != "" {
		return textsafe.Clean(ae.Message(), maxFailureText)
	}
	return textsafe.Clean(err.Error(), maxFailureText)
}

// maxFailureText caps failureText, in bytes.
const maxFailureText = 512

// activityKind is the run error kind of a failed model step.
func activityKind(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() != "" && ae.Type() != errPermanent {
		return ae.Type() // a loop.Kind (Activities.Model)
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return string(loop.KindTimeout)
	}
	var ce *temporal.CanceledError
	if errors.As(err, &ce) {
		return string(loop.KindCancelled)
	}
	return string(loop.KindOther)
}

func addUsage(a, b loop.Usage) loop.Usage {
	a.PromptTokens += b.PromptTokens
	a.CompletionTokens += b.CompletionTokens
	a.TotalTokens += b.TotalTokens
	a.CachedTokens += b.CachedTokens
	a.ReasoningTokens += b.ReasoningTokens
	return a
}
