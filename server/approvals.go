package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
)

// DefaultApprovalTimeout is how long a run waits for a client's decision
// about a call that needs approval before the call is denied ("no
// decision"), when Options.ApprovalTimeout is zero. The run holds its call
// slot while it waits.
const DefaultApprovalTimeout = 10 * time.Minute

// maxPendingApprovals bounds the questions one run holds open at once: a
// reply has at most loop.DefaultMaxToolCallsPerTurn calls.
const maxPendingApprovals = loop.DefaultMaxToolCallsPerTurn

// Runs in progress and the approvals they wait for.
//
// A run whose policy needs a person's yes for a call (the loop's Approver,
// from [approvals]: the template loop.Config's Approver answers
// loop.ErrApprovalPending for a call it cannot decide itself) asks its
// client: the stream carries an approval_required event, GET
// /v1/runs/{id} lists the pending calls, and POST /v1/runs/{id}/approvals
// decides one. The decision reaches the waiting run; a denial goes to the
// model as a tool message, as on the terminal.

// liveRun is one run in progress, by its session id.
type liveRun struct {
	id      string
	started time.Time
	send    func(typ string, v any) bool // the run's event stream

	mu      sync.Mutex
	pending []*pendingApproval // in the order asked
}

// pendingApproval is one call waiting for a decision.
type pendingApproval struct {
	req    loop.ApprovalRequest
	asked  time.Time
	decide chan loop.Decision // buffered (1): the first decision wins
	done   chan struct{}      // closed when the run stopped waiting (decided, timed out, cancelled)
}

// approvalEvent is the stream's event for a call that waits for a
// decision, also what GET /v1/runs/{id} lists.
type approvalEvent struct {
	Type    string          `json:"type,omitempty"` // "approval_required" in the stream
	Session string          `json:"session,omitempty"`
	CallID  string          `json:"call_id"`
	Tool    string          `json:"tool"`
	Input   json.RawMessage `json:"input"` // the arguments (a JSON string when they are not JSON)
	Grant   registry.Grant  `json:"grant"`
	Asked   time.Time       `json:"asked"`
}

func approvalView(p *pendingApproval) approvalEvent {
	in := json.RawMessage(p.req.Arguments)
	if !json.Valid(in) {
		in, _ = json.Marshal(p.req.Arguments)
	}
	return approvalEvent{CallID: p.req.CallID, Tool: p.req.Tool, Input: in, Grant: clientGrant(p.req.Grant), Asked: p.asked}
}

// clientGrant is g without the operator's host directories (clients of
// the API see guest paths and modes, as with audits).
func clientGrant(g registry.Grant) registry.Grant {
	g.Mounts = slices.Clone(g.Mounts)
	for i := range g.Mounts {
		g.Mounts[i].Host = ""
	}
	return g
}

// registerLive registers lr as tn's run in progress on its session (the
// caller holds the session's lock); the function returned unregisters it.
func (tn *tenant) registerLive(lr *liveRun) func() {
	tn.liveMu.Lock()
	tn.live[lr.id] = lr
	tn.liveMu.Unlock()
	return func() {
		tn.liveMu.Lock()
		if tn.live[lr.id] == lr {
			delete(tn.live, lr.id)
		}
		tn.liveMu.Unlock()
	}
}

// runApprover asks the run's client about the calls the policy cannot
// decide itself.
type runApprover struct {
	inner   loop.Approver
	lr      *liveRun
	timeout time.Duration
}

func (a *runApprover) NeedsApproval(req loop.ApprovalRequest) bool { return a.inner.NeedsApproval(req) }

func (a *runApprover) Approve(ctx context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
	d, err := a.inner.Approve(ctx, req)
	if !errors.Is(err, loop.ErrApprovalPending) {
		return d, err // decided by the policy (never, a standing approval)
	}
	lr := a.lr
	p := &pendingApproval{req: req, asked: time.Now().UTC(), decide: make(chan loop.Decision, 1), done: make(chan struct{})}
	lr.mu.Lock()
	if len(lr.pending) >= maxPendingApprovals {
		lr.mu.Unlock()
		return loop.Decision{Answer: loop.Deny, By: "server", Reason: "too many calls wait for a decision"}, nil
	}
	lr.pending = append(lr.pending, p)
	lr.mu.Unlock()
	defer func() {
		lr.mu.Lock()
		lr.pending = slices.DeleteFunc(lr.pending, func(q *pendingApproval) bool { return q == p })
		close(p.done)
		lr.mu.Unlock()
	}()
	ev := approvalView(p)
	ev.Type, ev.Session = "approval_required", lr.id
	if !lr.send(ev.Type, ev) {
		return loop.Decision{}, errClientGone
	}
	t := time.NewTimer(a.timeout)
	defer t.Stop()
	select {
	case d := <-p.decide:
		return d, nil
	case <-ctx.Done():
		return loop.Decision{}, ctx.Err()
	case <-t.C:
		return loop.Decision{Answer: loop.Deny, By: "server", Reason: "no decision within " + a.timeout.String()}, nil
	}
}

// runState is GET /v1/runs/{id}: whether the run is in progress and the
// calls waiting for a decision.
func (s *Server) runState(w http.ResponseWriter, r *http.Request) {
	lr, err := s.tenantOf(r).liveRun(r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	lr.mu.Lock()
	pending := make([]approvalEvent, 0, len(lr.pending))
	for _, p := range lr.pending {
		pending = append(pending, approvalView(p))
	}
	lr.mu.Unlock()
	state := "running"
	if len(pending) > 0 {
		state = "awaiting_approval"
	}
	s.writeJSON(w, http.StatusOK, struct {
		Session string          `json:"session"`
		State   string          `json:"state"`
		Started time.Time       `json:"started"`
		Pending []approvalEvent `json:"pending"`
	}{lr.id, state, lr.started.UTC(), pending})
}

// ApprovalRequest is the body of POST /v1/runs/{id}/approvals.
type ApprovalRequest struct {
	// CallID is the call decided (a pending call of the run).
	CallID string `json:"call_id"`
	// Answer is "once", "session" (this run's later calls of the same
	// tool run without asking) or "deny". "always" is not accepted over
	// the API: a standing approval is the operator's (agrun approvals).
	Answer string `json:"answer"`
	// Reason, for a denial, reaches the model.
	Reason string `json:"reason,omitempty"`
}

// decideApproval is POST /v1/runs/{id}/approvals.
func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request) {
	req, d, err := s.readDecision(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	answer := d.Answer
	lr, err := s.tenantOf(r).liveRun(r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	lr.mu.Lock()
	i := slices.IndexFunc(lr.pending, func(p *pendingApproval) bool { return p.req.CallID == req.CallID })
	var p *pendingApproval
	if i >= 0 {
		p = lr.pending[i]
	}
	lr.mu.Unlock()
	if p == nil {
		s.writeError(w, errorf(http.StatusNotFound, Kind(registry.NotFound), "run %q has no call %q waiting for a decision", lr.id, textsafe.Clean(req.CallID, 80)))
		return
	}
	select {
	case p.decide <- d:
	default:
		s.writeError(w, errorf(http.StatusConflict, KindConflict, "call %q is already decided", textsafe.Clean(req.CallID, 80)))
		return
	}
	// The run may have stopped waiting meanwhile (timed out, cancelled):
	// then this decision was not the one used. A run that is still
	// waiting takes the decision at once.
	select {
	case <-p.done:
		if len(p.decide) > 0 { // nobody took it
			s.writeError(w, errorf(http.StatusConflict, KindConflict, "call %q was decided by the server first (timed out or cancelled)", textsafe.Clean(req.CallID, 80)))
			return
		}
	case <-time.After(time.Second):
	}
	s.writeJSON(w, http.StatusOK, struct {
		Session string `json:"session"`
		CallID  string `json:"call_id"`
		Answer  string `json:"answer"`
	}{lr.id, p.req.CallID, string(answer)})
}

// readDecision reads the body of POST /v1/runs/{id}/approvals: the
// request and the decision it gives (by "api client", its reason
// cleaned).
func (s *Server) readDecision(w http.ResponseWriter, r *http.Request) (ApprovalRequest, loop.Decision, error) {
	var req ApprovalRequest
	if err := requireMedia(r, "application/json"); err != nil {
		return req, loop.Decision{}, err
	}
	b, err := s.readBody(w, r, 16<<10)
	if err != nil {
		return req, loop.Decision{}, err
	}
	defer b.release()
	dec := json.NewDecoder(strings.NewReader(string(b.data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, loop.Decision{}, errorf(http.StatusBadRequest, KindBadRequest, `the body must be {"call_id": "...", "answer": "once|session|deny", "reason": "optional"}: %v`, err)
	}
	var answer loop.Answer
	switch req.Answer {
	case "once":
		answer = loop.ApproveOnce
	case "session":
		answer = loop.ApproveSession
	case "deny":
		answer = loop.Deny
	default:
		return req, loop.Decision{}, errorf(http.StatusBadRequest, KindBadRequest, `"answer" must be "once", "session" or "deny" (a standing approval is the operator's: agrun approvals)`)
	}
	return req, loop.Decision{Answer: answer, By: "api client", Reason: textsafe.Clean(req.Reason, 1024)}, nil
}

// liveRun returns tn's run in progress on session id: another tenant's
// run on a session of that id is not looked at.
func (tn *tenant) liveRun(id string) (*liveRun, error) {
	tn.liveMu.Lock()
	lr := tn.live[id]
	tn.liveMu.Unlock()
	if lr == nil {
		return nil, errorf(http.StatusNotFound, Kind(registry.NotFound), "no run in progress on session %q", textsafe.Clean(id, 80))
	}
	return lr, nil
}
