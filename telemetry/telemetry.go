// Package telemetry turns agrun's runs into OpenTelemetry traces and
// metrics, following the GenAI semantic conventions (docs/OBSERVABILITY.md
// lists what is exported and the version followed): a span per run
// ("invoke_agent agrun"), per model request ("chat {model}", or
// "generate_content {model}" for the Gemini API) and per tool call
// ("execute_tool {name}"), the sandbox's audit of each call as
// agrun.sandbox.* attributes, and the GenAI histograms of durations,
// tokens and times to first chunk, with the spec's bucket boundaries.
//
// It consumes what the loop and the registry already report (events,
// request records, messages, audits) and produces spans after the fact
// with their real start and end times, so that neither runtime, registry
// nor loop imports OpenTelemetry (docs/RATIONALE.md); only a tool call's
// span is started when the call starts (Run.ToolContext), so that what
// the call does on the wire is its child.
//
//	tel, err := telemetry.Setup(ctx, telemetry.Config{Endpoint: "http://localhost:4318"})
//	defer tel.Shutdown(ctx)
//	ctx, run := tel.StartRun(ctx, telemetry.RunInfo{Session: id, Provider: p.Info(), ...})
//	// loop.Config.OnMessage: run.Message; OnRequest: run.LoopRequest;
//	// ToolContext: run.ToolContext (a call's span, live while it runs);
//	// every event of the run: run.Event
//	run.Finish(err)
//
// Off (no endpoint, no OTEL_EXPORTER_OTLP_*ENDPOINT, no tree) it costs a
// nil check per event. Contents (system prompt, messages, tool
// definitions, arguments and results) are recorded only with
// Config.CaptureContent, as valid JSON of at most MaxContent bytes each.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is [telemetry] in agrun.toml, plus the CLI's --trace.
type Config struct {
	// Endpoint is the OTLP/HTTP base URL (e.g. "http://localhost:4318");
	// traces go to Endpoint+"/v1/traces", metrics to "/v1/metrics". Empty:
	// the standard OTEL_EXPORTER_OTLP_ENDPOINT (and _TRACES_/_METRICS_
	// variants) if set, else no export.
	Endpoint string
	// Headers are sent with every export (e.g. an API key read from the
	// variable [telemetry] headers_env names). OTEL_EXPORTER_OTLP_HEADERS
	// is honoured too.
	Headers map[string]string
	// Sampling is the fraction of runs traced, 0 < s <= 1; zero means 1.
	Sampling float64
	// CaptureContent records the system prompt (gen_ai.system_instructions),
	// the tools offered (gen_ai.tool.definitions), each request's input and
	// output (gen_ai.input.messages, gen_ai.output.messages, in the
	// convention's role/parts JSON) and tool arguments and results, each
	// cleaned and bounded by MaxContent. Off by default: they may hold
	// anything the user or a tool handed over.
	CaptureContent bool
	// Tree keeps every span in memory for WriteTree (agrun run --trace).
	Tree bool
	// ServiceVersion is agrun's version, for the resource.
	ServiceVersion string
	// MetricInterval is how often metrics are exported. Zero: 60 s (the
	// SDK's default); Shutdown always exports the last values.
	MetricInterval time.Duration
	// MetricReader, if set, reads the metrics too, beside any export: an
	// sdkmetric.ManualReader in tests, or an embedder's own exporter (a
	// Prometheus one). With it Setup never returns nil.
	MetricReader sdkmetric.Reader
}

// The bounds of captured content (Config.CaptureContent). Each content
// attribute is one valid JSON value of at most MaxContent bytes: never a
// document cut mid-way. A text (a message's text, reasoning, a tool
// result or arguments that are not small JSON) is cleaned and cut to
// MaxPartContent bytes, ending in an ellipsis; gen_ai.input.messages
// then drops its oldest messages until it fits (how many in
// agrun.input.messages.dropped), and gen_ai.tool.definitions drops the
// tools' parameters, then their descriptions, then the last tools. A
// value still too large after that (one message of very many tool calls)
// has its parts cut shorter, then its last parts replaced by a note.
const (
	MaxContent     = 16 << 10
	MaxPartContent = 4 << 10
)

// spanLimits are the SDK's defaults with a cap on attribute values: a
// backstop, as every value is built to fit MaxContent.
func spanLimits() sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	l.AttributeValueLengthLimit = MaxContent
	return l
}

// word is a short value from an untrusted party (a session id from a
// serve client, a provider's model, response id or finish_reason, a
// model's call id): cleaned and cut.
func word(s string) string { return textsafe.Clean(s, 128) }

// The explicit bucket boundaries the GenAI metric conventions give:
// durationBuckets (seconds, 10 ms doubling to 81.92 s) for
// gen_ai.client.operation.duration,
// gen_ai.client.operation.time_to_first_chunk and
// gen_ai.execute_tool.duration; agentBuckets (seconds, 100 ms doubling to
// 409.6 s) for gen_ai.invoke_agent.duration; tokenBuckets (powers of 4
// from 1 to 67,108,864) for gen_ai.client.token.usage.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	agentBuckets    = []float64{0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	// mcpBuckets (seconds) are the MCP conventions' for
	// mcp.client.operation.duration and mcp.server.operation.duration.
	mcpBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
)

// Telemetry is the process's tracer and meter. A nil *Telemetry is valid
// and records nothing. It is safe for concurrent use.
type Telemetry struct {
	cfg    Config
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	tracer trace.Tracer
	tree   *treeRecorder

	toolCalls     metric.Int64Counter
	toolDuration  metric.Float64Histogram
	reqDuration   metric.Float64Histogram
	firstChunk    metric.Float64Histogram
	tokens        metric.Int64Histogram
	agentDuration metric.Float64Histogram
	mcpClient     metric.Float64Histogram
	mcpServer     metric.Float64Histogram
}

// Enabled reports whether anything is recorded.
func (t *Telemetry) Enabled() bool { return t != nil }

// CapturesContent reports whether contents (messages, tool arguments and
// results) are recorded: only then does a run need its history
// (RunInfo.History).
func (t *Telemetry) CapturesContent() bool { return t != nil && t.cfg.CaptureContent }

// envEndpoint reports whether the standard variables name an endpoint.
func envEndpoint() bool {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// Setup returns the Telemetry cfg asks for, or nil (off) when there is
// neither an endpoint nor a tree to keep. Exporting is asynchronous
// (batched); an unreachable endpoint costs dropped spans and a warning
// from the SDK, never a failed run.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	return setup(ctx, cfg, cfg.MetricReader, nil)
}

// setup is Setup with an extra metric reader and span processor (tests).
func setup(ctx context.Context, cfg Config, reader sdkmetric.Reader, sp sdktrace.SpanProcessor) (*Telemetry, error) {
	export := cfg.Endpoint != "" || envEndpoint()
	if !export && !cfg.Tree && reader == nil && sp == nil {
		return nil, nil
	}
	if cfg.Sampling < 0 || cfg.Sampling > 1 {
		return nil, fmt.Errorf("sampling %v is not between 0 and 1", cfg.Sampling)
	}
	if cfg.Sampling == 0 || cfg.Tree {
		cfg.Sampling = 1 // --trace shows the whole run
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "agrun"), attribute.String("service.version", cfg.ServiceVersion)))
	if err != nil {
		res = resource.Default()
	}
	t := &Telemetry{cfg: cfg}
	topts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		// A local parent's decision is followed; a remote one's (a serve
		// client's traceparent) is not: its flag cannot force every run
		// to be traced nor hide its runs, the ratio decides.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Sampling),
			sdktrace.WithRemoteParentSampled(sdktrace.TraceIDRatioBased(cfg.Sampling)),
			sdktrace.WithRemoteParentNotSampled(sdktrace.TraceIDRatioBased(cfg.Sampling)))),
		// A backstop under the caps of each attribute's source: no value
		// over MaxContent, no span over 128 attributes.
		sdktrace.WithRawSpanLimits(spanLimits()),
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if export {
		te, err := otlptracehttp.New(ctx, traceOptions(cfg)...)
		if err != nil {
			return nil, fmt.Errorf("trace exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(te))
		me, err := otlpmetrichttp.New(ctx, metricOptions(cfg)...)
		if err != nil {
			return nil, fmt.Errorf("metric exporter: %w", err)
		}
		var ropts []sdkmetric.PeriodicReaderOption
		if cfg.MetricInterval > 0 {
			ropts = append(ropts, sdkmetric.WithInterval(cfg.MetricInterval))
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, ropts...)))
	}
	if cfg.Tree {
		t.tree = &treeRecorder{}
		topts = append(topts, sdktrace.WithSpanProcessor(t.tree))
	}
	if sp != nil {
		topts = append(topts, sdktrace.WithSpanProcessor(sp))
	}
	if reader != nil {
		mopts = append(mopts, sdkmetric.WithReader(reader))
	}
	t.tp = sdktrace.NewTracerProvider(topts...)
	t.mp = sdkmetric.NewMeterProvider(mopts...)
	t.tracer = t.tp.Tracer("github.com/agcore/agrun")
	if err := t.instruments(); err != nil {
		return nil, err
	}
	return t, nil
}

func traceOptions(cfg Config) []otlptracehttp.Option {
	var o []otlptracehttp.Option
	if cfg.Endpoint != "" {
		o = append(o, otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/traces"))
	}
	if len(cfg.Headers) > 0 {
		o = append(o, otlptracehttp.WithHeaders(cfg.Headers))
	}
	return o
}

func metricOptions(cfg Config) []otlpmetrichttp.Option {
	var o []otlpmetrichttp.Option
	if cfg.Endpoint != "" {
		o = append(o, otlpmetrichttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/metrics"))
	}
	if len(cfg.Headers) > 0 {
		o = append(o, otlpmetrichttp.WithHeaders(cfg.Headers))
	}
	return o
}

func (t *Telemetry) instruments() error {
	m := t.mp.Meter("github.com/agcore/agrun")
	var errs []error
	var err error
	t.toolCalls, err = m.Int64Counter("agrun.tool.calls", metric.WithDescription("Tool calls, by tool and outcome (error kind, or ok)."))
	errs = append(errs, err)
	t.toolDuration, err = m.Float64Histogram("gen_ai.execute_tool.duration", metric.WithUnit("s"),
		metric.WithDescription("The duration of a single tool execution."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	t.reqDuration, err = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	t.firstChunk, err = m.Float64Histogram("gen_ai.client.operation.time_to_first_chunk", metric.WithUnit("s"),
		metric.WithDescription("Time to receive the first chunk, measured from when the client issues the generation request to when the first chunk is received in the response stream."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	t.tokens, err = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."), metric.WithExplicitBucketBoundaries(tokenBuckets...))
	errs = append(errs, err)
	t.agentDuration, err = m.Float64Histogram("gen_ai.invoke_agent.duration", metric.WithUnit("s"),
		metric.WithDescription("The end-to-end duration of a single agent invocation."), metric.WithExplicitBucketBoundaries(agentBuckets...))
	errs = append(errs, err)
	t.mcpClient, err = m.Float64Histogram("mcp.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("The duration of the MCP request or notification as observed on the sender from the time it was sent until the response or ack is received."),
		metric.WithExplicitBucketBoundaries(mcpBuckets...))
	errs = append(errs, err)
	t.mcpServer, err = m.Float64Histogram("mcp.server.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("MCP request or notification duration as observed on the receiver from the time it was received until the result or ack is sent."),
		metric.WithExplicitBucketBoundaries(mcpBuckets...))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// RuntimeStats is what ObserveRuntime reports: the sandbox's counters
// (runtime.Stats, copied by the caller so that this package does not
// import the runtime).
type RuntimeStats struct {
	InstancesInUse, InstancesPrepared   int64
	Compiles, CompileHits, PreparedHits int64
}

// ObserveRuntime reports stats at every metric collection:
// agrun.sandbox.instances (gauge, by state in_use|prepared) and
// agrun.sandbox.compiles (counter, by result compiled|memory_hit|
// prepared_hit: a compile answered by a module already held, or started
// from a prepared module on disk). Safe on a nil Telemetry.
func (t *Telemetry) ObserveRuntime(stats func() RuntimeStats) error {
	if t == nil || stats == nil {
		return nil
	}
	m := t.mp.Meter("github.com/agcore/agrun")
	inst, err := m.Int64ObservableGauge("agrun.sandbox.instances", metric.WithDescription("WebAssembly instances, by state (in_use: a call holds it; prepared: made ahead of its call)."))
	if err != nil {
		return err
	}
	comp, err := m.Int64ObservableCounter("agrun.sandbox.compiles", metric.WithDescription("Module compiles, by result (compiled, memory_hit, prepared_hit)."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := stats()
		o.ObserveInt64(inst, st.InstancesInUse, metric.WithAttributes(attribute.String("state", "in_use")))
		o.ObserveInt64(inst, st.InstancesPrepared, metric.WithAttributes(attribute.String("state", "prepared")))
		o.ObserveInt64(comp, st.Compiles-st.CompileHits-st.PreparedHits, metric.WithAttributes(attribute.String("result", "compiled")))
		o.ObserveInt64(comp, st.CompileHits, metric.WithAttributes(attribute.String("result", "memory_hit")))
		o.ObserveInt64(comp, st.PreparedHits, metric.WithAttributes(attribute.String("result", "prepared_hit")))
		return nil
	}, inst, comp)
	return err
}

// Shutdown exports what is pending and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return errors.Join(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
}

// Propagator is the W3C trace context (and baggage) propagator that
// `agrun serve` reads incoming requests with.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// agentName is gen_ai.agent.name: agrun's runs are one agent.
const agentName = "agrun"

// RunInfo is what a run says of itself to StartRun.
type RunInfo struct {
	// Session is the conversation (gen_ai.conversation.id), "" for none.
	Session string
	// Provider is the model API: System is gen_ai.provider.name, Model
	// gen_ai.request.model (of the spans and the metrics), Endpoint gives
	// server.address and server.port, API the operation ("chat", or
	// "generate_content" for "gemini").
	Provider loop.ProviderInfo
	// System is the system prompt (gen_ai.system_instructions, with
	// CaptureContent).
	System string
	// Tools are the tools offered (gen_ai.tool.definitions with
	// CaptureContent; each call's gen_ai.tool.description).
	Tools []registry.Definition
	// OutputType is "json" when the run has a response schema
	// (gen_ai.output.type, recorded only then: the convention asks for
	// it when the request names an output format), else "" or "text".
	OutputType string
	// History is, for a resumed session, the messages the run continues
	// (with CaptureContent: the start of its requests' input). Run.Resume
	// gives them once the run has started.
	History []loop.Message
	// Tenant is the agrun serve tenant whose run this is: agrun.tenant on
	// the run's spans and on every metric point it records. "" (the CLI):
	// no such attribute. It is the tenant's configured name, never a
	// token.
	Tenant string
}

// tenantKey is the attribute naming the agrun serve tenant of a run or
// a call.
const tenantKey = "agrun.tenant"

// describe is what every span and metric of one run repeats.
type describe struct {
	op, provider, model, api string
	address                  string
	port                     int
	conversation, output     string
	tenant                   string
	spanName                 string
	// metric is the attributes of the gen_ai.client.* metrics.
	metric []attribute.KeyValue
}

func describeRun(info RunInfo) describe {
	p := info.Provider
	d := describe{op: "chat", provider: word(p.System), model: word(p.Model), api: p.API, conversation: word(info.Session), tenant: word(info.Tenant)}
	if p.API == "gemini" {
		d.op = "generate_content" // the convention's operation for Gemini's generateContent
	}
	if d.provider == "" {
		d.provider = word(p.API) // gen_ai.provider.name is required: an embedder's API of its own
	}
	if d.provider == "" {
		d.provider = "unknown"
	}
	if info.OutputType != "" && info.OutputType != "text" {
		d.output = word(info.OutputType)
	}
	d.address, d.port = server(p.Endpoint)
	d.spanName = strings.TrimSpace(d.op + " " + d.model)
	d.metric = []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", d.op),
		attribute.String("gen_ai.provider.name", d.provider),
	}
	if d.model != "" {
		d.metric = append(d.metric, attribute.String("gen_ai.request.model", d.model))
	}
	if d.address != "" {
		d.metric = append(d.metric, attribute.String("server.address", d.address))
		if d.port > 0 {
			d.metric = append(d.metric, attribute.Int("server.port", d.port))
		}
	}
	d.metric = append(d.metric, tenantAttr(d.tenant)...)
	return d
}

// server is server.address and server.port of a provider's base URL: its
// host, and its port or the scheme's; "" when there is none.
func server(endpoint string) (string, int) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return "", 0
	}
	port, _ := strconv.Atoi(u.Port())
	if port <= 0 || port > 65535 {
		switch u.Scheme {
		case "https":
			port = 443
		case "http":
			port = 80
		default:
			port = 0
		}
	}
	return word(u.Hostname()), port
}

// tenantAttr is agrun.tenant for tenant, none for "".
func tenantAttr(tenant string) []attribute.KeyValue {
	if tenant == "" {
		return nil
	}
	return []attribute.KeyValue{attribute.String(tenantKey, tenant)}
}

// errorType is error.type for a loop or registry kind: the kind, or the
// convention's fallback "_OTHER" for none and for "other".
func errorType(kind string) string {
	if kind == "" || kind == string(loop.KindOther) {
		return "_OTHER"
	}
	return word(kind)
}

// Run is one run's span and the spans of its requests and tool calls. Its
// methods may be called from the goroutine consuming the run's events
// and from the loop's callbacks; a nil *Run records nothing.
type Run struct {
	t     *Telemetry
	ctx   context.Context
	span  trace.Span
	start time.Time
	d     describe
	// descs are the tools' descriptions (gen_ai.tool.description).
	descs map[string]string
	// With CaptureContent: gen_ai.system_instructions and
	// gen_ai.tool.definitions, made once.
	system, tools string

	mu    sync.Mutex
	calls map[string]toolStart
	// retries are the Retry events since the last request: span events
	// of the next request's span.
	retries []retryEvent
	// usage is what the run's requests reported.
	usage    loop.Usage
	reported bool
	// With CaptureContent: the conversation so far (the next request's
	// input), the reply and reasoning streamed since the last request,
	// and the last request's span, made once its reply's message is known.
	msgs            []loop.Message
	text, reasoning strings.Builder
	pending         *chatSpan
}

type toolStart struct {
	name  string
	start time.Time
	input string
	// span is the call's span when it was started while the call ran
	// (ToolContext), for its tool's requests to be children of; nil:
	// made when the call completes.
	span trace.Span
}

// retryEvent is a Retry event and when it came.
type retryEvent struct {
	at time.Time
	ev loop.Retry
}

// StartRun starts a run's span ("invoke_agent agrun") under whatever span
// ctx carries (a request of agrun serve's, propagated from its client).
func (t *Telemetry) StartRun(ctx context.Context, info RunInfo) (context.Context, *Run) {
	if t == nil {
		return ctx, nil
	}
	d := describeRun(info)
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", agentName),
		attribute.String("gen_ai.provider.name", d.provider),
	}
	if d.model != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.model", d.model))
	}
	if d.conversation != "" {
		attrs = append(attrs, attribute.String("gen_ai.conversation.id", d.conversation))
	}
	if d.output != "" {
		attrs = append(attrs, attribute.String("gen_ai.output.type", d.output))
	}
	attrs = append(attrs, tenantAttr(d.tenant)...)
	start := time.Now()
	ctx, span := t.tracer.Start(ctx, "invoke_agent "+agentName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	r := &Run{t: t, ctx: ctx, span: span, start: start, d: d, calls: map[string]toolStart{}}
	if len(info.Tools) > 0 {
		r.descs = make(map[string]string, len(info.Tools))
		for _, def := range info.Tools {
			r.descs[def.Name] = def.Description
		}
	}
	if t.cfg.CaptureContent {
		r.system = systemInstructions(info.System)
		r.tools = toolDefinitions(info.Tools)
		r.msgs = compactMessages(nil, info.History)
	}
	return ctx, r
}

// Resume gives, with CaptureContent, the messages of the session the run
// continues when they were loaded after StartRun (agrun serve opens the
// session under its lock once the run's span has started): as
// RunInfo.History, they open the input of the run's requests.
func (r *Run) Resume(history []loop.Message) {
	if r == nil || !r.t.cfg.CaptureContent || len(history) == 0 {
		return
	}
	r.mu.Lock()
	r.msgs = append(compactMessages(nil, history), r.msgs...)
	r.mu.Unlock()
}

// chatSpan is one model request, until its span is made.
type chatSpan struct {
	info    loop.RequestInfo
	retries []retryEvent
	// With CaptureContent: gen_ai.input.messages and how many messages
	// it left out, and what was streamed of the reply.
	input           string
	dropped         int
	text, reasoning string
}

// chat makes a request's span ("chat {model}") with its real start and
// end, its retries as events, and records its metrics. reply is the
// assistant message it produced (nil if unknown).
func (r *Run) chat(q *chatSpan, reply *loop.Message) {
	if q == nil {
		return
	}
	info, d := q.info, r.d
	failed := info.Error != ""
	attrs := append([]attribute.KeyValue{}, d.metric...)
	if d.conversation != "" {
		attrs = append(attrs, attribute.String("gen_ai.conversation.id", d.conversation))
	}
	if d.output != "" {
		attrs = append(attrs, attribute.String("gen_ai.output.type", d.output))
	}
	if d.provider == "openai" && (d.api == "chat" || d.api == "responses") {
		api := "chat_completions"
		if d.api == "responses" {
			api = "responses"
		}
		attrs = append(attrs, attribute.String("openai.api.type", api))
	}
	if info.Stream {
		attrs = append(attrs, attribute.Bool("gen_ai.request.stream", true))
	}
	attrs = append(attrs, attribute.Int("agrun.request.retries", info.Retries))
	// A failed request has no response: no model, id, finish reason or
	// usage is made up for it.
	if !failed {
		if m := word(info.ResponseModel); m != "" {
			attrs = append(attrs, attribute.String("gen_ai.response.model", m))
		}
		if id := word(info.ResponseID); id != "" {
			attrs = append(attrs, attribute.String("gen_ai.response.id", id))
		}
		if f := word(info.FinishReason); f != "" {
			attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", []string{f}))
		}
		if u := info.Usage; usageReported(u) {
			attrs = append(attrs, usageAttributes(u, true)...)
		}
		if info.Stream && info.TimeToFirstChunk > 0 {
			attrs = append(attrs, attribute.Float64("gen_ai.response.time_to_first_chunk", info.TimeToFirstChunk.Seconds()))
		}
	}
	if r.t.cfg.CaptureContent {
		if r.system != "" {
			attrs = append(attrs, attribute.String("gen_ai.system_instructions", r.system))
		}
		if r.tools != "" {
			attrs = append(attrs, attribute.String("gen_ai.tool.definitions", r.tools))
		}
		attrs = append(attrs, attribute.String("gen_ai.input.messages", q.input))
		if q.dropped > 0 {
			attrs = append(attrs, attribute.Int("agrun.input.messages.dropped", q.dropped))
		}
		if !failed {
			attrs = append(attrs, attribute.String("gen_ai.output.messages", outputMessages(q, reply)))
		}
	}
	start := info.Start
	if start.IsZero() {
		start = time.Now().Add(-info.Duration)
	}
	end := start.Add(info.Duration)
	_, span := r.t.tracer.Start(r.ctx, d.spanName, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	for _, e := range q.retries {
		at := e.at
		if at.Before(start) {
			at = start // a trim or a schema fallback comes just before the request it makes again
		}
		if at.After(end) {
			at = end
		}
		name, eattrs := retryEventOf(e.ev)
		span.AddEvent(name, trace.WithTimestamp(at), trace.WithAttributes(eattrs...))
	}
	if failed {
		span.SetAttributes(attribute.String("error.type", errorType(string(info.ErrorKind))))
		span.SetStatus(codes.Error, textsafe.Clean(info.Error, 256))
	}
	span.End(trace.WithTimestamp(end))

	dur := d.metric
	if failed {
		dur = append(append([]attribute.KeyValue{}, d.metric...), attribute.String("error.type", errorType(string(info.ErrorKind))))
	}
	r.t.reqDuration.Record(r.ctx, info.Duration.Seconds(), metric.WithAttributes(dur...))
	if !failed && usageReported(info.Usage) {
		in := append(append([]attribute.KeyValue{}, d.metric...), attribute.String("gen_ai.token.type", "input"))
		out := append(append([]attribute.KeyValue{}, d.metric...), attribute.String("gen_ai.token.type", "output"))
		r.t.tokens.Record(r.ctx, max(info.Usage.PromptTokens, 0), metric.WithAttributes(in...))
		r.t.tokens.Record(r.ctx, max(info.Usage.CompletionTokens, 0), metric.WithAttributes(out...))
	}
	if !failed && info.Stream && info.TimeToFirstChunk > 0 {
		r.t.firstChunk.Record(r.ctx, info.TimeToFirstChunk.Seconds(), metric.WithAttributes(d.metric...))
	}
}

// retryEventOf is the span event of a Retry: "agrun.context_trimmed" for
// the loop's retry of a request refused as too long for the model (made
// again trimmed), "agrun.schema_fallback" for its retry of a request
// whose response schema the provider refused (made again with the schema
// in the system prompt), else "agrun.retry" (a failed attempt retried).
func retryEventOf(ev loop.Retry) (string, []attribute.KeyValue) {
	reason := textsafe.Clean(ev.Reason, 300)
	adapted := ev.Status == 0 && ev.Wait == 0 && ev.Max == 1
	switch {
	case adapted && strings.Contains(ev.Reason, "too long"):
		return "agrun.context_trimmed", []attribute.KeyValue{attribute.String("agrun.retry.reason", reason)}
	case adapted && strings.Contains(ev.Reason, "response_format"):
		return "agrun.schema_fallback", []attribute.KeyValue{attribute.String("agrun.retry.reason", reason)}
	}
	kv := []attribute.KeyValue{
		attribute.Int("agrun.retry.attempt", ev.Attempt),
		attribute.Int("agrun.retry.max", ev.Max),
		attribute.Float64("agrun.retry.wait", ev.Wait.Seconds()),
		attribute.String("agrun.retry.reason", reason),
	}
	if ev.Status != 0 {
		kv = append(kv, attribute.Int("http.response.status_code", ev.Status))
	}
	return "agrun.retry", kv
}

// usageReported reports whether the provider reported any usage.
func usageReported(u loop.Usage) bool {
	return u.PromptTokens > 0 || u.CompletionTokens > 0 || u.TotalTokens > 0
}

// usageAttributes are the gen_ai.usage.* attributes of u; the cache and
// reasoning counts only where reported (they are parts of the input and
// output counts).
func usageAttributes(u loop.Usage, reasoning bool) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		attribute.Int64("gen_ai.usage.input_tokens", u.PromptTokens),
		attribute.Int64("gen_ai.usage.output_tokens", u.CompletionTokens),
	}
	if u.CachedTokens > 0 {
		kv = append(kv, attribute.Int64("gen_ai.usage.cache_read.input_tokens", u.CachedTokens))
	}
	if u.CacheWriteTokens > 0 {
		kv = append(kv, attribute.Int64("gen_ai.usage.cache_creation.input_tokens", u.CacheWriteTokens))
	}
	if reasoning && u.ReasoningTokens > 0 {
		kv = append(kv, attribute.Int64("gen_ai.usage.reasoning.output_tokens", u.ReasoningTokens))
	}
	return kv
}

// ToolStarted notes when tool call id started.
func (r *Run) ToolStarted(id, name string, input []byte) {
	if r == nil {
		return
	}
	ts := toolStart{name: name, start: time.Now()}
	if r.t.cfg.CaptureContent {
		ts.input = string(input)
	}
	r.mu.Lock()
	r.calls[id] = ts
	r.mu.Unlock()
}

// ToolContext is the context call id of tool name runs in: ctx with the
// call's "execute_tool {name}" span, started now (its attributes come
// when it completes, ToolCompleted), so that the tool's own requests —
// an MCP server's tools/call (StartMCP), an HTTP request — are its
// children. For loop.Hooks.ToolContext. A nil Run returns ctx.
func (r *Run) ToolContext(ctx context.Context, id, name string) context.Context {
	if r == nil {
		return ctx
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ts, ok := r.calls[id]
	if !ok {
		ts = toolStart{name: name, start: time.Now()}
	}
	if ts.span != nil { // an id the model used twice: one span each is not possible; the first keeps it
		return ctx
	}
	spanName := name
	if !registry.ValidName(spanName) {
		spanName = "unknown"
	}
	ctx, ts.span = r.t.tracer.Start(ctx, "execute_tool "+spanName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(ts.start))
	r.calls[id] = ts
	return context.WithValue(ctx, toolSpanKey{}, ts.span)
}

// Tool is one finished tool call.
type Tool struct {
	ID, Name string
	Duration time.Duration
	// ErrorKind is the registry's kind ("" on success).
	ErrorKind string
	// Output is recorded only with CaptureContent, and only for a call
	// that succeeded.
	Output []byte
	Audit  *registry.Audit
	// Tenant is the agrun serve tenant that made the call (agrun.tenant
	// on its span and metric points). Within a run: the run's
	// (RunInfo.Tenant) when empty.
	Tenant string
}

// ToolCompleted records a tool call's span ("execute_tool {name}"), from
// its ToolStarted (or Duration before now, for a call that never
// started), with the sandbox's audit as attributes.
func (r *Run) ToolCompleted(c Tool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	ts, ok := r.calls[c.ID]
	delete(r.calls, c.ID)
	r.mu.Unlock()
	end := time.Now()
	if !ok {
		ts = toolStart{name: c.Name, start: end.Add(-c.Duration)}
	}
	if c.Tenant == "" {
		c.Tenant = r.d.tenant
	}
	r.t.toolSpan(r.ctx, ts, end, c, true, r.descs[c.Name])
}

// Call records a tool call made outside a run (agrun serve's POST
// /v1/tools/{name}/call) as an "execute_tool {name}" span under whatever
// span ctx carries, from start to now. input is recorded only with
// CaptureContent.
func (t *Telemetry) Call(ctx context.Context, start time.Time, input []byte, c Tool) {
	if t == nil {
		return
	}
	ts := toolStart{name: c.Name, start: start}
	if t.cfg.CaptureContent {
		ts.input = string(input)
	}
	t.toolSpan(ctx, ts, time.Now(), c, false, "")
}

// toolSpan records one tool call's span and metrics; agent says a run
// made it (gen_ai.agent.name), desc is the tool's description.
func (t *Telemetry) toolSpan(ctx context.Context, ts toolStart, end time.Time, c Tool, agent bool, desc string) {
	// The name is the model's word: a call of no registered tool (or one
	// not a valid name) is "unknown" in the span's name and the metrics,
	// so that a model cannot create series or send text at will; what it
	// asked for is kept, cleaned and cut, as one attribute.
	toolName := c.Name
	var requested []attribute.KeyValue
	if !registry.ValidName(toolName) || c.ErrorKind == string(registry.NotFound) {
		requested = append(requested, attribute.String("agrun.tool.requested", textsafe.Clean(toolName, 64)))
		toolName, desc = "unknown", ""
	}
	name := attribute.String("gen_ai.tool.name", toolName)
	kind := attribute.String("gen_ai.tool.type", "function")
	attrs := append([]attribute.KeyValue{attribute.String("gen_ai.operation.name", "execute_tool"), name, kind}, requested...)
	metricAttrs := tenantAttr(word(c.Tenant))
	attrs = append(attrs, metricAttrs...)
	if agent {
		attrs = append(attrs, attribute.String("gen_ai.agent.name", agentName))
		metricAttrs = append(metricAttrs, attribute.String("gen_ai.agent.name", agentName))
	}
	if desc != "" {
		attrs = append(attrs, attribute.String("gen_ai.tool.description", textsafe.Clean(desc, 256)))
	}
	if c.ID != "" { // a direct call (serve's /call) has no call id
		attrs = append(attrs, attribute.String("gen_ai.tool.call.id", word(c.ID)))
	}
	if d := permissionDecision(c.ErrorKind); d != "" {
		attrs = append(attrs, attribute.String("agrun.permission.decision", d))
	}
	attrs = append(attrs, auditAttributes(c.Audit)...)
	if t.cfg.CaptureContent {
		if ts.input != "" { // a call that never started has none
			attrs = append(attrs, attribute.String("gen_ai.tool.call.arguments", jsonValue(ts.input, MaxContent)))
		}
		if c.ErrorKind == "" && len(c.Output) > 0 { // the result of a call that succeeded
			attrs = append(attrs, attribute.String("gen_ai.tool.call.result", jsonValue(string(c.Output), MaxContent)))
		}
	}
	span := ts.span
	if span == nil {
		_, span = t.tracer.Start(ctx, "execute_tool "+toolName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(ts.start), trace.WithAttributes(attrs...))
	} else {
		span.SetName("execute_tool " + toolName) // "unknown" for a tool not found
		span.SetAttributes(attrs...)
	}
	outcome := "ok"
	if c.ErrorKind != "" {
		outcome = c.ErrorKind
		et := attribute.String("error.type", errorType(c.ErrorKind))
		span.SetAttributes(et)
		span.SetStatus(codes.Error, c.ErrorKind)
		metricAttrs = append(metricAttrs, et)
	}
	span.End(trace.WithTimestamp(end))
	t.toolCalls.Add(ctx, 1, metric.WithAttributes(append(tenantAttr(word(c.Tenant)), name, attribute.String("agrun.outcome", outcome))...))
	t.toolDuration.Record(ctx, end.Sub(ts.start).Seconds(), metric.WithAttributes(append(metricAttrs, name, kind)...))
}

// End ends the run's span; err (nil on success) sets its status, and
// kind (its loop kind) its error.type. The requests' usage is summed on
// it, and its duration is gen_ai.invoke_agent.duration.
func (r *Run) End(kind string, err error) {
	if r == nil {
		return
	}
	r.flush()
	r.mu.Lock()
	usage, reported := r.usage, r.reported
	open := map[string]toolStart{}
	for id, ts := range r.calls {
		if ts.span != nil {
			open[id] = ts
			delete(r.calls, id)
		}
	}
	r.mu.Unlock()
	// A call whose completion the run never reported (its consumer
	// stopped) still ends its span, cancelled, before the run's.
	for id, ts := range open {
		r.t.toolSpan(r.ctx, ts, time.Now(), Tool{ID: id, Name: ts.name, ErrorKind: "cancelled"}, true, r.descs[ts.name])
	}
	if reported {
		r.span.SetAttributes(usageAttributes(usage, false)...)
	}
	attrs := append([]attribute.KeyValue{attribute.String("gen_ai.agent.name", agentName)}, tenantAttr(r.d.tenant)...)
	if r.d.model != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.model", r.d.model))
	}
	if err != nil {
		et := attribute.String("error.type", errorType(kind))
		r.span.SetAttributes(et)
		r.span.SetStatus(codes.Error, textsafe.Clean(err.Error(), 256))
		attrs = append(attrs, et)
	}
	end := time.Now()
	r.span.End(trace.WithTimestamp(end))
	r.t.agentDuration.Record(r.ctx, end.Sub(r.start).Seconds(), metric.WithAttributes(attrs...))
}

// auditAttributes are the sandbox's record of a call as agrun.sandbox.*
// attributes: no paths (they can be many and private), only the hosts
// contacted.
func auditAttributes(a *registry.Audit) []attribute.KeyValue {
	if a == nil {
		return nil
	}
	kv := []attribute.KeyValue{
		attribute.String("agrun.sandbox.source", a.Source),
		attribute.Int64("agrun.sandbox.bytes_in", a.BytesIn),
		attribute.Int64("agrun.sandbox.bytes_out", a.BytesOut),
	}
	if a.Source != "wasm" {
		return kv
	}
	var read, written int64
	for _, m := range a.Mounts {
		read += m.ReadBytes
		written += m.WrittenBytes
	}
	hosts := []string{}
	seen := map[string]bool{}
	for _, q := range a.Requests {
		if !seen[q.Host] {
			seen[q.Host] = true
			hosts = append(hosts, q.Host)
		}
	}
	return append(kv,
		attribute.Int64("agrun.sandbox.memory.peak", a.MemoryPeak),
		attribute.Float64("agrun.sandbox.cpu", a.CPU.Seconds()),
		attribute.Int64("agrun.sandbox.fuel", a.Fuel),
		attribute.Int64("agrun.sandbox.host_calls", a.HostCalls),
		attribute.Int64("agrun.sandbox.files.read_bytes", read),
		attribute.Int64("agrun.sandbox.files.written_bytes", written),
		attribute.Int("agrun.sandbox.http.requests", len(a.Requests)+a.MoreRequests),
		attribute.StringSlice("agrun.sandbox.http.hosts", hosts),
	)
}

// permissionDecision is what the permission policy decided for a call
// that ended with kind: "denied" (permission_denied: by the policy before
// the call, or by the sandbox when the guest used a capability it was not
// granted), "" when the call never reached the check (not_found), else
// "allowed" (the registry checks permissions before validating and
// running).
func permissionDecision(kind string) string {
	switch registry.Kind(kind) {
	case registry.PermissionDenied:
		return "denied"
	case registry.NotFound:
		return ""
	}
	return "allowed"
}
