package cluster_test

import (
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/internal/testing/require"
)

// TestExampleWorkerInApp runs Example_workerInApp (the documentation of
// an app running its own worker) against a real Temporal dev server and
// a fake model that calls the app's Go tool once, and checks what it
// prints and that the tool's result reached the model.
func TestExampleWorkerInApp(t *testing.T) {
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "upper", Args: `{"text":"hello"}`}}},
		chattest.Reply{Text: "HELLO"},
	)
	t.Setenv("AGRUN_EXAMPLE_TEMPORAL", addr)
	t.Setenv("AGRUN_EXAMPLE_MODEL", srv.URL)
	require.Stdout(t, Example_workerInApp, "answer: HELLO\nturns: 1 messages: 4\n")
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != "tool" || last.ToolCallID != "c1" || last.Content == nil || *last.Content != `"HELLO"` {
		t.Fatalf("the tool's result sent to the model: %+v", last)
	}
}
