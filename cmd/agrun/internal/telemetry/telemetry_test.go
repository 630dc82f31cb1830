package telemetry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/registry"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

var audit = &registry.Audit{
	Source: "wasm", MemoryPeak: 2 << 20, BytesIn: 20, BytesOut: 12, HostCalls: 3, Fuel: 1000,
	Mounts:   []registry.MountAudit{{Guest: "/docs", ReadBytes: 100, WrittenBytes: 5}},
	Requests: []registry.RequestAudit{{Method: "GET", Host: "api.example.com", Status: 200}, {Method: "GET", Host: "api.example.com", Status: 200}},
}

// aRun makes one run: a request that asks for a tool, the tool call, a
// second request, the end.
func aRun(t *Telemetry, runErr error) {
	ctx, run := t.StartRun(context.Background(), "sess1", "m1")
	_ = ctx
	start := time.Now().Add(-time.Second)
	run.Request(Request{Start: start, Duration: 300 * time.Millisecond, InputTokens: 50, OutputTokens: 7, FinishReason: "tool_calls", Prompt: "hi \x1b[31m", Completion: ""})
	run.ToolStarted("call_1", "word_count", []byte(`{"text":"secret words"}`))
	run.ToolCompleted(Tool{ID: "call_1", Name: "word_count", Duration: time.Millisecond, Output: []byte(`{"words":2}`), Audit: audit})
	run.ToolCompleted(Tool{ID: "call_2", Name: "nosuch", ErrorKind: "not_found"}) // never started
	run.Request(Request{Duration: 200 * time.Millisecond, InputTokens: 70, OutputTokens: 9, FinishReason: "stop"})
	kind := ""
	if runErr != nil {
		kind = "provider"
	}
	run.End(kind, runErr)
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		m[a.Key] = a.Value
	}
	return m
}

// TestSpans: names, GenAI attributes, the sandbox's audit, parent links,
// real start times, and no contents unless asked.
func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tel, err := setup(context.Background(), Config{}, reader, rec)
	if err != nil {
		t.Fatal(err)
	}
	aRun(tel, nil)
	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans", len(spans))
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
		byName[s.Name()] = s
	}
	if strings.Join(names, ",") != "chat m1,execute_tool word_count,execute_tool unknown,chat m1,invoke_agent agrun" {
		t.Fatalf("spans %v", names)
	}
	root := byName["invoke_agent agrun"]
	for _, s := range spans[:4] {
		if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the run", s.Name())
		}
	}
	if a := attrs(root); a["gen_ai.operation.name"].AsString() != "invoke_agent" || a["gen_ai.conversation.id"].AsString() != "sess1" {
		t.Errorf("run attributes %v", a)
	}
	chat := spans[0]
	a := attrs(chat)
	if a["gen_ai.request.model"].AsString() != "m1" || a["gen_ai.usage.input_tokens"].AsInt64() != 50 || a["gen_ai.usage.output_tokens"].AsInt64() != 7 ||
		strings.Join(a["gen_ai.response.finish_reasons"].AsStringSlice(), ",") != "tool_calls" {
		t.Errorf("chat attributes %v", a)
	}
	if d := chat.EndTime().Sub(chat.StartTime()); d != 300*time.Millisecond {
		t.Errorf("chat span lasts %v, want the request's 300ms", d)
	}
	if _, ok := a["gen_ai.input.messages"]; ok {
		t.Error("content captured without CaptureContent")
	}
	tool := attrs(byName["execute_tool word_count"])
	if tool["gen_ai.tool.name"].AsString() != "word_count" || tool["gen_ai.tool.call.id"].AsString() != "call_1" ||
		tool["agrun.sandbox.memory.peak"].AsInt64() != 2<<20 || tool["agrun.sandbox.files.read_bytes"].AsInt64() != 100 ||
		tool["agrun.sandbox.http.requests"].AsInt64() != 2 || strings.Join(tool["agrun.sandbox.http.hosts"].AsStringSlice(), ",") != "api.example.com" {
		t.Errorf("tool attributes %v", tool)
	}
	if _, ok := tool["gen_ai.tool.call.arguments"]; ok {
		t.Error("arguments captured without CaptureContent")
	}
	failed := byName["execute_tool unknown"] // no such tool: not the model's word in the span name
	if attrs(failed)["error.type"].AsString() != "not_found" || failed.Status().Code.String() != "Error" || attrs(failed)["agrun.tool.requested"].AsString() != "nosuch" {
		t.Errorf("failed tool %v %v", attrs(failed), failed.Status())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = true
			if m.Name == "gen_ai.client.token.usage" {
				var sum int64
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					sum += p.Value
				}
				if sum != 50+7+70+9 {
					t.Errorf("tokens %d", sum)
				}
			}
		}
	}
	for _, n := range []string{"agrun.tool.calls", "gen_ai.execute_tool.duration", "gen_ai.client.operation.duration", "gen_ai.client.token.usage"} {
		if !got[n] {
			t.Errorf("metric %s missing (have %v)", n, got)
		}
	}
}

// TestCaptureContent: with the opt-in, contents are recorded, cleaned.
func TestCaptureContent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tel, err := setup(context.Background(), Config{CaptureContent: true}, nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	aRun(tel, errors.New("boom"))
	spans := rec.Ended()
	if in := attrs(spans[0])["gen_ai.input.messages"].AsString(); in == "" || strings.ContainsRune(in, 0x1b) {
		t.Errorf("prompt %q", in)
	}
	if args := attrs(spans[1])["gen_ai.tool.call.arguments"].AsString(); args != `{"text":"secret words"}` {
		t.Errorf("arguments %q", args)
	}
	if root := spans[4]; root.Status().Code.String() != "Error" || attrs(root)["error.type"].AsString() != "provider" {
		t.Errorf("run status %v", root.Status())
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
	aRun(tel, nil)
	tel.WriteTree(io.Discard)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOTLPOverHTTP: spans and metrics reach a real OTLP/HTTP receiver
// (started here) as protobuf, with the configured header.
func TestOTLPOverHTTP(t *testing.T) {
	var mu sync.Mutex
	var spans []string
	var metrics []string
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
						metrics = append(metrics, m.Name)
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
	aRun(tel, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(spans) != 5 || !contains(spans, "invoke_agent agrun") || !contains(spans, "execute_tool word_count") {
		t.Fatalf("received spans %v", spans)
	}
	if !contains(metrics, "agrun.tool.calls") || header != "k" {
		t.Fatalf("received metrics %v, header %q", metrics, header)
	}
}

// TestWriteTree: the waterfall names each span under its parent, with
// tokens and errors.
func TestWriteTree(t *testing.T) {
	tel, err := Setup(context.Background(), Config{Tree: true})
	if err != nil {
		t.Fatal(err)
	}
	aRun(tel, nil)
	var b bytes.Buffer
	tel.WriteTree(&b)
	out := b.String()
	for _, want := range []string{"trace ", "invoke_agent agrun", "\n  chat m1", "50 in / 7 out tokens", "\n  execute_tool word_count", "error (not_found)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("tree lacks %q:\n%s", want, out)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestObserveRuntime: the sandbox's counters are collected as metrics:
// instances by state, compiles by result.
func TestObserveRuntime(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel, err := setup(context.Background(), Config{}, reader, tracetest.NewSpanRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.ObserveRuntime(func() RuntimeStats {
		return RuntimeStats{InstancesInUse: 2, InstancesPrepared: 1, Compiles: 5, CompileHits: 3, PreparedHits: 1}
	}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("state")
					got[m.Name+"/"+v.AsString()] = p.Value
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value("result"); ok {
						got[m.Name+"/"+v.AsString()] = p.Value
					}
				}
			}
		}
	}
	want := map[string]int64{
		"agrun.sandbox.instances/in_use": 2, "agrun.sandbox.instances/prepared": 1,
		"agrun.sandbox.compiles/compiled": 1, "agrun.sandbox.compiles/memory_hit": 3, "agrun.sandbox.compiles/prepared_hit": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	var off *Telemetry
	if err := off.ObserveRuntime(func() RuntimeStats { return RuntimeStats{} }); err != nil {
		t.Fatal(err)
	}
}
