package setup

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// loopbackConfig is the default config whose provider is a local server
// (no API key needed; nothing is sent by these tests).
func loopbackConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.LLM.BaseURL = "http://127.0.0.1:1/v1"
	cfg.Sessions.Dir = t.TempDir()
	return cfg
}

// TestOpenConversation: a session agrun names is fresh and removed on
// Close when no reply came; one the caller names is kept; a bad id is
// session.ErrBadID, a bad schema registry.ErrInvalidSchema, and a good
// schema makes the answer checked JSON; the approver is asked for the
// session's id.
func TestOpenConversation(t *testing.T) {
	cfg := loopbackConfig(t)
	st, err := SessionStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var approverOf string
	approver := func(id string) loop.Approver { approverOf = id; return nil }
	cv, warnings, err := OpenConversation(cfg, st, "", approver, nil)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("new session: %v %v", err, warnings)
	}
	if !cv.Fresh || cv.Kept() || cv.Schema || approverOf != cv.ID || !session.ValidID(cv.ID) {
		t.Errorf("new session: fresh %v kept %v schema %v approver of %q (id %q)", cv.Fresh, cv.Kept(), cv.Schema, approverOf, cv.ID)
	}
	cv.Close()
	if infos, _ := st.Infos(); len(infos) != 0 {
		t.Errorf("a fresh session without a reply was kept: %+v", infos)
	}

	named, _, err := OpenConversation(cfg, st, "mine", approver, json.RawMessage(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	if named.Fresh || !named.Kept() || !named.Schema || named.RunInfo(nil, nil).OutputType != "json" || named.RunInfo(nil, nil).Session != "mine" {
		t.Errorf("named session: fresh %v kept %v schema %v info %+v", named.Fresh, named.Kept(), named.Schema, named.RunInfo(nil, nil))
	}
	named.Close()
	if _, err := os.Stat(filepath.Join(cfg.Sessions.Dir, "mine.jsonl")); err != nil {
		t.Errorf("the named session is gone: %v", err)
	}

	if _, _, err := OpenConversation(cfg, st, "../x", approver, nil); !errors.Is(err, session.ErrBadID) {
		t.Errorf("bad id: %v, want ErrBadID", err)
	}
	if _, _, err := OpenConversation(cfg, st, "", approver, json.RawMessage(`{"type":"nonsense"}`)); !errors.Is(err, registry.ErrInvalidSchema) {
		t.Errorf("bad schema: %v, want ErrInvalidSchema", err)
	}
	if infos, _ := st.Infos(); len(infos) != 1 {
		t.Errorf("sessions left: %+v, want only mine", infos)
	}
}

// TestNamed: the filter of --tools loads the named tools and the MCP
// servers and plug-ins behind NAME__TOOL names, nothing else; the first
// name the config has no tool of is reported.
func TestNamed(t *testing.T) {
	cfg := config.Default()
	cfg.Tools = map[string]config.Tool{"a": {}, "b": {}}
	cfg.MCP = map[string]config.MCPServer{"srv": {}}
	cfg.Plugins = map[string]config.Tool{"plug": {}}
	f, missing := Named(cfg, []string{"a", "srv__x", "plug__y"})
	if missing != "" {
		t.Fatalf("missing %q", missing)
	}
	for _, c := range []struct {
		kind, name string
		want       bool
	}{{"wasm", "a", true}, {"wasm", "b", false}, {"mcp", "srv", true}, {"plugin", "plug", true}, {"mcp", "other", false}} {
		if got := f(c.kind, c.name); got != c.want {
			t.Errorf("filter(%s, %s) = %v, want %v", c.kind, c.name, got, c.want)
		}
	}
	if _, missing := Named(cfg, []string{"a", "nope", "other__x"}); missing != "nope" {
		t.Errorf("missing %q, want nope", missing)
	}
}

// TestListenMCP: mcp serve --http refuses a non-loopback address without
// tokens and a config with tenants (both configuration errors), and
// listens on loopback without tokens.
func TestListenMCP(t *testing.T) {
	cfg := config.Default()
	cfg.Serve.TokensEnv = "AGRUN_TEST_NO_SUCH_VARIABLE"
	var ce *ConfigError
	if ln, _, err := ListenMCP(cfg, "0.0.0.0:0"); !errors.As(err, &ce) {
		if ln != nil {
			ln.Close()
		}
		t.Errorf("all interfaces without tokens: %v, want a ConfigError", err)
	}
	ln, tokens, err := ListenMCP(cfg, "127.0.0.1:0")
	if err != nil || len(tokens) != 0 {
		t.Fatalf("loopback: %v %v", err, tokens)
	}
	ln.Close()
	cfg.Serve.Tenants = map[string]config.Tenant{"t": {}}
	if _, _, err := ListenMCP(cfg, "127.0.0.1:0"); !errors.As(err, &ce) {
		t.Errorf("tenants: %v, want a ConfigError", err)
	}
}

// TestServeMCPHTTP: with tokens, a request without one gets 401 and the
// JSON-RPC error, one with a token reaches the handler at /mcp; the
// server stops when its context ends.
func TestServeMCPHTTP(t *testing.T) {
	cfg := config.Default()
	token := strings.Repeat("k", 40)
	ln, _, err := ListenMCP(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") })
	go func() {
		done <- ServeMCPHTTP(ctx, cfg, ln, []string{token}, h, func(addr net.Addr, auth string) {
			if auth != "1 bearer token(s) from $"+cfg.Serve.TokensEnv {
				t.Errorf("auth %q", auth)
			}
			addrs <- addr.String()
		})
	}()
	url := "http://" + <-addrs + "/mcp"
	get := func(tok string) (int, string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader("{}"))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(""); code != http.StatusUnauthorized || !strings.Contains(body, `"code":-32001`) {
		t.Errorf("no token: %d %s", code, body)
	}
	if code, body := get(token); code != http.StatusOK || body != "reached" {
		t.Errorf("token: %d %s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("after the context ended: %v", err)
	}
}
