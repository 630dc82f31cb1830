//go:build cluster

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/cmd/agrun/internal/config"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
)

// clusterErrorKind is the run error kind of a run on the cluster that
// failed (ok false: err is not one).
func clusterErrorKind(err error) (string, bool) {
	var ce *clusterRunError
	if errors.As(err, &ce) {
		return ce.kind, true
	}
	if errors.Is(err, cluster.ErrSessionBusy) {
		return "session_locked", true
	}
	return "", false
}

// clusterRunError is a run on the cluster that ended without an answer:
// its kind is the loop's (provider, max_turns, ...).
type clusterRunError struct{ kind, msg string }

func (e *clusterRunError) Error() string {
	return "run failed on the cluster (" + e.kind + "): " + e.msg
}

// clusterUnsupported lists the run flags a run on the cluster refuses: the
// workers' configuration decides the model, the prompt and the tools, and
// these are not carried to them yet (docs/SCALING.md, Limits).
func clusterUnsupported(o *runOptions) string {
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"-m/--model", o.set["model"]}, {"-s/--system", o.set["system"]}, {"--base-url", o.set["base-url"]},
		{"--tools", o.tools != ""}, {"--no-tools", o.noTools}, {"-c/--continue", o.cont},
		{"--schema", o.schemaArg != ""}, {"--approve/--deny", o.resume != nil}, {"--trace", o.trace},
		{"--max-tokens", o.maxTokens > 0}, {"--max-tool-calls", o.maxToolCalls > 0},
	} {
		if f.set {
			return f.name
		}
	}
	return ""
}

// runOnCluster is runOnce with [cluster]: the run is a workflow on the
// cluster's workers; this process starts it, shows its progress from the
// session store as the workers append to it, and waits for its end.
// Ctrl-C cancels the run on the cluster.
func (c *cli) runOnCluster(ctx context.Context, fs *flag.FlagSet, cfg *config.Config, prompt string, o *runOptions, asJSON bool) (string, turnStats, error) {
	if f := clusterUnsupported(o); f != "" {
		return "", turnStats{}, usageOf(fs, "%s is not supported with [cluster] (the workers' config decides; docs/SCALING.md)", f)
	}
	o.apply(cfg)
	id := o.session
	if id == "" {
		id = session.NewID()
	} else if !session.ValidID(id) {
		return "", turnStats{}, usageOf(fs, "--session %q: %v", id, session.ErrBadID)
	}
	ce, err := c.openCluster(ctx, cfg)
	if err != nil {
		return "", turnStats{}, err
	}
	defer ce.close()
	cl := &cluster.Client{Temporal: ce.temporal, Sessions: ce.sessions, Blobs: ce.objects, Defaults: runDefaults(cfg, ce.queues)}
	run, from, err := cl.Start(ctx, id, prompt)
	if err != nil {
		return "", turnStats{}, err
	}
	if !asJSON {
		fmt.Fprintf(c.stderr, "agrun: session %s (on the cluster at %s)\n", id, cfg.Cluster.TemporalAddress)
	}
	stats, err := c.follow(ctx, ce, cl, run, id, from, asJSON)
	return id, stats, err
}

// follow shows a cluster run as the local path shows one — text on
// stdout, a line per tool call on stderr, or the same JSON events — from
// the records the workers append to the session store (a model reply
// arrives whole, not token by token), until the run ends.
func (c *cli) follow(ctx context.Context, ce *clusterEnv, cl *cluster.Client, run client.WorkflowRun, id string, from int64, asJSON bool) (turnStats, error) {
	st := turnStats{start: time.Now()}
	f := &follower{c: c, asJSON: asJSON, st: &st, calls: map[string]session.Call{}, names: map[string]string{}, inputs: map[string]json.RawMessage{}}
	var res cluster.RunResult
	done := make(chan error, 1)
	go func() { done <- run.Get(context.WithoutCancel(ctx), &res) }()
	next := from
	drain := func() error {
		recs, err := ce.sessions.Load(context.WithoutCancel(ctx), id, next)
		if errors.Is(err, session.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, b := range recs {
			f.record(b)
		}
		next += int64(len(recs))
		return nil
	}
	// Poll the store quickly at first, then every second: each poll of
	// the JSON-lines store reads the session's file.
	wait := 150 * time.Millisecond
	tick := time.NewTimer(wait)
	defer tick.Stop()
	told := false
	var runErr error
	for waiting := true; waiting; {
		select {
		case runErr = <-done:
			waiting = false
		case <-tick.C:
			if err := drain(); err != nil {
				c.logger().Warn("reading the session's progress", "session", id, "err", err)
			}
			if !told && next == from && time.Since(st.start) > 10*time.Second {
				told = true
				fmt.Fprintf(c.stderr, "agrun: waiting for a worker: no step of the run has been done yet (is `agrun worker` running for %s?)\n", cfgAddr(ce))
			}
			wait = min(wait*2, time.Second)
			tick.Reset(wait)
		case <-ctx.Done():
			// Ctrl-C: the run stops on the cluster too (its activities
			// see the cancellation at their next heartbeat).
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := ce.temporal.CancelWorkflow(cctx, run.GetID(), run.GetRunID()); err != nil {
				fmt.Fprintf(c.stderr, "agrun: the run could not be cancelled on the cluster (it goes on): %s\n", safe(err.Error()))
			} else {
				// Wait (a little) for the run to stop, so that the session
				// is free when agrun exits: its steps see the cancellation
				// at their next heartbeat.
				select {
				case <-done:
				case <-cctx.Done():
				}
			}
			cancel()
			drain()
			f.end()
			return st, fmt.Errorf("%w", ctx.Err())
		}
	}
	if err := drain(); err != nil && runErr == nil {
		runErr = err
	}
	f.end()
	st.elapsed = time.Since(st.start)
	if runErr != nil {
		return st, fmt.Errorf("the run on the cluster: %w", runErr)
	}
	if res.ErrorKind != "" {
		return st, &clusterRunError{kind: res.ErrorKind, msg: textsafe.Clean(res.Error, 4096)}
	}
	text, err := cl.Text(context.WithoutCancel(ctx), res)
	if err != nil {
		return st, err
	}
	st.text = text
	if st.truncated {
		fmt.Fprintln(c.stderr, `agrun: warning: the answer was cut off at the model's output limit (finish_reason "length")`)
	}
	return st, nil
}

// cfgAddr names the cluster in messages.
func cfgAddr(ce *clusterEnv) string {
	return ce.queues.LLM + " at " + ce.cfg.Cluster.TemporalAddress
}

// follower turns session records into what the terminal or a script sees.
type follower struct {
	c        *cli
	asJSON   bool
	st       *turnStats
	calls    map[string]session.Call // call records by call id
	names    map[string]string       // tool names by call id
	inputs   map[string]json.RawMessage
	wroteTxt bool
	// The last request record's, for the next assistant message's
	// turn_complete.
	lastUsage  loop.Usage
	lastFinish string
}

func (f *follower) emit(ev loop.Event) {
	if f.asJSON {
		writeJSONLine(f.c.stdout, ev)
	}
}

func (f *follower) record(b json.RawMessage) {
	var r session.Record
	if json.Unmarshal(b, &r) != nil {
		return
	}
	switch {
	case len(r.Request) > 0:
		var ri struct {
			Usage        loop.Usage `json:"usage"`
			FinishReason string     `json:"finish_reason"`
		}
		json.Unmarshal(r.Request, &ri)
		f.st.requests++
		f.st.usage = f.st.usage.Add(ri.Usage)
		f.lastUsage, f.lastFinish = ri.Usage, ri.FinishReason
	case len(r.Call) > 0:
		var call session.Call
		if json.Unmarshal(r.Call, &call) == nil {
			f.calls[call.ID] = call
		}
	case len(r.Message) > 0:
		var m loop.Message
		if json.Unmarshal(r.Message, &m) == nil {
			f.message(m)
		}
	}
}

func (f *follower) message(m loop.Message) {
	switch m.Role {
	case loop.RoleAssistant:
		if m.Content != "" {
			f.emit(&loop.TextDelta{Text: m.Content})
			if !f.asJSON {
				io.WriteString(f.c.stdout, safe(m.Content))
				f.wroteTxt = true
			}
		}
		reason := "stop"
		if f.lastFinish == "length" {
			reason = "length"
			f.st.truncated = true
		}
		if len(m.ToolCalls) > 0 {
			reason = "tool_calls"
			if f.wroteTxt && !f.asJSON {
				io.WriteString(f.c.stdout, "\n")
				f.wroteTxt = false
			}
		}
		f.emit(&loop.TurnComplete{Reason: reason, Usage: f.lastUsage})
		f.lastUsage, f.lastFinish = loop.Usage{}, ""
		for _, tc := range m.ToolCalls {
			f.st.toolCalls++
			f.names[tc.ID] = tc.Name
			in := json.RawMessage(tc.Arguments)
			if !json.Valid(in) {
				in, _ = json.Marshal(tc.Arguments)
			}
			f.inputs[tc.ID] = in
			f.emit(&loop.ToolExecutionStarted{ID: tc.ID, Name: tc.Name, Input: in})
		}
	case loop.RoleTool:
		call := f.calls[m.ToolCallID]
		ev := &loop.ToolExecutionCompleted{ID: m.ToolCallID, Name: m.Name, Duration: time.Duration(call.DurationMS) * time.Millisecond,
			ErrorKind: call.ErrorKind, IsError: call.ErrorKind != "", Audit: call.Audit}
		if ev.Name == "" {
			ev.Name = f.names[m.ToolCallID]
		}
		content := m.Content
		if m.FullContent != "" {
			content = m.FullContent
		}
		if ev.IsError {
			content = strings.TrimPrefix(content, "error ("+string(call.ErrorKind)+"): ")
			ev.Output, _ = json.Marshal(content)
		} else if json.Valid([]byte(content)) {
			ev.Output = json.RawMessage(content)
		} else {
			ev.Output, _ = json.Marshal(content)
		}
		f.emit(ev)
		if !f.asJSON {
			fmt.Fprintf(f.c.stderr, "agrun: %s %s → %s (%s)\n", safe(ev.Name), safe(textsafe.Truncate(compact(f.inputs[ev.ID]), 60)),
				outcome(ev), ev.Duration.Round(time.Millisecond))
		}
	}
}

// end finishes the text output.
func (f *follower) end() {
	if f.wroteTxt && !f.asJSON {
		io.WriteString(f.c.stdout, "\n")
		f.wroteTxt = false
	}
}

// chatOnCluster is `agrun chat` with [cluster]: each prompt is a run of
// the session on the cluster, shown as it progresses; Ctrl-C during a
// turn cancels that run on the cluster, at the prompt it ends the chat.
// Of the slash commands only /exit is available (the tools and history
// are the workers').
func (c *cli) chatOnCluster(ctx context.Context, fs *flag.FlagSet, cfg *config.Config, o *runOptions) error {
	if f := clusterUnsupported(o); f != "" {
		return usageOf(fs, "%s is not supported with [cluster] (the workers' config decides; docs/SCALING.md)", f)
	}
	o.apply(cfg)
	id := o.session
	if id == "" {
		id = session.NewID()
	} else if !session.ValidID(id) {
		return usageOf(fs, "--session %q: %v", id, session.ErrBadID)
	}
	ce, err := c.openCluster(ctx, cfg)
	if err != nil {
		return err
	}
	defer ce.close()
	cl := &cluster.Client{Temporal: ce.temporal, Sessions: ce.sessions, Blobs: ce.objects, Defaults: runDefaults(cfg, ce.queues)}
	fmt.Fprintf(c.stderr, "agrun: session %s on the cluster at %s. /exit\n", id, cfg.Cluster.TemporalAddress)
	s := &chatSession{cli: c}
	interactive := c.isTTY(c.stdin)
	lines, readErr := s.readLines(ctx)
	for {
		if interactive {
			fmt.Fprint(c.stderr, "> ")
		}
		var line string
		select {
		case <-ctx.Done():
			return nil
		case <-c.interrupts:
			fmt.Fprintln(c.stderr)
			return nil
		case err := <-readErr:
			return err
		case line = <-lines:
		}
		switch line = strings.TrimSpace(line); {
		case line == "":
			continue
		case line == "/exit" || line == "/quit":
			return nil
		case strings.HasPrefix(line, "/"):
			fmt.Fprintln(c.stderr, "agrun: on the cluster, only /exit is available")
			continue
		}
		tctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-c.interrupts:
				cancel()
			case <-stop:
			}
		}()
		run, from, err := cl.Start(tctx, id, line)
		if err == nil {
			var st turnStats
			st, err = c.follow(tctx, ce, cl, run, id, from, false)
			if err == nil && !interactive {
				fmt.Fprintf(c.stderr, "agrun: %s\n", st.summary())
			}
		}
		close(stop)
		cancel()
		if err != nil {
			if tctx.Err() != nil && ctx.Err() == nil {
				fmt.Fprintln(c.stderr, "agrun: interrupted")
				continue
			}
			fmt.Fprintf(c.stderr, "agrun: %s\n", safe(err.Error()))
		}
	}
}
