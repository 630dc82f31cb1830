package telemetry

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
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

// mcpInstruments are the MCP duration histograms, made on first use.
type mcpInstruments struct {
	once           sync.Once
	client, server metric.Float64Histogram
}

var mcpMetrics sync.Map // *Telemetry -> *mcpInstruments

func (t *Telemetry) mcpInstruments() *mcpInstruments {
	v, _ := mcpMetrics.LoadOrStore(t, &mcpInstruments{})
	in := v.(*mcpInstruments)
	in.once.Do(func() {
		m := t.mp.Meter("github.com/agcore/agrun")
		in.client, _ = m.Float64Histogram("mcp.client.operation.duration", metric.WithUnit("s"),
			metric.WithDescription("The duration of the MCP request or notification as observed on the sender from the time it was sent until the response or ack is received."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		in.server, _ = m.Float64Histogram("mcp.server.operation.duration", metric.WithUnit("s"),
			metric.WithDescription("MCP request or notification duration as observed on the receiver from the time it was received until the result or ack is sent."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
	})
	return in
}

// StartMCP starts the span of an MCP request as the OpenTelemetry MCP
// conventions describe it (semantic-conventions-genai, docs/gen-ai/mcp.md):
// named "{mcp.method.name} {target}" (the tool or prompt name) or
// "{mcp.method.name}", kind client or server, with mcp.method.name,
// mcp.session.id, mcp.protocol.version, gen_ai.tool.name or
// gen_ai.prompt.name, and gen_ai.operation.name "execute_tool" for
// tools/call. A client span is a child of ctx's and its trace context is
// written into op.Meta; a server span's parent is the one op.Meta
// carries (the client's), else ctx's. The returned function ends it with
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
	if op.Target != "" {
		target := word(op.Target)
		name += " " + target
		switch op.Method {
		case "tools/call":
			attrs = append(attrs, attribute.String("gen_ai.tool.name", target), attribute.String("gen_ai.operation.name", "execute_tool"))
			metricAttrs = append(metricAttrs, attribute.String("gen_ai.tool.name", target))
		case "prompts/get":
			attrs = append(attrs, attribute.String("gen_ai.prompt.name", target))
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
	kind := trace.SpanKindClient
	if !op.Client {
		kind = trace.SpanKindServer
		if op.Meta != nil {
			if parent := Propagator.Extract(context.Background(), metaCarrier(op.Meta)); trace.SpanContextFromContext(parent).IsValid() {
				ctx = trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(parent))
			}
		}
	}
	start := time.Now()
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if op.Client && op.Meta != nil {
		Propagator.Inject(ctx, metaCarrier(op.Meta))
	}
	var once sync.Once
	return ctx, func(errorType string) {
		once.Do(func() {
			if errorType != "" {
				et := attribute.String("error.type", word(errorType))
				span.SetAttributes(et)
				span.SetStatus(codes.Error, word(errorType))
				metricAttrs = append(metricAttrs, et)
			}
			end := time.Now()
			span.End(trace.WithTimestamp(end))
			in := t.mcpInstruments()
			h := in.server
			if op.Client {
				h = in.client
			}
			if h != nil {
				h.Record(context.Background(), end.Sub(start).Seconds(), metric.WithAttributes(metricAttrs...))
			}
		})
	}
}
