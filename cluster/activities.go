package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/store"
	"iter"
	"os"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// Activities are the work a worker does for the session workflows: the
// model steps (ModelActivity) and the tool calls (ToolActivity), with the
// worker's registry, loop configuration and stores. One value serves any
// number of concurrent activities.
type Activities struct {
	// Registry is the worker's tools: built from the same configuration
	// as the local path's, with the same policy and sandbox.
	Registry *registry.Registry
	// Loop is the model configuration (the provider, model, caps,
	// retries) and its Approver, which says which calls need a yes and
	// decides those it can within the step (the policy, the approvals
	// file); a call whose decision it leaves to a person
	// (loop.ErrApprovalPending) is handed to the workflow undecided
	// (PendingCall.Undecided), which waits for the decision. History,
	// ResumePending, DeferCalls, DeferDecisions, OnMessage, OnRequest and
	// OnDecision are set by each step.
	Loop loop.Config
	// Models are the providers of the other models a run may ask for
	// (RunSettings.Model; `agrun run -m`), by model name: [cluster]
	// models, each the worker's [llm] with that model. A run asking for
	// one not here, nor Loop's own, is refused.
	Models map[string]loop.Provider
	// Sessions holds the transcripts; Blobs the payloads passed by
	// reference (nil: payloads over InlineLimit fail the step).
	Sessions session.Store
	Blobs    store.ObjectStore
	// Records is the format of the records the steps store. Nil: the
	// session files' (session.Codec), so that `agrun sessions` and
	// `agrun audit` read what the steps wrote.
	Records Records
	// InlineLimit (0: DefaultInlineLimit).
	InlineLimit int
	// Refresh, if set, is called at the start of every step to bring
	// Registry up to date (cmd/agrun: the tools uploaded through agrun
	// serve). An error is logged and the step goes on with the registry
	// as it is.
	// force: now, even if it was done a moment ago (a call names a tool
	// this worker does not have).
	Refresh func(ctx context.Context, force bool) error
	// Remember, if set, keeps a tool a person approved "always" (with the
	// grant they were shown) for later runs: cmd/agrun adds it to the
	// worker's approvals file, which its Approver reads. An error is
	// logged; the decision stands for the run.
	Remember func(ctx context.Context, tool string, g registry.Grant, session string) error
	// Tenants, if set, gives the tools offered to the runs of an agrun
	// serve tenant (RunSettings.Tenant, ToolStep.Tenant): a registry
	// (cmd/agrun: Registry's tools plus the tenant's uploads, at the
	// tenant's ceiling in the worker's config) and the refresh that
	// keeps it up to date, as Refresh does Registry. A nil registry
	// (no such tenant here) leaves the run with Registry and Refresh;
	// so does a run of no tenant.
	Tenants func(tenant string) (reg *registry.Registry, refresh func(ctx context.Context, force bool) error)
}

// forTenant is a, or a copy of it serving the runs of tenant (Tenants).
func (a *Activities) forTenant(tenant string) *Activities {
	if tenant == "" || a.Tenants == nil {
		return a
	}
	reg, refresh := a.Tenants(tenant)
	if reg == nil {
		return a
	}
	b := *a
	b.Registry, b.Refresh = reg, refresh
	return &b
}

// refresh calls Refresh.
func (a *Activities) refresh(ctx context.Context, force bool) {
	if a.Refresh == nil {
		return
	}
	if err := a.Refresh(ctx, force); err != nil {
		activity.GetLogger(ctx).Warn("refreshing the tools", "error", err)
	}
}

func (a *Activities) blobs() blobs { return blobs{store: a.Blobs, limit: a.InlineLimit} }

// errPermanent is the Temporal error type of a step failure that a retry
// cannot cure (a damaged session, a store that lost records).
const errPermanent = "agrun.permanent"

func permanent(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), errPermanent, err)
}

// Model runs one model step: it loads the session's history from the
// session store, answers the calls the last step deferred with their
// results (or adds the run's prompt), makes the next model request, and
// appends what that produced to the session store at in.Seq. The calls of
// the reply are not run: they are returned, for tool activities.
//
// A step is done once its records are stored: a retried step (its first
// attempt's worker was lost after the write) finds them and returns what
// they say without a new model request, and of two attempts racing, the
// first to store wins and the other returns what it stored.
func (a *Activities) Model(ctx context.Context, in ModelStep) (ModelOutput, error) {
	// Heartbeat on a clock for the whole step, not on events: a model may
	// take longer than the heartbeat timeout to its first token, the loop
	// may wait between retries, and loading, storing and refreshing take
	// time too; the heartbeat is also how a cancelled run's cancellation
	// reaches this step.
	defer heartbeat(ctx)()
	a = a.forTenant(in.Settings.tenant())
	a.refresh(ctx, false)
	cfg, offered := a.Loop, a.Registry
	if in.Seq < 0 {
		// Where the step's records go, from the input too: a negative one
		// would index the session's records below zero.
		return ModelOutput{}, permanent(fmt.Errorf("the step's seq %d is negative", in.Seq))
	}
	if !in.Final && (in.Turns < 0 || in.UsedTokens < 0 || in.UsedCalls < len(in.Results)) {
		// The counters the budgets below subtract from come from the
		// workflow's input, which whoever starts one writes: a negative
		// one would lift the worker's max_turns and budgets. The workflow
		// never makes one.
		return a.endRun(ctx, in, string(registry.PermissionDenied), "the run's turn, token or call counts are not valid (negative)")
	}
	if !in.Final {
		// The run's settings, within the worker's config (checked first,
		// as the budgets: they depend on the input alone).
		var err error
		if cfg, offered, err = a.settle(in.Settings); err != nil {
			return a.endRun(ctx, in, string(registry.PermissionDenied), textsafe.Clean(err.Error(), 1024))
		}
		if lim := a.Loop.MaxTurns; lim > 0 && in.Turns >= lim {
			// The worker's max_turns holds whatever the run asked for.
			return a.endRun(ctx, in, string(loop.KindMaxTurns), fmt.Sprintf("%v (%d)", loop.ErrMaxTurns, lim))
		}
	}
	// The run's budgets, less what its earlier steps used (checked first:
	// they depend on the input alone, so a retry ends the same way).
	if lim := cfg.MaxTotalTokens; lim > 0 && !in.Final {
		if in.UsedTokens >= lim {
			return a.budgetSpent(ctx, in, &loop.BudgetError{Budget: "tokens", Limit: lim, Used: in.UsedTokens})
		}
		cfg.MaxTotalTokens = lim - in.UsedTokens
	}
	if lim := cfg.MaxToolCalls; lim > 0 && !in.Final {
		// UsedCalls counts the calls being answered here; the loop counts
		// them again as it answers them.
		prior := in.UsedCalls - len(in.Results)
		if prior >= lim {
			return a.budgetSpent(ctx, in, &loop.BudgetError{Budget: "tool_calls", Limit: int64(lim), Used: int64(in.UsedCalls)})
		}
		cfg.MaxToolCalls = lim - prior
	}
	recs, err := a.load(ctx, in.Session)
	if err != nil {
		return ModelOutput{}, err
	}
	if int64(len(recs)) > in.Seq {
		if in.Final {
			return ModelOutput{Seq: int64(len(recs))}, nil
		}
		return a.recovered(ctx, in, recs)
	}
	if int64(len(recs)) < in.Seq {
		return ModelOutput{}, permanent(fmt.Errorf("%w: session %s holds %d records, the run expected %d", session.ErrSeqGap, in.Session, len(recs), in.Seq))
	}
	history, err := a.records().History(recs)
	if err != nil {
		return ModelOutput{}, permanent(fmt.Errorf("session %s: %w", in.Session, err))
	}
	var out []json.RawMessage
	var recErr error
	keep := func(b json.RawMessage, err error) {
		if err != nil && recErr == nil {
			recErr = err
		}
		if err == nil {
			out = append(out, b)
		}
	}
	if len(in.Results) == 0 && !in.Final {
		// A new prompt: calls an earlier run handed on but whose results
		// it never stored (the run was terminated, or could not store
		// them) are answered as what they are — they may have run — and
		// not "never decided", the loop's answer for calls that waited
		// for a decision.
		for _, m := range a.unfinished(recs, history) {
			history = append(history, m)
			keep(a.records().Message(m))
		}
	}
	var usage loop.Usage
	cfg.History, cfg.ResumePending, cfg.DeferCalls, cfg.DeferDecisions = history, true, true, true
	if cfg.Approver != nil && len(in.Approved) > 0 {
		ap := sessionApprover{Approver: cfg.Approver, approved: map[string]bool{}}
		for _, k := range in.Approved {
			ap.approved[k] = true
		}
		cfg.Approver = ap
	}
	cfg.OnMessage = func(m loop.Message) { keep(a.records().Message(m)) }
	cfg.OnRequest = func(ri loop.RequestInfo) {
		usage = addUsage(usage, ri.Usage)
		keep(a.records().Request(ri))
	}
	cfg.OnDecision = func(d loop.DecisionRecord) {
		if d.By == "session" {
			d.Remembered = true // approved for the session in an earlier step
		}
		keep(a.records().Decision(d))
	}
	cyc, err := loop.New(cfg)
	if err != nil {
		return ModelOutput{}, permanent(err)
	}
	var events iter.Seq2[loop.Event, error]
	if len(in.Results) > 0 {
		results, err := a.invocations(ctx, in.Results)
		if err != nil {
			return ModelOutput{}, err
		}
		if in.Final {
			events = cyc.Run(ctx, loop.Turn{Tools: offered, Results: results, AnswerOnly: true})
		} else {
			events = cyc.Run(ctx, loop.Turn{Tools: offered, Results: results})
		}
	} else {
		prompt := in.Prompt
		if in.PromptRef != nil {
			b, err := a.blobs().get(ctx, *in.PromptRef)
			if err != nil {
				return ModelOutput{}, err
			}
			prompt = string(b)
		}
		events = cyc.SubmitStreamWithTools(ctx, prompt, offered)
	}
	// The reply's text streams live to those following the session (a
	// side channel of the session store's, when it has one: LiveBus),
	// best effort; what is stored below is the reply.
	var live *livePub
	if bus, ok := a.Sessions.(LiveBus); ok && !in.Final {
		live = newLivePub(ctx, bus, in.Session, in.Seq)
	}
	var runErr error
	for ev, err := range events {
		if err != nil {
			runErr = err
			break
		}
		live.event(ev)
		if tc, ok := ev.(*loop.ToolExecutionCompleted); ok {
			keep(a.records().Call(tc))
		}
	}
	live.close()
	if recErr != nil {
		return ModelOutput{}, permanent(recErr)
	}
	if runErr != nil && !errors.Is(runErr, loop.ErrCallsDeferred) {
		if ctx.Err() != nil {
			return ModelOutput{}, ctx.Err() // cancelled or timed out: Temporal decides
		}
		if transient(runErr) {
			// Nothing is stored: the next attempt, on any worker, starts
			// the step over from the same records.
			return ModelOutput{}, temporal.NewApplicationErrorWithCause(textsafe.Clean(runErr.Error(), 1024), string(loop.KindOf(runErr)), runErr)
		}
	}
	written := true
	if len(out) > 0 {
		if written, err = a.Sessions.Append(ctx, in.Session, in.Seq, out); err != nil {
			return ModelOutput{}, err
		}
	}
	if !written {
		if recs, err = a.load(ctx, in.Session); err != nil {
			return ModelOutput{}, err
		}
		return a.recovered(ctx, in, recs)
	}
	if in.Final {
		return ModelOutput{Seq: in.Seq + int64(len(out))}, nil
	}
	o, err := a.outputOf(ctx, in.Seq+int64(len(out)), cyc.Messages(), a.records().Approved(out), runErr)
	o.Usage = usage
	return o, err
}

// Seq returns the session's next record: its number of records (0 for a
// new session). The workflow runs it as a local activity when a run
// starts (SeqActivity), so that a run's records begin where the session
// ends once the run has started, whatever its starter read before.
func (a *Activities) Seq(ctx context.Context, session string) (int64, error) {
	recs, err := a.load(ctx, session)
	return int64(len(recs)), err
}

// budgetSpent ends a run whose budget its earlier steps spent: the last
// calls' results are stored (no model request), and the run's error is
// the budget's.
func (a *Activities) budgetSpent(ctx context.Context, in ModelStep, be *loop.BudgetError) (ModelOutput, error) {
	return a.endRun(ctx, in, string(loop.KindOf(be)), be.Error())
}

// endRun ends a run without a model request: the last calls' results are
// stored, and the run's error is kind and msg.
func (a *Activities) endRun(ctx context.Context, in ModelStep, kind, msg string) (ModelOutput, error) {
	seq := in.Seq
	if len(in.Results) > 0 {
		final := in
		final.Final = true
		o, err := a.Model(ctx, final)
		if err != nil {
			return ModelOutput{}, err
		}
		seq = o.Seq
	}
	return ModelOutput{Seq: seq, ErrorKind: kind, Error: msg}, nil
}

// transient reports whether a run error may pass on another attempt: the
// provider or the network failing after the loop's own retries.
func transient(err error) bool {
	switch loop.KindOf(err) {
	case loop.KindTransport, loop.KindStreamIdle:
		return true
	case loop.KindProvider:
		var ae *loop.APIError
		if errors.As(err, &ae) {
			return ae.StatusCode == 408 || ae.StatusCode == 409 || ae.StatusCode == 429 || ae.StatusCode >= 500
		}
		return errors.Is(err, loop.ErrIncompleteStream)
	}
	return false
}

// load returns the session's records (none for a new session).
func (a *Activities) load(ctx context.Context, id string) ([]json.RawMessage, error) {
	recs, err := a.Sessions.Load(ctx, id, 0)
	if errors.Is(err, session.ErrNotFound) {
		return nil, nil
	}
	return recs, err
}

// recovered is the output of a step whose records an earlier attempt
// stored.
func (a *Activities) recovered(ctx context.Context, in ModelStep, recs []json.RawMessage) (ModelOutput, error) {
	history, err := a.records().History(recs)
	if err != nil {
		return ModelOutput{}, permanent(err)
	}
	// The stored calls are handed on as they are: one that needs a
	// person's yes and has no approving decision stored with the step
	// (it was left to a person, or a batch torn in the JSON-lines store
	// kept the call and lost its denial) waits for a decision again.
	o, err := a.outputOf(ctx, int64(len(recs)), history, a.records().Approved(recs[min(int(in.Seq), len(recs)):]), nil)
	o.Recovered = true
	return o, err
}

// outputOf says what a step ended with from the history it left: calls
// left unanswered at its end are to run (those that need a yes and that
// the step's records, approved, do not approve, once a person decides);
// a last assistant message without calls is the answer; anything else
// (runErr, or a recovered step whose attempt failed) is the run's error.
func (a *Activities) outputOf(ctx context.Context, seq int64, history []loop.Message, approved map[string]bool, runErr error) (ModelOutput, error) {
	o := ModelOutput{Seq: seq}
	if runErr != nil && !errors.Is(runErr, loop.ErrCallsDeferred) {
		o.ErrorKind, o.Error = string(loop.KindOf(runErr)), textsafe.Clean(runErr.Error(), 4096)
		return o, nil
	}
	open := openCalls(history)
	if len(open) > 0 {
		for _, c := range open {
			args, err := a.blobs().put(ctx, []byte(c.Arguments))
			if err != nil {
				return ModelOutput{}, err
			}
			pc := PendingCall{ID: c.ID, Tool: c.Name, Args: args}
			if t, ok := a.Registry.Get(c.Name); ok {
				g := registry.DescribeGrant(t)
				pc.Source, pc.SideEffects, pc.Timeout, pc.Grant = g.Source, SideEffects(g), g.Timeout, grantDigest(g)
				if ap := a.Loop.Approver; ap != nil && !approved[c.ID] &&
					ap.NeedsApproval(loop.ApprovalRequest{CallID: c.ID, Tool: c.Name, Arguments: textsafe.Clean(c.Arguments, 0), Grant: g}) {
					pc.Undecided = &g
				}
			}
			o.Calls = append(o.Calls, pc)
		}
		return o, nil
	}
	if n := len(history); n > 0 && history[n-1].Role == loop.RoleAssistant && len(history[n-1].ToolCalls) == 0 && !history[n-1].Interrupted {
		text, err := a.blobs().put(ctx, []byte(history[n-1].Content))
		if err != nil {
			return ModelOutput{}, err
		}
		o.Done, o.Text, o.FinishReason = true, text, "stop"
		return o, nil
	}
	o.ErrorKind, o.Error = string(loop.KindOther), "the model step ended without an answer (its worker failed after storing its records)"
	return o, nil
}

// openCalls returns the calls of the last assistant message that no tool
// message answers.
func openCalls(history []loop.Message) []loop.ToolCall {
	last := -1
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role == loop.RoleAssistant {
			last = i
			break
		}
	}
	if last < 0 {
		return nil
	}
	answered := map[string]bool{}
	for _, m := range history[last+1:] {
		if m.Role == loop.RoleTool {
			answered[m.ToolCallID] = true
		}
	}
	var open []loop.ToolCall
	for _, c := range history[last].ToolCalls {
		if !answered[c.ID] {
			open = append(open, c)
		}
	}
	return open
}

// invocations turns tool results into what the loop answers calls with.
func (a *Activities) invocations(ctx context.Context, results []ToolResult) (map[string]registry.Invocation, error) {
	m := make(map[string]registry.Invocation, len(results))
	for _, r := range results {
		if r.Whole != nil {
			b, err := a.blobs().get(ctx, *r.Whole)
			if err != nil {
				return nil, err
			}
			id := r.ID
			r = ToolResult{}
			if err := json.Unmarshal(b, &r); err != nil || r.ID != id || r.Whole != nil {
				return nil, permanent(fmt.Errorf("the stored result of call %s is damaged", id))
			}
		}
		inv := registry.Invocation{ID: r.ID, Duration: time.Duration(r.DurationMS) * time.Millisecond, Audit: r.Audit}
		if r.Kind != "" {
			inv.Err = registry.NewError(r.Kind, "", errors.New(r.Message))
		} else {
			out, err := a.blobs().get(ctx, r.Output)
			if err != nil {
				return nil, err
			}
			inv.Output = out
		}
		m[r.ID] = inv
	}
	return m, nil
}

// Tool runs one tool call through the worker's registry (argument
// validation, policy, sandbox: as locally), heartbeating while it runs so
// that a lost worker is noticed within the heartbeat timeout. A failed
// call is a result (its kind and message), not an activity error.
func (a *Activities) Tool(ctx context.Context, in ToolStep) (ToolResult, error) {
	defer heartbeat(ctx)()
	a = a.forTenant(in.Tenant)
	a.refresh(ctx, false)
	args, err := a.blobs().get(ctx, in.Call.Args)
	if err != nil {
		return ToolResult{}, err
	}
	t, ok := a.Registry.Get(in.Call.Tool)
	if !ok {
		// A tool uploaded a moment ago may not be here yet.
		a.refresh(ctx, true)
		t, ok = a.Registry.Get(in.Call.Tool)
	}
	if ok {
		g := registry.DescribeGrant(t)
		// The call was decided (approvals, retry policy) on the model
		// step's worker's view of the tool: it runs only on the same.
		if in.Call.Grant != "" && grantDigest(g) != in.Call.Grant {
			return ToolResult{ID: in.Call.ID, Kind: registry.Other, Worker: workerName(),
				Message: "not run: the tool changed (its module or grant) between the model's request and the call; ask again"}, nil
		}
		// Defence in depth (Temporal is trusted, docs/SECURITY.md): a call
		// that needs a person's yes runs only if the session holds the
		// decision that approved it, which the model step stored before it
		// handed the call on — a forged step completion naming such a
		// call is refused here.
		if ap := a.Loop.Approver; ap != nil {
			req := loop.ApprovalRequest{CallID: in.Call.ID, Tool: in.Call.Tool, Arguments: textsafe.Clean(string(args), 0), Grant: g}
			if ap.NeedsApproval(req) {
				recs, err := a.load(ctx, in.Session)
				if err != nil {
					return ToolResult{}, err // the store: Temporal retries
				}
				if why := a.unapproved(recs, in.Call.ID, in.Call.Tool, string(args)); why != "" {
					return ToolResult{ID: in.Call.ID, Kind: registry.DeniedByUser, Worker: workerName(),
						Message: "not run: the call needs a person's approval and " + why}, nil
				}
			}
		}
		// A retried attempt of a call with side effects here is not run
		// unless the run allows it.
		if activity.GetInfo(ctx).Attempt > 1 && !in.RetrySideEffects && SideEffects(g) {
			return ToolResult{ID: in.Call.ID, Kind: registry.Other, Worker: workerName(),
				Message: "the worker running the call was lost; it was not run again because the tool may have side effects, so it may or may not have taken effect"}, nil
		}
	}
	// The registry answers by the time ctx ends, even for a tool that
	// ignores it (its call is answered cancelled or timeout).
	inv := a.Registry.InvokeAll(ctx, []registry.Call{{ID: in.Call.ID, Name: in.Call.Tool, Args: json.RawMessage(args)}})[0]
	if err := ctx.Err(); err != nil && inv.Err != nil {
		// Cancelled (the run was, or this worker stops) or out of time:
		// not a result for the model but the attempt's failure, so that
		// Temporal decides (another worker may retry the call).
		return ToolResult{}, err
	}
	return a.result(ctx, inv)
}

// localCall is what LocalToolActivity answers: the call's result if this
// worker ran it, else Ran false (it does not serve the call's queue, or
// local calls are off), and the workflow hands the call to its queue.
type localCall struct {
	Ran    bool       `json:"ran"`
	Result ToolResult `json:"result"`
}

// localTool is LocalToolActivity on a worker that serves the queues in
// slots (WorkerOptions.Serve names), each with that many local calls at
// once: Tool, run in the workflow worker's process, for the calls of
// those queues while a slot is free. A call of another queue, or of one
// whose slots are taken, is not run (Ran false): it goes to its queue,
// where any worker serving it may take it. Whether it ran is part of the
// recorded result, so a replay on any worker takes the same branch.
func (a *Activities) localTool(slots map[string]int) func(context.Context, ToolStep) (localCall, error) {
	free := map[string]chan struct{}{}
	for q, n := range slots {
		if n > 0 {
			free[q] = make(chan struct{}, n)
		}
	}
	return func(ctx context.Context, in ToolStep) (localCall, error) {
		sem := free[serveOf(in.Call.Source)]
		select {
		case sem <- struct{}{}: // a nil sem (not served) is never ready
		default:
			return localCall{}, nil
		}
		defer func() { <-sem }()
		r, err := a.Tool(ctx, in)
		return localCall{Ran: true, Result: r}, err
	}
}

// unapproved says why the session's records recs do not approve the call
// (id, tool, args), or "" if they do: the call must be one that the
// session's last model reply asked for, with these very arguments, not
// answered yet, and a decision record stored after that reply must have
// approved it. So neither a made-up call, nor one whose id an earlier,
// approved call used (ids repeat across replies), nor an approved call
// that already ran is taken for approved.
func (a *Activities) unapproved(recs []json.RawMessage, id, tool, args string) string {
	i, open, err := a.lastReply(recs)
	switch {
	case err != nil:
		return "the session's records do not decode"
	case i < 0:
		return "the session holds no decision approving it (no reply asked for it)"
	}
	for _, c := range open {
		if c.ID != id {
			continue
		}
		if c.Name != tool || c.Arguments != args {
			return "the session's last reply asked for another call under its id"
		}
		if !a.records().Approved(recs[i+1:])[id] {
			return "the session holds no decision approving it"
		}
		return ""
	}
	return "the session's last reply holds no such call waiting (it was never asked for, or it ran)"
}

// lastReply returns the index among recs of the record of the session's
// last assistant message (-1: none) and that message's calls that no
// later record answers.
func (a *Activities) lastReply(recs []json.RawMessage) (int, []loop.ToolCall, error) {
	rs := a.records()
	for i := len(recs) - 1; i >= 0; i-- {
		h, err := rs.History(recs[i : i+1])
		if err != nil || len(h) != 1 || h[0].Role != loop.RoleAssistant {
			continue
		}
		later, err := rs.History(recs[i+1:])
		if err != nil {
			return 0, nil, err
		}
		return i, openCalls(append(h, later...)), nil
	}
	return -1, nil, nil
}

// unfinishedCall is what the model is told of a call that an earlier run
// handed on to a tool activity and whose result that run never stored.
const unfinishedCall = "error (cancelled): the call's result was never stored: the run that asked for it ended first " +
	"(cancelled, terminated or failed on the cluster); it may or may not have run"

// unfinished answers the calls of the session's last reply (recs,
// history) that are still open and were handed on to run: those that
// needed no decision or had an approving one. A call that needed a
// decision and has none never ran, and is left to the loop.
func (a *Activities) unfinished(recs []json.RawMessage, history []loop.Message) []loop.Message {
	if len(openCalls(history)) == 0 {
		return nil
	}
	i, open, err := a.lastReply(recs)
	if err != nil || i < 0 {
		return nil
	}
	approved := a.records().Approved(recs[i+1:])
	var msgs []loop.Message
	for _, c := range open {
		if ap := a.Loop.Approver; ap != nil && !approved[c.ID] {
			if t, ok := a.Registry.Get(c.Name); !ok ||
				ap.NeedsApproval(loop.ApprovalRequest{CallID: c.ID, Tool: c.Name, Arguments: textsafe.Clean(c.Arguments, 0), Grant: registry.DescribeGrant(t)}) {
				continue
			}
		}
		msgs = append(msgs, loop.Message{Role: loop.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: unfinishedCall})
	}
	return msgs
}

// heartbeat records a heartbeat now and then every third of the
// activity's heartbeat timeout (at most every second: the worker's
// throttle is set to match, so a cancellation is seen within about a
// second) until the returned function is called.
func heartbeat(ctx context.Context) (stop func()) {
	beat := activity.GetInfo(ctx).HeartbeatTimeout / 3
	if beat <= 0 || beat > time.Second {
		beat = time.Second
	}
	activity.RecordHeartbeat(ctx)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(beat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (a *Activities) result(ctx context.Context, inv registry.Invocation) (ToolResult, error) {
	r := ToolResult{ID: inv.ID, DurationMS: inv.Duration.Milliseconds(), Audit: inv.Audit, Worker: workerName()}
	if inv.Err != nil {
		r.Kind = registry.KindOf(inv.Err)
		var re *registry.Error
		if errors.As(inv.Err, &re) {
			r.Message = re.Message()
		} else {
			r.Message = inv.Err.Error()
		}
		return a.spill(ctx, r)
	}
	out, err := a.blobs().put(ctx, inv.Output)
	if err != nil {
		return ToolResult{}, err
	}
	r.Output = out
	return a.spill(ctx, r)
}

// spill keeps a result inline if its JSON is within the inline limit,
// and otherwise stores it whole (its audit too) and returns a reference:
// a batch of results travels in one workflow payload.
func (a *Activities) spill(ctx context.Context, r ToolResult) (ToolResult, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return ToolResult{}, err
	}
	limit := a.InlineLimit
	if limit <= 0 {
		limit = DefaultInlineLimit
	}
	if len(b) <= limit+1024 { // a reference costs about that much anyway
		return r, nil
	}
	bl := a.blobs()
	bl.limit = -1 // always by reference
	whole, err := bl.put(ctx, b)
	if err != nil {
		return ToolResult{}, err
	}
	return ToolResult{ID: r.ID, Whole: &whole}, nil
}

// grantDigest names a grant: a call is decided and run on the same.
func grantDigest(g registry.Grant) string {
	b, _ := json.Marshal(g)
	return store.Digest(b)
}

// workerName names this process in results, for the record.
func workerName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%d@%s", os.Getpid(), h)
}

// records is the step's record format: a.Records, or the session
// files' (session.Codec) when it is nil.
func (a *Activities) records() Records {
	if a.Records == nil {
		return session.Codec{}
	}
	return a.Records
}
