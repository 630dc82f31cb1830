package loop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/registry"
)

// scriptedApprover asks about the tools in ask and answers from answers
// (by call id), recording what it was asked.
type scriptedApprover struct {
	ask     map[string]bool
	answers map[string]Decision
	err     error
	before  <-chan struct{} // if set, Approve waits for it (or fails the test after 5 s)

	mu    sync.Mutex
	asked []ApprovalRequest
}

func (a *scriptedApprover) NeedsApproval(req ApprovalRequest) bool { return a.ask[req.Tool] }

func (a *scriptedApprover) Approve(ctx context.Context, req ApprovalRequest) (Decision, error) {
	if a.before != nil {
		select {
		case <-a.before:
		case <-time.After(5 * time.Second):
			return Decision{}, errors.New("the call that needs no approval did not run before the question")
		}
	}
	a.mu.Lock()
	a.asked = append(a.asked, req)
	a.mu.Unlock()
	if a.err != nil {
		return Decision{By: "test"}, a.err
	}
	return a.answers[req.CallID], nil
}

// grantTool is a funcTool that describes its grant.
type grantTool struct {
	*funcTool
	grant registry.Grant
}

func (g *grantTool) Grant() registry.Grant { return g.grant }

func okTool(name string, ran chan<- struct{}) *funcTool {
	return &funcTool{name: name, desc: name, fn: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
		if ran != nil {
			close(ran)
		}
		return json.RawMessage(`{"ok":"` + name + `"}`), nil
	}}
}

// toolContents returns the tool messages of a request by call id, in order.
func toolContents(got received) (ids []string, content map[string]string) {
	content = map[string]string{}
	for _, m := range got.Messages {
		if m.Role == "tool" && m.Content != nil {
			ids = append(ids, m.ToolCallID)
			content[m.ToolCallID] = *m.Content
		}
	}
	return ids, content
}

// TestApprovalParallelDenyAndOrder: of one reply's calls, the one that
// needs no approval runs before the question about the others is
// answered; a denial reaches the model as "error (denied_by_user):
// <reason>" and the run goes on; the results stay in call order; every
// decision is recorded with the grant the call would run with.
func TestApprovalParallelDenyAndOrder(t *testing.T) {
	ran := make(chan struct{})
	grant := registry.Grant{Source: "wasm", Mounts: []registry.GrantMount{{Guest: "/notes", Host: "/tmp/notes", Mode: registry.ReadWrite}}}
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{
			{ID: "c1", Name: "writer", Args: `{"title":"a"}`},
			{ID: "c2", Name: "reader", Args: `{}`},
			{ID: "c3", Name: "writer", Args: `{"title":"b"}`},
		}},
		expect(func(t testing.TB, got received) {
			ids, content := toolContents(got)
			if strings.Join(ids, ",") != "c1,c2,c3" {
				t.Errorf("tool messages in order %v", ids)
			}
			if content["c1"] != `{"ok":"writer"}` || content["c2"] != `{"ok":"reader"}` {
				t.Errorf("approved calls: %q %q", content["c1"], content["c2"])
			}
			if content["c3"] != "error (denied_by_user): not this one" {
				t.Errorf("denied call: %q", content["c3"])
			}
		}, streamText("done")),
	)
	ap := &scriptedApprover{
		ask:     map[string]bool{"writer": true},
		answers: map[string]Decision{"c1": {Answer: ApproveOnce, By: "user"}, "c3": {Answer: Deny, Reason: "not this one", By: "user"}},
		before:  ran,
	}
	var recs []DecisionRecord
	c := newCycle(t, srv, Config{Hooks: Hooks{Approver: ap, OnDecision: func(r DecisionRecord) { recs = append(recs, r) }}})
	reg := newRegistry(t, &grantTool{funcTool: okTool("writer", nil), grant: grant}, okTool("reader", ran))
	evs, err := collect(t, c, context.Background(), "x", reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(ap.asked) != 2 || ap.asked[0].CallID != "c1" || ap.asked[1].CallID != "c3" {
		t.Fatalf("asked %+v", ap.asked)
	}
	if g := ap.asked[0].Grant; len(g.Mounts) != 1 || g.Mounts[0].Host != "/tmp/notes" || ap.asked[0].Arguments != `{"title":"a"}` {
		t.Fatalf("request %+v", ap.asked[0])
	}
	if len(recs) != 2 || recs[0].Answer != ApproveOnce || recs[1].Answer != Deny || recs[1].Reason != "not this one" ||
		recs[1].By != "user" || recs[0].Time.IsZero() || recs[0].Grant.Mounts[0].Mode != registry.ReadWrite {
		t.Fatalf("records %+v", recs)
	}
	var denied *ToolExecutionCompleted
	started := map[string]bool{}
	for _, ev := range evs {
		switch e := ev.(type) {
		case *ToolExecutionCompleted:
			if e.ID == "c3" {
				denied = e
			}
		case *ToolExecutionStarted:
			started[e.ID] = true
		}
	}
	if denied == nil || !denied.IsError || denied.ErrorKind != registry.DeniedByUser || string(denied.Input) != `{"title":"b"}` {
		t.Fatalf("denied call's event %+v", denied)
	}
	if !started["c1"] || !started["c2"] || started["c3"] {
		t.Fatalf("started %v: a denied call never starts", started)
	}
}

// TestApprovalSessionRemembered: a tool approved for the session is not
// asked about again in that Cycle (the decision is still recorded, as
// remembered); ApproveOnce asks again next time.
func TestApprovalSessionRemembered(t *testing.T) {
	for _, tc := range []struct {
		answer Answer
		asks   int
	}{{ApproveSession, 1}, {ApproveAlways, 1}, {ApproveOnce, 2}} {
		t.Run(string(tc.answer), func(t *testing.T) {
			srv := newServer(t,
				step{ToolCalls: []chattest.Call{{ID: "c1", Name: "writer", Args: `{}`}}},
				step{ToolCalls: []chattest.Call{{ID: "c2", Name: "writer", Args: `{"n":2}`}}},
				expect(func(t testing.TB, got received) {
					_, content := toolContents(got)
					if content["c1"] != `{"ok":"writer"}` || content["c2"] != `{"ok":"writer"}` {
						t.Errorf("tool messages %v", content)
					}
				}, streamText("done")),
			)
			ap := &scriptedApprover{ask: map[string]bool{"writer": true},
				answers: map[string]Decision{"c1": {Answer: tc.answer}, "c2": {Answer: ApproveOnce}}}
			var recs []DecisionRecord
			c := newCycle(t, srv, Config{Hooks: Hooks{Approver: ap, OnDecision: func(r DecisionRecord) { recs = append(recs, r) }}})
			if _, err := collect(t, c, context.Background(), "x", newRegistry(t, okTool("writer", nil))); err != nil {
				t.Fatal(err)
			}
			if len(ap.asked) != tc.asks || len(recs) != 2 {
				t.Fatalf("asked %d times, %d records", len(ap.asked), len(recs))
			}
			if tc.asks == 1 && (!recs[1].Remembered || recs[1].By != "session") {
				t.Fatalf("second record %+v", recs[1])
			}
		})
	}
}

// TestApprovalErrorDenies: an Approver that fails gives no yes: the call
// is denied with the error as the reason and the run goes on. A nil
// Approver runs everything (no records).
func TestApprovalErrorDenies(t *testing.T) {
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{{ID: "c1", Name: "writer", Args: `{}`}}},
		expect(func(t testing.TB, got received) {
			if _, content := toolContents(got); content["c1"] != "error (denied_by_user): no decision: no terminal" {
				t.Errorf("tool message %q", content["c1"])
			}
		}, step{Text: "done"}),
	)
	ap := &scriptedApprover{ask: map[string]bool{"writer": true}, err: errors.New("no terminal")}
	var recs []DecisionRecord
	c := newCycle(t, srv, Config{Hooks: Hooks{Approver: ap, OnDecision: func(r DecisionRecord) { recs = append(recs, r) }}})
	resp, err := c.SubmitWithTools(context.Background(), "x", newRegistry(t, okTool("writer", nil)))
	if err != nil || resp.Text != "done" {
		t.Fatalf("%v %+v", err, resp)
	}
	if len(recs) != 1 || recs[0].Answer != Deny || recs[0].By != "test" {
		t.Fatalf("records %+v", recs)
	}
}

// pendingApprover defers every decision (ErrApprovalPending).
type pendingApprover struct{}

func (pendingApprover) NeedsApproval(req ApprovalRequest) bool { return req.Tool == "writer" }
func (pendingApprover) Approve(context.Context, ApprovalRequest) (Decision, error) {
	return Decision{}, ErrApprovalPending
}

// TestApprovalPendingAndResume: an Approver that defers stops the run
// after the other calls ran, with an ApprovalRequired event and an
// ApprovalPendingError; the history keeps the call open; a Cycle built
// from that saved history (ResumePending) resumes it with the decision,
// without repeating the model request; the calls answered before the
// pause keep their place, the resumed ones follow.
func TestApprovalPendingAndResume(t *testing.T) {
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{{ID: "c1", Name: "writer", Args: `{"t":1}`}, {ID: "c2", Name: "reader", Args: `{}`}}},
		expect(func(t testing.TB, got received) {
			ids, content := toolContents(got)
			// c2 was answered before the pause, c1 when resumed.
			if strings.Join(ids, ",") != "c2,c1" || content["c1"] != "error (denied_by_user): use the other folder" || content["c2"] != `{"ok":"reader"}` {
				t.Errorf("tool messages %v %v", ids, content)
			}
		}, streamText("done")),
	)
	reg := newRegistry(t, okTool("writer", nil), okTool("reader", nil))
	c := newCycle(t, srv, Config{Hooks: Hooks{Approver: pendingApprover{}}})
	evs, err := collect(t, c, context.Background(), "x", reg)
	var pe *ApprovalPendingError
	if !errors.As(err, &pe) || !errors.Is(err, ErrApprovalPending) || len(pe.Calls) != 1 || pe.Calls[0].CallID != "c1" {
		t.Fatalf("err %v", err)
	}
	last := evs[len(evs)-1]
	b, _ := json.Marshal(last)
	if _, ok := last.(*ApprovalRequired); !ok || !strings.HasPrefix(string(b), `{"type":"approval_required","call_id":"c1","tool":"writer","input":{"t":1},"grant":{`) {
		t.Fatalf("last event %s", b)
	}
	if p := c.Pending(); len(p) != 1 || p[0].ID != "c1" {
		t.Fatalf("pending %+v", p)
	}
	saved := c.Messages()
	if n := len(saved); n != 3 || saved[2].ToolCallID != "c2" { // user, assistant, c2's answer
		t.Fatalf("history %+v", saved)
	}

	// As a new process would: the saved history, the decision.
	var recs []DecisionRecord
	c2 := newCycle(t, srv, Config{History: saved, ResumePending: true, Hooks: Hooks{OnDecision: func(r DecisionRecord) { recs = append(recs, r) }}})
	if p := c2.Pending(); len(p) != 1 {
		t.Fatalf("pending after reload %+v", p)
	}
	for _, err := range c2.Run(context.Background(), Turn{Tools: reg, Decisions: map[string]Decision{"nope": {Answer: ApproveOnce}}}) {
		// The error names the calls that wait, so a script can correct it.
		if !errors.Is(err, ErrNothingPending) || !strings.Contains(err.Error(), `"nope"; waiting: "c1" (`) {
			t.Fatalf("unknown call: %v", err)
		}
	}
	var text strings.Builder
	for ev, err := range c2.Run(context.Background(), Turn{Tools: reg, Decisions: map[string]Decision{"c1": {Answer: Deny, Reason: "use the other folder", By: "script"}}}) {
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := ev.(*TextDelta); ok {
			text.WriteString(d.Text)
		}
	}
	if text.String() != "done" || len(srv.Requests()) != 2 {
		t.Fatalf("text %q after %d requests", text.String(), len(srv.Requests()))
	}
	if len(recs) != 1 || recs[0].By != "script" || recs[0].Answer != Deny {
		t.Fatalf("records %+v", recs)
	}
	// Without ResumePending an open call is answered "cancelled".
	c3 := newCycle(t, srv, Config{History: saved})
	if m := c3.Messages(); len(m) != 4 || !strings.HasPrefix(m[3].Content, "error (cancelled)") {
		t.Fatalf("history %+v", m)
	}
}

// askCounter asks about every call of tool and denies it, counting.
type askCounter struct {
	tool  string
	asked int
}

func (a *askCounter) NeedsApproval(req ApprovalRequest) bool { return req.Tool == a.tool }
func (a *askCounter) Approve(context.Context, ApprovalRequest) (Decision, error) {
	a.asked++
	return Decision{Answer: Deny, Reason: "no", By: "test"}, nil
}

// TestResumeDecisionCoversOnlyThePausedCall: a decision given to resume a
// paused call does not decide a later call that reuses its id (the
// review's bypass): the later call gets an id of its own and is asked.
func TestResumeDecisionCoversOnlyThePausedCall(t *testing.T) {
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{{ID: "c1", Name: "writer", Args: `{}`}}},
		step{ToolCalls: []chattest.Call{{ID: "c1", Name: "deleter", Args: `{}`}}}, // the id again
		streamText("done"),
	)
	reg := newRegistry(t, okTool("writer", nil), okTool("deleter", nil))
	c := newCycle(t, srv, Config{Hooks: Hooks{Approver: pendingApprover{}}})
	if _, err := collect(t, c, context.Background(), "x", reg); !errors.Is(err, ErrApprovalPending) {
		t.Fatalf("err %v", err)
	}
	ask := &askCounter{tool: "deleter"}
	c2 := newCycle(t, srv, Config{History: c.Messages(), ResumePending: true, Hooks: Hooks{Approver: ask}})
	for _, err := range c2.Run(context.Background(), Turn{Tools: reg, Decisions: map[string]Decision{"c1": {Answer: ApproveOnce, By: "script"}}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ask.asked != 1 {
		t.Fatalf("the later call was asked about %d times, want 1", ask.asked)
	}
	msgs := c2.Messages()
	ids := map[string]int{}
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			ids[tc.ID]++
		}
	}
	for id, n := range ids {
		if n > 1 {
			t.Fatalf("call id %s used %d times in the history", id, n)
		}
	}
}

// widening is a tool whose grant widens after its first call (an MCP
// server's new hints, a tool replaced under the same name).
type widening struct {
	*funcTool
	calls int
}

func (w *widening) Grant() registry.Grant {
	if w.calls == 0 {
		return registry.Grant{AllowedHosts: []string{"a.example"}}
	}
	return registry.Grant{AllowedHosts: []string{"a.example", "b.example"}}
}

// TestSessionApprovalHoldsForItsGrant: a tool approved for the session is
// asked about again when its grant is no longer the one approved.
func TestSessionApprovalHoldsForItsGrant(t *testing.T) {
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{{ID: "c1", Name: "writer", Args: `{}`}}},
		step{ToolCalls: []chattest.Call{{ID: "c2", Name: "writer", Args: `{}`}}},
		streamText("done"),
	)
	w := &widening{}
	w.funcTool = &funcTool{name: "writer", desc: "writer", fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		w.calls++
		return json.RawMessage(`{"ok":"writer"}`), nil
	}}
	ap := &scriptedApprover{ask: map[string]bool{"writer": true},
		answers: map[string]Decision{"c1": {Answer: ApproveSession}, "c2": {Answer: ApproveOnce}}}
	c := newCycle(t, srv, Config{Hooks: Hooks{Approver: ap}})
	if _, err := collect(t, c, context.Background(), "x", newRegistry(t, w)); err != nil {
		t.Fatal(err)
	}
	if len(ap.asked) != 2 {
		t.Fatalf("asked %d times: a wider grant ran on a session approval of the narrower one", len(ap.asked))
	}
}

// TestToolContext: Hooks.ToolContext gives each call the registry runs
// its own context, derived from the run's (a value it adds reaches the
// tool; the call's id and name are its arguments), after the call's
// ToolExecutionStarted; a call denied by the Approver never gets one.
func TestToolContext(t *testing.T) {
	type key struct{}
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{{ID: "c1", Name: "reader", Args: `{}`}, {ID: "c2", Name: "writer", Args: `{}`}}},
		streamText("done"),
	)
	seen := map[string]string{}
	var mu sync.Mutex
	tool := func(name string) *funcTool {
		return &funcTool{name: name, desc: name, fn: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			seen[name], _ = ctx.Value(key{}).(string)
			mu.Unlock()
			return json.RawMessage(`{}`), nil
		}}
	}
	var hooked []string
	ap := &scriptedApprover{ask: map[string]bool{"writer": true}, answers: map[string]Decision{"c2": {Answer: Deny, Reason: "no", By: "user"}}}
	c := newCycle(t, srv, Config{Hooks: Hooks{Approver: ap, ToolContext: func(ctx context.Context, id, name string) context.Context {
		hooked = append(hooked, id+":"+name)
		return context.WithValue(ctx, key{}, "for "+id)
	}}})
	if _, err := collect(t, c, context.Background(), "x", newRegistry(t, tool("reader"), tool("writer"))); err != nil {
		t.Fatal(err)
	}
	if strings.Join(hooked, ",") != "c1:reader" || seen["reader"] != "for c1" || len(seen) != 1 {
		t.Fatalf("hooked %v, the tools saw %v", hooked, seen)
	}
}
