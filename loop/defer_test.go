package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/registry"
)

// TestDeferCallsAndResumeWithResults: with DeferCalls a reply's calls are
// not run (the tool is never executed) and the run ends with a
// CallsDeferredError naming them in call order, while an unknown tool is
// answered at once; a Cycle built from the saved history resumes with
// results computed elsewhere — an output and a typed error — which reach
// the model exactly as registry results would, without repeating the
// model request.
func TestDeferCallsAndResumeWithResults(t *testing.T) {
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{call("c1", "writer", `{"t":1}`), call("c2", "nosuch", `{}`), call("c3", "reader", `{}`)}},
		expect(func(t testing.TB, got received) {
			ids, content := toolContents(got)
			if strings.Join(ids, ",") != "c2,c1,c3" || content["c1"] != `{"wrote":true}` ||
				content["c3"] != "error (timeout): the tool ran out of time" || !strings.HasPrefix(content["c2"], "error (not_found)") {
				t.Errorf("tool messages %v %v", ids, content)
			}
		}, streamText("done")),
	)
	var ran atomic.Int32
	count := func(tl *funcTool) *funcTool {
		fn := tl.fn
		tl.fn = func(ctx context.Context, a json.RawMessage) (json.RawMessage, error) { ran.Add(1); return fn(ctx, a) }
		return tl
	}
	reg := newRegistry(t, count(okTool("writer", nil)), count(okTool("reader", nil)))
	c := newCycle(t, srv, Config{DeferCalls: true})
	_, err := collect(t, c, context.Background(), "x", reg)
	var de *CallsDeferredError
	if !errors.As(err, &de) || !errors.Is(err, ErrCallsDeferred) || errors.Is(err, ErrApprovalPending) ||
		len(de.Calls) != 2 || de.Calls[0].CallID != "c1" || de.Calls[1].CallID != "c3" || de.Calls[0].Arguments != `{"t":1}` {
		t.Fatalf("err %v (%+v)", err, de)
	}
	if ran.Load() != 0 {
		t.Fatalf("%d deferred calls ran here", ran.Load())
	}
	saved := c.Messages()
	c2 := newCycle(t, srv, Config{History: saved, ResumePending: true, DeferCalls: true})
	for _, err := range c2.Run(context.Background(), Turn{Tools: reg, Results: map[string]registry.Invocation{"c1": {}}}) {
		if !errors.Is(err, ErrNothingPending) {
			t.Fatalf("a missing result: %v", err)
		}
	}
	results := map[string]registry.Invocation{
		"c1": {Output: json.RawMessage(`{"wrote":true}`)},
		"c3": {Err: registry.Errorf(registry.Timeout, "reader", "the tool ran out of time")},
	}
	var text strings.Builder
	var completed []string
	for ev, err := range c2.Run(context.Background(), Turn{Tools: reg, Results: results}) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *TextDelta:
			text.WriteString(e.Text)
		case *ToolExecutionCompleted:
			completed = append(completed, e.ID+":"+string(e.ErrorKind))
		}
	}
	if text.String() != "done" || len(srv.Requests()) != 2 || ran.Load() != 0 {
		t.Fatalf("text %q after %d requests, %d runs here", text.String(), len(srv.Requests()), ran.Load())
	}
	if strings.Join(completed, ",") != "c1:,c3:timeout" {
		t.Fatalf("completed events %v", completed)
	}
}

// toolApprover answers by tool: "deny", "pending", else approve.
type toolApprover map[string]string

func (s toolApprover) NeedsApproval(req ApprovalRequest) bool { return s[req.Tool] != "" }
func (s toolApprover) Approve(_ context.Context, req ApprovalRequest) (Decision, error) {
	switch s[req.Tool] {
	case "deny":
		return Decision{Answer: Deny, Reason: "not that", By: "test"}, nil
	case "pending":
		return Decision{}, ErrApprovalPending
	}
	return Decision{Answer: ApproveOnce, By: "test"}, nil
}

// TestDeferCallsDecidesApprovalsFirst: with DeferCalls and an Approver,
// the calls that need a yes are decided before the run ends: the approved
// one is deferred with the one that needs none (in call order), the
// denied one is answered denied_by_user, and one whose decision would
// wait is denied too (a deferred run cannot wait): nothing that needs
// approval is handed over unapproved.
func TestDeferCallsDecidesApprovalsFirst(t *testing.T) {
	srv := newServer(t, step{ToolCalls: []chattest.Call{
		call("c1", "ok", `{}`), call("c2", "denied", `{}`), call("c3", "asked", `{}`), call("c4", "waits", `{}`)}})
	reg := newRegistry(t, okTool("ok", nil), okTool("denied", nil), okTool("asked", nil), okTool("waits", nil))
	var decided []string
	c := newCycle(t, srv, Config{DeferCalls: true, Hooks: Hooks{
		Approver:   toolApprover(map[string]string{"denied": "deny", "asked": "approve", "waits": "pending"}),
		OnDecision: func(r DecisionRecord) { decided = append(decided, r.Tool+":"+string(r.Answer)) },
	}})
	_, err := collect(t, c, context.Background(), "x", reg)
	var de *CallsDeferredError
	if !errors.As(err, &de) || len(de.Calls) != 2 || de.Calls[0].CallID != "c1" || de.Calls[1].CallID != "c3" {
		t.Fatalf("err %v (%+v)", err, de)
	}
	answers := map[string]string{}
	for _, m := range c.Messages() {
		if m.Role == RoleTool {
			answers[m.ToolCallID] = m.Content
		}
	}
	if len(answers) != 2 || answers["c2"] != "error (denied_by_user): not that" || !strings.HasPrefix(answers["c4"], "error (denied_by_user): no decision") {
		t.Fatalf("answers %v", answers)
	}
	if strings.Join(decided, ",") != "denied:deny,asked:once" {
		t.Fatalf("decisions %v", decided)
	}
}

// TestDeferDecisionsLeavesTheCallOpen: with DeferDecisions, a call
// whose decision would wait is deferred undecided instead of denied: it
// is among the deferred calls (in call order) and listed as undecided,
// no decision is recorded for it and no tool message answers it; Run
// with Results then answers it like the others.
func TestDeferDecisionsLeavesTheCallOpen(t *testing.T) {
	srv := newServer(t, step{ToolCalls: []chattest.Call{call("c1", "ok", `{}`), call("c2", "waits", `{}`), call("c3", "denied", `{}`)}},
		streamText("done"))
	reg := newRegistry(t, okTool("ok", nil), okTool("waits", nil), okTool("denied", nil))
	var decided []string
	c := newCycle(t, srv, Config{DeferCalls: true, DeferDecisions: true, Hooks: Hooks{
		Approver:   toolApprover(map[string]string{"waits": "pending", "denied": "deny"}),
		OnDecision: func(r DecisionRecord) { decided = append(decided, r.Tool+":"+string(r.Answer)) },
	}})
	_, err := collect(t, c, context.Background(), "x", reg)
	var de *CallsDeferredError
	if !errors.As(err, &de) || len(de.Calls) != 2 || de.Calls[0].CallID != "c1" || de.Calls[1].CallID != "c2" ||
		len(de.Undecided) != 1 || de.Undecided[0].CallID != "c2" || de.Undecided[0].Tool != "waits" {
		t.Fatalf("err %v (%+v)", err, de)
	}
	if strings.Join(decided, ",") != "denied:deny" {
		t.Fatalf("decisions %v", decided)
	}
	for _, m := range c.Messages() {
		if m.Role == RoleTool && m.ToolCallID != "c3" {
			t.Fatalf("a deferred call was answered: %+v", m)
		}
	}
	denied := registry.Invocation{Err: registry.NewError(registry.DeniedByUser, "waits", errors.New("not now"))}
	for _, err := range c.Run(context.Background(), Turn{Tools: reg, Results: map[string]registry.Invocation{"c1": {Output: json.RawMessage(`1`)}, "c2": denied}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	answers := map[string]string{}
	for _, m := range c.Messages() {
		if m.Role == RoleTool {
			answers[m.ToolCallID] = m.Content
		}
	}
	if answers["c1"] != "1" || answers["c2"] != "error (denied_by_user): not now" {
		t.Fatalf("answers %v", answers)
	}
}

// TestAnswerWithResultsMakesNoRequest: Run with AnswerOnly answers
// the deferred calls and stops: no model request, the tool messages in
// the history.
func TestAnswerWithResultsMakesNoRequest(t *testing.T) {
	srv := newServer(t, step{ToolCalls: []chattest.Call{call("c1", "t", `{}`)}})
	reg := newRegistry(t, okTool("t", nil))
	c := newCycle(t, srv, Config{DeferCalls: true})
	if _, err := collect(t, c, context.Background(), "x", reg); !errors.Is(err, ErrCallsDeferred) {
		t.Fatal(err)
	}
	var completed int
	for ev, err := range c.Run(context.Background(), Turn{Tools: reg, Results: map[string]registry.Invocation{"c1": {Output: json.RawMessage(`{"v":1}`)}}, AnswerOnly: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*ToolExecutionCompleted); ok {
			completed++
		}
	}
	h := c.Messages()
	if completed != 1 || len(srv.Requests()) != 1 || h[len(h)-1].Role != RoleTool || h[len(h)-1].Content != `{"v":1}` || len(c.Pending()) != 0 {
		t.Fatalf("completed %d, %d requests, history %+v", completed, len(srv.Requests()), h)
	}
}

// TestResumeManyCallsKeepsEachResult: resuming three or more waiting
// calls answers each with its own result, once (the calls being answered
// and the calls still open are not the same slice).
func TestResumeManyCallsKeepsEachResult(t *testing.T) {
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{call("c1", "t", `{"i":1}`), call("c2", "t", `{"i":2}`), call("c3", "t", `{"i":3}`), call("c4", "t", `{"i":4}`)}},
		expect(func(t testing.TB, got received) {
			ids, content := toolContents(got)
			if strings.Join(ids, ",") != "c1,c2,c3,c4" || content["c2"] != `{"r":2}` || content["c3"] != `{"r":3}` || content["c4"] != `{"r":4}` {
				t.Errorf("tool messages %v %v", ids, content)
			}
		}, streamText("done")),
	)
	reg := newRegistry(t, okTool("t", nil))
	c := newCycle(t, srv, Config{DeferCalls: true})
	if _, err := collect(t, c, context.Background(), "x", reg); !errors.Is(err, ErrCallsDeferred) {
		t.Fatal(err)
	}
	results := map[string]registry.Invocation{}
	for i := 1; i <= 4; i++ {
		results[fmt.Sprintf("c%d", i)] = registry.Invocation{Output: json.RawMessage(fmt.Sprintf(`{"r":%d}`, i))}
	}
	for _, err := range c.Run(context.Background(), Turn{Tools: reg, Results: results}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	var tools []string
	for _, m := range c.Messages() {
		if m.Role == RoleTool {
			tools = append(tools, m.ToolCallID+"="+m.Content)
		}
	}
	if strings.Join(tools, ",") != `c1={"r":1},c2={"r":2},c3={"r":3},c4={"r":4}` {
		t.Fatalf("history %v", tools)
	}
}
