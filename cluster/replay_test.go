package cluster

import (
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestReplayHistories: histories of two-call sessions recorded on a dev
// server (testdata) replay on today's workflow without a nondeterminism
// error, so a worker upgraded mid run goes on with the run: one written
// before calls could run local (the code of commit 1007da7: each call an
// activity task; versionLocalCalls keeps it so), and one with local
// calls (commit 69f673f). A change to the workflow that breaks one needs
// a workflow.GetVersion of its own.
func TestReplayHistories(t *testing.T) {
	for _, f := range []string{"history-before-local-calls.json", "history-local-calls.json"} {
		t.Run(f, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(SessionWorkflow, workflow.RegisterOptions{Name: WorkflowName})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/"+f); err != nil {
				t.Fatal(err)
			}
		})
	}
}
