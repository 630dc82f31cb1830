package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/testing/mddoc"
	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/registry"
)

// oauthServer is an MCP server (one tool, "hello") behind bearer tokens
// and, on its origin, a whole authorization server: protected resource
// and authorization server metadata, dynamic registration, an
// authorization endpoint that approves at once (redirecting to the
// redirect URI with a code and the state), and a token endpoint for the
// code (PKCE's verifier required) and for refresh.
type oauthServer struct {
	*httptest.Server
	mu       sync.Mutex
	issued   map[string]bool // access tokens issued
	verifier map[string]string
	grants   []string
}

func newOAuthServer(t *testing.T) *oauthServer {
	o := &oauthServer{issued: map[string]bool{}, verifier: map[string]string{}}
	mux := http.NewServeMux()
	o.Server = httptest.NewServer(mux)
	t.Cleanup(o.Close)
	base := o.URL
	reg := registry.New()
	hello, err := registry.NewFunc("hello", "say hello", func(ctx context.Context, in struct{}) (string, error) { return "hello, authorized", nil })
	if err != nil {
		t.Fatal(err)
	}
	reg.Register(hello)
	verify := func(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !o.issued[tok] {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: base + "/.well-known/oauth-protected-resource/mcp"})(mcp.NewHTTPHandler(reg, nil)))
	js := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		js(w, map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		js(w, map[string]any{"issuer": base, "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
			"registration_endpoint": base + "/register", "code_challenge_methods_supported": []string{"S256"},
			"response_types_supported": []string{"code"}, "token_endpoint_auth_methods_supported": []string{"none"}})
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&m)
		m["client_id"] = "dyn-client"
		w.WriteHeader(http.StatusCreated)
		js(w, m)
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("resource") != base+"/mcp" {
			http.Error(w, "want PKCE S256 and the resource indicator", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.verifier["code1"] = q.Get("code_challenge")
		o.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code=code1&state="+q.Get("state"), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		o.mu.Lock()
		defer o.mu.Unlock()
		g := r.Form.Get("grant_type")
		o.grants = append(o.grants, g)
		ok := g == "authorization_code" && r.Form.Get("code") == "code1" && r.Form.Get("code_verifier") != "" ||
			g == "refresh_token" && r.Form.Get("refresh_token") == "refresh1"
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			js(w, map[string]string{"error": "invalid_grant"})
			return
		}
		tok := "access" + string(rune('0'+len(o.issued)))
		o.issued[tok] = true
		js(w, map[string]any{"access_token": tok, "refresh_token": "refresh1", "token_type": "Bearer", "expires_in": 3600})
	})
	return o
}

// TestMCPLogin: `agrun mcp login NAME` prints the authorization URL and
// waits; the browser (here a plain HTTP client following the
// redirects) ends on agrun's loopback listener; the tokens are stored
// and, from then on, `agrun tools` and `agrun call` reach the server
// without a browser. Before the login, the server's tools are broken
// with the hint to log in.
func TestMCPLogin(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := newOAuthServer(t)
	e := newTestEnv(t, "", "\n[mcp.secure]\nurl = \""+srv.URL+"/mcp\"\noauth = {}\n")

	r := e.run("", "tools", "--json").wantCode(t, exitFailure) // a server that cannot be used
	if !strings.Contains(r.stdout, "secure__*") || !strings.Contains(r.stdout, "agrun mcp login secure") {
		t.Fatalf("before the login: %s", r.stdout)
	}
	if len(srv.grants) != 0 {
		t.Fatalf("a run without a person asked for tokens: %v", srv.grants)
	}

	pr, pw := io.Pipe()
	done := make(chan result, 1)
	go func() {
		var out strings.Builder
		code := run(context.Background(), []string{"-c", e.config, "mcp", "login", "secure"}, strings.NewReader(""), &out, pw)
		pw.Close()
		done <- result{stdout: out.String(), code: code}
	}()
	sc := bufio.NewScanner(pr)
	var authURL string
	for sc.Scan() {
		if m := regexp.MustCompile(`^  (http://\S+/authorize\?\S+)$`).FindStringSubmatch(sc.Text()); m != nil {
			authURL = m[1]
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if authURL == "" {
		t.Fatal("mcp login printed no authorization URL")
	}
	// A stray request to the callback (another page, another process)
	// does not end the login.
	cb := regexp.MustCompile(`redirect_uri=([^&]+)`).FindStringSubmatch(authURL)
	if cb != nil {
		if u, err := url.QueryUnescape(cb[1]); err == nil {
			if r, err := http.Get(u + "?code=forged&state=forged"); err == nil {
				r.Body.Close()
			}
		}
	}
	resp, err := http.Get(authURL) // the browser: follows the redirect to agrun's listener
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "agrun is authorized") {
		t.Errorf("the callback page: %q", page)
	}
	res := <-done
	if res.code != exitOK || !strings.Contains(res.stdout, "logged in to secure: 1 tools") {
		t.Fatalf("mcp login: exit %d, %q", res.code, res.stdout)
	}

	r = e.run("", "call", "secure__hello", `{}`).wantCode(t, exitOK)
	if r.stdout != "\"hello, authorized\"\n" {
		t.Fatalf("call after the login: %q (%s)", r.stdout, r.stderr)
	}
	if g := strings.Join(srv.grants, ","); g != "authorization_code" {
		t.Errorf("token requests %s, want one authorization_code (the stored token reused)", g)
	}
}

// TestMCPLoginUsage: what mcp login refuses.
func TestMCPLoginUsage(t *testing.T) {
	e := newTestEnv(t, "", "\n[mcp.local]\ncommand = \"x\"\n[mcp.plain]\nurl = \"http://127.0.0.1:1/mcp\"\n")
	for _, c := range []struct{ name, want string }{
		{"nosuch", "no [mcp.nosuch]"}, {"local", "is a command (stdio)"}, {"plain", "has no oauth: add oauth = {}"},
	} {
		r := e.run("", "mcp", "login", c.name).wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("mcp login %s: %q, want %q", c.name, r.stderr, c.want)
		}
	}
}

// TestMCPDocConfig: docs/MCP.md's configuration example is a valid
// agrun.toml as written (headers_env and oauth included), and a
// headers_env whose variable is unset is a configuration error naming it.
func TestMCPDocConfig(t *testing.T) {
	blocks := mddoc.Read(t, "docs/MCP.md").Section(t, "## Configuring servers").Blocks("toml")
	if len(blocks) == 0 {
		t.Fatal("docs/MCP.md has no configuration example")
	}
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "agrun.toml"), []byte(blocks[0]))
	if err != nil {
		t.Fatalf("docs/MCP.md's example: %v", err)
	}
	if cfg.MCP["hosted"].OAuth == nil || cfg.MCP["remote"].HeadersEnv["Authorization"] != "REMOTE_AUTH" {
		t.Fatalf("the example's oauth and headers_env: %+v", cfg.MCP)
	}
	e := newTestEnv(t, "", "\n[mcp.remote]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders_env = { Authorization = \"AGRUN_TEST_UNSET_AUTH\" }\n")
	r := e.run("", "tools", "--json").wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, "AGRUN_TEST_UNSET_AUTH is not set") {
		t.Fatalf("an unset headers_env variable: %s", r.stdout)
	}
}
