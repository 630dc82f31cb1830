// Package telemetry turns agrun's runs into OpenTelemetry traces and
// metrics, following the GenAI semantic conventions: a span per run
// ("invoke_agent agrun"), per model request ("chat {model}") and per tool
// call ("execute_tool {name}"), the sandbox's audit of each call as
// agrun.sandbox.* attributes, and counters and histograms of calls,
// durations and tokens.
//
// It consumes what the loop and the registry already report (events,
// request records, audits) and produces spans after the fact with their
// real start and end times, so that neither runtime, registry nor loop
// imports OpenTelemetry (docs/ARCHITECTURE.md).
//
//	tel, err := telemetry.Setup(ctx, telemetry.Config{Endpoint: "http://localhost:4318"})
//	defer tel.Shutdown(ctx)
//	ctx, run := tel.StartRun(ctx, sessionID, model)
//	run.Request(telemetry.Request{...}) // each model request
//	run.ToolStarted(id, name, input); run.ToolCompleted(...)
//	run.End(err)
//
// Off (no endpoint, no OTEL_EXPORTER_OTLP_*ENDPOINT, no tree) it costs a
// nil check per event. Contents (prompts, completions, tool arguments and
// results) are recorded only with Config.CaptureContent.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
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
	// CaptureContent records prompts, completions, tool arguments and
	// results (cut to MaxContent bytes) as span attributes. Off by default:
	// they may hold anything the user or a tool handed over.
	CaptureContent bool
	// Tree keeps every span in memory for WriteTree (agrun run --trace).
	Tree bool
	// ServiceVersion is agrun's version, for the resource.
	ServiceVersion string
	// MetricInterval is how often metrics are exported. Zero: 60 s (the
	// SDK's default); Shutdown always exports the last values.
	MetricInterval time.Duration
}

// MaxContent cuts each captured content attribute.
const MaxContent = 8 << 10

// spanLimits are the SDK's defaults with a cap on attribute values.
func spanLimits() sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	l.AttributeValueLengthLimit = MaxContent
	return l
}

// word is a short value from an untrusted party (a session id from a
// serve client, a provider's model or finish_reason, a model's call id):
// cleaned and cut.
func word(s string) string { return textsafe.Clean(s, 128) }

// Telemetry is the process's tracer and meter. A nil *Telemetry is valid
// and records nothing. It is safe for concurrent use.
type Telemetry struct {
	cfg    Config
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	tracer trace.Tracer
	tree   *treeRecorder

	toolCalls    metric.Int64Counter
	toolDuration metric.Float64Histogram
	reqDuration  metric.Float64Histogram
	tokens       metric.Int64Counter
}

// Enabled reports whether anything is recorded.
func (t *Telemetry) Enabled() bool { return t != nil }

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
	return setup(ctx, cfg, nil, nil)
}

// setup is Setup with an extra metric reader and span processor (tests).
func setup(ctx context.Context, cfg Config, reader sdkmetric.Reader, sp sdktrace.SpanProcessor) (*Telemetry, error) {
	export := cfg.Endpoint != "" || envEndpoint()
	if !export && !cfg.Tree && reader == nil && sp == nil {
		return nil, nil
	}
	if cfg.Sampling < 0 || cfg.Sampling > 1 {
		return nil, fmt.Errorf("telemetry: sampling %v is not between 0 and 1", cfg.Sampling)
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
			return nil, fmt.Errorf("telemetry: trace exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(te))
		me, err := otlpmetrichttp.New(ctx, metricOptions(cfg)...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: metric exporter: %w", err)
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
	t.toolDuration, err = m.Float64Histogram("gen_ai.execute_tool.duration", metric.WithUnit("s"), metric.WithDescription("Duration of tool calls."))
	errs = append(errs, err)
	t.reqDuration, err = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"), metric.WithDescription("Duration of model requests."))
	errs = append(errs, err)
	t.tokens, err = m.Int64Counter("gen_ai.client.token.usage", metric.WithUnit("{token}"), metric.WithDescription("Tokens used, by type (input, output)."))
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

// Run is one run's span and the spans of its requests and tool calls. Its
// methods may be called from the goroutine consuming the run's events;
// a nil *Run records nothing.
type Run struct {
	t     *Telemetry
	ctx   context.Context
	span  trace.Span
	model string

	mu    sync.Mutex
	tools map[string]toolStart
	// With CaptureContent: the messages since the last request (its
	// input) and the reply text streamed so far (its output).
	input []string
	text  strings.Builder
}

type toolStart struct {
	name  string
	start time.Time
	input string
}

// StartRun starts a run's span ("invoke_agent agrun") under whatever span
// ctx carries (a request of agrun serve's, propagated from its client).
func (t *Telemetry) StartRun(ctx context.Context, session, model string) (context.Context, *Run) {
	if t == nil {
		return ctx, nil
	}
	ctx, span := t.tracer.Start(ctx, "invoke_agent agrun", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", "agrun"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", model),
		attribute.String("gen_ai.conversation.id", word(session)),
	))
	return ctx, &Run{t: t, ctx: ctx, span: span, model: model, tools: map[string]toolStart{}}
}

// Request is one finished model request.
type Request struct {
	Model        string
	Start        time.Time
	Duration     time.Duration
	InputTokens  int64
	OutputTokens int64
	FinishReason string
	Retries      int
	// ErrorKind is the loop's kind when the request failed.
	ErrorKind string
	// Prompt and Completion are recorded only with CaptureContent.
	Prompt, Completion string
}

// Request records a model request's span ("chat {model}") with its real
// start and end.
func (r *Run) Request(q Request) {
	if r == nil {
		return
	}
	// The configured model names the span and the metrics (the provider
	// says which model answered: gen_ai.response.model, an attribute
	// only, so that a provider cannot create metric series at will).
	model := r.model
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", model),
		attribute.Int64("gen_ai.usage.input_tokens", q.InputTokens),
		attribute.Int64("gen_ai.usage.output_tokens", q.OutputTokens),
		attribute.Int("agrun.request.retries", q.Retries),
	}
	if q.Model != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", word(q.Model)))
	}
	if q.FinishReason != "" {
		attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", []string{word(q.FinishReason)}))
	}
	if r.t.cfg.CaptureContent {
		attrs = append(attrs, content("gen_ai.input.messages", q.Prompt), content("gen_ai.output.messages", q.Completion))
	}
	start := q.Start
	if start.IsZero() {
		start = time.Now().Add(-q.Duration)
	}
	_, span := r.t.tracer.Start(r.ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if q.ErrorKind != "" {
		span.SetAttributes(attribute.String("error.type", q.ErrorKind))
		span.SetStatus(codes.Error, q.ErrorKind)
	}
	span.End(trace.WithTimestamp(start.Add(q.Duration)))
	kind := attribute.String("gen_ai.request.model", model)
	r.t.reqDuration.Record(r.ctx, q.Duration.Seconds(), metric.WithAttributes(kind, attribute.String("gen_ai.operation.name", "chat")))
	r.t.tokens.Add(r.ctx, q.InputTokens, metric.WithAttributes(kind, attribute.String("gen_ai.token.type", "input")))
	r.t.tokens.Add(r.ctx, q.OutputTokens, metric.WithAttributes(kind, attribute.String("gen_ai.token.type", "output")))
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
	r.tools[id] = ts
	r.mu.Unlock()
}

// Tool is one finished tool call.
type Tool struct {
	ID, Name string
	Duration time.Duration
	// ErrorKind is the registry's kind ("" on success).
	ErrorKind string
	// Output is recorded only with CaptureContent.
	Output []byte
	Audit  *registry.Audit
}

// ToolCompleted records a tool call's span ("execute_tool {name}"), from
// its ToolStarted (or Duration before now, for a call that never
// started), with the sandbox's audit as attributes.
func (r *Run) ToolCompleted(c Tool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	ts, ok := r.tools[c.ID]
	delete(r.tools, c.ID)
	r.mu.Unlock()
	end := time.Now()
	if !ok {
		ts = toolStart{name: c.Name, start: end.Add(-c.Duration)}
	}
	r.t.toolSpan(r.ctx, ts, end, c)
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
	t.toolSpan(ctx, ts, time.Now(), c)
}

// toolSpan records one tool call's span and metrics.
func (t *Telemetry) toolSpan(ctx context.Context, ts toolStart, end time.Time, c Tool) {
	// The name is the model's word: a call of no registered tool (or one
	// not a valid name) is "unknown" in the span's name and the metrics,
	// so that a model cannot create series or send text at will; what it
	// asked for is kept, cleaned and cut, as one attribute.
	toolName := c.Name
	var requested []attribute.KeyValue
	if !registry.ValidName(toolName) || c.ErrorKind == string(registry.NotFound) {
		requested = append(requested, attribute.String("agrun.tool.requested", textsafe.Clean(toolName, 64)))
		toolName = "unknown"
	}
	attrs := append([]attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", toolName),
		attribute.String("gen_ai.tool.type", "function"),
	}, requested...)
	if c.ID != "" { // a direct call (serve's /call) has no call id
		attrs = append(attrs, attribute.String("gen_ai.tool.call.id", word(c.ID)))
	}
	if d := permissionDecision(c.ErrorKind); d != "" {
		attrs = append(attrs, attribute.String("agrun.permission.decision", d))
	}
	attrs = append(attrs, auditAttributes(c.Audit)...)
	if t.cfg.CaptureContent {
		attrs = append(attrs, content("gen_ai.tool.call.arguments", ts.input), content("gen_ai.tool.call.result", string(c.Output)))
	}
	_, span := t.tracer.Start(ctx, "execute_tool "+toolName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(ts.start), trace.WithAttributes(attrs...))
	outcome := "ok"
	if c.ErrorKind != "" {
		outcome = c.ErrorKind
		span.SetAttributes(attribute.String("error.type", c.ErrorKind))
		span.SetStatus(codes.Error, c.ErrorKind)
	}
	span.End(trace.WithTimestamp(end))
	name := attribute.String("gen_ai.tool.name", toolName)
	t.toolCalls.Add(ctx, 1, metric.WithAttributes(name, attribute.String("agrun.outcome", outcome)))
	t.toolDuration.Record(ctx, end.Sub(ts.start).Seconds(), metric.WithAttributes(name))
}

// End ends the run's span; err (nil on success) sets its status.
func (r *Run) End(kind string, err error) {
	if r == nil {
		return
	}
	if err != nil {
		r.span.SetAttributes(attribute.String("error.type", kind))
		r.span.SetStatus(codes.Error, textsafe.Clean(err.Error(), 256))
	}
	r.span.End()
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

func content(key, s string) attribute.KeyValue {
	return attribute.String(key, textsafe.Clean(s, MaxContent))
}
