package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/server"
)

// scriptedRuns is a server.Runs whose answers the test sets, and which
// records the session names it is given. (The real one, over the
// cluster, is driven end to end by cmd/agrun's TestServeClusterRuns.)
type scriptedRuns struct {
	mu       sync.Mutex
	sessions []string
	events   []loop.Event
	end      error // the run's last error
	startErr error
	decide   error
}

func (r *scriptedRuns) saw(s string) {
	r.mu.Lock()
	r.sessions = append(r.sessions, s)
	r.mu.Unlock()
}

// set changes the answers under the lock (the server reads them in its
// handlers' goroutines).
func (r *scriptedRuns) set(f func(r *scriptedRuns)) {
	r.mu.Lock()
	f(r)
	r.mu.Unlock()
}

func (r *scriptedRuns) Start(_ context.Context, session, _ string, _ json.RawMessage) (iter.Seq2[loop.Event, error], error) {
	r.saw(session)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.startErr != nil {
		return nil, r.startErr
	}
	events, end := r.events, r.end
	return func(yield func(loop.Event, error) bool) {
		for _, ev := range events {
			if !yield(ev, nil) {
				return
			}
		}
		if end != nil {
			yield(nil, end)
		}
	}, nil
}

func (r *scriptedRuns) Run(_ context.Context, session string) (server.RunInfo, error) {
	r.saw(session)
	return server.RunInfo{}, server.ErrNoRun
}

func (r *scriptedRuns) Decide(_ context.Context, session, _ string, _ loop.Decision) error {
	r.saw(session)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decide
}

func (r *scriptedRuns) Messages(_ context.Context, session string) ([]json.RawMessage, error) {
	r.saw(session)
	return nil, errors.New("db down\x1b[31m")
}

// TestClusterRunsAnswers: with Options.Runs the run endpoints answer
// from it, exactly: the session names it is given are the tenant's
// ("default.ID"); a run's events are streamed with a waiting call as
// approval_required on the client's id and the run's own kind at its
// end; a busy session is 409 session_locked; a decision racing another
// is 409 conflict, one of no call 404; a failing Runs is 502 internal
// with its message cleaned.
func TestClusterRunsAnswers(t *testing.T) {
	runs := &scriptedRuns{
		events: []loop.Event{
			&loop.TurnComplete{Reason: "tool_calls"},
			&loop.ToolExecutionStarted{ID: "call_w", Name: "write_note", Input: json.RawMessage(`{}`)},
			&server.PendingCall{ApprovalRequest: loop.ApprovalRequest{CallID: "call_w", Tool: "write_note", Arguments: `{"x":1}`}, Asked: time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)},
			&loop.TextDelta{Text: "partial"},
		},
		end: &server.RunError{Kind: "max_turns", Message: "the run used its 5 turns"},
	}
	rs, _ := replicas(t, 1, newMemShared(), server.Options{Runs: runs})
	a := rs[0]

	r := a.request("POST", "/v1/runs", "application/json", []byte(`{"prompt":"hi","session":"s1"}`))
	body := string(r.body)
	if r.status != http.StatusOK ||
		!strings.Contains(body, "event: approval_required\ndata: {\"type\":\"approval_required\",\"session\":\"s1\",\"call_id\":\"call_w\",\"tool\":\"write_note\",\"input\":{\"x\":1},") ||
		!strings.Contains(body, `"asked":"2026-12-07T03:00:00Z"`) ||
		!strings.Contains(body, "event: error\ndata: {\"type\":\"error\",\"kind\":\"max_turns\",\"message\":\"the run used its 5 turns\",\"session\":\"s1\"}") {
		t.Errorf("the run's stream: %d %s", r.status, body)
	}

	runs.set(func(r *scriptedRuns) { r.startErr = fmt.Errorf("%w: elsewhere", server.ErrRunBusy) })
	if r := a.request("POST", "/v1/runs", "application/json", []byte(`{"prompt":"hi","session":"s1"}`)); r.status != http.StatusConflict || r.errorKind(t) != server.KindSessionLocked ||
		!strings.Contains(string(r.body), `session \"s1\" is in use by another run`) {
		t.Errorf("a busy session: %d %s", r.status, r.body)
	}
	decide := func() response {
		return a.request("POST", "/v1/runs/s1/approvals", "application/json", []byte(`{"call_id":"call_w","answer":"once"}`))
	}
	runs.set(func(r *scriptedRuns) { r.decide = fmt.Errorf("%w: %w", server.ErrNotPending, errors.New("x")) })
	if r := decide(); r.status != http.StatusNotFound || !strings.Contains(string(r.body), `run \"s1\" has no call \"call_w\" waiting for a decision`) {
		t.Errorf("a decision of no waiting call: %d %s", r.status, r.body)
	}
	runs.set(func(r *scriptedRuns) { r.decide = server.ErrDecisionConflict })
	if r := decide(); r.status != http.StatusConflict || r.errorKind(t) != server.KindConflict {
		t.Errorf("a decision racing another: %d %s", r.status, r.body)
	}
	runs.set(func(r *scriptedRuns) { r.decide = nil })
	if r := decide(); r.status != http.StatusOK || string(r.body) != `{"session":"s1","call_id":"call_w","answer":"once"}`+"\n" {
		t.Errorf("a decision taken: %d %s", r.status, r.body)
	}
	if r := a.request("GET", "/v1/sessions/s1", "", nil); r.status != http.StatusBadGateway || r.errorKind(t) != server.KindInternal || strings.Contains(string(r.body), "\x1b") {
		t.Errorf("a failing Runs: %d %q", r.status, r.body)
	}
	if r := a.request("GET", "/v1/runs/"+strings.Repeat("x", 60), "", nil); r.status != http.StatusNotFound {
		t.Errorf("a run id no run can have: %d %s", r.status, r.body)
	}
	runs.mu.Lock()
	defer runs.mu.Unlock()
	for _, s := range runs.sessions {
		if s != "default.s1" {
			t.Errorf("Runs was given session %q, want default.s1", s)
		}
	}
	if len(runs.sessions) != 6 {
		t.Errorf("Runs was asked %d times: %v", len(runs.sessions), runs.sessions)
	}
}
