package session

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/agcore/agrun/loop"
)

// Replay turns a session's records back into the loop's events, as a run
// that wrote them would have emitted them: an assistant message is its
// text as one TextDelta, a TurnComplete (with the usage and
// finish_reason of the request record before it) and a
// ToolExecutionStarted per tool call; a tool message is a
// ToolExecutionCompleted (with the duration, error kind and audit of its
// call record). A process that did not run the loop itself — one
// following a run on a cluster from the records its workers append —
// shows the run with it as the loop's own events are shown. Records are
// fed in order; a record that does not decode, or a decision record, adds
// no event. The zero Replay is ready to use; it is not safe for
// concurrent use.
type Replay struct {
	calls  map[string]Call // call records by call id
	names  map[string]string
	usage  loop.Usage // the last request record's, for the next turn_complete
	finish string
}

// Feed returns the events record b stands for (none for most records).
func (r *Replay) Feed(b json.RawMessage) []loop.Event {
	var rec Record
	if json.Unmarshal(b, &rec) != nil {
		return nil
	}
	switch {
	case len(rec.Request) > 0:
		var ri struct {
			Usage        loop.Usage `json:"usage"`
			FinishReason string     `json:"finish_reason"`
		}
		json.Unmarshal(rec.Request, &ri)
		r.usage, r.finish = ri.Usage, ri.FinishReason
	case len(rec.Call) > 0:
		if c, ok := rec.DecodeCall(); ok {
			if r.calls == nil {
				r.calls = map[string]Call{}
			}
			r.calls[c.ID] = c
		}
	case len(rec.Message) > 0:
		var m loop.Message
		if json.Unmarshal(rec.Message, &m) == nil {
			return r.message(m)
		}
	}
	return nil
}

func (r *Replay) message(m loop.Message) []loop.Event {
	var out []loop.Event
	switch m.Role {
	case loop.RoleAssistant:
		if m.Content != "" {
			out = append(out, &loop.TextDelta{Text: m.Content})
		}
		reason := "stop"
		if r.finish == "length" {
			reason = "length"
		}
		if len(m.ToolCalls) > 0 {
			reason = "tool_calls"
		}
		out = append(out, &loop.TurnComplete{Reason: reason, Usage: r.usage})
		r.usage, r.finish = loop.Usage{}, ""
		for _, tc := range m.ToolCalls {
			if r.names == nil {
				r.names = map[string]string{}
			}
			r.names[tc.ID] = tc.Name
			in := json.RawMessage(tc.Arguments)
			if !json.Valid(in) {
				in, _ = json.Marshal(tc.Arguments)
			}
			out = append(out, &loop.ToolExecutionStarted{ID: tc.ID, Name: tc.Name, Input: in})
		}
	case loop.RoleTool:
		c := r.calls[m.ToolCallID]
		ev := &loop.ToolExecutionCompleted{ID: m.ToolCallID, Name: m.Name, Duration: time.Duration(c.DurationMS) * time.Millisecond,
			ErrorKind: c.ErrorKind, IsError: c.ErrorKind != "", Audit: c.Audit}
		if ev.Name == "" {
			ev.Name = r.names[m.ToolCallID]
		}
		content := m.Content
		if m.FullContent != "" {
			content = m.FullContent
		}
		switch {
		case ev.IsError:
			ev.Output, _ = json.Marshal(strings.TrimPrefix(content, "error ("+string(c.ErrorKind)+"): "))
		case json.Valid([]byte(content)):
			ev.Output = json.RawMessage(content)
		default:
			ev.Output, _ = json.Marshal(content)
		}
		delete(r.calls, m.ToolCallID)
		delete(r.names, m.ToolCallID)
		out = append(out, ev)
	}
	return out
}
