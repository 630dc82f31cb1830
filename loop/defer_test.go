package loop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/registry"
)

// TestDeferCallsAndResumeWithResults: with DeferCalls a reply's calls are
// not run (the tool is never executed) and the run ends with a
// CallsDeferredError naming them in call order, while an unknown tool is
// answered at once; a Cycle built from the saved history resumes with
// results computed elsewhere — an output and a typed error — which reach
// the model exactly as registry results would, without repeating the
// model request.
func TestDeferCallsAndResumeWithResults(t *testing.T) {
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{call("c1", "writer", `{"t":1}`), call("c2", "nosuch", `{}`), call("c3", "reader", `{}`)}},
		expect(func(t testing.TB, got received) {
			ids, content := toolContents(got)
			if strings.Join(ids, ",") != "c2,c1,c3" || content["c1"] != `{"wrote":true}` ||
				content["c3"] != "error (timeout): the tool ran out of time" || !strings.HasPrefix(content["c2"], "error (not_found)") {
				t.Errorf("tool messages %v %v", ids, content)
			}
		}, streamText("done")),
	)
	var ran atomic.Int32
	count := func(tl *funcTool) *funcTool {
		fn := tl.fn
		tl.fn = func(ctx context.Context, a json.RawMessage) (json.RawMessage, error) { ran.Add(1); return fn(ctx, a) }
		return tl
	}
	reg := newRegistry(t, count(okTool("writer", nil)), count(okTool("reader", nil)))
	c := newCycle(t, srv, Config{DeferCalls: true})
	_, err := collect(t, c, context.Background(), "x", reg)
	var de *CallsDeferredError
	if !errors.As(err, &de) || !errors.Is(err, ErrCallsDeferred) || errors.Is(err, ErrApprovalPending) ||
		len(de.Calls) != 2 || de.Calls[0].CallID != "c1" || de.Calls[1].CallID != "c3" || de.Calls[0].Arguments != `{"t":1}` {
		t.Fatalf("err %v (%+v)", err, de)
	}
	if ran.Load() != 0 {
		t.Fatalf("%d deferred calls ran here", ran.Load())
	}
	saved := c.Messages()
	c2 := newCycle(t, srv, Config{History: saved, ResumePending: true, DeferCalls: true})
	for _, err := range c2.ResumeStreamWithResults(context.Background(), reg, map[string]registry.Invocation{"c1": {}}) {
		if !errors.Is(err, ErrNothingPending) {
			t.Fatalf("a missing result: %v", err)
		}
	}
	results := map[string]registry.Invocation{
		"c1": {Output: json.RawMessage(`{"wrote":true}`)},
		"c3": {Err: registry.Errorf(registry.Timeout, "reader", "the tool ran out of time")},
	}
	var text strings.Builder
	var completed []string
	for ev, err := range c2.ResumeStreamWithResults(context.Background(), reg, results) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *TextDelta:
			text.WriteString(e.Text)
		case *ToolExecutionCompleted:
			completed = append(completed, e.ID+":"+string(e.ErrorKind))
		}
	}
	if text.String() != "done" || len(srv.Requests()) != 2 || ran.Load() != 0 {
		t.Fatalf("text %q after %d requests, %d runs here", text.String(), len(srv.Requests()), ran.Load())
	}
	if strings.Join(completed, ",") != "c1:,c3:timeout" {
		t.Fatalf("completed events %v", completed)
	}
}
