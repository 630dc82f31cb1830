//go:build cluster

package setup

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"time"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/session"
)

// ServeCluster opens cfg's [cluster] for `agrun serve` (OpenCluster)
// and sets what opts takes of it: the shared store of uploads over
// [cluster] module_store (server.NewSharedStore) and the runs, which are
// workflows on the cluster's workers (ClusterRuns, with the run settings
// of cfg: [cluster] approval_timeout among them). Call close when the
// server is done.
func ServeCluster(ctx context.Context, cfg *config.Config, log *slog.Logger, opts *server.Options) (close func(), err error) {
	ce, err := OpenCluster(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if cfg.Serve.ApprovalTimeout != 0 {
		// The workflow's timer decides: one setting for every run on
		// the cluster, whoever started it.
		log.Warn("[serve] approval_timeout is not used in cluster mode: a run's calls wait [cluster] approval_timeout for a decision",
			"cluster_approval_timeout", cmp.Or(cfg.Cluster.ApprovalTimeout.Std(), cluster.DefaultApprovalTimeout).String())
	}
	opts.SharedStore = server.NewSharedStore(ce.Objects, 0)
	opts.Runs = &ClusterRuns{Client: &cluster.Client{Temporal: ce.Temporal, Sessions: ce.Sessions, Blobs: ce.Objects,
		Defaults: RunDefaults(cfg, ce.Queues), Logger: log}, Log: log, Tenants: len(cfg.Serve.Tenants) > 0}
	return ce.Close, nil
}

// ClusterRuns is server.Runs over a cluster.Client: a run is the session
// workflow that `agrun run` on the cluster starts, shown from the records
// the workers append (a reply's text live as its model writes it when
// the session store is PostgreSQL, cluster.LiveBus; else whole), its
// approvals the workflow's DecideUpdate. It is safe for concurrent use.
type ClusterRuns struct {
	// Client starts, follows, describes and decides the runs; its
	// Defaults are the settings every run starts with.
	Client *cluster.Client
	// Log receives the warning of a run that no worker serves (nil:
	// slog.Default()).
	Log *slog.Logger
	// Tenants: the server has [serve.tenants], so a session's name is
	// TENANT.ID and its run is started as that tenant's
	// (cluster.Client.StartServed): the workers offer it the tenant's
	// uploaded tools, at the ceiling of their own config.
	Tenants bool
}

// cancelWait bounds the cancellation of a run whose caller stopped
// ranging over its events.
const cancelWait = 10 * time.Second

// Start implements server.Runs: the workflow is started, and its events
// followed (cluster.Client.Follow) until it ends. A caller that stops
// ranging early cancels it on the cluster, as an ended ctx does.
func (c *ClusterRuns) Start(ctx context.Context, id, prompt string, schema json.RawMessage) (iter.Seq2[loop.Event, error], error) {
	tenant := ""
	if c.Tenants {
		tenant, _, _ = strings.Cut(id, ".") // a tenant's name holds no dot
	}
	run, from, err := c.Client.StartServed(ctx, tenant, id, prompt, schema)
	if errors.Is(err, cluster.ErrSessionBusy) {
		return nil, fmt.Errorf("%w: %w", server.ErrRunBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return func(yield func(loop.Event, error) bool) {
		ended := false
		defer func() {
			if !ended { // the caller left: the run does not outlive it
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelWait)
				defer cancel()
				if err := c.Client.CancelRun(cctx, run); err != nil {
					c.log().Warn("cancelling a run whose client left", "session", id, "error", err)
				}
			}
		}()
		for ev, err := range c.Client.Follow(ctx, run, id, from) {
			if err != nil {
				ended = true
				var re *cluster.RunError
				if errors.As(err, &re) {
					err = &server.RunError{Kind: server.Kind(re.Kind), Message: re.Message}
				}
				yield(nil, err)
				return
			}
			switch e := ev.(type) {
			case *cluster.ApprovalsPending:
				// Since when each waits, as Run lists them (zero, if the
				// run cannot say: the server then says now).
				asked := map[string]time.Time{}
				if calls, err := c.Client.PendingCalls(ctx, id); err == nil {
					for _, w := range calls {
						asked[w.CallID] = w.Asked
					}
				}
				for _, r := range e.Calls {
					if !yield(&server.PendingCall{ApprovalRequest: r, Asked: asked[r.CallID]}, nil) {
						return
					}
				}
				continue
			case *cluster.Waiting:
				c.log().Warn("a run waits for a worker: no step of it has been done", "session", id, "for", e.For.Round(time.Second))
				continue
			case *cluster.Cancelling:
				continue
			case *cluster.ReplyRestated:
				// The text streamed live is void: the API's retry event
				// says so to a client (docs/API.md), and the reply as
				// stored follows whole.
				ev = &loop.Retry{Attempt: 1, Max: 1, Reason: "the model step was retried on the cluster and its reply differs from the text streamed; the reply follows as stored"}
			}
			if !yield(ev, nil) {
				return
			}
		}
		ended = true
	}, nil
}

// Run implements server.Runs.
func (c *ClusterRuns) Run(ctx context.Context, id string) (server.RunInfo, error) {
	started, ok, err := c.Client.Running(ctx, id)
	if err != nil {
		return server.RunInfo{}, err
	}
	if !ok {
		return server.RunInfo{}, server.ErrNoRun
	}
	calls, err := c.Client.PendingCalls(ctx, id)
	if err != nil {
		return server.RunInfo{}, err
	}
	info := server.RunInfo{Started: started}
	for _, w := range calls {
		info.Pending = append(info.Pending, server.PendingCall{ApprovalRequest: w.ApprovalRequest, Asked: w.Asked})
	}
	return info, nil
}

// Decide implements server.Runs: the decision is the workflow's
// DecideUpdate, answered once the run has stored it.
func (c *ClusterRuns) Decide(ctx context.Context, id, callID string, d loop.Decision) error {
	_, ok, err := c.Client.Running(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		return server.ErrNoRun
	}
	err = c.Client.Decide(ctx, id, map[string]loop.Decision{callID: d})
	switch {
	case errors.Is(err, cluster.ErrBeingDecided):
		return fmt.Errorf("%w: %w", server.ErrDecisionConflict, err)
	case errors.Is(err, loop.ErrNothingPending):
		return fmt.Errorf("%w: %w", server.ErrNotPending, err)
	}
	return err
}

// Messages implements server.Runs: the messages of the session's records
// in the cluster's session store.
func (c *ClusterRuns) Messages(ctx context.Context, id string) ([]json.RawMessage, error) {
	recs, err := c.Client.Sessions.Load(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for _, b := range recs {
		var r session.Record
		if json.Unmarshal(b, &r) == nil && len(r.Message) > 0 {
			out = append(out, r.Message)
		}
	}
	return out, nil
}

func (c *ClusterRuns) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}
