package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"strings"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
)

// exitApproval is a `run --json` that stopped because tool calls wait for
// a decision (approval_required events); `run --session ID --approve
// CALL_ID` / `--deny CALL_ID:REASON` resumes it.
const exitApproval = 3

// decisionsFlag collects --approve CALL_ID and --deny CALL_ID[:REASON]
// into one map of decisions by call id.
type decisionsFlag struct {
	m    *map[string]loop.Decision
	deny bool
}

func (f decisionsFlag) String() string { return "" }

func (f decisionsFlag) Set(v string) error {
	id, reason, _ := strings.Cut(v, ":")
	id = strings.TrimSpace(id)
	if id == "" {
		return errors.New("needs a CALL_ID (from the approval_required event)")
	}
	if *f.m == nil {
		*f.m = map[string]loop.Decision{}
	}
	if _, dup := (*f.m)[id]; dup {
		return fmt.Errorf("call %q decided twice", id)
	}
	d := loop.Decision{Answer: loop.ApproveOnce, By: "--approve"}
	if f.deny {
		d = loop.Decision{Answer: loop.Deny, By: "--deny", Reason: strings.TrimSpace(reason)}
	}
	(*f.m)[id] = d
	return nil
}

// defineResume adds run's --approve and --deny.
func (o *runOptions) defineResume(fs *flag.FlagSet) {
	fs.Var(decisionsFlag{m: &o.resume}, "approve", "resume the paused run of --session: run the waiting call `CALL_ID` (repeatable)")
	fs.Var(decisionsFlag{m: &o.resume, deny: true}, "deny", "resume the paused run of --session: deny the waiting call, `CALL_ID:REASON` (repeatable; the reason goes to the model)")
}

// checkResume validates --approve/--deny: they resume a named session
// and take no prompt.
func (o *runOptions) checkResume(fs *flag.FlagSet, pos []string) error {
	switch {
	case o.resume == nil:
		return nil
	case o.session == "":
		return usageOf(fs, "--approve and --deny resume a paused run: name its session with --session ID")
	case len(pos) > 0:
		return usageOf(fs, "--approve and --deny take no prompt: the paused run goes on where it stopped")
	}
	return nil
}

// events is the run of one turn: the prompt, or, with --approve/--deny,
// the resumed run of the session's waiting calls.
func (cv *conversation) events(ctx context.Context, prompt string, reg *registry.Registry) iter.Seq2[loop.Event, error] {
	if cv.resume != nil {
		return cv.Cycle.Run(ctx, loop.Turn{Tools: reg, Decisions: cv.resume})
	}
	return cv.Cycle.SubmitStreamWithTools(ctx, prompt, reg)
}

// approvalPending is the last line of a `run --json` that stopped for
// approvals: the session to resume and the calls that wait.
type approvalPending struct {
	Type    string   `json:"type"`
	Session string   `json:"session"`
	Calls   []string `json:"calls"`
}

// pendingLine returns the approval_pending line of err, if err is a pause.
func pendingLine(err error, session string) (approvalPending, bool) {
	var pe *loop.ApprovalPendingError
	if !errors.As(err, &pe) {
		return approvalPending{}, false
	}
	p := approvalPending{Type: "approval_pending", Session: session}
	for _, c := range pe.Calls {
		p.Calls = append(p.Calls, c.CallID)
	}
	return p, true
}
