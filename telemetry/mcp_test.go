package telemetry

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TestMCPSpans: an MCP client span (kind client, "tools/call NAME", the
// conventions' attributes) writes its trace context into params._meta;
// the server span read from that _meta is its child, in the same trace;
// an error ends a span with error.type and an error status; both
// duration histograms are recorded with the spec's buckets; a hostile
// traceparent is ignored.
func TestMCPSpans(t *testing.T) {
	tel, rec, reader := record(t, Config{})
	meta := map[string]any{}
	// Baggage a caller of agrun serve sent is not the MCP server's.
	bag, _ := baggage.Parse("tenant.secret=abc123")
	ctx, end := tel.StartMCP(baggage.ContextWithBaggage(context.Background(), bag), MCPOperation{Client: true, Method: "tools/call", Target: "search", SessionID: "s1", ProtocolVersion: "2025-11-25", Meta: meta,
		Transport: "tcp", ServerAddress: "mcp.example.com", ServerPort: 443})
	tp, _ := meta["traceparent"].(string)
	if len(tp) != 55 || !strings.Contains(tp, trace.SpanContextFromContext(ctx).TraceID().String()) {
		t.Fatalf("traceparent %q", tp)
	}
	if _, ok := meta["baggage"]; ok || len(meta) != 1 {
		t.Errorf("_meta %v: only the trace context travels", meta)
	}
	_, sEnd := tel.StartMCP(context.Background(), MCPOperation{Method: "tools/call", Target: "search", Meta: meta})
	sEnd("tool_error")
	end("")
	_, pEnd := tel.StartMCP(context.Background(), MCPOperation{Method: "prompts/get", Target: "review", Meta: map[string]any{"traceparent": strings.Repeat("x", 10000)}})
	pEnd("")

	spans := byName(rec.Ended())
	both := spans["tools/call search"]
	if len(both) != 2 {
		t.Fatalf("spans %v", spans)
	}
	c, s := both[0], both[1]
	if c.SpanKind() != trace.SpanKindClient {
		c, s = s, c
	}
	if c.SpanKind() != trace.SpanKindClient || s.SpanKind() != trace.SpanKindServer {
		t.Fatalf("kinds %v %v", c.SpanKind(), s.SpanKind())
	}
	if s.Parent().SpanID() != c.SpanContext().SpanID() || s.SpanContext().TraceID() != c.SpanContext().TraceID() || !s.Parent().IsRemote() {
		t.Errorf("the server span is not the client's child: parent %v, client %v", s.Parent(), c.SpanContext())
	}
	wantAttrs(t, c, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "search", "gen_ai.operation.name": "execute_tool", "mcp.session.id": "s1", "mcp.protocol.version": "2025-11-25",
		"network.transport": "tcp", "server.address": "mcp.example.com", "server.port": 443})
	wantAttrs(t, s, map[string]any{"error.type": "tool_error"})
	if s.Status().Code != codes.Error || c.Status().Code == codes.Error {
		t.Errorf("status: server %v client %v", s.Status(), c.Status())
	}
	p := spans["prompts/get review"]
	if len(p) != 1 || p[0].Parent().IsValid() {
		t.Errorf("prompt span %v (a garbage traceparent must give no parent)", p)
	}
	wantAttrs(t, p[0], map[string]any{"gen_ai.prompt.name": "review"})
	seen := map[string]bool{}
	for _, pt := range points(t, reader) {
		if strings.HasPrefix(pt.metric, "mcp.") {
			seen[pt.metric] = true
			if !slices.Equal(pt.bounds, []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}) {
				t.Errorf("%s: bounds %v, want the MCP conventions'", pt.metric, pt.bounds)
			}
			if pt.attrs["mcp.method.name"] == "" {
				t.Errorf("%s: %v", pt.metric, pt.attrs)
			}
		}
	}
	if !seen["mcp.client.operation.duration"] || !seen["mcp.server.operation.duration"] {
		t.Errorf("metrics %v", seen)
	}
	var none *Telemetry
	if _, f := none.StartMCP(context.Background(), MCPOperation{Method: "ping"}); f == nil {
		t.Error("nil Telemetry")
	}
}

// TestToolContext: a call given its context by ToolContext (what
// loop.Hooks.ToolContext calls) has its execute_tool span while it runs:
// an MCP tools/call made in it adds the MCP attributes to that span and
// sends its trace context (no span of its own, as the conventions ask);
// it completes as one span with the call's attributes (a tool not found
// renamed "unknown"), and a call whose completion never came is ended,
// cancelled, when the run ends, with its name and id.
func TestToolContext(t *testing.T) {
	tel, rec, _ := record(t, Config{})
	ctx, run := tel.StartRun(context.Background(), runInfo())
	run.Event(&loop.ToolExecutionStarted{ID: "c1", Name: "files__read", Input: []byte(`{}`)})
	cctx := run.ToolContext(ctx, "c1", "files__read")
	meta := map[string]any{}
	_, end := tel.StartMCP(cctx, MCPOperation{Client: true, Method: "tools/call", Target: "read", Meta: meta})
	end("")
	run.Event(&loop.ToolExecutionCompleted{ID: "c1", Name: "files__read", Output: []byte(`"x"`)})
	run.ToolContext(ctx, "c2", "nosuch")
	run.Event(&loop.ToolExecutionCompleted{ID: "c2", Name: "nosuch", ErrorKind: registry.NotFound})
	run.ToolContext(ctx, "c3", "files__read")
	run.Finish(nil)

	spans := byName(rec.Ended())
	tools := spans["execute_tool files__read"]
	if len(tools) != 2 || len(spans["tools/call read"]) != 0 || len(spans["execute_tool unknown"]) != 1 || len(spans["execute_tool nosuch"]) != 0 {
		t.Fatalf("spans %v (the MCP call makes no span of its own under a live execute_tool)", spans)
	}
	done, cut := tools[0], tools[1]
	if tp, _ := meta["traceparent"].(string); !strings.Contains(tp, done.SpanContext().SpanID().String()) {
		t.Errorf("traceparent %q does not name the call's span %v: the server's span would not be its child", tp, done.SpanContext())
	}
	wantAttrs(t, done, map[string]any{"gen_ai.tool.name": "files__read", "gen_ai.tool.call.id": "c1", "gen_ai.operation.name": "execute_tool", "mcp.method.name": "tools/call"})
	noAttrs(t, done, "error.type")
	wantAttrs(t, cut, map[string]any{"error.type": "cancelled", "gen_ai.tool.name": "files__read", "gen_ai.tool.call.id": "c3"})
	if cut.Status().Code != codes.Error {
		t.Errorf("an unfinished call's span: status %v", cut.Status())
	}
	wantAttrs(t, spans["execute_tool unknown"][0], map[string]any{"error.type": "not_found", "agrun.tool.requested": "nosuch"})
	var none *Run
	if none.ToolContext(ctx, "x", "y") != ctx {
		t.Error("a nil Run changes the context")
	}
}
