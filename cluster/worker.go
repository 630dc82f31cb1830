package cluster

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Queue names for WorkerOptions.Serve.
const (
	ServeLLM  = "llm"
	ServeWASM = "wasm"
	ServeMCP  = "mcp"
)

// WorkerOptions configure RunWorker.
type WorkerOptions struct {
	Queues Queues
	// Serve lists the activity queues this worker takes tasks from:
	// ServeLLM, ServeWASM, ServeMCP (empty: all three). Every worker also
	// serves the session workflows' tasks (Queues.Sessions): they are
	// light, and a pool of any shape then runs sessions.
	Serve []string
	// Concurrency bounds the activities this worker runs at once, per
	// queue (0: 8), and as many local calls per queue besides (a call
	// finding them all busy goes to its queue). The sandbox's own bound
	// (runtime MaxInstances) still holds below it.
	Concurrency int
	// Identity names the worker in Temporal (empty: the SDK's pid@host).
	Identity string
	// QueuedCalls turns off local calls: every tool call is an activity
	// task on its tool's queue, taken by any worker serving it. By default
	// a call that may be run again (its tool has no side effects, or the
	// run retries side effects) runs as a local activity of the worker
	// that runs the session's workflow task, when that worker serves the
	// tool's queue — one round trip through Temporal per call instead of
	// three (docs/SCALING.md, "Local calls").
	QueuedCalls bool
}

// RunWorker serves the session workflow and the activities of a on c until
// ctx is done, then stops the workers (letting running activities see
// their context end) and returns nil; or returns the first worker's
// error.
func RunWorker(ctx context.Context, c client.Client, a *Activities, o WorkerOptions) error {
	serve := o.Serve
	if len(serve) == 0 {
		serve = []string{ServeLLM, ServeWASM, ServeMCP}
	}
	for _, s := range serve {
		if s != ServeLLM && s != ServeWASM && s != ServeMCP {
			return fmt.Errorf("unknown queue %q (llm, wasm, mcp)", s)
		}
	}
	n := o.Concurrency
	if n <= 0 {
		n = 8
	}
	fatal := make(chan error, 8)
	// On stop, running activities get a moment to finish; then their
	// contexts end and they fail as attempts (not as results), so that
	// Temporal retries them elsewhere where it may.
	// Heartbeats go out at most every second (the SDK's default throttle
	// is 0.8 × the heartbeat timeout): a cancelled run's steps learn it
	// within about a second.
	opts := worker.Options{MaxConcurrentActivityExecutionSize: n, Identity: o.Identity, WorkerStopTimeout: 5 * time.Second,
		MaxHeartbeatThrottleInterval: time.Second, DefaultHeartbeatThrottleInterval: time.Second,
		OnFatalError: func(err error) {
			select {
			case fatal <- err:
			default:
			}
		}}
	queues := map[string]string{ServeLLM: o.Queues.LLM, ServeWASM: o.Queues.WASM, ServeMCP: o.Queues.MCP}
	var ws []worker.Worker
	// The workflow worker runs the workflows and their one local
	// activity (SeqActivity), and no activity task of its queue.
	sopts := opts
	sopts.LocalActivityWorkerOnly = true
	// Local calls: up to n at once per queue it serves (localTool), the
	// rest handed to their queues; room besides for the instant answers
	// "not here" and SeqActivity.
	sopts.MaxConcurrentLocalActivityExecutionSize = n * (len(serve) + 1)
	sw := worker.New(c, o.Queues.Sessions, sopts)
	sw.RegisterWorkflowWithOptions(SessionWorkflow, workflow.RegisterOptions{Name: WorkflowName})
	sw.RegisterActivityWithOptions(a.Seq, activity.RegisterOptions{Name: SeqActivity})
	local := map[string]int{}
	if !o.QueuedCalls {
		for _, s := range serve {
			local[s] = n
		}
	}
	sw.RegisterActivityWithOptions(a.localTool(local), activity.RegisterOptions{Name: LocalToolActivity})
	ws = append(ws, sw)
	done := map[string]bool{}
	for _, s := range serve {
		q := queues[s]
		if done[q] {
			continue
		}
		done[q] = true
		w := worker.New(c, q, opts)
		if s == ServeLLM {
			w.RegisterActivityWithOptions(a.Model, activity.RegisterOptions{Name: ModelActivity})
			w.RegisterActivityWithOptions(a.Decide, activity.RegisterOptions{Name: DecideActivity})
		}
		// Every activity worker runs tool calls: a call of a tool that is
		// neither WASM nor MCP is routed to the LLM queue.
		w.RegisterActivityWithOptions(a.Tool, activity.RegisterOptions{Name: ToolActivity})
		ws = append(ws, w)
	}
	for i, w := range ws {
		if err := w.Start(); err != nil {
			for _, started := range ws[:i] {
				started.Stop()
			}
			return fmt.Errorf("starting a worker: %w", err)
		}
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-fatal:
		err = fmt.Errorf("worker: %w", err)
	}
	for _, w := range ws {
		w.Stop()
	}
	return err
}
