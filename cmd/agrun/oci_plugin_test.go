package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
)

// TestPulledPluginLikeAnyTool is issue 26's "done when", as a user does
// it: an Extism plug-in pushed to a real registry, pulled, pinned with
// the line pull printed, and then, offline, called with exactly the
// grant written (its http_request reaches the one allowed host and
// nothing else), listed by `agrun tools`, asked about before a model's
// call runs (approve = "ask", answered on a terminal), and in `agrun
// audit`, whose block to paste keeps the oci source.
func TestPulledPluginLikeAnyTool(t *testing.T) {
	t.Parallel()
	host, stop := startRegistry(t)
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello from " + r.URL.Path))
	}))
	defer peer.Close()
	var otherHits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { otherHits.Add(1) }))
	defer other.Close()
	peerHost := strings.TrimPrefix(peer.URL, "http://")

	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_f", Name: "fetch", Args: fmt.Sprintf(`{"url":%q}`, peer.URL+"/m")}}},
		chattest.Reply{Text: "Fetched."},
	)
	e := newTestEnv(t, srv.URL, "\n[oci]\ndir = \"modules\"\n")
	e.run("", "push", filepath.Join(repoRoot(t), "testdata", "plugins", "count_vowels.wasm"), host+"/plugins/cv:1").wantCode(t, exitOK)
	r := e.run("", "pull", host+"/plugins/cv:1").wantCode(t, exitOK)
	line := regexp.MustCompile(`(?m)^  (oci = "[^"]+")$`).FindStringSubmatch(r.stdout)
	if line == nil {
		t.Fatalf("pull: %s", r.stdout)
	}
	stop() // offline from here
	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte(fmt.Sprintf(`
[tools.fetch]
%s
function = "fetch"
description = "Fetch a URL"
parameters = { type = "object", properties = { url = { type = "string" } }, required = ["url"] }
allowed_hosts = [%q]
allow_private = true
approve = "ask"
`, line[1], peerHost))...), 0o644)

	r = e.run("", "tools", "--json").wantCode(t, exitOK)
	var tools []struct {
		Name        string   `json:"name"`
		Source      string   `json:"source"`
		Permissions []string `json:"permissions"`
	}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.HasPrefix(l, "[") {
			continue
		}
		if err := json.Unmarshal([]byte(l), &tools); err != nil {
			t.Fatalf("tools --json: %v: %s", err, r.stdout)
		}
	}
	found := false
	for _, tl := range tools {
		if tl.Name == "fetch" {
			found = true
			if !strings.HasPrefix(tl.Source, "oci:"+host+"/plugins/cv:1@sha256:") || strings.Join(tl.Permissions, ",") != "network" {
				t.Errorf("tools: fetch from %q with %v; want the pinned reference and network (what allowed_hosts implies)", tl.Source, tl.Permissions)
			}
		}
	}
	if !found {
		t.Fatalf("tools --json lacks fetch: %s", r.stdout)
	}

	// The grant as written: the allowed host answers, another is refused
	// before a connection.
	r = e.run("", "call", "fetch", fmt.Sprintf(`{"url":%q}`, peer.URL+"/x")).wantCode(t, exitOK)
	if want := `{"status":200,"body":"hello from /x"}` + "\n"; r.stdout != want {
		t.Fatalf("call: %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
	r = e.run("", "call", "--json", "fetch", fmt.Sprintf(`{"url":%q}`, other.URL+"/x")).wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, `"kind":"permission_denied"`) {
		t.Fatalf("a host not granted: %+v", r)
	}
	if n := otherHits.Load(); n != 0 {
		t.Fatalf("the host not granted was reached %d times", n)
	}

	// A model's call is asked about, with the grant shown, and runs on a yes.
	r = e.runTTY("y\n", "run", "--session", "p1", "fetch it").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "fetch wants") || !strings.Contains(r.stderr, peerHost) {
		t.Fatalf("the approval question does not name the tool and its host:\n%s", r.stderr)
	}
	if m := toolMessage(t, srv, 1, "call_f"); m != `{"status":200,"body":"hello from /m"}` {
		t.Fatalf("the model got %q", m)
	}
	if d := decisions(t, e, "p1"); len(d) != 1 || d[0]["tool"] != "fetch" || d[0]["answer"] != "once" {
		t.Fatalf("decisions %v", d)
	}

	r = e.run("", "audit", "--json", "--tool", "fetch").wantCode(t, exitOK)
	var rep struct {
		Tools []struct {
			Tool  string `json:"tool"`
			Calls int    `json:"calls"`
			TOML  string `json:"toml"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Tools) != 1 || rep.Tools[0].Calls != 1 {
		t.Fatalf("audit: %+v; want fetch's one recorded call (the model's)", rep.Tools)
	}
	if block := rep.Tools[0].TOML; !strings.HasPrefix(block, "[tools.fetch]\n"+line[1]+"\n") || !strings.Contains(block, fmt.Sprintf("allowed_hosts = [%q]", peerHost)) {
		t.Errorf("audit's block to paste:\n%s\nwant it to keep %s and the host used", block, line[1])
	}
}
