package telemetry

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Feeding a run from the model loop, as `agrun run`, `agrun chat` and
// agrun serve's runs do: the loop's events (Event), its history as it
// grows (Message, from Config.OnMessage), its requests (LoopRequest, from
// Config.OnRequest) and how it ended (Finish). The loop itself knows
// nothing of OpenTelemetry.

// Event records what ev says of the run: a tool call's start and end (its
// span, with the audit), a retry (an event of the request's span), a
// schema re-ask (an event of the run's span) and, with CaptureContent,
// the reply and reasoning being streamed (the output of the request that
// ends next).
func (r *Run) Event(ev loop.Event) {
	if r == nil {
		return
	}
	switch ev := ev.(type) {
	case *loop.ToolExecutionStarted:
		r.flush()
		r.ToolStarted(ev.ID, ev.Name, ev.Input)
	case *loop.ToolExecutionCompleted:
		r.flush()
		c := Tool{ID: ev.ID, Name: ev.Name, Duration: ev.Duration, ErrorKind: string(ev.ErrorKind), Audit: ev.Audit}
		if r.t.cfg.CaptureContent {
			c.Output = ev.Output
		}
		r.ToolCompleted(c)
	case *loop.TextDelta:
		if r.t.cfg.CaptureContent {
			r.mu.Lock()
			if r.text.Len() < MaxPartContent {
				r.text.WriteString(ev.Text)
			}
			r.mu.Unlock()
		}
	case *loop.ReasoningDelta:
		if r.t.cfg.CaptureContent {
			r.mu.Lock()
			if r.reasoning.Len() < MaxPartContent {
				r.reasoning.WriteString(ev.Text)
			}
			r.mu.Unlock()
		}
	case *loop.Retry:
		r.mu.Lock()
		if len(r.retries) < maxRetryEvents {
			r.retries = append(r.retries, retryEvent{at: time.Now(), ev: *ev})
		}
		r.text.Reset() // the reply starts over
		r.reasoning.Reset()
		r.mu.Unlock()
	case *loop.TurnComplete:
		r.flush() // the reply's message came before it
	case *loop.StructuredOutput:
		r.flush()
		if ev.Retry {
			// The answer did not match the schema: the model is asked
			// again (a correction appended). Why is content (it may quote
			// the answer): recorded with CaptureContent only.
			var attrs []attribute.KeyValue
			if r.t.cfg.CaptureContent {
				attrs = append(attrs, attribute.String("agrun.schema.error", textsafe.Clean(ev.Error, 300)))
			}
			r.span.AddEvent("agrun.schema_retry", trace.WithAttributes(attrs...))
		}
	}
}

// maxRetryEvents bounds the Retry events one request's span gets (the
// loop's own retries are bounded by Config.MaxRetries, plus a trim and a
// schema fallback).
const maxRetryEvents = 32

// Message notes, with CaptureContent, a message added to the history: the
// conversation is the input of the run's next request, and an assistant
// message is the output of the request that produced it.
func (r *Run) Message(m loop.Message) {
	if r == nil || !r.t.cfg.CaptureContent {
		return
	}
	r.mu.Lock()
	r.msgs = compactMessages(r.msgs, []loop.Message{m})
	var done *chatSpan
	if m.Role == loop.RoleAssistant && r.pending != nil {
		done, r.pending = r.pending, nil
	}
	r.mu.Unlock()
	r.chat(done, &m)
}

// LoopRequest records a model request the loop reported
// (loop.Config.OnRequest): its span ends when the request ended, and
// starts its Duration earlier, with the Retry events since the last
// request as its events. A failed request's error.type is its loop kind
// ("_OTHER" if it has none). With CaptureContent, the span of a request
// that succeeded is made when its reply's message arrives (its output).
func (r *Run) LoopRequest(info loop.RequestInfo) {
	if r == nil {
		return
	}
	q := &chatSpan{info: info}
	r.mu.Lock()
	prev := r.pending
	r.pending = nil
	q.retries, r.retries = r.retries, nil
	if info.Error == "" && usageReported(info.Usage) {
		r.usage, r.reported = r.usage.Add(info.Usage), true
	}
	if r.t.cfg.CaptureContent {
		q.input, q.dropped = inputMessages(r.msgs, MaxContent)
		q.text, q.reasoning = r.text.String(), r.reasoning.String()
		r.text.Reset()
		r.reasoning.Reset()
		if info.Error == "" {
			r.pending, q = q, nil
		}
	}
	r.mu.Unlock()
	r.chat(prev, nil)
	r.chat(q, nil)
}

// flush makes the span of a request still waiting for its reply's
// message: it has come (it precedes the TurnComplete and the tool events)
// or never will.
func (r *Run) flush() {
	r.mu.Lock()
	q := r.pending
	r.pending = nil
	r.mu.Unlock()
	r.chat(q, nil)
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

// The captured content, in the GenAI conventions' JSON: input and output
// messages as {"role", "parts": [...]} (output messages with their
// "finish_reason"), parts "text" {content}, "tool_call" {id, name,
// arguments}, "tool_call_response" {id, response} and "reasoning"
// {content}; system instructions as text parts; tool definitions as
// {"type": "function", name, description, parameters}.

type chatMessage struct {
	Role         string `json:"role"`
	Parts        []part `json:"parts"`
	FinishReason string `json:"finish_reason,omitempty"`
}

type part struct {
	Type      string `json:"type"`
	Content   string `json:"content,omitempty"` // text, reasoning (never empty: empty parts are left out)
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments any    `json:"arguments,omitempty"` // tool_call: the arguments' JSON, or their text
	Response  any    `json:"response,omitempty"`  // tool_call_response: the result's JSON, or its text
}

// compactMessages appends to dst what the captured input needs of msgs:
// no full tool results (the model saw Content) and no reasoning (it goes
// back only to the provider that wrote it, mostly as opaque parts).
func compactMessages(dst, msgs []loop.Message) []loop.Message {
	for _, m := range msgs {
		dst = append(dst, loop.Message{Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Interrupted: m.Interrupted})
	}
	return dst
}

// interruptedNote is what the loop appends to an interrupted reply when
// it sends it back (loop.Message.Interrupted).
const interruptedNote = " [interrupted by the user]"

// convert is m in the conventions' shape, each text cut to limit bytes.
func convert(m loop.Message, limit int) chatMessage {
	c := chatMessage{Role: string(m.Role), Parts: []part{}}
	switch m.Role {
	case loop.RoleTool:
		c.Parts = append(c.Parts, part{Type: "tool_call_response", ID: word(m.ToolCallID), Response: value(m.Content, limit)})
		return c
	case loop.RoleSystem, loop.RoleUser, loop.RoleAssistant:
	default:
		c.Role = word(c.Role)
	}
	text := m.Content
	if m.Interrupted {
		text = strings.TrimRight(text, " \t\r\n") + interruptedNote
	}
	if text != "" {
		c.Parts = append(c.Parts, part{Type: "text", Content: textsafe.Clean(text, limit)})
	}
	for _, call := range m.ToolCalls {
		c.Parts = append(c.Parts, toolCallPart(call, limit))
	}
	return c
}

func toolCallPart(c loop.ToolCall, limit int) part {
	return part{Type: "tool_call", ID: word(c.ID), Name: word(c.Name), Arguments: value(c.Arguments, limit)}
}

// value is s as a part's value: its JSON when s is a JSON value of at
// most limit bytes (cleaned), else its text cleaned and cut to limit.
func value(s string, limit int) any {
	if len(s) <= limit && json.Valid([]byte(s)) {
		if b, err := textsafe.CleanJSON([]byte(s)); err == nil && len(b) <= limit {
			return json.RawMessage(b)
		}
	}
	return textsafe.Clean(s, limit)
}

// encode is v as compact JSON, HTML characters as they are.
func encode(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte("null")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// fit encodes the message m makes with limit-long texts, in at most max
// bytes: with shorter texts if need be, then with its last parts
// replaced by a note. ok is false if even that does not fit.
func fit(m func(limit int) chatMessage, max int) (b []byte, ok bool) {
	for limit := MaxPartContent; limit >= 64; limit /= 2 {
		if b = encode(m(limit)); len(b) <= max {
			return b, true
		}
	}
	c := m(64)
	for n := len(c.Parts) - 1; n >= 0; n-- {
		short := c
		short.Parts = append(append([]part{}, c.Parts[:n]...), part{Type: "text", Content: "[agrun: " + strconv.Itoa(len(c.Parts)-n) + " more parts not recorded]"})
		if b = encode(short); len(b) <= max {
			return b, true
		}
	}
	return nil, false
}

// inputMessages is gen_ai.input.messages for the conversation msgs: the
// newest messages that fit in max bytes, in order, and how many older
// ones were left out. The newest message is cut to fit if need be; an
// older one that does not fit whole ends the input.
func inputMessages(msgs []loop.Message, max int) (string, int) {
	var enc [][]byte // newest first
	size := 2        // the brackets
	i := len(msgs) - 1
	for ; i >= 0; i-- {
		m := msgs[i]
		var b []byte
		if len(enc) == 0 {
			var ok bool
			if b, ok = fit(func(limit int) chatMessage { return convert(m, limit) }, max-size); !ok {
				break
			}
		} else if b = encode(convert(m, MaxPartContent)); size+len(b)+1 > max {
			break
		}
		if len(enc) > 0 {
			size++ // the comma
		}
		enc = append(enc, b)
		size += len(b)
	}
	var out bytes.Buffer
	out.Grow(size)
	out.WriteByte('[')
	for j := len(enc) - 1; j >= 0; j-- {
		out.Write(enc[j])
		if j > 0 {
			out.WriteByte(',')
		}
	}
	out.WriteByte(']')
	return out.String(), i + 1
}

// outputMessages is gen_ai.output.messages of a request that succeeded:
// the reply as one assistant message, its reasoning (as streamed, else as
// kept with the message), its text and tool calls, and its finish reason.
func outputMessages(q *chatSpan, reply *loop.Message) string {
	text, reasoning := q.text, q.reasoning
	var calls []loop.ToolCall
	if reply != nil {
		text, calls = reply.Content, reply.ToolCalls
		if reasoning == "" && reply.Reasoning != nil {
			reasoning = reply.Reasoning.Text
		}
	}
	finish := finishReason(q.info.FinishReason, len(calls) > 0)
	msg := func(limit int) chatMessage {
		c := chatMessage{Role: string(loop.RoleAssistant), Parts: []part{}, FinishReason: finish}
		if reasoning != "" {
			c.Parts = append(c.Parts, part{Type: "reasoning", Content: textsafe.Clean(reasoning, limit)})
		}
		if text != "" {
			c.Parts = append(c.Parts, part{Type: "text", Content: textsafe.Clean(text, limit)})
		}
		for _, call := range calls {
			c.Parts = append(c.Parts, toolCallPart(call, limit))
		}
		return c
	}
	b, ok := fit(msg, MaxContent-2)
	if !ok {
		b = encode(chatMessage{Role: string(loop.RoleAssistant), Parts: []part{}, FinishReason: finish})
	}
	return "[" + string(b) + "]"
}

// finishReason is an output message's finish_reason: the conventions'
// "stop", "length", "content_filter", "tool_call", "error", or the
// provider's own word.
func finishReason(reason string, calls bool) string {
	switch {
	case calls || reason == "tool_calls" || reason == "tool_call":
		return "tool_call"
	case reason == "":
		return "stop"
	}
	return word(reason)
}

// systemInstructions is gen_ai.system_instructions for the system
// prompt: one text part ("" for none).
func systemInstructions(system string) string {
	if system == "" {
		return ""
	}
	limit := MaxContent - 64
	for ; limit > 0; limit -= limit/4 + 1 {
		if b := encode([]part{{Type: "text", Content: textsafe.Clean(system, limit)}}); len(b) <= MaxContent {
			return string(b)
		}
	}
	return ""
}

type toolDefinition struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// toolDefinitions is gen_ai.tool.definitions for defs ("" for none): with
// their descriptions and parameters while they fit in MaxContent, then
// without parameters, then without descriptions, then as many tools as
// fit.
func toolDefinitions(defs []registry.Definition) string {
	if len(defs) == 0 {
		return ""
	}
	for step := 0; step < 3; step++ {
		out := make([]toolDefinition, 0, len(defs))
		for _, d := range defs {
			td := toolDefinition{Type: "function", Name: word(d.Name)}
			if step < 2 {
				td.Description = textsafe.Clean(d.Description, 1024)
			}
			if step < 1 && len(d.Parameters) > 0 {
				if p, err := textsafe.CleanJSON(d.Parameters); err == nil {
					td.Parameters = p
				}
			}
			out = append(out, td)
		}
		if step < 2 {
			if b := encode(out); len(b) <= MaxContent {
				return string(b)
			}
			continue
		}
		for n := len(out); n > 0; n-- {
			if b := encode(out[:n]); len(b) <= MaxContent {
				return string(b)
			}
		}
	}
	return ""
}

// jsonValue is a tool call's arguments or result as a content attribute:
// the JSON itself when s is a JSON value of at most max bytes (cleaned),
// else s's text as a JSON string, cleaned and cut to fit max.
func jsonValue(s string, max int) string {
	if v, ok := value(s, max).(json.RawMessage); ok {
		return string(v)
	}
	for limit := max - 2; limit > 0; limit -= limit/4 + 1 {
		if b := encode(textsafe.Clean(s, limit)); len(b) <= max {
			return string(b)
		}
	}
	return `""`
}
