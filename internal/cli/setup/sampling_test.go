//lint:file-ignore SA1019 the test server samples as servers on protocol versions before 2026-07-28 do (SEP-2577 deprecates sampling)

package setup

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/mcp"
)

// goid is the calling goroutine's id, from its stack's first line
// ("goroutine 17 [running]:").
func goid() uint64 {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

// TestSamplerRecordsOnTheRunsGoroutine: a server's sampling request,
// served on the MCP SDK's goroutines while the run waits for its tool
// call, records nothing there: its decision and its model request are
// queued, and Flush hands them to the run's record on the run's own
// goroutine, in order; an elicitation answered meanwhile is recorded
// the same way; EndRun flushes what is left, and after it nothing is
// the run's. Run with -race: the records are plain slices of this
// goroutine's.
func TestSamplerRecordsOnTheRunsGoroutine(t *testing.T) {
	model := chattest.New(t, chattest.Reply{Text: "written for you"}, chattest.Reply{Text: "again"})
	t.Setenv("AGRUN_TEST_KEY", "k")
	cfg := config.Default()
	cfg.LLM.BaseURL, cfg.LLM.Model, cfg.LLM.APIKeyEnv = model.URL, "m", "AGRUN_TEST_KEY"
	s := NewSampler(cfg, nil)

	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, nil)
	up.AddTool(&sdk.Tool{Name: "write", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		// Multi round-trip (SEP-2322): the request comes back answered
		// in the call's retry.
		if len(req.Params.InputResponses) == 0 {
			return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"s": &sdk.CreateMessageWithToolsParams{MaxTokens: 20,
				Messages: []*sdk.SamplingMessageV2{{Role: "user", Content: []sdk.Content{&sdk.TextContent{Text: "write"}}}}}}}, nil
		}
		b, _ := json.Marshal(req.Params.InputResponses["s"])
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}, nil
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	ask := func(context.Context, *mcp.Elicitation) (*mcp.ElicitAnswer, error) { return nil, ErrNoOneToAsk }
	elicit := s.Elicit(ask)
	cl, err := mcp.NewClient("up", mcp.SDKTransport{New: func() sdk.Transport { return ct }}, &mcp.ClientOptions{
		Sample: s.For("up", config.MCPServer{Sampling: "allow"}), Elicit: elicit})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)

	run := goid()
	var decisions []loop.DecisionRecord
	var requests []loop.RequestInfo
	var order []string
	s.StartRun(nil, func(r loop.DecisionRecord) {
		if g := goid(); g != run {
			t.Errorf("a decision recorded on goroutine %d, not the run's %d", g, run)
		}
		decisions = append(decisions, r)
		order = append(order, "decision")
	}, func(r loop.RequestInfo) {
		if g := goid(); g != run {
			t.Errorf("a request recorded on goroutine %d, not the run's %d", g, run)
		}
		requests = append(requests, r)
		order = append(order, "request")
	})
	out, err := cl.CallTool(ctx, "write", json.RawMessage(`{}`))
	if err != nil || !bytes.Contains(out, []byte("written for you")) {
		t.Fatalf("the call: %s, %v", out, err)
	}
	if len(decisions)+len(requests) != 0 {
		t.Fatalf("recorded before Flush: %+v %+v", decisions, requests)
	}
	s.Flush()
	if len(decisions) != 1 || decisions[0].Tool != "sampling:up" || decisions[0].Answer != loop.ApproveOnce || decisions[0].By != "config" {
		t.Errorf("the decision: %+v", decisions)
	}
	if len(requests) != 1 || requests[0].Usage.Total() == 0 {
		t.Errorf("the model request: %+v", requests)
	}
	if len(order) != 2 || order[0] != "decision" {
		t.Errorf("order %v: the decision comes before the request it allowed", order)
	}

	// An elicitation no one can answer: declined, queued, recorded at
	// EndRun like an approval no one could give.
	ans, err := elicit(ctx, &mcp.Elicitation{Server: "up", Message: "Which colour?"})
	if err != nil || ans.Action != "decline" {
		t.Fatalf("elicitation without a person: %+v, %v", ans, err)
	}
	if len(decisions) != 1 {
		t.Fatal("the elicitation was recorded before EndRun")
	}
	s.EndRun()
	if len(decisions) != 2 || decisions[1].Tool != "elicitation:up" || decisions[1].Answer != loop.Deny || decisions[1].By != "non-interactive" || decisions[1].Arguments != "Which colour?" {
		t.Errorf("the elicitation's record: %+v", decisions)
	}
	if _, err := cl.CallTool(ctx, "write", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	if len(decisions) != 2 || len(requests) != 1 {
		t.Errorf("after EndRun, sampling was recorded in the run: %d decisions, %d requests", len(decisions), len(requests))
	}
}
