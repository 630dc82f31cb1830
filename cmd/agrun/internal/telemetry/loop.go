package telemetry

import (
	"encoding/json"
	"strings"

	"github.com/agcore/agrun/loop"
)

// Feeding a run from the model loop, as `agrun run`, `agrun chat` and
// agrun serve's runs do: the loop's events (Event), its history as it
// grows (Message, from Config.OnMessage), its requests (LoopRequest, from
// Config.OnRequest) and how it ended (Finish). The loop itself knows
// nothing of OpenTelemetry.

// Event records what ev says of the run: a tool call's start and end (its
// span, with the audit), and, with CaptureContent, the reply text being
// streamed (the output of the request that ends next).
func (r *Run) Event(ev loop.Event) {
	if r == nil {
		return
	}
	switch ev := ev.(type) {
	case *loop.ToolExecutionStarted:
		r.ToolStarted(ev.ID, ev.Name, ev.Input)
	case *loop.ToolExecutionCompleted:
		c := Tool{ID: ev.ID, Name: ev.Name, Duration: ev.Duration, ErrorKind: string(ev.ErrorKind), Audit: ev.Audit}
		if r.t.cfg.CaptureContent {
			c.Output = ev.Output
		}
		r.ToolCompleted(c)
	case *loop.TextDelta:
		if r.t.cfg.CaptureContent {
			r.mu.Lock()
			if r.text.Len() < MaxContent {
				r.text.WriteString(ev.Text)
			}
			r.mu.Unlock()
		}
	case *loop.Retry:
		r.mu.Lock()
		r.text.Reset() // the reply starts over
		r.mu.Unlock()
	}
}

// Message notes, with CaptureContent, a message added to the history: the
// prompt and the tool results since the last request are the next
// request's input (the assistant's own messages are its output).
func (r *Run) Message(m loop.Message) {
	if r == nil || !r.t.cfg.CaptureContent || m.Role == loop.RoleAssistant {
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.input {
		n += len(s)
	}
	if n < MaxContent {
		r.input = append(r.input, string(b))
	}
}

// LoopRequest records a model request the loop reported
// (loop.Config.OnRequest): its span ends when the request ended, and
// starts its Duration earlier. A failed request's error.type is its loop
// kind ("_OTHER" if it has none).
func (r *Run) LoopRequest(info loop.RequestInfo) {
	if r == nil {
		return
	}
	q := Request{Model: info.Model, Duration: info.Duration, InputTokens: info.Usage.PromptTokens,
		OutputTokens: info.Usage.CompletionTokens, FinishReason: info.FinishReason, Retries: info.Retries}
	if info.Error != "" {
		q.ErrorKind = string(info.ErrorKind)
		if q.ErrorKind == "" {
			q.ErrorKind = "_OTHER"
		}
	}
	if r.t.cfg.CaptureContent {
		r.mu.Lock()
		q.Prompt = "[" + strings.Join(r.input, ",") + "]"
		q.Completion = r.text.String()
		r.input = nil
		r.text.Reset()
		r.mu.Unlock()
	}
	r.Request(q)
}

// Finish ends the run's span: err nil is success, else its loop kind
// (loop.KindOf) is the span's error.type.
func (r *Run) Finish(err error) {
	if r == nil {
		return
	}
	kind := ""
	if err != nil {
		kind = string(loop.KindOf(err))
	}
	r.End(kind, err)
}
