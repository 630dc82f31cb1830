package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

var audit = &registry.Audit{
	Source: "wasm", MemoryPeak: 2 << 20, BytesIn: 20, BytesOut: 12, HostCalls: 3, Fuel: 1000,
	Mounts:   []registry.MountAudit{{Guest: "/docs", ReadBytes: 100, WrittenBytes: 5}},
	Requests: []registry.RequestAudit{{Method: "GET", Host: "api.example.com", Status: 200}, {Method: "GET", Host: "api.example.com", Status: 200}},
}

// deepseek is the provider of the runs below: its gen_ai.provider.name,
// the configured model, the base URL server.address and port come from.
var deepseek = loop.ProviderInfo{API: "chat", System: "deepseek", Model: "m1", Endpoint: "https://api.deepseek.com/v1"}

var wordCount = registry.Definition{Name: "word_count", Description: "Counts the words of a text.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}

// aRun feeds one run the way the CLI does: a streamed request retried
// once after a 429 that asks for a tool (with reasoning and a provider's
// cache and reasoning counts), the tool call, a request refused as too
// long, its trimmed retry answered in text, a call of no such tool in
// between. runErr ends it.
func aRun(t *Telemetry, info RunInfo, runErr error) {
	_, run := t.StartRun(context.Background(), info)
	start := time.Now().Add(-2 * time.Second)
	run.Message(loop.Message{Role: loop.RoleUser, Content: "count: secret words \x1b[31m"})
	run.Event(&loop.ReasoningDelta{Text: "void"})
	run.Event(&loop.Retry{Attempt: 1, Max: 2, Wait: 100 * time.Millisecond, Status: 429, Reason: "429 Too Many Requests: slow down"})
	run.Event(&loop.ReasoningDelta{Text: "Counting needs "})
	run.Event(&loop.ReasoningDelta{Text: "the tool."})
	run.LoopRequest(loop.RequestInfo{Model: "m1-0613", ResponseModel: "m1-0613", ResponseID: "resp-1", Start: start, Duration: 300 * time.Millisecond,
		Stream: true, TimeToFirstChunk: 120 * time.Millisecond, Retries: 1, FinishReason: "tool_calls",
		Usage: loop.Usage{PromptTokens: 50, CompletionTokens: 7, TotalTokens: 57, CachedTokens: 30, ReasoningTokens: 5, CacheWriteTokens: 4}})
	run.Message(loop.Message{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "call_1", Name: "word_count", Arguments: `{"text":"secret words"}`}}})
	run.Event(&loop.TurnComplete{Reason: "tool_calls"})
	run.ToolStarted("call_1", "word_count", []byte(`{"text":"secret words"}`))
	run.ToolCompleted(Tool{ID: "call_1", Name: "word_count", Duration: time.Millisecond, Output: []byte(`{"words":2}`), Audit: audit})
	run.ToolCompleted(Tool{ID: "call_2", Name: "nosuch", ErrorKind: "not_found"}) // never started
	run.Message(loop.Message{Role: loop.RoleTool, ToolCallID: "call_1", Name: "word_count", Content: `{"words":2}`})
	run.LoopRequest(loop.RequestInfo{Model: "m1", Start: start.Add(400 * time.Millisecond), Duration: 50 * time.Millisecond, Stream: true,
		Error: "loop: 400 Bad Request: prompt is too long", ErrorKind: loop.KindContextOverflow})
	run.Event(&loop.Retry{Attempt: 1, Max: 1, Reason: "the provider refused the request as too long for the model: trimmed, once more"})
	run.Event(&loop.TextDelta{Text: "Two "})
	run.Event(&loop.TextDelta{Text: "words."})
	run.LoopRequest(loop.RequestInfo{Model: "m1", ResponseModel: "m1", ResponseID: "resp-2", Start: time.Now().Add(-200 * time.Millisecond), Duration: 200 * time.Millisecond,
		Stream: true, TimeToFirstChunk: 30 * time.Millisecond, FinishReason: "stop", Usage: loop.Usage{PromptTokens: 70, CompletionTokens: 9, TotalTokens: 79}})
	run.Message(loop.Message{Role: loop.RoleAssistant, Content: "Two words."})
	run.Event(&loop.TurnComplete{Reason: "stop"})
	run.Finish(runErr)
}

func runInfo() RunInfo {
	return RunInfo{Session: "sess1", Provider: deepseek, System: "Be brief.", Tools: []registry.Definition{wordCount}}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		m[a.Key] = a.Value
	}
	return m
}

func record(t *testing.T, cfg Config) (*Telemetry, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	rec, reader := tracetest.NewSpanRecorder(), sdkmetric.NewManualReader()
	tel, err := setup(context.Background(), cfg, reader, rec)
	if err != nil {
		t.Fatal(err)
	}
	return tel, rec, reader
}

func byName(spans []sdktrace.ReadOnlySpan) map[string][]sdktrace.ReadOnlySpan {
	m := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		m[s.Name()] = append(m[s.Name()], s)
	}
	return m
}

// wantAttrs fails for each key of want that s lacks or holds another
// value for (compared as the SDK prints them).
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]any) {
	t.Helper()
	a := attrs(s)
	for k, v := range want {
		got, ok := a[attribute.Key(k)]
		if !ok {
			t.Errorf("%s: no %s (have %v)", s.Name(), k, a)
			continue
		}
		if g := got.String(); g != toValue(v).String() {
			t.Errorf("%s: %s = %s, want %v", s.Name(), k, g, v)
		}
	}
}

func toValue(v any) attribute.Value {
	switch x := v.(type) {
	case string:
		return attribute.StringValue(x)
	case int:
		return attribute.Int64Value(int64(x))
	case float64:
		return attribute.Float64Value(x)
	case bool:
		return attribute.BoolValue(x)
	case []string:
		return attribute.StringSliceValue(x)
	}
	panic(v)
}

func noAttrs(t *testing.T, s sdktrace.ReadOnlySpan, keys ...string) {
	t.Helper()
	a := attrs(s)
	for _, k := range keys {
		if v, ok := a[attribute.Key(k)]; ok {
			t.Errorf("%s: %s = %s, want none", s.Name(), k, v.String())
		}
	}
}

// TestSpans: names, kinds, parent links, real start times, and the GenAI
// attributes the conventions ask for on the run's, the requests' and the
// tool calls' spans; no contents unless asked.
func TestSpans(t *testing.T) {
	tel, rec, _ := record(t, Config{})
	aRun(tel, runInfo(), nil)
	spans := rec.Ended()
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
	}
	if strings.Join(names, ",") != "chat m1,execute_tool word_count,execute_tool unknown,chat m1,chat m1,invoke_agent agrun" {
		t.Fatalf("spans %v", names)
	}
	root := spans[len(spans)-1]
	for _, s := range spans[:len(spans)-1] {
		if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the run", s.Name())
		}
		want := trace.SpanKindInternal
		if strings.HasPrefix(s.Name(), "chat ") {
			want = trace.SpanKindClient
		}
		if s.SpanKind() != want {
			t.Errorf("%s is %v, want %v", s.Name(), s.SpanKind(), want)
		}
	}
	if root.SpanKind() != trace.SpanKindInternal {
		t.Errorf("run span kind %v", root.SpanKind())
	}
	wantAttrs(t, root, map[string]any{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agrun", "gen_ai.provider.name": "deepseek",
		"gen_ai.request.model": "m1", "gen_ai.conversation.id": "sess1",
		"gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 16, "gen_ai.usage.cache_read.input_tokens": 30, "gen_ai.usage.cache_creation.input_tokens": 4})
	noAttrs(t, root, "gen_ai.output.type", "error.type")

	first := spans[0]
	wantAttrs(t, first, map[string]any{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "deepseek", "gen_ai.request.model": "m1",
		"server.address": "api.deepseek.com", "server.port": 443, "gen_ai.conversation.id": "sess1",
		"gen_ai.response.model": "m1-0613", "gen_ai.response.id": "resp-1", "gen_ai.response.finish_reasons": []string{"tool_calls"},
		"gen_ai.usage.input_tokens": 50, "gen_ai.usage.output_tokens": 7, "gen_ai.usage.cache_read.input_tokens": 30,
		"gen_ai.usage.cache_creation.input_tokens": 4, "gen_ai.usage.reasoning.output_tokens": 5,
		"gen_ai.request.stream": true, "gen_ai.response.time_to_first_chunk": 0.12, "agrun.request.retries": 1})
	noAttrs(t, first, "gen_ai.output.type", "openai.api.type", "error.type", "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.tool.definitions")
	if d := first.EndTime().Sub(first.StartTime()); d != 300*time.Millisecond {
		t.Errorf("chat span lasts %v, want the request's 300ms", d)
	}
	if first.Status().Code.String() != "Unset" {
		t.Errorf("status %v", first.Status())
	}

	tool := byName(spans)["execute_tool word_count"][0]
	wantAttrs(t, tool, map[string]any{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "word_count", "gen_ai.tool.type": "function",
		"gen_ai.tool.call.id": "call_1", "gen_ai.agent.name": "agrun", "gen_ai.tool.description": "Counts the words of a text.",
		"agrun.sandbox.memory.peak": 2 << 20, "agrun.sandbox.files.read_bytes": 100, "agrun.sandbox.http.requests": 2,
		"agrun.sandbox.http.hosts": []string{"api.example.com"}})
	noAttrs(t, tool, "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "error.type")
	failed := byName(spans)["execute_tool unknown"][0] // no such tool: not the model's word in the span name
	wantAttrs(t, failed, map[string]any{"error.type": "not_found", "agrun.tool.requested": "nosuch"})
	noAttrs(t, failed, "gen_ai.tool.description")
	if failed.Status().Code.String() != "Error" {
		t.Errorf("failed tool status %v", failed.Status())
	}
}

// TestProviders: gen_ai.provider.name is the provider's System whatever
// its API, the Gemini API's operation is generate_content (its span
// "generate_content {model}"), OpenAI's APIs are told apart by
// openai.api.type, and an endpoint's port is its own or its scheme's.
func TestProviders(t *testing.T) {
	for _, c := range []struct {
		info            loop.ProviderInfo
		span, op        string
		address         string
		port            int
		apiType         string
		providerAttrKey string
	}{
		{loop.ProviderInfo{API: "chat", System: "openai", Model: "gpt", Endpoint: "https://api.openai.com/v1"}, "chat gpt", "chat", "api.openai.com", 443, "chat_completions", "openai"},
		{loop.ProviderInfo{API: "responses", System: "openai", Model: "gpt", Endpoint: "http://127.0.0.1:8080/v1"}, "chat gpt", "chat", "127.0.0.1", 8080, "responses", "openai"},
		{loop.ProviderInfo{API: "anthropic", System: "anthropic", Model: "claude", Endpoint: "https://api.anthropic.com"}, "chat claude", "chat", "api.anthropic.com", 443, "", "anthropic"},
		{loop.ProviderInfo{API: "gemini", System: "gcp.gemini", Model: "gemini-pro", Endpoint: "https://generativelanguage.googleapis.com"}, "generate_content gemini-pro", "generate_content", "generativelanguage.googleapis.com", 443, "", "gcp.gemini"},
		{loop.ProviderInfo{API: "mine", Model: "x", Endpoint: "http://localhost/"}, "chat x", "chat", "localhost", 80, "", "mine"},
	} {
		tel, rec, reader := record(t, Config{})
		_, r := tel.StartRun(context.Background(), RunInfo{Provider: c.info})
		r.LoopRequest(loop.RequestInfo{Duration: time.Millisecond, FinishReason: "stop", Usage: loop.Usage{PromptTokens: 1, CompletionTokens: 1}})
		r.Finish(nil)
		spans := rec.Ended()
		if spans[0].Name() != c.span {
			t.Errorf("%s: span %q, want %q", c.info.API, spans[0].Name(), c.span)
		}
		wantAttrs(t, spans[0], map[string]any{"gen_ai.operation.name": c.op, "gen_ai.provider.name": c.providerAttrKey, "server.address": c.address, "server.port": c.port})
		wantAttrs(t, spans[1], map[string]any{"gen_ai.provider.name": c.providerAttrKey})
		if c.apiType != "" {
			wantAttrs(t, spans[0], map[string]any{"openai.api.type": c.apiType})
		} else {
			noAttrs(t, spans[0], "openai.api.type")
		}
		noAttrs(t, spans[1], "gen_ai.conversation.id") // no session, no conversation id
		for _, p := range points(t, reader) {
			if p.metric == "gen_ai.client.operation.duration" && (p.attrs["gen_ai.provider.name"] != c.providerAttrKey || p.attrs["gen_ai.operation.name"] != c.op) {
				t.Errorf("%s: duration point %v", c.info.API, p.attrs)
			}
		}
	}
}

// point is one data point of a collected metric.
type point struct {
	metric, kind string
	attrs        map[string]string
	bounds       []float64
	count        uint64
	sum          float64
}

func points(t *testing.T, reader *sdkmetric.ManualReader) []point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []point
	set := func(s attribute.Set) map[string]string {
		m := map[string]string{}
		for _, kv := range s.ToSlice() {
			m[string(kv.Key)] = kv.Value.String()
		}
		return m
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, "histogram", set(p.Attributes), p.Bounds, p.Count, p.Sum})
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, "histogram", set(p.Attributes), p.Bounds, p.Count, float64(p.Sum)})
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, "sum", set(p.Attributes), nil, 1, float64(p.Value)})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, "gauge", set(p.Attributes), nil, 1, float64(p.Value)})
				}
			}
		}
	}
	return out
}

// The bucket boundaries of the GenAI metric conventions.
var (
	specDuration = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	specAgent    = []float64{0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6}
	specTokens   = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// TestMetrics: every GenAI metric is a histogram with the spec's
// buckets; gen_ai.client.token.usage counts input and output tokens per
// request by gen_ai.token.type; every gen_ai.client.* point carries the
// required operation and provider, the configured model and the server;
// a failed request's duration has its error.type and no token usage; no
// metric carries the provider's model; time to first chunk is recorded
// for streamed requests.
func TestMetrics(t *testing.T) {
	tel, _, reader := record(t, Config{})
	aRun(tel, runInfo(), nil)
	ps := points(t, reader)
	want := map[string][]float64{
		"gen_ai.client.operation.duration": specDuration, "gen_ai.client.operation.time_to_first_chunk": specDuration,
		"gen_ai.execute_tool.duration": specDuration, "gen_ai.invoke_agent.duration": specAgent, "gen_ai.client.token.usage": specTokens,
	}
	seen := map[string]int{}
	tokens := map[string]float64{}
	var durations, failures int
	for _, p := range ps {
		seen[p.metric]++
		if bounds, ok := want[p.metric]; ok && (p.kind != "histogram" || !slices.Equal(p.bounds, bounds)) {
			t.Errorf("%s: %s with bounds %v, want a histogram with %v", p.metric, p.kind, p.bounds, bounds)
		}
		if _, ok := p.attrs["gen_ai.response.model"]; ok {
			t.Errorf("%s carries the provider's model: %v", p.metric, p.attrs)
		}
		if strings.HasPrefix(p.metric, "gen_ai.client.") {
			for k, v := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "deepseek", "gen_ai.request.model": "m1", "server.address": "api.deepseek.com", "server.port": "443"} {
				if p.attrs[k] != v {
					t.Errorf("%s point %v: %s is %q, want %q", p.metric, p.attrs, k, p.attrs[k], v)
				}
			}
		}
		switch p.metric {
		case "gen_ai.client.token.usage":
			tokens[p.attrs["gen_ai.token.type"]] += p.sum
			if _, ok := p.attrs["error.type"]; ok || p.count != 2 {
				t.Errorf("token usage point %v: %d requests", p.attrs, p.count)
			}
		case "gen_ai.client.operation.duration":
			durations += int(p.count)
			if et, ok := p.attrs["error.type"]; ok {
				failures += int(p.count)
				if et != "context_overflow" {
					t.Errorf("error.type %q", et)
				}
			}
		case "gen_ai.client.operation.time_to_first_chunk":
			if p.count != 2 {
				t.Errorf("time to first chunk of %d requests, want the 2 streamed ones that succeeded", p.count)
			}
		case "gen_ai.execute_tool.duration":
			if p.attrs["gen_ai.tool.name"] == "" || p.attrs["gen_ai.tool.type"] != "function" || p.attrs["gen_ai.agent.name"] != "agrun" {
				t.Errorf("tool duration point %v", p.attrs)
			}
			if p.attrs["gen_ai.tool.name"] == "unknown" && p.attrs["error.type"] != "not_found" {
				t.Errorf("failed tool point %v", p.attrs)
			}
		case "gen_ai.invoke_agent.duration":
			if p.attrs["gen_ai.agent.name"] != "agrun" || p.attrs["gen_ai.request.model"] != "m1" || p.count != 1 {
				t.Errorf("invoke_agent point %v", p.attrs)
			}
		}
	}
	for name := range want {
		if seen[name] == 0 {
			t.Errorf("no %s (have %v)", name, seen)
		}
	}
	if seen["agrun.tool.calls"] == 0 {
		t.Errorf("no agrun.tool.calls")
	}
	if tokens["input"] != 120 || tokens["output"] != 16 || len(tokens) != 2 {
		t.Errorf("token usage by type %v", tokens)
	}
	if durations != 3 || failures != 1 {
		t.Errorf("%d request durations, %d failed", durations, failures)
	}

	// A failed run: the agent's duration has its error.type.
	tel, _, reader = record(t, Config{})
	_, r := tel.StartRun(context.Background(), runInfo())
	r.Finish(errors.New("failed"))
	for _, p := range points(t, reader) {
		if p.metric == "gen_ai.invoke_agent.duration" && p.attrs["error.type"] != "_OTHER" {
			t.Errorf("failed run point %v", p.attrs)
		}
	}
}

// TestFailedRequest: a failed request's span has its error.type and
// status and nothing a response would have told: no response model, id,
// finish reason or usage, not even zeros; an error without a kind is
// "_OTHER", and so is the loop's "other".
func TestFailedRequest(t *testing.T) {
	tel, rec, _ := record(t, Config{CaptureContent: true})
	aRun(tel, runInfo(), nil)
	failed := rec.Ended()[3]
	wantAttrs(t, failed, map[string]any{"error.type": "context_overflow", "gen_ai.request.model": "m1", "gen_ai.provider.name": "deepseek", "gen_ai.request.stream": true})
	noAttrs(t, failed, "gen_ai.response.model", "gen_ai.response.id", "gen_ai.response.finish_reasons", "gen_ai.usage.input_tokens",
		"gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.reasoning.output_tokens",
		"gen_ai.response.time_to_first_chunk", "gen_ai.output.messages")
	if failed.Status().Code.String() != "Error" || !strings.Contains(failed.Status().Description, "too long") {
		t.Errorf("status %v", failed.Status())
	}

	tel, rec, _ = record(t, Config{})
	_, r := tel.StartRun(context.Background(), runInfo())
	r.LoopRequest(loop.RequestInfo{Model: "m1", Duration: time.Millisecond, Error: "loop: something"})
	r.LoopRequest(loop.RequestInfo{Model: "m1", Duration: time.Millisecond, Error: "loop: busy", ErrorKind: loop.KindOther})
	r.Finish(errors.New("failed"))
	spans := rec.Ended()
	for _, s := range spans {
		wantAttrs(t, s, map[string]any{"error.type": "_OTHER"})
	}
	noAttrs(t, spans[0], "gen_ai.usage.input_tokens", "gen_ai.response.model")
}

// events are the names of a span's events.
func events(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

func event(s sdktrace.ReadOnlySpan, name string) (sdktrace.Event, bool) {
	for _, e := range s.Events() {
		if e.Name == name {
			return e, true
		}
	}
	return sdktrace.Event{}, false
}

// TestRetryEvents: a retried attempt is an event of its request's span
// (attempt, wait, status, reason), the trim after a context overflow and
// the schema fallback are events of the request made again (within its
// span), and a schema re-ask is an event of the run's span; gen_ai.output.type
// is json under a schema.
func TestRetryEvents(t *testing.T) {
	tel, rec, _ := record(t, Config{})
	info := runInfo()
	info.OutputType = "json"
	_, r := tel.StartRun(context.Background(), info)
	t0 := time.Now()
	r.Event(&loop.Retry{Attempt: 1, Max: 2, Wait: 2 * time.Second, Status: 429, Reason: "429 Too Many Requests: slow down"})
	r.LoopRequest(loop.RequestInfo{Start: t0.Add(-time.Millisecond), Duration: 3 * time.Second, Retries: 1, Error: "loop: 400 Bad Request: response_format is not supported", ErrorKind: loop.KindProvider})
	r.Event(&loop.Retry{Attempt: 1, Max: 1, Reason: "the provider refused response_format: the schema goes in the system prompt instead"})
	time.Sleep(2 * time.Millisecond)
	r.LoopRequest(loop.RequestInfo{Start: time.Now(), Duration: time.Millisecond, FinishReason: "stop", Usage: loop.Usage{PromptTokens: 1, CompletionTokens: 1}})
	r.Event(&loop.TurnComplete{Reason: "stop"})
	r.Event(&loop.StructuredOutput{Valid: false, Error: "not JSON", Retry: true})
	r.Message(loop.Message{Role: loop.RoleUser, Content: "[agrun: your answer does not match ...]"})
	r.LoopRequest(loop.RequestInfo{Start: time.Now(), Duration: time.Millisecond, Error: "loop: 400: prompt is too long", ErrorKind: loop.KindContextOverflow})
	r.Event(&loop.Retry{Attempt: 1, Max: 1, Reason: "the provider refused the request as too long for the model: trimmed, once more"})
	r.LoopRequest(loop.RequestInfo{Start: time.Now(), Duration: time.Millisecond, FinishReason: "stop", Usage: loop.Usage{PromptTokens: 1, CompletionTokens: 1}})
	r.Event(&loop.StructuredOutput{Valid: true, Output: json.RawMessage(`{}`)})
	r.Finish(nil)
	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range [][]string{{"agrun.retry"}, {"agrun.schema_fallback"}, nil, {"agrun.context_trimmed"}, {"agrun.schema_retry"}} {
		if got := events(spans[i]); !slices.Equal(got, want) {
			t.Errorf("%s (%d): events %v, want %v", spans[i].Name(), i, got, want)
		}
	}
	retry, _ := event(spans[0], "agrun.retry")
	ra := map[attribute.Key]attribute.Value{}
	for _, kv := range retry.Attributes {
		ra[kv.Key] = kv.Value
	}
	if ra["agrun.retry.attempt"].AsInt64() != 1 || ra["agrun.retry.max"].AsInt64() != 2 || ra["agrun.retry.wait"].AsFloat64() != 2 ||
		ra["http.response.status_code"].AsInt64() != 429 || ra["agrun.retry.reason"].AsString() != "429 Too Many Requests: slow down" {
		t.Errorf("retry event %v", ra)
	}
	if retry.Time.Before(spans[0].StartTime()) || retry.Time.After(spans[0].EndTime()) {
		t.Errorf("retry at %v, outside its span %v-%v", retry.Time, spans[0].StartTime(), spans[0].EndTime())
	}
	for _, i := range []int{1, 3} {
		e := spans[i].Events()[0]
		if e.Time.Before(spans[i].StartTime()) || e.Time.After(spans[i].EndTime()) {
			t.Errorf("%s at %v, outside its span %v-%v", e.Name, e.Time, spans[i].StartTime(), spans[i].EndTime())
		}
	}
	for _, s := range spans {
		wantAttrs(t, s, map[string]any{"gen_ai.output.type": "json"})
	}
	if e, _ := event(spans[4], "agrun.schema_retry"); len(e.Attributes) != 0 {
		t.Errorf("the schema error is content: %v", e.Attributes) // CaptureContent is off
	}
}

// TestOff: nothing configured, nothing recorded, and every method is
// safe on the nil Telemetry.
func TestOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tel, err := Setup(context.Background(), Config{})
	if err != nil || tel != nil || tel.Enabled() {
		t.Fatalf("Setup = %v, %v", tel, err)
	}
	aRun(tel, runInfo(), nil)
	_, r := tel.StartRun(context.Background(), runInfo())
	r.Resume([]loop.Message{{Role: loop.RoleUser}})
	r.End("", nil)
	tel.WriteTree(io.Discard)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOTLPOverHTTP: spans and metrics reach a real OTLP/HTTP receiver
// (started here) as protobuf, with the configured header: the spans, and
// the GenAI histograms with the spec's explicit bounds (token usage a
// histogram, not a sum).
func TestOTLPOverHTTP(t *testing.T) {
	var mu sync.Mutex
	var spans []string
	metrics := map[string]*metricpb.Metric{}
	var header string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		header = r.Header.Get("X-Api-Key")
		switch r.URL.Path {
		case "/v1/traces":
			var req colltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("traces: %v", err)
			}
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						spans = append(spans, s.Name)
					}
				}
			}
		case "/v1/metrics":
			var req collmetric.ExportMetricsServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("metrics: %v", err)
			}
			for _, rm := range req.ResourceMetrics {
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						metrics[m.Name] = m
					}
				}
			}
		default:
			t.Errorf("unexpected path %s", r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	tel, err := Setup(context.Background(), Config{Endpoint: srv.URL, Headers: map[string]string{"X-Api-Key": "k"}})
	if err != nil {
		t.Fatal(err)
	}
	aRun(tel, runInfo(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(spans) != 6 || !slices.Contains(spans, "invoke_agent agrun") || !slices.Contains(spans, "execute_tool word_count") {
		t.Fatalf("received spans %v", spans)
	}
	if metrics["agrun.tool.calls"] == nil || header != "k" {
		t.Fatalf("received metrics %v, header %q", metrics, header)
	}
	for name, bounds := range map[string][]float64{"gen_ai.client.operation.duration": specDuration, "gen_ai.client.token.usage": specTokens,
		"gen_ai.client.operation.time_to_first_chunk": specDuration, "gen_ai.execute_tool.duration": specDuration, "gen_ai.invoke_agent.duration": specAgent} {
		m := metrics[name]
		if m == nil || m.GetHistogram() == nil || len(m.GetHistogram().DataPoints) == 0 {
			t.Errorf("%s: %v, want a histogram", name, m)
			continue
		}
		for _, p := range m.GetHistogram().DataPoints {
			if !slices.Equal(p.ExplicitBounds, bounds) {
				t.Errorf("%s: bounds %v, want %v", name, p.ExplicitBounds, bounds)
			}
		}
	}
	if u := metrics["gen_ai.client.token.usage"]; u != nil && u.Unit != "{token}" || metrics["gen_ai.client.operation.duration"].GetUnit() != "s" {
		t.Errorf("units %q %q", u.GetUnit(), metrics["gen_ai.client.operation.duration"].GetUnit())
	}
}

// TestWriteTree: the waterfall names each span under its parent, with
// tokens and errors.
func TestWriteTree(t *testing.T) {
	tel, err := Setup(context.Background(), Config{Tree: true})
	if err != nil {
		t.Fatal(err)
	}
	aRun(tel, runInfo(), nil)
	var b bytes.Buffer
	tel.WriteTree(&b)
	out := b.String()
	for _, want := range []string{"trace ", "invoke_agent agrun", "120 in / 16 out tokens", "\n  chat m1", "50 in / 7 out tokens", "\n  execute_tool word_count", "error (not_found)", "error (context_overflow)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("tree lacks %q:\n%s", want, out)
		}
	}
}

// TestObserveRuntime: the sandbox's counters are collected as metrics:
// instances by state, compiles by result.
func TestObserveRuntime(t *testing.T) {
	tel, _, reader := record(t, Config{})
	if err := tel.ObserveRuntime(func() RuntimeStats {
		return RuntimeStats{InstancesInUse: 2, InstancesPrepared: 1, Compiles: 5, CompileHits: 3, PreparedHits: 1}
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, p := range points(t, reader) {
		if v, ok := p.attrs["state"]; ok {
			got[p.metric+"/"+v] = p.sum
		}
		if v, ok := p.attrs["result"]; ok {
			got[p.metric+"/"+v] = p.sum
		}
	}
	want := map[string]float64{
		"agrun.sandbox.instances/in_use": 2, "agrun.sandbox.instances/prepared": 1,
		"agrun.sandbox.compiles/compiled": 1, "agrun.sandbox.compiles/memory_hit": 3, "agrun.sandbox.compiles/prepared_hit": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	var off *Telemetry
	if err := off.ObserveRuntime(func() RuntimeStats { return RuntimeStats{} }); err != nil {
		t.Fatal(err)
	}
}

// TestTenantAttribute: every metric point and span of a run of tenant
// acme, and of a direct call of tenant globex, carries agrun.tenant with
// that tenant's name and no other; a run without a tenant (the CLI's)
// carries none.
func TestTenantAttribute(t *testing.T) {
	tel, rec, reader := record(t, Config{})
	info := runInfo()
	info.Tenant = "acme"
	aRun(tel, info, nil)
	tel.Call(context.Background(), time.Now().Add(-time.Millisecond), nil, Tool{Name: "word_count", Audit: audit, Tenant: "globex"})
	ps := points(t, reader)
	byTenant := map[string]int{}
	for _, p := range ps {
		tn, ok := p.attrs["agrun.tenant"]
		if !ok {
			t.Errorf("%s point %v has no agrun.tenant", p.metric, p.attrs)
		}
		byTenant[tn]++
		if tn == "globex" && p.metric != "agrun.tool.calls" && p.metric != "gen_ai.execute_tool.duration" {
			t.Errorf("the direct call's tenant on %s %v", p.metric, p.attrs)
		}
	}
	if byTenant["acme"] == 0 || byTenant["globex"] != 2 || len(byTenant) != 2 {
		t.Errorf("points by tenant %v", byTenant)
	}
	for _, s := range rec.Ended() {
		want := "acme"
		if !s.Parent().IsValid() && strings.HasPrefix(s.Name(), "execute_tool") {
			want = "globex" // the direct call: a root span
		}
		wantAttrs(t, s, map[string]any{"agrun.tenant": want})
	}

	tel, rec, reader = record(t, Config{})
	aRun(tel, runInfo(), nil)
	for _, p := range points(t, reader) {
		if tn, ok := p.attrs["agrun.tenant"]; ok {
			t.Errorf("%s: agrun.tenant %q without a tenant", p.metric, tn)
		}
	}
	for _, s := range rec.Ended() {
		noAttrs(t, s, "agrun.tenant")
	}
}

// TestMetricReader: Config.MetricReader alone switches telemetry on and
// reads the metrics.
func TestMetricReader(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel, err := Setup(context.Background(), Config{MetricReader: reader})
	if err != nil || tel == nil {
		t.Fatalf("Setup: %v, %v", tel, err)
	}
	defer tel.Shutdown(context.Background())
	tel.Call(context.Background(), time.Now(), nil, Tool{Name: "word_count", Tenant: "acme"})
	if ps := points(t, reader); len(ps) == 0 {
		t.Fatal("the reader read nothing")
	}
}
