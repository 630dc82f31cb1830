package loop

import (
	"context"
	"errors"
	"iter"

	"github.com/agcore/agrun/registry"
)

// Turn is what one Run is given: a prompt, or the answers to the calls an
// earlier run left waiting (decisions for calls that wait for a person's
// yes, results for calls that ran elsewhere).
type Turn struct {
	// Prompt, if set, is the user's message: a new turn. Calls left
	// waiting by an earlier run are first answered "cancelled".
	Prompt string
	// Tools are the tools the model is offered and its calls run with;
	// nil offers none (a call is then answered not_found).
	Tools *registry.Registry
	// Decisions, without a Prompt, decide the calls left waiting for
	// approval (ErrApprovalPending), by call id; the Approver decides the
	// others. Each decision is recorded through OnDecision like an
	// Approver's.
	Decisions map[string]Decision
	// Results, without a Prompt, answer the calls left deferred
	// (ErrCallsDeferred, Config.DeferCalls), by call id, with the
	// Invocation each returned where it ran — exactly as if the registry
	// had run it here (the same caps, events and tool messages). Every
	// waiting call needs a result, and every result a waiting call.
	Results map[string]registry.Invocation
	// AnswerOnly, with Results, answers the calls and ends the run there,
	// without the next model request (a run whose turns are spent ends
	// so, its calls in the history).
	AnswerOnly bool
	// Whole asks the model for whole replies instead of streams: the run
	// emits no TextDelta or ReasoningDelta, only the other events.
	Whole bool
}

// ErrBadTurn: a Turn that asks for two things at once (a Prompt with
// Decisions or Results, Decisions with Results) or AnswerOnly without
// Results.
var ErrBadTurn = errors.New("a turn is a prompt, decisions or results, one of them")

// Run is the one way a Cycle runs: a prompt, or the decisions or results
// of calls an earlier run left waiting, as a sequence of events (see
// Event for their order). A failed run ends the sequence with one (nil,
// err) pair; a successful one simply ends, and Messages then holds the
// run (its last assistant message is the final reply). The run happens
// in the goroutine that ranges over the sequence: stopping early (break)
// cancels the request in flight and leaves no goroutine behind; calls
// already in the history are then answered "cancelled". The sequence can
// be ranged over once; a second range yields ErrConsumed.
//
// Without a Prompt, the waiting calls (Pending) are answered — decided,
// then run or denied, or given their Results — after the ones already
// answered, and the run goes on with its next model request (unless
// AnswerOnly): the request that asked for the calls is not repeated. A
// decision or a result for a call that does not wait, or no call
// waiting, is ErrNothingPending (nothing is changed).
//
// Submit, SubmitWithTools and SubmitStreamWithTools are Run with a
// Prompt, collected.
func (c *Cycle) Run(ctx context.Context, t Turn) iter.Seq2[Event, error] {
	return eventSeq(func(emit func(Event) bool) error {
		switch {
		case t.Prompt != "" && (t.Decisions != nil || t.Results != nil),
			t.Decisions != nil && t.Results != nil,
			t.AnswerOnly && t.Results == nil:
			return ErrBadTurn
		case t.Prompt != "":
			_, err := c.run(ctx, t.Prompt, t.Tools, emit, !t.Whole)
			return err
		}
		args := resumeArgs{decisions: t.Decisions, results: t.Results, goOn: !t.AnswerOnly, stream: !t.Whole}
		if args.results == nil && t.Results != nil {
			args.results = map[string]registry.Invocation{}
		}
		return c.resume(ctx, t.Tools, args, emit)
	})
}
