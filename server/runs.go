package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/termsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/telemetry"
)

// RunRequest is the body of POST /v1/runs.
type RunRequest struct {
	// Prompt is the user's message. Required.
	Prompt string `json:"prompt"`
	// Session continues that session, or starts it under that id if it is
	// new; empty starts a new session with a fresh id.
	Session string `json:"session,omitempty"`
	// Schema, if set, is a JSON Schema (an object schema) the final
	// answer must match (loop.Config.ResponseSchema): the done event's
	// text is then the answer's JSON, and an answer that does not match
	// twice ends the run with kind invalid_output. A schema the registry's
	// checks refuse is a 400 before the run starts.
	Schema json.RawMessage `json:"schema,omitempty"`
	// ShowReasoning asks for the model's reasoning as reasoning_delta
	// events; without it they are left out of the stream (the reasoning
	// is still kept in the session, for the model).
	ShowReasoning bool `json:"show_reasoning,omitempty"`
}

// The events a run's stream adds to the loop's (text_delta, tool_started,
// tool_completed, turn_complete).
type (
	// startedEvent is the first event: the session the run appends to.
	startedEvent struct {
		Type     string   `json:"type"` // "started"
		Session  string   `json:"session"`
		Warnings []string `json:"warnings,omitempty"`
	}
	// doneEvent is the last event of a successful run.
	doneEvent struct {
		Type      string     `json:"type"` // "done"
		Session   string     `json:"session"`
		Text      string     `json:"text"`
		Truncated bool       `json:"truncated,omitempty"` // the answer ended with finish_reason "length"
		Usage     loop.Usage `json:"usage"`               // the run's tokens, summed over its requests
	}
	// errorEvent is the last event of a failed run.
	errorEvent struct {
		Type    string `json:"type"` // "error"
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Session string `json:"session,omitempty"` // the session the run appended to
	}
)

// run is POST /v1/runs: one prompt through the model loop, with every tool
// of the registry, answered as a Server-Sent Events stream. Each event is
// "event: <type>" and "data: <the JSON line of `agrun run --json`>".
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	if s.loopCfg == nil {
		s.writeError(w, errorf(http.StatusServiceUnavailable, KindUnavailable, "runs are not configured on this server"))
		return
	}
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
	// The run's span (telemetry on), a child of the client's trace
	// context; the loop's callbacks feed it the requests, the events its
	// tool calls.
	ctx, trace := s.tel.StartRun(s.traceContext(r), s.runInfo(tn, id, req.Schema))
	var runErr error
	defer func() { trace.Finish(runErr) }()
	// The run, for approvals (approvals.go): registered once its session
	// is locked (one run per session), its questions sent on its stream.
	var sw *eventWriter
	lr := &liveRun{id: id, started: time.Now(), send: func(typ string, v any) bool { return sw != nil && sw.send(typ, v) }}
	conv, warnings, err := s.openConversation(tn, id, req.Schema, trace, lr)
	if err != nil {
		runErr = err
		s.writeError(w, err)
		return
	}
	defer conv.sess.Close()
	defer tn.registerLive(lr)()
	tn.usage.run()

	sw = newEventWriter(w, s.limits.WriteTimeout)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	sw.send("started", startedEvent{Type: "started", Session: id, Warnings: warnings})
	stop := sw.keepAlive(keepAliveEvery)
	defer stop()

	var final strings.Builder
	var usage loop.Usage
	var lastReason string
	for ev, err := range conv.cycle.SubmitStreamWithTools(ctx, req.Prompt, tn.reg) {
		if err != nil {
			runErr = err
			break
		}
		trace.Event(ev)
		switch ev := ev.(type) {
		case *loop.ToolExecutionCompleted:
			// What the call did, for `agrun audit`, beside the messages;
			// the client's copy without the operator's directories.
			rec := session.CallOf(ev)
			rec.Tenant = tn.name // `agrun audit --tenant`
			conv.sess.RecordCall(rec)
			tn.usage.call(ev.ErrorKind != "", ev.Audit)
			if ev.Audit != nil {
				c := *ev
				c.Audit = clientAudit(ev.Audit)
				ev = &c
			}
			if !sw.send(ev.EventType(), ev) {
				runErr = errClientGone
				return
			}
			continue
		case *loop.TextDelta:
			final.WriteString(ev.Text)
		case *loop.Retry:
			final.Reset() // the reply starts over
		case *loop.TurnComplete:
			usage, lastReason = usage.Add(ev.Usage), ev.Reason
			if ev.Reason == "tool_calls" {
				final.Reset()
			}
		case *loop.StructuredOutput:
			final.Reset()
			final.Write(ev.Output) // the checked JSON, or nothing before a retry
		case *loop.ReasoningDelta:
			if !req.ShowReasoning {
				continue
			}
		}
		if !sw.send(ev.EventType(), ev) {
			runErr = errClientGone
			return // the client is gone: stopping the range cancels the run
		}
	}
	stop()
	if runErr == nil {
		runErr = conv.sess.Err()
	}
	if runErr != nil {
		kind := string(loop.KindOf(runErr))
		if kind == string(loop.KindOther) && conv.sess.Err() != nil {
			kind = string(registry.IO) // the session could not be written
		}
		sw.send("error", errorEvent{Type: "error", Kind: kind, Message: runErr.Error(), Session: id})
		return
	}
	sw.send("done", doneEvent{Type: "done", Session: id, Text: final.String(), Truncated: lastReason == "length", Usage: usage})
}

// decodeRunRequest decodes the body of POST /v1/runs and returns it with
// the run's session id (a fresh one when the body names none), checked
// before it reaches a span, a log or a file.
func decodeRunRequest(data []byte) (RunRequest, string, error) {
	var req RunRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, "", errorf(http.StatusBadRequest, KindBadRequest, `the body must be {"prompt": "...", "session": "optional id", "schema": {optional JSON Schema}, "show_reasoning": optional bool}: %v`, err)
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return req, "", errorf(http.StatusBadRequest, KindBadRequest, `"prompt" is required`)
	}
	id := req.Session
	if id == "" {
		id = session.NewID()
	}
	if !session.ValidID(id) {
		return req, "", errorf(http.StatusBadRequest, KindBadRequest, "%v", session.ErrBadID)
	}
	return req, id, nil
}

// runInfo is what a run's span says of itself: the session, the
// provider, the system prompt, the output type and, with telemetry on,
// the tools offered (the session's history comes with Resume, once it is
// open).
func (s *Server) runInfo(tn *tenant, id string, schema json.RawMessage) telemetry.RunInfo {
	info := telemetry.RunInfo{Session: id, Provider: s.loopCfg.Provider.Info(), System: s.loopCfg.System, OutputType: "text", Tenant: tn.name}
	if len(schema) > 0 || len(s.loopCfg.ResponseSchema) > 0 {
		info.OutputType = "json"
	}
	if s.tel.Enabled() && tn.reg != nil {
		info.Tools = tn.reg.Definitions()
	}
	return info
}

// errClientGone ends the span of a run whose client stopped reading.
var errClientGone = errors.New("the client went away")

// conversation is one open session and the cycle that records in it.
type conversation struct {
	sess  *session.Session
	cycle *loop.Cycle
}

// openConversation opens (or creates) tn's session id, locked, and builds
// a cycle that continues it and appends each new message as it completes.
func (s *Server) openConversation(tn *tenant, id string, schema json.RawMessage, trace *telemetry.Run, lr *liveRun) (*conversation, []string, error) {
	if !session.ValidID(id) {
		return nil, nil, errorf(http.StatusBadRequest, KindBadRequest, "%v", session.ErrBadID)
	}
	sess, raw, warnings, err := tn.sessions.Open(id)
	switch {
	case errors.Is(err, session.ErrLocked):
		return nil, nil, errorf(http.StatusConflict, KindSessionLocked, "session %q is in use by another run", id)
	case err != nil:
		return nil, nil, errorf(http.StatusInternalServerError, KindInternal, "%v", err)
	}
	history, err := session.Decode[loop.Message](raw)
	if err != nil {
		sess.Close()
		var me *session.MessageError
		errors.As(err, &me)
		return nil, nil, errorf(http.StatusConflict, KindInvalidSession, "session %q: message %d is unreadable: %v", id, me.Index, me.Err)
	}
	conv := &conversation{sess: sess}
	cfg := *s.loopCfg
	cfg.History = history
	trace.Resume(history) // the run's input continues the session
	cfg.OnMessage = func(m loop.Message) {
		sess.Record(m)
		trace.Message(m)
	}
	cfg.OnRequest = func(r loop.RequestInfo) {
		sess.RecordRequest(r) // usage, beside the messages
		trace.LoopRequest(r)
	}
	cfg.ToolContext = trace.ToolContext // an MCP tool's tools/call span is its call's child
	if len(schema) > 0 {
		cfg.ResponseSchema = schema
	}
	if cfg.Approver != nil && lr != nil {
		// Calls the policy cannot decide are asked of the run's client.
		cfg.Approver = &runApprover{inner: cfg.Approver, lr: lr, timeout: s.limits.ApprovalTimeout}
		cfg.OnDecision = func(d loop.DecisionRecord) { sess.RecordDecision(d) }
	}
	cyc, err := loop.New(cfg)
	if err != nil {
		sess.Close()
		if errors.Is(err, registry.ErrInvalidSchema) {
			return nil, nil, errorf(http.StatusBadRequest, KindBadRequest, "schema: %v", err)
		}
		if errors.Is(err, loop.ErrInvalidHistory) {
			return nil, nil, errorf(http.StatusConflict, KindInvalidSession, "session %q: %v", id, err)
		}
		return nil, nil, errorf(http.StatusServiceUnavailable, KindUnavailable, "the model loop is misconfigured: %v", err)
	}
	conv.cycle = cyc
	return conv, warnings, nil
}

// getSession is GET /v1/sessions/{id}: the stored messages of a session.
func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	msgs, warnings, err := s.tenantOf(r).sessions.Messages(id)
	switch {
	case errors.Is(err, session.ErrBadID):
		s.writeError(w, errorf(http.StatusBadRequest, KindBadRequest, "%v", session.ErrBadID))
		return
	case errors.Is(err, session.ErrNotFound):
		s.writeError(w, errorf(http.StatusNotFound, Kind(registry.NotFound), "no session %q", id))
		return
	case err != nil:
		s.writeError(w, errorf(http.StatusInternalServerError, KindInternal, "%v", err))
		return
	}
	if msgs == nil {
		msgs = []json.RawMessage{}
	}
	s.writeJSON(w, http.StatusOK, struct {
		ID       string            `json:"id"`
		Messages []json.RawMessage `json:"messages"`
		Warnings []string          `json:"warnings,omitempty"`
	}{id, msgs, warnings})
}

// eventWriter writes Server-Sent Events. Each write pushes the connection's
// write deadline writeTimeout ahead, so a stream may last longer than the
// server's WriteTimeout while a client that stops reading is still cut off.
// It is safe for concurrent use.
type eventWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration

	mu     sync.Mutex
	failed bool
}

func newEventWriter(w http.ResponseWriter, timeout time.Duration) *eventWriter {
	return &eventWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// send writes one event; false means the client is gone.
func (e *eventWriter) send(typ string, v any) bool {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(errorEvent{Type: "error", Kind: string(loop.KindOther), Message: err.Error()})
		typ = "error"
	}
	data = termsafe.JSON(data)
	return e.write("event: " + typ + "\ndata: " + string(data) + "\n\n")
}

func (e *eventWriter) write(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return false
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	if _, err := e.w.Write([]byte(s)); err != nil {
		e.failed = true
		return false
	}
	if err := e.rc.Flush(); err != nil {
		e.failed = true
		return false
	}
	return true
}

// keepAlive writes a comment line every d until stop is called, so that
// proxies keep the stream open while tools run.
func (e *eventWriter) keepAlive(d time.Duration) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				e.write(": keep-alive\n\n")
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}
