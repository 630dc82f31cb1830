//go:build cluster

package setup

import (
	"context"
	"errors"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/loop"
)

// Client is the client of runs on the cluster: its Temporal client and
// stores, and the run settings of its config (RunDefaults).
func (ce *Cluster) Client() *cluster.Client {
	return &cluster.Client{Temporal: ce.Temporal, Sessions: ce.Sessions, Blobs: ce.Objects, Defaults: RunDefaults(ce.Config, ce.Queues)}
}

// Addr names the cluster in messages: its model queue and Temporal
// address.
func (ce *Cluster) Addr() string {
	return ce.Queues.LLM + " at " + ce.Config.Cluster.TemporalAddress
}

// DecideOneByOne asks ask about the calls of session id's run that wait
// for a decision, one at a time and in call order, and gives each
// decision to the run. The run may have decided some meanwhile (a
// "session" answer approves the tool's other calls; the timeout denies):
// what still waits is read again after each, and a call decided before
// its decision arrived is told to meanwhile. An answer that failed (the
// input ended) is a denial saying so; a question cut short by ctx ends
// here with nil (the caller cancels the run).
func DecideOneByOne(ctx context.Context, cl *cluster.Client, id string, calls []loop.ApprovalRequest,
	ask func(context.Context, loop.ApprovalRequest) (loop.Decision, error), meanwhile func(loop.ApprovalRequest, error)) error {
	for len(calls) > 0 {
		req := calls[0]
		d, err := ask(ctx, req)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			d = loop.Decision{Answer: loop.Deny, Reason: "no decision: " + err.Error(), By: d.By}
		}
		err = cl.Decide(ctx, id, map[string]loop.Decision{req.CallID: d})
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, loop.ErrNothingPending):
			meanwhile(req, err) // decided meanwhile (the timeout, another client)
		case err != nil:
			return err
		}
		if calls, err = cl.Pending(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// ClusterErrorKind is the run error kind of a run on the cluster that
// failed (ok false: err is not one).
func ClusterErrorKind(err error) (string, bool) {
	var re *cluster.RunError
	if errors.As(err, &re) {
		return re.Kind, true
	}
	if errors.Is(err, cluster.ErrSessionBusy) {
		return "session_locked", true
	}
	return "", false
}
