package server

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// Runs run elsewhere (cluster mode).
//
// With Options.Runs, POST /v1/runs, GET /v1/runs/{id}, POST
// /v1/runs/{id}/approvals and GET /v1/sessions/{id} are answered through
// it instead of the Server's own loop and session files: in agrun, a
// run is a workflow on the cluster's workers (internal/cli/setup
// implements Runs over cluster.Client), so any replica answers any
// run's state and decisions. The HTTP contract is the local one, with
// the differences docs/API.md "Cluster mode" lists.
//
// Tenants stay apart by the session names Runs is given: the tenant's
// name, a dot and the client's session id (runSession). A tenant name
// holds no dot, so two (tenant, id) pairs never give one name, and
// another tenant's run or session is looked up where there is none: it
// answers what a missing one answers, with the id the client sent.

// Runs runs the agent runs of a Server somewhere else (Options.Runs).
// Every session it is given is already the tenant's (runSession): an
// implementation keeps each session name apart and need not know
// tenants. Implementations must be safe for concurrent use.
type Runs interface {
	// Start starts a run of session with prompt and returns its events
	// as they happen: the loop's (TextDelta — a reply may come whole —,
	// ToolExecutionStarted, ToolExecutionCompleted, TurnComplete, ...)
	// and a *PendingCall for each call that waits for a decision
	// (Decide). The sequence ends when the run does: with a *RunError
	// if it ended without an answer. When ctx ends, or the caller stops
	// ranging early, the run is cancelled. A run of session already in
	// progress is ErrRunBusy. schema, if set, is the answer schema the
	// client asked for (checked by the server before Start): the run's
	// final answer must match it.
	Start(ctx context.Context, session, prompt string, schema json.RawMessage) (iter.Seq2[loop.Event, error], error)
	// Run returns session's run in progress: ErrNoRun if there is none.
	Run(ctx context.Context, session string) (RunInfo, error)
	// Decide gives d about call callID of session's run in progress and
	// returns once the run holds it. ErrNoRun: no run in progress;
	// ErrNotPending: no such call waits (never asked, or decided);
	// ErrDecisionConflict: another decision about it came first and is
	// being taken.
	Decide(ctx context.Context, session, callID string, d loop.Decision) error
	// Messages returns session's stored messages, in order (the message
	// of each record that has one): session.ErrNotFound if there is no
	// such session.
	Messages(ctx context.Context, session string) ([]json.RawMessage, error)
}

// RunInfo is a run in progress, as Runs.Run returns it.
type RunInfo struct {
	// Started is when the run started.
	Started time.Time
	// Pending are the calls that wait for a decision, in call order.
	Pending []PendingCall
}

// PendingCall is a call of a run that waits for a decision: also the
// event Runs.Start yields for it.
type PendingCall struct {
	loop.ApprovalRequest
	// Asked is when the run began to wait (zero: not known; the Server
	// then says when it learnt of the call).
	Asked time.Time
}

// EventType implements loop.Event.
func (*PendingCall) EventType() string { return "approval_required" }

// RunError is how a run that Runs started ended without an answer: the
// loop's kind (provider, max_turns, cancelled, ...) and its message.
type RunError struct {
	// Kind is the run's error kind, as the error event's "kind".
	Kind Kind
	// Message says what happened (the Server cleans and caps it).
	Message string
}

// Error implements error.
func (e *RunError) Error() string { return e.Message }

// The errors of Runs, matched with errors.Is.
var (
	// ErrRunBusy: a run of the session is already in progress (409
	// session_locked).
	ErrRunBusy = errors.New("a run of the session is in progress")
	// ErrNoRun: the session has no run in progress (404 not_found).
	ErrNoRun = errors.New("no run in progress")
	// ErrNotPending: no call of that id waits for a decision (404
	// not_found).
	ErrNotPending = errors.New("no such call waits for a decision")
	// ErrDecisionConflict: another decision about the call came first
	// (409 conflict).
	ErrDecisionConflict = errors.New("the call is being decided already")
)

// runSession is the session name Runs is given for tenant tn's session
// id: "TENANT.ID". It must itself be a valid session id, so that a store
// keeps it under its own name: a client's id may then be up to 63 bytes
// less the tenant's name.
func runSession(tn *tenant, id string) (string, error) {
	key := tn.name + "." + id
	if !session.ValidID(key) {
		return "", errorf(http.StatusBadRequest, KindBadRequest, "%v; in cluster mode at most %d characters for this tenant (stored as TENANT.ID)", session.ErrBadID, 63-len(tn.name))
	}
	return key, nil
}

// clusterError answers a failure of Runs itself (the cluster did not
// answer, or answered an error).
func clusterError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return errorf(http.StatusServiceUnavailable, KindUnavailable, "the cluster did not answer in time")
	}
	return errorf(http.StatusBadGateway, KindInternal, "the cluster: %s", textsafe.Clean(err.Error(), 500))
}

// noRun is the answer for a session with no run in progress: the same
// for another tenant's.
func noRun(id string) error {
	return errorf(http.StatusNotFound, Kind(registry.NotFound), "no run in progress on session %q", textsafe.Clean(id, 80))
}

// clusterRun is POST /v1/runs with Options.Runs: the run happens in
// Runs, its events are streamed as a local run's are.
func (s *Server) clusterRun(w http.ResponseWriter, r *http.Request) {
	tn := s.tenantOf(r)
	data, done, err := s.admitCall(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	defer done()
	req, id, err := decodeRunRequest(data)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if len(req.Schema) > 0 {
		// Checked here as a local run's is (loop.New), so a refused one
		// is a 400 before anything starts; the workers check it again.
		if _, err := registry.CompileSchema(req.Schema); err != nil {
			s.writeError(w, errorf(http.StatusBadRequest, KindBadRequest, "schema (the root must be an object schema): %s", textsafe.Clean(err.Error(), 1024)))
			return
		}
	}
	key, err := runSession(tn, id)
	if err != nil {
		s.writeError(w, err)
		return
	}
	events, err := s.runs.Start(r.Context(), key, req.Prompt, req.Schema)
	switch {
	case errors.Is(err, ErrRunBusy):
		s.writeError(w, errorf(http.StatusConflict, KindSessionLocked, "session %q is in use by another run", id))
		return
	case err != nil:
		s.writeError(w, clusterError(err))
		return
	}
	tn.usage.run()
	sw := newEventWriter(w, s.limits.WriteTimeout)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	sw.send("started", startedEvent{Type: "started", Session: id})
	stop := sw.keepAlive(keepAliveEvery)
	defer stop()

	var final strings.Builder
	var usage loop.Usage
	var lastReason string
	var runErr error
	for ev, err := range events {
		if err != nil {
			runErr = err
			break
		}
		var typ string
		var out any = ev
		switch e := ev.(type) {
		case *loop.ToolExecutionCompleted:
			tn.usage.call(e.ErrorKind != "", e.Audit)
			if e.Audit != nil {
				c := *e
				c.Audit = clientAudit(e.Audit)
				out = &c
			}
		case *loop.TextDelta:
			final.WriteString(e.Text)
		case *loop.Retry:
			final.Reset()
		case *loop.TurnComplete:
			usage, lastReason = usage.Add(e.Usage), e.Reason
			if e.Reason == "tool_calls" {
				final.Reset()
			}
		case *PendingCall:
			out = pendingEvent(id, *e)
		case *loop.ApprovalRequired:
			out = pendingEvent(id, PendingCall{ApprovalRequest: e.ApprovalRequest})
		case *loop.ReasoningDelta:
			if !req.ShowReasoning {
				continue
			}
		case *loop.ToolExecutionStarted, *loop.StructuredOutput:
		default:
			continue // an event of the runner's own: not part of the API
		}
		typ = ev.EventType()
		if !sw.send(typ, out) {
			return // the client is gone: stopping the range cancels the run
		}
	}
	stop()
	if runErr != nil {
		kind, msg := string(loop.KindOf(runErr)), runErr.Error()
		var re *RunError
		if errors.As(runErr, &re) {
			kind, msg = string(re.Kind), textsafe.Clean(re.Message, 4096)
		}
		sw.send("error", errorEvent{Type: "error", Kind: kind, Message: msg, Session: id})
		return
	}
	if len(req.Schema) > 0 && json.Valid([]byte(final.String())) {
		// The worker's loop checked the answer against the schema (one
		// that does not match ends the run, invalid_output); its
		// structured_output events are not in the session's records, so
		// the checked answer's is sent here, as a local run's last.
		sw.send("structured_output", &loop.StructuredOutput{Output: json.RawMessage(final.String()), Valid: true})
	}
	sw.send("done", doneEvent{Type: "done", Session: id, Text: final.String(), Truncated: lastReason == "length", Usage: usage})
}

// pendingEvent is the approval_required event (and GET /v1/runs/{id}'s
// entry) of p, on the client's session id.
func pendingEvent(id string, p PendingCall) approvalEvent {
	if p.Asked.IsZero() {
		p.Asked = time.Now()
	}
	ev := approvalView(&pendingApproval{req: p.ApprovalRequest, asked: p.Asked.UTC()})
	ev.Type, ev.Session = "approval_required", id
	return ev
}

// clusterRunState is GET /v1/runs/{id} with Options.Runs.
func (s *Server) clusterRunState(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	key, err := runSession(s.tenantOf(r), id)
	if err != nil {
		s.writeError(w, noRun(id)) // no run can have that id
		return
	}
	ctx, cancel := s.sharedContext(r)
	defer cancel()
	info, err := s.runs.Run(ctx, key)
	switch {
	case errors.Is(err, ErrNoRun):
		s.writeError(w, noRun(id))
		return
	case err != nil:
		s.writeError(w, clusterError(err))
		return
	}
	pending := make([]approvalEvent, 0, len(info.Pending))
	for _, p := range info.Pending {
		ev := pendingEvent(id, p)
		ev.Type, ev.Session = "", "" // as a local run lists them
		pending = append(pending, ev)
	}
	state := "running"
	if len(pending) > 0 {
		state = "awaiting_approval"
	}
	s.writeJSON(w, http.StatusOK, struct {
		Session string          `json:"session"`
		State   string          `json:"state"`
		Started time.Time       `json:"started"`
		Pending []approvalEvent `json:"pending"`
	}{id, state, info.Started.UTC(), pending})
}

// clusterDecide is POST /v1/runs/{id}/approvals with Options.Runs: the
// decision goes to the run wherever it runs.
func (s *Server) clusterDecide(w http.ResponseWriter, r *http.Request) {
	req, d, err := s.readDecision(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	id := r.PathValue("id")
	key, err := runSession(s.tenantOf(r), id)
	if err != nil {
		s.writeError(w, noRun(id))
		return
	}
	ctx, cancel := s.sharedContext(r)
	defer cancel()
	callID := textsafe.Clean(req.CallID, 80)
	switch err := s.runs.Decide(ctx, key, req.CallID, d); {
	case errors.Is(err, ErrNoRun):
		s.writeError(w, noRun(id))
		return
	case errors.Is(err, ErrNotPending):
		s.writeError(w, errorf(http.StatusNotFound, Kind(registry.NotFound), "run %q has no call %q waiting for a decision", textsafe.Clean(id, 80), callID))
		return
	case errors.Is(err, ErrDecisionConflict):
		s.writeError(w, errorf(http.StatusConflict, KindConflict, "call %q is already decided", callID))
		return
	case err != nil:
		s.writeError(w, clusterError(err))
		return
	}
	s.writeJSON(w, http.StatusOK, struct {
		Session string `json:"session"`
		CallID  string `json:"call_id"`
		Answer  string `json:"answer"`
	}{id, req.CallID, string(d.Answer)})
}

// clusterSession is GET /v1/sessions/{id} with Options.Runs.
func (s *Server) clusterSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !session.ValidID(id) {
		s.writeError(w, errorf(http.StatusBadRequest, KindBadRequest, "%v", session.ErrBadID))
		return
	}
	notFound := errorf(http.StatusNotFound, Kind(registry.NotFound), "no session %q", id)
	key, err := runSession(s.tenantOf(r), id)
	if err != nil {
		s.writeError(w, notFound)
		return
	}
	ctx, cancel := s.sharedContext(r)
	defer cancel()
	msgs, err := s.runs.Messages(ctx, key)
	switch {
	case errors.Is(err, session.ErrNotFound):
		s.writeError(w, notFound)
		return
	case err != nil:
		s.writeError(w, clusterError(err))
		return
	}
	if msgs == nil {
		msgs = []json.RawMessage{}
	}
	s.writeJSON(w, http.StatusOK, struct {
		ID       string            `json:"id"`
		Messages []json.RawMessage `json:"messages"`
	}{id, msgs})
}
