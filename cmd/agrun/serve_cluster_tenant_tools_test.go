//go:build cluster

package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/server"
)

// offered is the names of the tools the model was offered in request i.
func offered(t *testing.T, srv *chattest.Server, i int) []string {
	t.Helper()
	reqs := srv.Requests()
	if len(reqs) <= i {
		t.Fatalf("%d requests, want more than %d", len(reqs), i)
	}
	var names []string
	for _, tl := range reqs[i].Tools {
		names = append(names, tl.Function.Name)
	}
	return names
}

// TestServeClusterTenantTools (issue 27, 3): with [serve.tenants] on a
// cluster, tenant acme uploads get_weather through a serve replica; acme's
// run through serve is offered it beside the configured tools and calls it
// on an `agrun worker`, which loads it with acme's ceiling from its own
// config (no network: the call is refused by the sandbox, as serve's own
// call is). globex's run through serve is not offered it, and a call
// naming it is not_found; globex's own upload of the name runs with
// globex's ceiling (its host allowed).
func TestServeClusterTenantTools(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	args := `{"latitude":48.85,"longitude":2.35,"api_base":"http://127.0.0.1:1"}`
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_a", Name: "get_weather", Args: args}}},
		chattest.Reply{Text: "acme done."},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_g", Name: "get_weather", Args: args}}},
		chattest.Reply{Text: "globex done."},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_h", Name: "get_weather", Args: args}}},
		chattest.Reply{Text: "globex's own."},
	)
	e := newTestEnv(t, srv.URL, fmt.Sprintf(`
[serve.tenants.acme]
tokens_env = "ACME_TOKENS"
[serve.tenants.globex]
tokens_env = "GLOBEX_TOKENS"
[serve.tenants.globex.uploads]
allowed_hosts = ["127.0.0.1:1"]
allow_private = true
[cluster]
temporal_address = %q
task_queue_prefix = "serve-tenant-tools-"
heartbeat_timeout = "2s"
module_store = "objects"
`, addr))
	acme, globex := strings.Repeat("a", 32), strings.Repeat("g", 32)
	a := startServeReplica(t, e.config, []string{"AGRUN_TEST_KEY=k", "ACME_TOKENS=" + acme, "GLOBEX_TOKENS=" + globex})
	startWorker(t, e, "w1")

	gw, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "get_weather.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if st, body := httpAs(t, acme, "POST", a+"/v1/tools", "application/wasm", gw); st != http.StatusCreated {
		t.Fatalf("acme's upload: %d %s", st, body)
	}

	// acme's run: offered the upload, the call run at acme's ceiling.
	st, events, body, _ := streamRun(t, a, acme, `{"prompt":"weather?","session":"s1"}`)
	if st != http.StatusOK {
		t.Fatalf("POST /v1/runs: %d %s", st, body)
	}
	var seen []sseEvent
	if ev := until(t, events, "tool_completed", &seen); ev.data["id"] != "call_a" || ev.data["is_error"] != true || ev.data["error_kind"] != "permission_denied" {
		t.Fatalf("acme's call beyond its ceiling: %s", ev.raw)
	}
	if ev := until(t, events, "done", &seen); ev.data["text"] != "acme done." {
		t.Fatalf("done: %s", ev.raw)
	}
	if names := offered(t, srv, 0); !slices.Contains(names, "get_weather") || !slices.Contains(names, "word_count") {
		t.Errorf("acme's run was offered %v", names)
	}

	// globex's run (whose own ceiling would allow the host): not offered
	// acme's tool, and its call is not found (what a tool no tenant
	// uploaded answers).
	st, events, body, _ = streamRun(t, a, globex, `{"prompt":"weather?","session":"s1"}`)
	if st != http.StatusOK {
		t.Fatalf("POST /v1/runs: %d %s", st, body)
	}
	seen = nil
	if ev := until(t, events, "tool_completed", &seen); ev.data["id"] != "call_g" || !strings.Contains(ev.raw, `error (not_found): no tool named \"get_weather\"`) {
		t.Fatalf("globex's call of acme's tool: %s", ev.raw)
	}
	if ev := until(t, events, "done", &seen); ev.data["text"] != "globex done." {
		t.Fatalf("done: %s", ev.raw)
	}
	if names := offered(t, srv, 2); slices.Contains(names, "get_weather") || !slices.Contains(names, "word_count") {
		t.Errorf("globex's run was offered %v", names)
	}

	// globex's own upload of the name: run with globex's ceiling, which
	// allows the host (the request is made, and fails to connect).
	if st, body := httpAs(t, globex, "POST", a+"/v1/tools", "application/wasm", gw); st != http.StatusCreated {
		t.Fatalf("globex's upload: %d %s", st, body)
	}
	// The worker reads globex's records at most every UploadsRefresh, and
	// it read them for the run just above.
	time.Sleep(server.UploadsRefresh + 500*time.Millisecond)
	st, events, body, _ = streamRun(t, a, globex, `{"prompt":"weather?","session":"s2"}`)
	if st != http.StatusOK {
		t.Fatalf("POST /v1/runs: %d %s", st, body)
	}
	seen = nil
	if ev := until(t, events, "tool_completed", &seen); ev.data["id"] != "call_h" || ev.data["is_error"] != true ||
		ev.data["error_kind"] == "permission_denied" || ev.data["error_kind"] == "not_found" || strings.Contains(ev.raw, "not in the allowed hosts") {
		t.Fatalf("globex's call of its own tool: %s", ev.raw)
	}
	if ev := until(t, events, "done", &seen); ev.data["text"] != "globex's own." {
		t.Fatalf("done: %s", ev.raw)
	}
}
