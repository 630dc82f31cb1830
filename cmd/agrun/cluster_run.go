//go:build cluster

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/session"
)

// clusterErrorKind is the run error kind of a run on the cluster that
// failed (ok false: err is not one).
func clusterErrorKind(err error) (string, bool) {
	var re *cluster.RunError
	if errors.As(err, &re) {
		return re.Kind, true
	}
	if errors.Is(err, cluster.ErrSessionBusy) {
		return "session_locked", true
	}
	return "", false
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
		{"--resource", len(o.resources) > 0}, {"--prompt", o.promptRef != ""},
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
	var st turnStats
	p := c.newPrinter(&st, asJSON, false)
	defer p.stop()
	var runErr error
	for ev, err := range cl.Follow(ctx, run, id, from) {
		if err != nil {
			runErr = err
			break
		}
		switch ev := ev.(type) {
		case *cluster.Waiting:
			fmt.Fprintf(c.stderr, "agrun: waiting for a worker: no step of the run has been done in %s (is `agrun worker` running for %s?)\n",
				ev.For.Round(time.Second), cfgAddr(ce))
		case *cluster.Cancelling:
			fmt.Fprintf(c.stderr, "agrun: cancelling the run on the cluster (waiting up to %s for it to stop)\n", cluster.CancelWait)
		default:
			p.show(ev)
		}
	}
	p.end(runErr)
	return st, runErr
}

// cfgAddr names the cluster in messages.
func cfgAddr(ce *clusterEnv) string {
	return ce.queues.LLM + " at " + ce.cfg.Cluster.TemporalAddress
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
