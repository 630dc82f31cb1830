package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// repeatNote is appended to the tool message of a call made RepeatLimit
// turns in a row.
var repeatNote = "\n\n[note from the tool runner: you have made this exact call (same tool, same arguments) in " +
	strconv.Itoa(RepeatLimit) + " turns in a row and its result will not change. Use the result you have or try something different; repeating it once more ends the run.]"

// runTools answers the calls of one reply: checks for repeats, runs the
// runnable calls in parallel through the registry, appends one tool
// message per call in call order, and emits the events.
func (r *runState) runTools(ctx context.Context, calls []ToolCall) error {
	b := r.newBatch(calls)
	stop := b.repeated()
	prior := r.calls
	r.calls += len(calls)
	toRun, runIdx, local := r.runnable(b, stop, prior)
	toRun, runIdx, ask := r.needsApproval(ctx, b, toRun, runIdx)
	if !r.started(calls, local, runIdx) {
		return errStopped
	}
	var stopped bool
	if len(ask) == 0 {
		stopped = !r.invoke(ctx, b, toRun, runIdx)
	} else {
		stopped = !r.invokeAsking(ctx, b, toRun, runIdx, ask)
	}
	for i, c := range calls {
		if b.results[i] == nil {
			continue // waits for a decision (ErrApprovalPending)
		}
		var full string
		if b.full != nil {
			full = b.full[i]
		}
		r.answer(c, b.contents[i], full)
	}
	if stopped {
		return errStopped
	}
	for i, ev := range b.results { // the calls that were not run
		if ev != nil && !b.emitted[i] && !r.emit(ev) {
			return errStopped
		}
	}
	if stop != nil {
		return stop
	}
	if len(r.paused) > 0 {
		return r.pausedError()
	}
	if limit := r.c.cfg.MaxToolCalls; limit > 0 && r.calls > limit {
		return &BudgetError{Budget: "tool_calls", Limit: int64(limit), Used: int64(r.calls)}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("run cancelled during tool calls: %w", err)
	}
	return nil
}

// toolBatch is the calls of one reply and what answers them: each call's
// event, tool message (and the whole result when the message holds it
// cut), and whether its event was emitted.
type toolBatch struct {
	calls    []ToolCall
	sigs     []string       // each call's signature (tool and arguments)
	counts   map[string]int // turns in a row each signature was called
	cycle    *Cycle         // for each call's cap (Cycle.toolLimit)
	results  []*ToolExecutionCompleted
	contents []string
	full     []string // nil until a result is cut
	emitted  []bool
}

// limit is the cap of call i's tool message.
func (b *toolBatch) limit(i int) int { return b.cycle.toolLimit(b.calls[i].Name) }

func (r *runState) newBatch(calls []ToolCall) *toolBatch {
	sigs, counts := r.countRepeats(calls)
	return &toolBatch{
		calls:    calls,
		sigs:     sigs,
		counts:   counts,
		cycle:    r.c,
		results:  make([]*ToolExecutionCompleted, len(calls)),
		contents: make([]string, len(calls)),
		emitted:  make([]bool, len(calls)),
	}
}

// fail answers call i with an error of the kind.
func (b *toolBatch) fail(i int, kind registry.Kind, msg string) {
	prefix := errorContent(string(kind), "")
	msg = textsafe.Clean(msg, max(b.limit(i)-len(prefix), 0)) // no cap if limit is 0
	out, _ := json.Marshal(msg)
	b.results[i] = &ToolExecutionCompleted{ID: b.calls[i].ID, Name: b.calls[i].Name, Input: json.RawMessage(b.calls[i].Arguments), Output: out, IsError: true, ErrorKind: kind}
	b.contents[i] = prefix + msg
}

// repeated returns the error that ends the run if a call was made more
// than RepeatLimit turns in a row, else nil.
func (b *toolBatch) repeated() error {
	for i, c := range b.calls {
		if n := b.counts[b.sigs[i]]; n > RepeatLimit {
			return &RepeatedCallError{Tool: c.Name, Arguments: c.Arguments, Turns: n}
		}
	}
	return nil
}

// runnable answers the calls that will not run (the run stops, there are
// no tools, too many calls in the reply, the run's budget of calls is
// spent: prior calls were made before this reply; the built-in page tool's
// calls count too) and the calls of the built-in page tool (local: their
// indices), and returns the others, with their indices in the batch.
func (r *runState) runnable(b *toolBatch, stop error, prior int) (toRun []registry.Call, runIdx, local []int) {
	for i, c := range b.calls {
		switch {
		case stop != nil:
			why := "the run was stopped because a call (same tool, same arguments) was repeated " +
				strconv.Itoa(RepeatLimit+1) + " turns in a row"
			if b.counts[b.sigs[i]] > RepeatLimit {
				why = "this call (same tool, same arguments) was made " + strconv.Itoa(b.counts[b.sigs[i]]) +
					" turns in a row; the run was stopped"
			}
			b.fail(i, registry.Cancelled, "not run: "+why)
		case r.reg == nil:
			b.fail(i, registry.NotFound, fmt.Sprintf("no tool named %q: no tools are available", c.Name))
		case i >= r.c.cfg.MaxToolCallsPerTurn:
			b.fail(i, registry.Other, fmt.Sprintf("not run: more than %d tool calls in one reply; make at most %d at once",
				r.c.cfg.MaxToolCallsPerTurn, r.c.cfg.MaxToolCallsPerTurn))
		case r.c.cfg.MaxToolCalls > 0 && prior+i >= r.c.cfg.MaxToolCalls:
			b.fail(i, KindMaxToolCalls, fmt.Sprintf("not run: the run's budget of %d tool calls is spent; the run stops here", r.c.cfg.MaxToolCalls))
		case c.Name == PageToolName:
			start := time.Now()
			out, kind, msg := r.c.page(c.Arguments, b.limit(i))
			if kind != "" {
				b.fail(i, kind, msg)
			} else {
				b.done(i, registry.Invocation{Tool: c.Name, Output: out})
			}
			b.results[i].Duration = time.Since(start)
			local = append(local, i)
		default:
			toRun = append(toRun, registry.Call{ID: c.ID, Name: c.Name, Args: json.RawMessage(c.Arguments)})
			runIdx = append(runIdx, i)
		}
	}
	return toRun, runIdx, local
}

// invoke runs the runnable calls in parallel and emits each call's ToolExecutionCompleted as soon as it
// finishes (the tool messages are appended afterwards, in call order). If
// the consumer stops, the calls still running are cancelled and answered,
// and invoke returns false.
func (r *runState) invoke(ctx context.Context, b *toolBatch, toRun []registry.Call, runIdx []int) bool {
	if len(toRun) == 0 {
		return true
	}
	stopped := false
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.invokeEach(tctx, toRun, func(k int, inv registry.Invocation) {
		i := runIdx[k]
		b.done(i, inv)
		if !stopped {
			b.emitted[i] = true
			if !r.emit(b.results[i]) {
				stopped = true
				cancel()
			}
		}
	})
	return !stopped
}

// started emits ToolExecutionStarted for the calls at the indices, in
// order; false if the consumer stopped.
func (r *runState) started(calls []ToolCall, idx ...[]int) bool {
	for _, is := range idx {
		for _, i := range is {
			c := calls[i]
			if !r.emit(&ToolExecutionStarted{ID: c.ID, Name: c.Name, Input: json.RawMessage(c.Arguments)}) {
				return false
			}
		}
	}
	return true
}

// invokeAsking is invoke when some calls (ask, by batch index) need a
// decision: the others start at once, in the background, while the
// Approver is asked about these in call order; the approved ones then
// start too. Completions are emitted as they come once the questions are
// answered (events come from this goroutine only). Like invoke it returns
// false if the consumer stopped.
func (r *runState) invokeAsking(ctx context.Context, b *toolBatch, now []registry.Call, nowIdx []int, ask map[int]ApprovalRequest) bool {
	type result struct {
		i   int
		inv registry.Invocation
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, len(now)+len(ask))
	start := func(calls []registry.Call, idx []int) {
		if len(calls) == 0 {
			return
		}
		go r.invokeEach(tctx, calls, func(k int, inv registry.Invocation) { results <- result{idx[k], inv} })
	}
	start(now, nowIdx)
	order := make([]int, 0, len(ask))
	for i := range ask {
		order = append(order, i)
	}
	slices.Sort(order)
	later, laterIdx := r.decide(ctx, b, order, ask)
	stopped := !r.started(b.calls, laterIdx)
	if stopped {
		cancel()
	}
	start(later, laterIdx)
	for range len(now) + len(later) {
		res := <-results
		b.done(res.i, res.inv)
		if !stopped {
			b.emitted[res.i] = true
			if !r.emit(b.results[res.i]) {
				stopped = true
				cancel()
			}
		}
	}
	return !stopped
}

// done answers call i with what its invocation returned.
func (b *toolBatch) done(i int, inv registry.Invocation) {
	c := b.calls[i]
	if inv.Err != nil {
		kind := registry.KindOf(inv.Err)
		msg := errorMessage(inv.Err)
		if kind == registry.InvalidArguments && !json.Valid([]byte(c.Arguments)) {
			msg += "; the arguments were: " + textsafe.Truncate(c.Arguments, 200)
		}
		b.fail(i, kind, msg)
		b.results[i].Duration = inv.Duration
		b.results[i].Audit = inv.Audit
	} else {
		out := cleanOutput(inv.Output)
		b.results[i] = &ToolExecutionCompleted{ID: c.ID, Name: c.Name, Input: json.RawMessage(c.Arguments), Output: out, Duration: inv.Duration, Audit: inv.Audit}
		var cut bool
		if b.contents[i], cut = boundOutput(out, b.limit(i), c.ID); cut {
			if b.full == nil {
				b.full = make([]string, len(b.calls))
			}
			b.full[i] = string(out)
		}
	}
	if b.counts[b.sigs[i]] == RepeatLimit {
		b.contents[i] += repeatNote
	}
}

// countRepeats updates the run's record of consecutive calls with one
// reply's calls and returns it: signature -> turns in a row (this one
// included) that made the call. A call made twice in one reply counts once.
func (r *runState) countRepeats(calls []ToolCall) (sigs []string, counts map[string]int) {
	prev := r.repeats
	r.repeats = make(map[string]int, len(calls))
	sigs = make([]string, len(calls))
	for i, c := range calls {
		sigs[i] = signature(c)
		if _, seen := r.repeats[sigs[i]]; !seen {
			r.repeats[sigs[i]] = prev[sigs[i]] + 1
		}
	}
	return sigs, r.repeats
}

// signature identifies a call by tool and arguments, ignoring key order
// and spacing in the arguments.
func signature(c ToolCall) string {
	args := []byte(c.Arguments)
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	var v any
	if d.Decode(&v) == nil {
		if b, err := json.Marshal(v); err == nil {
			args = b
		}
	}
	return c.Name + "\x00" + string(args)
}

// errorMessage is the message of a tool error without kind or tool name.
func errorMessage(err error) string {
	var re *registry.Error
	if errors.As(err, &re) {
		return re.Message()
	}
	return err.Error()
}

// cleanOutput is a tool's result as the model and the events get it: every
// string in the JSON (keys included) without the runes textsafe calls
// unsafe, raw or escaped — control characters, bidi controls, zero-width,
// tag and other invisible characters — so the model reads what a person
// reading the session sees; the JSON stays valid and is returned byte for
// byte when nothing needed cleaning. A result that is not JSON (a Tool
// breaking its contract) is cleaned as text and given as a JSON string.
func cleanOutput(out json.RawMessage) json.RawMessage {
	if len(out) == 0 {
		return json.RawMessage("null")
	}
	if c, err := textsafe.CleanJSON(out); err == nil {
		return c
	}
	b, _ := json.Marshal(textsafe.CleanBytes(out, 0))
	return b
}

// toolContent cleans and caps the content of a tool message from a saved
// history: JSON as a result is (cleanOutput, boundOutput, from the whole
// result when the message kept it), anything else (an "error (<kind>):
// ..." message, a note) as text. full is the whole result when content
// is cut.
func toolContent(m Message, limit int) (content, full string) {
	src := m.Content
	if m.FullContent != "" {
		src = m.FullContent
	}
	if json.Valid([]byte(src)) {
		out := cleanOutput(json.RawMessage(src))
		if content, cut := boundOutput(out, limit, m.ToolCallID); cut {
			return content, string(out)
		}
		return string(out), ""
	}
	return textsafe.Clean(m.Content, limit), ""
}

func marshalString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// invokeEach runs calls through the registry, or answers them with the
// supplied invocations (Turn.Results).
func (r *runState) invokeEach(ctx context.Context, calls []registry.Call, done func(int, registry.Invocation)) {
	if r.supplied == nil {
		if hook := r.c.cfg.ToolContext; hook != nil {
			for k := range calls {
				calls[k].Context = hook(ctx, calls[k].ID, calls[k].Name)
			}
		}
		r.reg.InvokeEach(ctx, calls, done)
		return
	}
	for k, c := range calls {
		inv := r.supplied[c.ID] // resume checked that every call has one
		inv.ID, inv.Tool, inv.Input = c.ID, c.Name, c.Args
		if inv.Err == nil && inv.Output == nil {
			inv.Output = json.RawMessage("null")
		}
		done(k, inv)
	}
}
