package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/agcore/agrun/registry"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agcore/agrun/cmd/agrun/internal/lpriv"
	"github.com/agcore/agrun/cmd/agrun/internal/session"
	"github.com/agcore/agrun/internal/testing/chattest"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
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
	st, err := session.OpenStore(filepath.Join(e.dir, "sessions"))
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
	var rep auditReport
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
	rep = auditReport{}
	json.Unmarshal([]byte(r.stdout), &rep)
	if rep.Sessions != 1 || len(rep.Tools) != 1 || rep.Tools[0].Calls != 1 {
		t.Fatalf("--session a1: %s", r.stdout)
	}
	r = e.run("", "audit", "--since", "1h", "--json").wantCode(t, exitOK)
	rep = auditReport{}
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

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes every export
// (protobuf) and keeps the spans and the headers seen.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*span
	headers []string
}

type span struct {
	name, id, parent, trace string
	attrs                   map[string]string
}

func newOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		rcv.headers = append(rcv.headers, r.Header.Get("X-Api-Key"))
		if r.URL.Path == "/v1/traces" {
			var req colltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("traces: %v", err)
			}
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						sp := &span{name: s.Name, id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId), trace: hex.EncodeToString(s.TraceId), attrs: map[string]string{}}
						for _, kv := range s.Attributes {
							v := kv.Value
							switch {
							case v.GetStringValue() != "":
								sp.attrs[kv.Key] = v.GetStringValue()
							case v.GetIntValue() != 0:
								sp.attrs[kv.Key] = fmt.Sprint(v.GetIntValue())
							}
						}
						rcv.spans = append(rcv.spans, sp)
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

// TestTelemetryOverOTLP: with [telemetry] otlp_endpoint, a real run of
// word_count reaches a receiver started here, flushed before agrun
// exits: the run's span, a span per model request and per tool call
// under it, GenAI attributes, the sandbox's audit, the headers from
// headers_env, and no contents (capture_content is off).
func TestTelemetryOverOTLP(t *testing.T) {
	rcv, url := newOTLPReceiver(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"secret words here"}`}}},
		chattest.Reply{Text: "Three."},
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
	if run.attrs["gen_ai.conversation.id"] != "t1" || run.attrs["gen_ai.request.model"] != "test-model" {
		t.Errorf("run attributes %v", run.attrs)
	}
	if tool.attrs["gen_ai.tool.name"] != "word_count" || tool.attrs["gen_ai.tool.call.id"] != "call_1" || tool.attrs["agrun.sandbox.source"] != "wasm" || tool.attrs["agrun.sandbox.memory.peak"] == "" || tool.attrs["agrun.permission.decision"] != "allowed" {
		t.Errorf("tool attributes %v", tool.attrs)
	}
	if chat.attrs["gen_ai.usage.input_tokens"] != "10" || chat.attrs["gen_ai.usage.output_tokens"] != "5" || chat.attrs["gen_ai.response.model"] != "test" {
		t.Errorf("chat attributes %v", chat.attrs)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
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
	st, _ := session.OpenStore(filepath.Join(e.dir, "sessions"))
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
	st, err := session.OpenStore(filepath.Join(e.dir, "sessions"))
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
