package cluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/session"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// ErrSessionBusy is returned by Client.Run when a run of the session is
// already going on somewhere in the cluster.
var ErrSessionBusy = errors.New("the session is running elsewhere in the cluster")

// Client starts runs of sessions on a cluster and reads their results.
type Client struct {
	Temporal client.Client
	Sessions session.Store
	Blobs    store.ObjectStore
	// Defaults holds the run settings (Queues, MaxTurns, timeouts,
	// RetrySideEffects) each run starts from.
	Defaults RunInput
}

// Start starts a run of session with prompt, at the session's next
// record, and returns its handle and that record's seq (where the run's
// records begin). A run of the same session already going on is
// ErrSessionBusy.
func (c *Client) Start(ctx context.Context, id, prompt string) (client.WorkflowRun, int64, error) {
	recs, err := c.Sessions.Load(ctx, id, 0)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		return nil, 0, err
	}
	in := c.Defaults
	in.Session, in.Prompt, in.Seq = id, prompt, int64(len(recs))
	if len(prompt) > DefaultInlineLimit {
		p, err := blobs{store: c.Blobs}.put(ctx, []byte(prompt))
		if err != nil {
			return nil, 0, err
		}
		in.Prompt, in.PromptRef = "", &p
	}
	if in.Queues == (Queues{}) {
		in.Queues = QueuesFor("")
	}
	run, err := c.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       WorkflowID(id),
		TaskQueue:                in.Queues.Sessions,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		// Without it the SDK hands back the running run's handle.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, WorkflowName, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil, 0, fmt.Errorf("%w: %s", ErrSessionBusy, id)
	}
	return run, in.Seq, err
}

// Run starts a run and waits for its result.
func (c *Client) Run(ctx context.Context, id, prompt string) (RunResult, error) {
	run, _, err := c.Start(ctx, id, prompt)
	if err != nil {
		return RunResult{}, err
	}
	var res RunResult
	err = run.Get(ctx, &res)
	return res, err
}

// Text returns the final answer of res (fetched from the blob store when
// it was passed by reference).
func (c *Client) Text(ctx context.Context, res RunResult) (string, error) {
	b, err := blobs{store: c.Blobs}.get(ctx, res.Text)
	return string(b), err
}
