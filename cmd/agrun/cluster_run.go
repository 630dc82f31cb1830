//go:build cluster

package main

import (
	"context"
	"flag"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
)

// clusterUnsupported lists the run flags a run on the cluster refuses
// (docs/SCALING.md, Limits): --base-url would send a worker's API key
// wherever the starter says; --trace's spans are made on the workers (their
// [telemetry]); --resource and --prompt read this process's MCP servers.
func clusterUnsupported(o *runOptions) string {
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"--base-url", o.set["base-url"]}, {"--trace", o.trace},
		{"--resource", len(o.resources) > 0}, {"--prompt", o.promptRef != ""},
	} {
		if f.set {
			return f.name
		}
	}
	return ""
}

// clusterSettings are the run flags a run on the cluster carries to its
// workers, which apply them within their own config (cluster.RunSettings).
func clusterSettings(o *runOptions) *cluster.RunSettings {
	s := &cluster.RunSettings{Tools: o.toolNames(), NoTools: o.noTools, Schema: o.schema, MaxTotalTokens: o.maxTokens, MaxToolCalls: int(o.maxToolCalls)}
	if o.set["model"] {
		s.Model = o.model
	}
	if o.set["system"] {
		s.System = &o.system
	}
	return s
}

// clusterClient starts and follows the runs of session *id on the
// cluster, with the run flags they carry; with -c, *id becomes the
// cluster's most recently used session.
func (c *cli) clusterClient(ce *clusterEnv, cfg *config.Config, o *runOptions, id *string) (*cluster.Client, error) {
	if st, ok := ce.sessions.(session.Admin); ok && o.cont {
		latest, err := c.sessionID(st, o)
		if err != nil {
			return nil, err
		}
		if latest != "" {
			*id = latest
		}
	}
	cl := ce.Client()
	cl.Defaults.Settings = clusterSettings(o)
	return cl, nil
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
	cl, err := c.clusterClient(ce, cfg, o, &id)
	if err != nil {
		return "", turnStats{}, err
	}
	if o.resume != nil {
		// --approve/--deny: the decisions go to the run that waits for
		// them, which goes on; shown from where the session is now.
		run, from, err := cl.Resume(ctx, id, o.resume)
		if err != nil {
			return id, turnStats{}, err
		}
		stats, err := c.follow(ctx, ce, cl, id, cl.FollowFrom(ctx, run, id, from), asJSON)
		return id, stats, err
	}
	run, from, err := cl.Start(ctx, id, prompt)
	if err != nil {
		return "", turnStats{}, err
	}
	if !asJSON {
		fmt.Fprintf(c.stderr, "agrun: session %s (on the cluster at %s)\n", id, cfg.Cluster.TemporalAddress)
	}
	stats, err := c.follow(ctx, ce, cl, id, cl.Follow(ctx, run, id, from), asJSON)
	return id, stats, err
}

// follow shows a cluster run as the local path shows one — text on
// stdout, a line per tool call on stderr, or the same JSON events — from
// the records the workers append to the session store, with a reply's
// text live as its model writes it when the store carries it
// (cluster.LiveBus: PostgreSQL; otherwise a reply arrives whole), until
// the run ends. Calls that wait
// for a person's yes are asked about as locally: on the terminal, denied
// without one, or (run --json) shown as approval_required events, and
// then follow returns an *loop.ApprovalPendingError, leaving the run
// waiting for `run --approve/--deny`.
func (c *cli) follow(ctx context.Context, ce *clusterEnv, cl *cluster.Client, id string, events iter.Seq2[loop.Event, error], asJSON bool) (turnStats, error) {
	var st turnStats
	p := c.newPrinter(&st, asJSON, false)
	defer p.stop()
	var runErr error
	for ev, err := range events {
		if err != nil {
			runErr = err
			break
		}
		if ap, ok := ev.(*cluster.ApprovalsPending); ok {
			for _, r := range ap.Calls {
				p.prog.done(r.CallID) // not running: waiting for a yes
			}
			if c.deferApprovals {
				for _, r := range ap.Calls {
					p.show(&loop.ApprovalRequired{ApprovalRequest: r})
				}
				runErr = &loop.ApprovalPendingError{Calls: ap.Calls}
				break // the run waits on the cluster
			}
			// As the local path asks: the same question and answers;
			// without a terminal each is denied.
			if err := setup.DecideOneByOne(ctx, cl, id, ap.Calls, c.askPerson, func(req loop.ApprovalRequest, err error) {
				fmt.Fprintf(c.stderr, "agrun: %s (%s) was decided meanwhile: %s\n", safe(req.CallID), safe(req.Tool), safe(err.Error()))
			}); err != nil {
				runErr = err
				break
			}
			continue
		}
		switch ev := ev.(type) {
		case *cluster.Waiting:
			fmt.Fprintf(c.stderr, "agrun: waiting for a worker: no step of the run has been done in %s (is `agrun worker` running for %s?)\n",
				ev.For.Round(time.Second), ce.Addr())
		case *loop.TextDelta, *loop.ReasoningDelta:
			// Live text of a step: the calls before it have run (their
			// tool_completed comes with the step's records).
			p.prog.doneAll()
			p.show(ev)
		case *cluster.ReplyRestated:
			// The reply streamed live is not the one stored (its step was
			// retried and wrote otherwise): the stored one follows whole.
			p.final.Reset()
			if asJSON {
				p.show(ev)
			} else {
				p.newline()
				fmt.Fprintln(c.stderr, "agrun: the step was retried and its reply differs from the text above, which is discarded; the reply as stored:")
			}
		case *cluster.Cancelling:
			fmt.Fprintf(c.stderr, "agrun: cancelling the run on the cluster (waiting up to %s for it to stop)\n", cluster.CancelWait)
		default:
			p.show(ev)
		}
	}
	p.end(runErr)
	return st, runErr
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
	cl, err := c.clusterClient(ce, cfg, o, &id)
	if err != nil {
		return err
	}
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
			st, err = c.follow(tctx, ce, cl, id, cl.Follow(tctx, run, id, from), false)
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

// doneAll takes every call for done (on the cluster, a reply's live
// text means the calls before it have run; their results come with the
// reply's records).
func (p *progress) doneAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.running)
}
