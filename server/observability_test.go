package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testprovider"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/telemetry"
	"github.com/agcore/agrun/wasmtools"
)

const (
	runTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callTrace = "0af7651916cd43dd8448eb211c80319c"
)

// TestTraceContextAndAudits: a run started with a W3C traceparent is
// traced as a child of it (the span tree names the client's trace id),
// its tool call is recorded in the session with its audit, and its
// tool_completed event carries the audit without the operator's host
// directories; a direct call is traced under its own traceparent and
// answers its audit with ?audit=true only.
func TestTraceContextAndAudits(t *testing.T) {
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Config{Tree: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	rt := testrt.New(t, runtime.Config{})
	docs := t.TempDir()
	os.WriteFile(filepath.Join(docs, "a.txt"), []byte("alpha\n"), 0o644)
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.Config{Allowed: []permission.Permission{permission.Read, permission.Filesystem}})))
	rf, err := wasmtools.Load(ctx, rt, exampleTool(t, "read_file"), wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: docs, Guest: "/docs"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rf.Close(ctx) })
	if err := reg.Register(rf); err != nil {
		t.Fatal(err)
	}
	chat := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "read_file", Args: `{"path":"/docs/a.txt"}`}}},
		chattest.Reply{Text: "alpha"},
	)
	store, err := session.OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, setup{rt: rt, opts: server.Options{Registry: reg, Telemetry: tel, Sessions: store,
		Loop: &loop.Config{Provider: testprovider.Chat(t, chat.URL), Limits: loop.Limits{MaxRetries: -1}}}})

	h := http.Header{"Traceparent": {"00-" + runTrace + "-00f067aa0ba902b7-01"}}
	status, evs, body := ts.postRunWith(t, `{"prompt":"read a.txt","session":"tr-1"}`, h)
	if status != http.StatusOK {
		t.Fatalf("run: %d %s", status, body)
	}
	var completed *sseEvent
	for i := range evs {
		if evs[i].name == "tool_completed" {
			completed = &evs[i]
		}
	}
	if completed == nil || !strings.Contains(completed.raw, `"audit":{"source":"wasm"`) || !strings.Contains(completed.raw, `"guest":"/docs"`) || strings.Contains(completed.raw, docs) {
		t.Fatalf("tool_completed: %+v", completed)
	}
	calls, _, err := store.Calls("tr-1")
	if err != nil || len(calls) != 1 || calls[0].Tool != "read_file" || calls[0].Audit == nil || calls[0].Audit.Mounts[0].Host != docs {
		t.Fatalf("recorded calls %+v, %v", calls, err)
	}

	// A direct call: the audit only when asked, without host directories.
	call := func(query, trace string) server.Result {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.url+"/v1/tools/read_file/call"+query, strings.NewReader(`{"path":"/docs/a.txt"}`))
		req.Header.Set("Content-Type", "application/json")
		if trace != "" {
			req.Header.Set("Traceparent", "00-"+trace+"-b7ad6b7169203331-01")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res server.Result
		var raw json.RawMessage
		json.NewDecoder(resp.Body).Decode(&raw)
		json.Unmarshal(raw, &res)
		if strings.Contains(string(raw), docs) {
			t.Errorf("the answer names the host directory: %s", raw)
		}
		return res
	}
	if res := call("?audit=true", callTrace); !res.OK || res.Audit == nil || res.Audit.Mounts[0].Guest != "/docs" || res.Audit.Mounts[0].Paths[0].Path != "/docs/a.txt" {
		t.Fatalf("call ?audit=true: %+v", res)
	}
	if res := call("", ""); !res.OK || res.Audit != nil {
		t.Fatalf("call without ?audit: %+v", res)
	}
	if res := call("?audit=maybe", ""); res.OK || res.Error.Kind != string(server.KindBadRequest) {
		t.Fatalf("call ?audit=maybe: %+v", res)
	}

	var b bytes.Buffer
	tel.WriteTree(&b)
	tree := b.String()
	for _, want := range []string{"trace " + runTrace, "invoke_agent agrun", "  chat m" /* the configured model names the span; the provider's is gen_ai.response.model */, "  execute_tool read_file", "trace " + callTrace} {
		if !strings.Contains(tree, want) {
			t.Fatalf("span tree lacks %q:\n%s", want, tree)
		}
	}
	// The run's tree: the run span is the root of the client's trace, the
	// request and the call under it.
	i := strings.Index(tree, "trace "+runTrace)
	if j := strings.Index(tree[i:], "invoke_agent agrun"); j < 0 || j > 80 {
		t.Fatalf("the run span does not start the client's trace:\n%s", tree)
	}
}
