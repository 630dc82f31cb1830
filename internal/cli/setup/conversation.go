package setup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/telemetry"
)

// Conversation is one open session of `agrun run` or `agrun chat`: the
// loop's cycle, continuing the session's history, and the locked session
// file it records every message, model request, decision and (Record)
// call in as it completes. Close it when done.
type Conversation struct {
	// ID names the session.
	ID string
	// Session is the locked session file.
	Session *session.Session
	// Cycle is the loop, its history the session's.
	Cycle *loop.Cycle
	// Schema: the final answer is checked JSON (run --schema).
	Schema bool
	// Fresh: a new session named by agrun (no id was given) that held no
	// message when it was opened; Replied: an assistant message was
	// recorded since. A fresh session that got no reply (a first request
	// that failed) is removed on Close, so that a failed first run
	// leaves no orphan session behind; a session the user named is kept.
	Fresh, Replied bool
	// Trace is the span of the turn under way, which the loop's
	// callbacks feed (nil: telemetry off, or no turn running).
	Trace atomic.Pointer[telemetry.Run]

	tel telemetry.RunInfo // what a turn's span says of the provider, the system prompt, the output type
}

// OpenConversation opens (or creates) session id of st ("": a new one,
// Fresh) and builds, from cfg's [llm], a cycle that continues its
// history and records to it; approver gives the loop.Approver of the
// session (nil: none). A non-empty schema is the JSON Schema the final
// answer must match. It returns the warnings of a session file that was
// damaged (the lines skipped). A bad id is session.ErrBadID, a bad
// schema registry.ErrInvalidSchema; a provider that cannot be made is a
// *ConfigError.
func OpenConversation(cfg *config.Config, st *session.Files, id string, approver func(id string) loop.Approver, schema json.RawMessage) (*Conversation, []string, error) {
	named := id != ""
	if !named {
		id = session.NewID()
	}
	sess, raw, warnings, err := st.Open(id)
	if err != nil {
		return nil, nil, err
	}
	history, err := session.Decode[loop.Message](raw)
	if err != nil {
		sess.Close()
		return nil, warnings, fmt.Errorf("session %s: %w", id, err)
	}
	// Only a session agrun named itself is removed when its first
	// request fails: one the user named is theirs to resume.
	cv := &Conversation{ID: id, Session: sess, Fresh: len(history) == 0 && !named}
	lc, err := LoopConfig(cfg)
	if err != nil {
		sess.Close()
		return nil, warnings, err
	}
	lc.History = history
	lc.OnMessage = func(m loop.Message) {
		if m.Role == loop.RoleAssistant {
			cv.Replied = true
		}
		sess.Record(m)
		cv.Trace.Load().Message(m)
	}
	// Each model request's model, usage, duration, retries and
	// finish_reason, beside the messages (agrun sessions shows tokens),
	// and as a span of the turn's trace.
	lc.OnRequest = func(r loop.RequestInfo) {
		sess.RecordRequest(r)
		cv.Trace.Load().LoopRequest(r)
	}
	// Each call runs under its execute_tool span, so that an MCP server's
	// tools/call span is its child.
	lc.ToolContext = func(ctx context.Context, id, name string) context.Context {
		return cv.Trace.Load().ToolContext(ctx, id, name)
	}
	// Approvals: who decided what, recorded.
	if approver != nil {
		lc.Approver = approver(id)
	}
	lc.OnDecision = func(r loop.DecisionRecord) { sess.RecordDecision(r) }
	lc.ResumePending = true // a run paused for approvals can be resumed
	if len(schema) > 0 {
		lc.ResponseSchema, cv.Schema = schema, true
	}
	cv.tel = telemetry.RunInfo{Provider: lc.Provider.Info(), System: lc.System, OutputType: "text"}
	if cv.Schema {
		cv.tel.OutputType = "json"
	}
	cyc, err := loop.New(lc)
	if err != nil {
		cv.Close()
		if errors.Is(err, registry.ErrInvalidSchema) {
			return nil, warnings, err
		}
		return nil, warnings, &ConfigError{fmt.Errorf("[llm]: %w", err)}
	}
	cv.Cycle = cyc
	return cv, warnings, nil
}

// Kept reports whether the session stays when the conversation is closed
// (see Fresh).
func (cv *Conversation) Kept() bool { return !cv.Fresh || cv.Replied }

// Close releases the session; a fresh one that got no reply is removed.
func (cv *Conversation) Close() {
	if !cv.Kept() {
		cv.Session.Remove()
		return
	}
	cv.Session.Close()
}

// RunInfo is what a turn's span says of itself: the session, the
// provider, the system prompt, the output type and, with telemetry on,
// the tools offered (reg) and the history the prompt continues.
func (cv *Conversation) RunInfo(tel *telemetry.Telemetry, reg *registry.Registry) telemetry.RunInfo {
	info := cv.tel
	info.Session = cv.ID
	if tel.Enabled() && reg != nil {
		info.Tools = reg.Definitions()
	}
	if tel.CapturesContent() {
		info.History = cv.Cycle.Messages()
	}
	return info
}
