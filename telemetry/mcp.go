package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// MCPOperation is one MCP request, sent by agrun's MCP client or received
// by `agrun mcp serve` (package mcp's Operation, mapped by its caller:
// telemetry links no MCP SDK).
type MCPOperation struct {
	Client                     bool   // sent (a client span) or received (a server span)
	Method                     string // mcp.method.name
	Target                     string // the tool's or prompt's name, if any
	SessionID, ProtocolVersion string
	// Transport is network.transport ("pipe", "tcp"; "" unknown);
	// ServerAddress and ServerPort a client's HTTP server's.
	Transport     string
	ServerAddress string
	ServerPort    int
	// Meta is the request's params._meta: a client span's trace context
	// is written into it, a server span's parent read from it.
	Meta map[string]any
}

// metaCarrier is params._meta as a propagation.TextMapCarrier: the
// reserved keys traceparent, tracestate and baggage (SEP-414) as strings.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	if len(s) > 512 { // a W3C traceparent is 55 bytes; tracestate at most 512
		return ""
	}
	return s
}
func (m metaCarrier) Set(key, value string) { m[key] = value }
func (m metaCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// mcpPropagator carries the trace context (traceparent, tracestate) in
// params._meta, and nothing else: not the baggage, which may hold what a
// caller of agrun serve sent and is not the MCP server's to read.
var mcpPropagator = propagation.TraceContext{}

// toolSpanKey marks a context whose span is a live execute_tool span
// (Run.ToolContext): an MCP tools/call made in it adds its attributes to
// that span instead of making a span of its own, as the MCP conventions
// ask when GenAI instrumentation already traces the call.
type toolSpanKey struct{}

// StartMCP starts the span of an MCP request as the OpenTelemetry MCP
// conventions describe it (semantic-conventions-genai, docs/gen-ai/mcp.md):
// named "{mcp.method.name} {target}" (the tool or prompt name) or
// "{mcp.method.name}", kind client or server, with mcp.method.name,
// mcp.session.id, mcp.protocol.version, gen_ai.tool.name or
// gen_ai.prompt.name, and gen_ai.operation.name "execute_tool" for
// tools/call. A client span is a child of ctx's and its trace context is
// written into op.Meta (traceparent and tracestate only); a server span's
// parent is the one op.Meta carries (the client's), else ctx's. A client
// tools/call made under a live execute_tool span (Run.ToolContext) makes
// no span: the MCP attributes go on that span, as the conventions ask
// when GenAI instrumentation already traces the call, and its context is
// what op.Meta carries. The returned function ends the span with
// errorType ("" for success: error.type and an error status otherwise)
// and records mcp.client.operation.duration or
// mcp.server.operation.duration. A nil *Telemetry records nothing.
func (t *Telemetry) StartMCP(ctx context.Context, op MCPOperation) (context.Context, func(errorType string)) {
	if t == nil {
		return ctx, func(string) {}
	}
	name := word(op.Method)
	attrs := []attribute.KeyValue{attribute.String("mcp.method.name", name)}
	metricAttrs := []attribute.KeyValue{attribute.String("mcp.method.name", name)}
	var toolAttrs []attribute.KeyValue // gen_ai.* of the tool or prompt
	if op.Target != "" {
		target := word(op.Target)
		name += " " + target
		switch op.Method {
		case "tools/call":
			toolAttrs = append(toolAttrs, attribute.String("gen_ai.tool.name", target), attribute.String("gen_ai.operation.name", "execute_tool"))
			metricAttrs = append(metricAttrs, attribute.String("gen_ai.tool.name", target))
		case "prompts/get":
			toolAttrs = append(toolAttrs, attribute.String("gen_ai.prompt.name", target))
			metricAttrs = append(metricAttrs, attribute.String("gen_ai.prompt.name", target))
		}
	}
	if op.SessionID != "" {
		attrs = append(attrs, attribute.String("mcp.session.id", word(op.SessionID)))
	}
	if op.ProtocolVersion != "" {
		attrs = append(attrs, attribute.String("mcp.protocol.version", word(op.ProtocolVersion)))
		metricAttrs = append(metricAttrs, attribute.String("mcp.protocol.version", word(op.ProtocolVersion)))
	}
	if op.Transport != "" {
		attrs = append(attrs, attribute.String("network.transport", word(op.Transport)))
		metricAttrs = append(metricAttrs, attribute.String("network.transport", word(op.Transport)))
	}
	if op.Client && op.ServerAddress != "" { // the operator's config: not the other side's word
		addr := []attribute.KeyValue{attribute.String("server.address", textsafe.Clean(op.ServerAddress, 256)), attribute.Int("server.port", op.ServerPort)}
		attrs = append(attrs, addr...)
		metricAttrs = append(metricAttrs, addr...)
	}
	h := t.mcpServer
	if op.Client {
		h = t.mcpClient
	}
	start := time.Now()
	record := func(errorType string) {
		if errorType != "" {
			metricAttrs = append(metricAttrs, attribute.String("error.type", word(errorType)))
		}
		if h != nil {
			h.Record(context.Background(), time.Since(start).Seconds(), metric.WithAttributes(metricAttrs...))
		}
	}
	if tool, ok := ctx.Value(toolSpanKey{}).(trace.Span); ok && op.Client && op.Method == "tools/call" &&
		tool.IsRecording() && trace.SpanFromContext(ctx).SpanContext().Equal(tool.SpanContext()) {
		// The call's execute_tool span is live: it gets the MCP
		// attributes (its own name, error and status stay the call's),
		// and the server's span is its child.
		tool.SetAttributes(attrs...)
		if op.Meta != nil {
			mcpPropagator.Inject(ctx, metaCarrier(op.Meta))
		}
		var once sync.Once
		return ctx, func(errorType string) { once.Do(func() { record(errorType) }) }
	}
	kind := trace.SpanKindClient
	if !op.Client {
		kind = trace.SpanKindServer
		if op.Meta != nil {
			if parent := mcpPropagator.Extract(context.Background(), metaCarrier(op.Meta)); trace.SpanContextFromContext(parent).IsValid() {
				ctx = trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(parent))
			}
		}
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(start), trace.WithAttributes(append(attrs, toolAttrs...)...))
	if op.Client && op.Meta != nil {
		mcpPropagator.Inject(ctx, metaCarrier(op.Meta))
	}
	var once sync.Once
	return ctx, func(errorType string) {
		once.Do(func() {
			if errorType != "" {
				span.SetAttributes(attribute.String("error.type", word(errorType)))
				span.SetStatus(codes.Error, word(errorType))
			}
			span.End()
			record(errorType)
		})
	}
}
