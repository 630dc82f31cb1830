package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/audit/lpriv"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
	collmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// readerTool is a read_file granted more than it needs: its docs mount
// read-write (it only reads) and a notes mount it never touches.
const readerTool = `
[tools.reader]
wasm = %q
mounts = ["./docs:/docs:rw", "./notes:/notes:ro"]
memory = "32MiB"
`

func withReader(t *testing.T) string {
	return fmt.Sprintf(readerTool, filepath.Join(repoRoot(t), "testdata/read_file.wasm"))
}

// TestAuditSuggestsReadOnly: real runs of the example read_file, granted
// its docs mount rw and a notes mount, leave call records with the
// sandbox's audit in the session; agrun audit reads them and suggests the
// docs mount read-only, the notes mount dropped, and smaller limits.
func TestAuditSuggestsReadOnly(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "reader", Args: `{"path":"/docs/hello.txt"}`}}},
		chattest.Reply{Text: "It says hello."},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_2", Name: "reader", Args: `{"path":"/docs"}`}, {ID: "call_3", Name: "word_count", Args: `{"text":"a b"}`}}},
		chattest.Reply{Text: "One file."},
	)
	e := newTestEnv(t, srv.URL, withReader(t))
	e.run("", "run", "--session", "a1", "what does hello.txt say?").wantCode(t, exitOK)
	e.run("", "run", "--session", "a2", "list the docs").wantCode(t, exitOK)

	// The records: one per call, beside the messages, with the audit.
	st, err := session.OpenFiles(filepath.Join(e.dir, "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	calls, _, err := st.Calls("a1")
	if err != nil || len(calls) != 1 {
		t.Fatalf("a1 calls %+v, %v", calls, err)
	}
	c := calls[0]
	if c.Tool != "reader" || c.ID != "call_1" || c.ErrorKind != "" || c.Audit == nil || c.Audit.Source != "wasm" || len(c.Audit.Mounts) != 2 {
		t.Fatalf("a1 call %+v", c)
	}
	if m := c.Audit.Mounts[0]; m.Guest != "/docs" || m.ReadBytes != int64(len("hello from the mount\n")) || len(m.Paths) != 1 || m.Paths[0].Path != "/docs/hello.txt" {
		t.Fatalf("a1 docs mount %+v", m)
	}
	r := e.run("", "sessions", "show", "--json", "a1").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"call":{"tool":"reader","id":"call_1"`) {
		t.Fatalf("sessions show --json lacks the call record:\n%s", r.stdout)
	}

	r = e.run("", "audit", "--json").wantCode(t, exitOK)
	var rep lpriv.Summary
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("audit --json: %v\n%s", err, r.stdout)
	}
	var reader *lpriv.Report
	for i := range rep.Tools {
		if rep.Tools[i].Tool == "reader" {
			reader = &rep.Tools[i]
		}
	}
	if rep.Sessions != 2 || reader == nil {
		t.Fatalf("audit: %+v", rep)
	}
	if reader.Calls != 2 || reader.Failed != 0 || len(reader.Mounts) != 2 || reader.Mounts[0].Suggest != "ro" || !reader.Mounts[0].Read || reader.Mounts[0].Wrote || reader.Mounts[1].Suggest != "" {
		t.Fatalf("reader report %+v", reader)
	}
	if reader.Memory.Current != 32<<20 || reader.Memory.Observed <= 0 || reader.Memory.Suggest >= 32<<20 || reader.Timeout.Current != int64(10e9) {
		t.Fatalf("reader limits %+v %+v", reader.Memory, reader.Timeout)
	}
	if want := `mounts = ["./docs:/docs:ro"]`; !strings.Contains(reader.TOML, want) || !strings.Contains(reader.TOML, "[tools.reader]\nwasm = ") || !strings.Contains(reader.TOML, "allowed_hosts = []") {
		t.Fatalf("suggestion lacks %s:\n%s", want, reader.TOML)
	}

	// The readable report says the same, with the block to paste.
	r = e.run("", "audit", "--tool", "reader").wantCode(t, exitOK)
	for _, want := range []string{"## reader: 2 calls", "/docs", "only read (2 calls)", "/notes", "never touched", "drop", "memory", "32MiB",
		"    [tools.reader]\n", `    mounts = ["./docs:/docs:ro"]`} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("audit lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "word_count") {
		t.Fatalf("--tool reader shows another tool:\n%s", r.stdout)
	}
	// --session reads one session; --since a window.
	r = e.run("", "audit", "--json", "--session", "a1", "--tool", "reader").wantCode(t, exitOK)
	rep = lpriv.Summary{}
	json.Unmarshal([]byte(r.stdout), &rep)
	if rep.Sessions != 1 || len(rep.Tools) != 1 || rep.Tools[0].Calls != 1 {
		t.Fatalf("--session a1: %s", r.stdout)
	}
	r = e.run("", "audit", "--since", "1h", "--json").wantCode(t, exitOK)
	rep = lpriv.Summary{}
	json.Unmarshal([]byte(r.stdout), &rep)
	if rep.Since.IsZero() || len(rep.Tools) == 0 {
		t.Fatalf("--since 1h: %s", r.stdout)
	}
	e.run("", "audit", "--tool", "nosuch").wantCode(t, exitUsage)
	e.run("", "audit", "--since", "soon").wantCode(t, exitUsage)
	e.run("", "audit", "--session", "nosuch").wantCode(t, exitFailure)
}

// TestCallAudit: call --json --audit adds the audit beside the result;
// without --audit the object is as before; --audit alone is a usage
// error.
func TestCallAudit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	r := e.run("", "call", "--json", "--audit", "read_file", `{"path":"/docs/hello.txt"}`).wantCode(t, exitOK)
	var res struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
		Audit  *struct {
			Source string `json:"source"`
			Mounts []struct {
				Guest string `json:"guest"`
				Paths []struct {
					Path string   `json:"path"`
					Ops  []string `json:"ops"`
				} `json:"paths"`
			} `json:"mounts"`
			MemoryPeak int64 `json:"memory_peak"`
		} `json:"audit"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.OK || res.Audit == nil {
		t.Fatalf("call --json --audit: %v\n%s", err, r.stdout)
	}
	a := res.Audit
	if a.Source != "wasm" || a.MemoryPeak <= 0 || len(a.Mounts) != 1 || a.Mounts[0].Guest != "/docs" || len(a.Mounts[0].Paths) != 1 || a.Mounts[0].Paths[0].Path != "/docs/hello.txt" {
		t.Fatalf("audit %s", r.stdout)
	}
	// A failed call that ran is audited too.
	r = e.run("", "call", "--json", "--audit", "read_file", `{"path":"/docs/missing.txt"}`).wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, `"ok":false`) || !strings.Contains(r.stdout, `"audit":{"source":"wasm"`) {
		t.Fatalf("failed call: %s", r.stdout)
	}
	r = e.run("", "call", "--json", "read_file", `{"path":"/docs/hello.txt"}`).wantCode(t, exitOK)
	if strings.Contains(r.stdout, "audit") {
		t.Fatalf("call --json without --audit changed shape: %s", r.stdout)
	}
	e.run("", "call", "--audit", "read_file", `{"path":"/docs/hello.txt"}`).wantCode(t, exitUsage)
}

// otlpReceiver is an OTLP/HTTP receiver: it decodes every export
// (protobuf) and keeps the spans, the metric points and the headers seen.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*span
	points  []*metricPoint
	headers []string
}

type span struct {
	name, id, parent, trace string
	kind                    tracepb.Span_SpanKind
	attrs                   map[string]string
	events                  []string
}

// metricPoint is one data point of an exported metric.
type metricPoint struct {
	name, typ, unit string // typ: histogram, sum or gauge
	attrs           map[string]string
	bounds          []float64
	count           uint64
	sum             float64
}

// anyValue is an attribute's value as text: strings as they are, numbers
// and booleans as Go prints them, arrays as JSON.
func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		var vs []string
		for _, e := range x.ArrayValue.Values {
			vs = append(vs, anyValue(e))
		}
		b, _ := json.Marshal(vs)
		return string(b)
	}
	return ""
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = anyValue(kv.Value)
	}
	return m
}

func newOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		rcv.headers = append(rcv.headers, r.Header.Get("X-Api-Key"))
		switch r.URL.Path {
		case "/v1/traces":
			var req colltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("traces: %v", err)
			}
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						sp := &span{name: s.Name, id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId), trace: hex.EncodeToString(s.TraceId),
							kind: s.Kind, attrs: attrMap(s.Attributes)}
						for _, e := range s.Events {
							sp.events = append(sp.events, e.Name)
						}
						rcv.spans = append(rcv.spans, sp)
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
						for _, p := range m.GetHistogram().GetDataPoints() {
							rcv.points = append(rcv.points, &metricPoint{name: m.Name, typ: "histogram", unit: m.Unit, attrs: attrMap(p.Attributes), bounds: p.ExplicitBounds, count: p.Count, sum: p.GetSum()})
						}
						for _, p := range m.GetSum().GetDataPoints() {
							rcv.points = append(rcv.points, &metricPoint{name: m.Name, typ: "sum", unit: m.Unit, attrs: attrMap(p.Attributes), count: 1, sum: float64(p.GetAsInt())})
						}
						for _, p := range m.GetGauge().GetDataPoints() {
							rcv.points = append(rcv.points, &metricPoint{name: m.Name, typ: "gauge", unit: m.Unit, attrs: attrMap(p.Attributes), count: 1, sum: float64(p.GetAsInt())})
						}
					}
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return rcv, srv.URL
}

func (r *otlpReceiver) byName(name string) *span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.name == name {
			return s
		}
	}
	return nil
}

// named is every span called name, in the order they were exported.
func (r *otlpReceiver) named(name string) []*span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*span
	for _, s := range r.spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// metric is every exported point of the metric called name.
func (r *otlpReceiver) metric(name string) []*metricPoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*metricPoint
	for _, p := range r.points {
		if p.name == name {
			out = append(out, p)
		}
	}
	return out
}

// The GenAI metric conventions' bucket boundaries.
var (
	genaiDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genaiTokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// wantSpanAttrs fails for each key of want that s lacks or holds another
// value for, and for each key of none that s has.
func wantSpanAttrs(t *testing.T, s *span, want map[string]string, none ...string) {
	t.Helper()
	for k, v := range want {
		if got, ok := s.attrs[k]; !ok || got != v {
			t.Errorf("%s: %s = %q, want %q (all: %v)", s.name, k, got, v, s.attrs)
		}
	}
	for _, k := range none {
		if v, ok := s.attrs[k]; ok {
			t.Errorf("%s: %s = %q, want none", s.name, k, v)
		}
	}
}

// TestTelemetryOverOTLP: with [telemetry] otlp_endpoint, a real run of
// word_count reaches a receiver started here, flushed before agrun
// exits: the run's span, a span per model request and per tool call
// under it, GenAI attributes as the conventions spell them (the
// provider, server address and port, the response's id, cache-read and
// reasoning tokens, streaming and the time to its first chunk, the
// session as conversation id), the sandbox's audit, the headers from
// headers_env, no contents (capture_content is off), and the GenAI
// metrics as histograms with the spec's buckets and required attributes.
func TestTelemetryOverOTLP(t *testing.T) {
	rcv, url := newOTLPReceiver(t)
	usage := &chattest.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, CachedTokens: 4, ReasoningTokens: 2}
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"secret words here"}`}}, Usage: usage},
		chattest.Reply{Text: "Three.", Usage: usage},
	)
	t.Setenv("AGRUN_TEST_OTLP_HEADERS", "X-Api-Key=k%201")
	e := newTestEnv(t, srv.URL, fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\nheaders_env = \"AGRUN_TEST_OTLP_HEADERS\"\n", url))
	r := e.run("", "run", "--session", "t1", "count: secret words here").wantCode(t, exitOK)
	if strings.Contains(r.stderr, "telemetry") {
		t.Errorf("stderr speaks of telemetry: %s", r.stderr)
	}
	run, tool, chat := rcv.byName("invoke_agent agrun"), rcv.byName("execute_tool word_count"), rcv.byName("chat test-model")
	if run == nil || tool == nil || chat == nil {
		t.Fatalf("received spans %+v", rcv.spans)
	}
	if tool.parent != run.id || chat.parent != run.id || tool.trace != run.trace || run.parent != "" {
		t.Fatalf("parent links: run %+v tool %+v chat %+v", run, tool, chat)
	}
	if run.kind != tracepb.Span_SPAN_KIND_INTERNAL || chat.kind != tracepb.Span_SPAN_KIND_CLIENT || tool.kind != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("span kinds: run %v, chat %v, tool %v", run.kind, chat.kind, tool.kind)
	}
	u, _ := neturl.Parse(srv.URL)
	host, port := u.Hostname(), u.Port()
	wantSpanAttrs(t, run, map[string]string{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agrun", "gen_ai.provider.name": "openai",
		"gen_ai.conversation.id": "t1", "gen_ai.request.model": "test-model", "gen_ai.usage.input_tokens": "20", "gen_ai.usage.cache_read.input_tokens": "8"}, "gen_ai.output.type")
	wantSpanAttrs(t, tool, map[string]string{"gen_ai.tool.name": "word_count", "gen_ai.tool.call.id": "call_1", "gen_ai.tool.type": "function", "gen_ai.agent.name": "agrun",
		"agrun.sandbox.source": "wasm", "agrun.permission.decision": "allowed"})
	if tool.attrs["agrun.sandbox.memory.peak"] == "" || tool.attrs["gen_ai.tool.description"] == "" {
		t.Errorf("tool attributes %v", tool.attrs)
	}
	wantSpanAttrs(t, chat, map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "test-model",
		"server.address": host, "server.port": port, "gen_ai.conversation.id": "t1", "openai.api.type": "chat_completions",
		"gen_ai.response.id": "chatcmpl-test", "gen_ai.response.model": "test", "gen_ai.response.finish_reasons": `["tool_calls"]`,
		"gen_ai.usage.input_tokens": "10", "gen_ai.usage.output_tokens": "5", "gen_ai.usage.cache_read.input_tokens": "4",
		"gen_ai.usage.reasoning.output_tokens": "2", "gen_ai.request.stream": "true"}, "gen_ai.output.type", "error.type")
	if ttfc, err := strconv.ParseFloat(chat.attrs["gen_ai.response.time_to_first_chunk"], 64); err != nil || ttfc <= 0 || ttfc > 10 {
		t.Errorf("gen_ai.response.time_to_first_chunk %q", chat.attrs["gen_ai.response.time_to_first_chunk"])
	}
	rcv.mu.Lock()
	n := 0
	for _, s := range rcv.spans {
		n++
		for k, v := range s.attrs {
			if strings.Contains(v, "secret") {
				t.Errorf("span %s carries content in %s without capture_content", s.name, k)
			}
		}
	}
	if n != 4 { // the run, two requests, one call
		t.Errorf("%d spans, want 4", n)
	}
	for _, h := range rcv.headers {
		if h != "k 1" {
			t.Errorf("export header %q, want the decoded value of $AGRUN_TEST_OTLP_HEADERS", h)
		}
	}
	rcv.mu.Unlock()

	required := map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "test-model", "server.address": host, "server.port": port}
	for name, bounds := range map[string][]float64{"gen_ai.client.operation.duration": genaiDurationBuckets, "gen_ai.client.token.usage": genaiTokenBuckets,
		"gen_ai.client.operation.time_to_first_chunk": genaiDurationBuckets} {
		ps := rcv.metric(name)
		if len(ps) == 0 {
			t.Errorf("no %s", name)
		}
		tokens := map[string]float64{}
		for _, p := range ps {
			if p.typ != "histogram" || !slices.Equal(p.bounds, bounds) {
				t.Errorf("%s: a %s with bounds %v, want a histogram with %v", name, p.typ, p.bounds, bounds)
			}
			for k, v := range required {
				if p.attrs[k] != v {
					t.Errorf("%s point %v: %s = %q, want %q", name, p.attrs, k, p.attrs[k], v)
				}
			}
			if _, ok := p.attrs["gen_ai.response.model"]; ok {
				t.Errorf("%s is keyed by the provider's model: %v", name, p.attrs)
			}
			tokens[p.attrs["gen_ai.token.type"]] += p.sum
		}
		if name == "gen_ai.client.token.usage" && (tokens["input"] != 20 || tokens["output"] != 10 || len(tokens) != 2 || ps[0].unit != "{token}") {
			t.Errorf("token usage by type %v", tokens)
		}
	}
	for _, p := range rcv.metric("gen_ai.execute_tool.duration") {
		if !slices.Equal(p.bounds, genaiDurationBuckets) || p.attrs["gen_ai.tool.name"] != "word_count" {
			t.Errorf("gen_ai.execute_tool.duration %+v", p)
		}
	}
	if ps := rcv.metric("gen_ai.invoke_agent.duration"); len(ps) != 1 || ps[0].attrs["gen_ai.agent.name"] != "agrun" || ps[0].unit != "s" {
		t.Errorf("gen_ai.invoke_agent.duration %+v", ps)
	}
}

// TestTelemetryFailedRequestOverOTLP: a request the provider refuses is a
// span with error.type (the loop's kind) and an error status, and
// nothing a response would have said (no response model, no usage);
// its duration point carries the error.type, and no token usage is
// recorded for it.
func TestTelemetryFailedRequestOverOTLP(t *testing.T) {
	rcv, url := newOTLPReceiver(t)
	srv := chattest.New(t, chattest.Reply{Status: 400, Body: `{"error":{"message":"unknown parameter","type":"invalid_request_error"}}`})
	e := newTestEnv(t, srv.URL, fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\n", url))
	e.run("", "run", "--session", "f1", "hi").wantCode(t, exitFailure)
	chat, run := rcv.byName("chat test-model"), rcv.byName("invoke_agent agrun")
	if chat == nil || run == nil {
		t.Fatalf("received spans %+v", rcv.spans)
	}
	wantSpanAttrs(t, chat, map[string]string{"error.type": "provider", "gen_ai.provider.name": "openai", "gen_ai.request.model": "test-model", "gen_ai.request.stream": "true"},
		"gen_ai.response.model", "gen_ai.response.id", "gen_ai.response.finish_reasons", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.time_to_first_chunk")
	wantSpanAttrs(t, run, map[string]string{"error.type": "provider"}, "gen_ai.usage.input_tokens")
	ps := rcv.metric("gen_ai.client.operation.duration")
	if len(ps) != 1 || ps[0].attrs["error.type"] != "provider" || ps[0].attrs["gen_ai.operation.name"] != "chat" || ps[0].attrs["gen_ai.provider.name"] != "openai" {
		t.Errorf("duration points %+v", ps)
	}
	if ps := rcv.metric("gen_ai.client.token.usage"); len(ps) != 0 {
		t.Errorf("token usage of a failed request: %+v", ps)
	}
	if ps := rcv.metric("gen_ai.invoke_agent.duration"); len(ps) != 1 || ps[0].attrs["error.type"] != "provider" {
		t.Errorf("gen_ai.invoke_agent.duration %+v", ps)
	}
}

// TestTelemetryRetryEventsOverOTLP: a retried 429 is an agrun.retry event
// of its request's span; a request refused as too long is a failed span,
// and its trimmed retry's span has an agrun.context_trimmed event; a
// provider refusing the response schema is a failed span followed by one
// with an agrun.schema_fallback event; an answer that does not match the
// schema is an agrun.schema_retry event of the run's span; under
// --schema every span says gen_ai.output.type json.
func TestTelemetryRetryEventsOverOTLP(t *testing.T) {
	t.Parallel()
	rcv, url := newOTLPReceiver(t)
	overflow := chattest.Reply{Status: 400, Body: `{"error":{"message":"This model's maximum context length is 1000 tokens. However, your messages resulted in 5000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`}
	srv := chattest.New(t,
		chattest.Reply{Status: 429, Header: map[string]string{"Retry-After": "0"}, Body: `{"error":{"message":"slow down","type":"rate_limit"}}`},
		chattest.Reply{Text: "first"},
		overflow, chattest.Reply{Text: "trimmed"},
		chattest.Reply{Status: 400, Body: `{"error":{"message":"response_format json_schema is not supported by this model","type":"invalid_request_error"}}`},
		chattest.Reply{Text: "three words"}, chattest.Reply{Text: `{"words": 3}`},
	)
	e := newTestEnv(t, srv.URL, fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\n", url))
	e.run("", "run", "--session", "rt", "hello").wantCode(t, exitOK)
	e.run("", "run", "--session", "rt", "more").wantCode(t, exitOK)
	schema := `{"type":"object","properties":{"words":{"type":"integer"}},"required":["words"],"additionalProperties":false}`
	if r := e.run("", "run", "--session", "sc", "--schema", schema, "count a b c"); r.code != exitOK || r.stdout != "{\"words\": 3}\n" {
		t.Fatalf("--schema run: %d %q %q", r.code, r.stdout, r.stderr)
	}
	chats := rcv.named("chat test-model")
	if len(chats) != 6 {
		t.Fatalf("%d request spans", len(chats))
	}
	for i, want := range []struct {
		events, errorType string
	}{{"agrun.retry", ""}, {"", "context_overflow"}, {"agrun.context_trimmed", ""}, {"", "provider"}, {"agrun.schema_fallback", ""}, {"", ""}} {
		c := chats[i]
		if strings.Join(c.events, ",") != want.events || c.attrs["error.type"] != want.errorType {
			t.Errorf("request %d: events %v, error.type %q; want %q, %q", i+1, c.events, c.attrs["error.type"], want.events, want.errorType)
		}
		if out := c.attrs["gen_ai.output.type"]; (i >= 3) != (out == "json") {
			t.Errorf("request %d: gen_ai.output.type %q", i+1, out)
		}
	}
	if chats[0].attrs["agrun.request.retries"] != "1" {
		t.Errorf("retries %v", chats[0].attrs)
	}
	var schemaRun *span
	for _, s := range rcv.named("invoke_agent agrun") {
		if s.attrs["gen_ai.conversation.id"] == "sc" {
			schemaRun = s
		}
	}
	if schemaRun == nil || strings.Join(schemaRun.events, ",") != "agrun.schema_retry" || schemaRun.attrs["gen_ai.output.type"] != "json" {
		t.Errorf("the --schema run's span: %+v", schemaRun)
	}
}

// TestTelemetryCaptureContentOverOTLP: with capture_content, each
// request's span carries its whole input and its output in the GenAI
// role/parts shape (the prompt, the assistant's tool call with its
// arguments as JSON, the tool's response; the reply with its
// finish_reason), the system prompt as gen_ai.system_instructions and
// the tools offered as gen_ai.tool.definitions; a continued session's
// history opens the next run's input.
func TestTelemetryCaptureContentOverOTLP(t *testing.T) {
	t.Parallel()
	rcv, url := newOTLPReceiver(t)
	srv := chattest.New(t,
		chattest.Reply{Reasoning: "The tool counts.", ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"a b c"}`}}},
		chattest.Reply{Text: "Three."},
		chattest.Reply{Text: "Yes."},
	)
	e := newTestEnv(t, srv.URL, fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\ncapture_content = true\n", url))
	e.edit(`model = "test-model"`, "model = \"test-model\"\nsystem = \"Be brief.\"")
	e.run("", "run", "--session", "cc", "count: a b c").wantCode(t, exitOK)
	e.run("", "run", "--session", "cc", "sure?").wantCode(t, exitOK)
	chats := rcv.named("chat test-model")
	if len(chats) != 3 {
		t.Fatalf("%d request spans", len(chats))
	}
	type msg struct {
		Role         string           `json:"role"`
		Parts        []map[string]any `json:"parts"`
		FinishReason *string          `json:"finish_reason"`
	}
	decode := func(i int, key string, output bool) []msg {
		t.Helper()
		var ms []msg
		if err := json.Unmarshal([]byte(chats[i].attrs[key]), &ms); err != nil {
			t.Fatalf("request %d: %s is not messages: %v: %s", i+1, key, err, chats[i].attrs[key])
		}
		for _, m := range ms {
			if !slices.Contains([]string{"system", "user", "assistant", "tool"}, m.Role) || m.Parts == nil || output != (m.FinishReason != nil) {
				t.Errorf("request %d: %s message %+v", i+1, key, m)
			}
			for _, p := range m.Parts {
				ok := false
				switch p["type"] {
				case "text", "reasoning":
					_, ok = p["content"].(string)
				case "tool_call":
					_, ok = p["name"].(string)
				case "tool_call_response":
					_, ok = p["response"]
				}
				if !ok {
					t.Errorf("request %d: %s part %v", i+1, key, p)
				}
			}
		}
		return ms
	}
	in, out := decode(0, "gen_ai.input.messages", false), decode(0, "gen_ai.output.messages", true)
	if len(in) != 1 || in[0].Role != "user" || in[0].Parts[0]["content"] != "count: a b c" {
		t.Errorf("first input %+v", in)
	}
	if len(out) != 1 || *out[0].FinishReason != "tool_call" || len(out[0].Parts) != 2 || out[0].Parts[0]["type"] != "reasoning" || out[0].Parts[0]["content"] != "The tool counts." ||
		out[0].Parts[1]["type"] != "tool_call" || out[0].Parts[1]["id"] != "call_1" || fmt.Sprint(out[0].Parts[1]["arguments"]) != "map[text:a b c]" {
		t.Errorf("first output %+v", out)
	}
	in, out = decode(1, "gen_ai.input.messages", false), decode(1, "gen_ai.output.messages", true)
	if len(in) != 3 || in[1].Role != "assistant" || in[1].Parts[0]["type"] != "tool_call" || in[2].Role != "tool" ||
		in[2].Parts[0]["type"] != "tool_call_response" || in[2].Parts[0]["id"] != "call_1" || fmt.Sprint(in[2].Parts[0]["response"]) != "map[bytes:5 chars:5 lines:1 words:3]" {
		t.Errorf("second input %+v", in)
	}
	if len(out) != 1 || *out[0].FinishReason != "stop" || out[0].Parts[0]["content"] != "Three." {
		t.Errorf("second output %+v", out)
	}
	if in = decode(2, "gen_ai.input.messages", false); len(in) != 5 || in[0].Parts[0]["content"] != "count: a b c" || in[3].Parts[0]["content"] != "Three." || in[4].Parts[0]["content"] != "sure?" {
		t.Errorf("the continued session's input %+v", in)
	}
	var sys []map[string]any
	if err := json.Unmarshal([]byte(chats[0].attrs["gen_ai.system_instructions"]), &sys); err != nil || len(sys) != 1 || sys[0]["type"] != "text" || sys[0]["content"] != "Be brief." {
		t.Errorf("gen_ai.system_instructions %q", chats[0].attrs["gen_ai.system_instructions"])
	}
	var tools []map[string]any
	if err := json.Unmarshal([]byte(chats[0].attrs["gen_ai.tool.definitions"]), &tools); err != nil {
		t.Errorf("gen_ai.tool.definitions %q", chats[0].attrs["gen_ai.tool.definitions"])
	}
	found := false
	for _, tl := range tools {
		if tl["type"] != "function" || tl["name"] == nil {
			t.Errorf("tool definition %v", tl)
		}
		found = found || tl["name"] == "word_count"
	}
	if !found {
		t.Errorf("word_count not among the tool definitions %v", tools)
	}
	if tool := rcv.byName("execute_tool word_count"); tool == nil || tool.attrs["gen_ai.tool.call.arguments"] != `{"text":"a b c"}` || !strings.HasPrefix(tool.attrs["gen_ai.tool.call.result"], `{"words":3,`) {
		t.Errorf("tool span %+v", tool)
	}
}

// TestTelemetryEveryAPIOverOTLP: each [llm] api against a fake server of
// that API: gen_ai.provider.name is the API's provider, Gemini's
// operation is generate_content (and names its span), and the usage the
// API reported (cache reads, reasoning) is on the request's span.
func TestTelemetryEveryAPIOverOTLP(t *testing.T) {
	t.Parallel()
	want := map[string][2]string{"chat": {"openai", "chat"}, "responses": {"openai", "chat"}, "anthropic": {"anthropic", "chat"}, "gemini": {"gcp.gemini", "generate_content"}}
	for _, api := range apis() {
		t.Run(api, func(t *testing.T) {
			w, ok := want[api]
			if !ok {
				t.Fatalf("no expectation for api %q", api)
			}
			rcv, url := newOTLPReceiver(t)
			e, _ := modelEnv(t, api, countSteps...)
			b, _ := os.ReadFile(e.config)
			os.WriteFile(e.config, append(b, fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\n", url)...), 0o644)
			e.run("", "run", "--session", "api", "How many words in 'a b c'?").wantCode(t, exitOK)
			chats := rcv.named(w[1] + " test-model")
			if len(chats) != 2 {
				t.Fatalf("%d %q spans (have %+v)", len(chats), w[1]+" test-model", rcv.spans)
			}
			wantSpanAttrs(t, chats[0], map[string]string{"gen_ai.provider.name": w[0], "gen_ai.operation.name": w[1], "server.address": "127.0.0.1",
				"gen_ai.usage.cache_read.input_tokens": "300", "gen_ai.usage.reasoning.output_tokens": "20", "gen_ai.request.stream": "true"})
			if run := rcv.byName("invoke_agent agrun"); run == nil || run.attrs["gen_ai.provider.name"] != w[0] {
				t.Errorf("run span %+v", run)
			}
			for _, p := range rcv.metric("gen_ai.client.operation.duration") {
				if p.attrs["gen_ai.provider.name"] != w[0] || p.attrs["gen_ai.operation.name"] != w[1] {
					t.Errorf("duration point %v", p.attrs)
				}
			}
		})
	}
}

// TestTelemetryBadHeaders: a malformed headers_env variable is a
// configuration error naming the variable, not its value.
func TestTelemetryBadHeaders(t *testing.T) {
	t.Setenv("AGRUN_TEST_OTLP_HEADERS", "just-a-secret")
	e := newTestEnv(t, "", "\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:1\"\nheaders_env = \"AGRUN_TEST_OTLP_HEADERS\"\n")
	r := e.run("", "run", "hi").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "$AGRUN_TEST_OTLP_HEADERS") || strings.Contains(r.stderr, "just-a-secret") {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

// TestRunTrace: run --trace prints the span tree on stderr at the end,
// with no endpoint configured: the run, its requests with tokens, the
// tool call under it.
func TestRunTrace(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"a b"}`}, {ID: "call_2", Name: "nosuch", Args: `{}`}}},
		chattest.Reply{Text: "Two."},
		chattest.Reply{Text: "Again."},
	)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "--trace", "count a b").wantCode(t, exitOK)
	if r.stdout != "Two.\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	for _, want := range []string{"\ntrace ", "\ninvoke_agent agrun", "\n  chat test", "10 in / 5 out tokens", "\n  execute_tool word_count", "\n  execute_tool unknown", "error (not_found)"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("--trace output lacks %q:\n%s", want, r.stderr)
		}
	}
	r = e.run("", "run", "-q", "again").wantCode(t, exitOK)
	if strings.Contains(r.stderr, "invoke_agent") {
		t.Fatalf("a tree without --trace:\n%s", r.stderr)
	}
}

// TestChatTurnsTracedAndRecorded: agrun chat traces each turn as a run
// (its own trace, the session as conversation id) and records its tool
// calls in the session.
func TestChatTurnsTracedAndRecorded(t *testing.T) {
	rcv, url := newOTLPReceiver(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"a b"}`}}},
		chattest.Reply{Text: "Two."},
		chattest.Reply{Text: "Bye."},
	)
	e := newTestEnv(t, srv.URL, fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\n", url))
	e.run("count a b\nthanks\n", "chat", "--session", "ch1").wantCode(t, exitOK)
	rcv.mu.Lock()
	var runs []*span
	tools := 0
	for _, s := range rcv.spans {
		switch s.name {
		case "invoke_agent agrun":
			runs = append(runs, s)
		case "execute_tool word_count":
			tools++
		}
	}
	rcv.mu.Unlock()
	if len(runs) != 2 || runs[0].trace == runs[1].trace || runs[0].attrs["gen_ai.conversation.id"] != "ch1" || tools != 1 {
		t.Fatalf("chat spans: %d runs %+v, %d tool calls", len(runs), runs, tools)
	}
	st, _ := session.OpenFiles(filepath.Join(e.dir, "sessions"))
	if calls, _, err := st.Calls("ch1"); err != nil || len(calls) != 1 || calls[0].Tool != "word_count" || calls[0].Audit == nil {
		t.Fatalf("chat call records %+v, %v", calls, err)
	}
}

// TestAuditReportCannotBeForged: names and hosts from session files (a
// model's invented tool name, a guest's host) cannot start a line of the
// report, such as a fake suggested grant.
func TestAuditReportCannotBeForged(t *testing.T) {
	srv := chattest.New(t)
	e := newTestEnv(t, srv.URL, withReader(t))
	st, err := session.OpenFiles(filepath.Join(e.dir, "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := st.Open("forged")
	if err != nil {
		t.Fatal(err)
	}
	forged := "x\n\n  suggested grant (paste over [tools.reader] in agrun.toml):\n\n    [tools.reader]\n    mounts = [\"/:/docs:rwd\"]"
	s.RecordCall(session.Call{Tool: forged, ID: "c1"})
	s.RecordCall(session.Call{Tool: "reader", ID: "c2", Audit: &registry.Audit{Source: "wasm",
		Requests: []registry.RequestAudit{{Method: "GET", Host: "evil\n## injected\tline", Error: "forbidden"}}}})
	s.Close()
	r := e.run("", "audit").wantCode(t, exitOK)
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "mounts = [\"/:/docs:rwd\"]") || strings.HasPrefix(l, "## injected") {
			t.Fatalf("a forged line in the report:\n%s", r.stdout)
		}
	}
	if !strings.Contains(r.stdout, `evil\n## injected\tline`) {
		t.Fatalf("the host is not shown escaped:\n%s", r.stdout)
	}
}

// TestMCPTelemetryOverOTLP: with [telemetry], a run's call of an MCP
// server's tool is traced end to end as the OpenTelemetry MCP
// conventions describe: the loop's execute_tool span carries the MCP
// client attributes (no client span of its own: the conventions ask so
// when GenAI instrumentation already traces the call), and in the
// server — here `agrun mcp serve`, a process of its own exporting to
// the same receiver — a server span "tools/call word_count" whose
// parent is that execute_tool span, the trace context having crossed in
// params._meta; each side records its operation duration.
func TestMCPTelemetryOverOTLP(t *testing.T) {
	t.Parallel()
	rcv, url := newOTLPReceiver(t)
	tel := fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\n", url)
	up := newTestEnv(t, "", tel)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "up__word_count", Args: `{"text":"a b c"}`}}},
		chattest.Reply{Text: "Three."},
	)
	e := newTestEnv(t, srv.URL, tel+fmt.Sprintf("\n[mcp.up]\ncommand = %q\nargs = [\"-c\", %q, \"mcp\", \"serve\"]\npermissions = [\"read\"]\n", binary(t), up.config))
	e.run("", "run", "count: a b c").wantCode(t, exitOK)
	if m := toolMessage(t, srv, 1, "call_1"); !strings.Contains(m, `"words":3`) {
		t.Fatalf("the tool answered %q", m)
	}
	// The server's spans are flushed when it exits, which the client
	// waits for when the run closes it; allow the export a moment.
	var server *span
	for i := 0; server == nil && i < 50; i++ {
		for _, s := range rcv.named("tools/call word_count") {
			if s.kind == tracepb.Span_SPAN_KIND_SERVER {
				server = s
			} else {
				t.Errorf("a %v span %q: the call's execute_tool span is the client's", s.kind, s.name)
			}
		}
		if server == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	tool := rcv.byName("execute_tool up__word_count")
	if tool == nil || server == nil {
		t.Fatalf("spans: execute_tool %v, server %v (all: %d)", tool, server, len(rcv.spans))
	}
	if server.parent != tool.id || server.trace != tool.trace {
		t.Errorf("the server span's parent is not the execute_tool span (trace context through _meta): tool %+v server %+v", tool, server)
	}
	wantSpanAttrs(t, tool, map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "up__word_count", "gen_ai.operation.name": "execute_tool", "network.transport": "pipe"}, "error.type")
	wantSpanAttrs(t, server, map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "word_count", "gen_ai.operation.name": "execute_tool", "network.transport": "pipe"}, "error.type")
	for _, s := range []*span{tool, server} {
		if s.attrs["mcp.protocol.version"] == "" {
			t.Errorf("%s: attributes %v", s.name, s.attrs)
		}
	}
	for _, name := range []string{"mcp.client.operation.duration", "mcp.server.operation.duration"} {
		found := false
		for _, p := range rcv.metric(name) {
			if p.attrs["mcp.method.name"] == "tools/call" && p.typ == "histogram" && p.unit == "s" {
				found = true
			}
		}
		if !found {
			t.Errorf("no tools/call point of %s: %+v", name, rcv.metric(name))
		}
	}
}
