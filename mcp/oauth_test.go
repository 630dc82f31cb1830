package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/oauth2"

	"github.com/agcore/agrun/internal/netguard"
)

// oauthPeer is an MCP server behind bearer tokens (the go-sdk's
// RequireBearerToken and protected resource metadata) and, on the same
// origin, its authorization server's metadata and token endpoint, which
// answers refresh grants with a new access and refresh token.
type oauthPeer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	valid  string   // the access token the MCP endpoint accepts
	grants []string // what the token endpoint was asked: "refresh_token:r1", ...
	hits   []string // every path of the authorization server asked for
}

func newOAuthPeer(t *testing.T) *oauthPeer {
	p := &oauthPeer{valid: "tok2"}
	mux := http.NewServeMux()
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	base := p.srv.URL
	verify := func(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if tok != p.valid {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}
	mcpH := NewHTTPHandler(serverRegistry(), nil)
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: base + "/.well-known/oauth-protected-resource/mcp"})(mcpH))
	note := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			p.mu.Lock()
			p.hits = append(p.hits, r.URL.Path)
			p.mu.Unlock()
			h(w, r)
		}
	}
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", note(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}})
	}))
	mux.HandleFunc("/.well-known/oauth-authorization-server", note(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": base, "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
			"registration_endpoint": base + "/register", "code_challenge_methods_supported": []string{"S256"}, "response_types_supported": []string{"code"}})
	}))
	mux.HandleFunc("/register", note(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusBadRequest) }))
	mux.HandleFunc("/token", note(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		p.mu.Lock()
		p.grants = append(p.grants, r.Form.Get("grant_type")+":"+r.Form.Get("refresh_token"))
		p.mu.Unlock()
		if r.Form.Get("grant_type") != "refresh_token" || r.Form.Get("refresh_token") != "r1" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": "tok2", "refresh_token": "r2", "token_type": "Bearer", "expires_in": 3600})
	}))
	return p
}

// TestOAuthRefresh: a stored session whose access token has expired is
// refreshed with its refresh token before the first request, the new
// tokens are saved (0600), and the server gets the new access token; no
// person takes part.
func TestOAuthRefresh(t *testing.T) {
	p := newOAuthPeer(t)
	path := filepath.Join(t.TempDir(), "tokens", "srv.json")
	ft := FileTokens{Path: path}
	url := p.srv.URL + "/mcp"
	if err := ft.Save(&OAuthSession{Server: url, Config: oauth2.Config{ClientID: "c1", Endpoint: oauth2.Endpoint{TokenURL: p.srv.URL + "/token"}},
		Token: oauth2.Token{AccessToken: "old", RefreshToken: "r1", Expiry: time.Now().Add(-time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient("srv", HTTP{URL: url, OAuth: &OAuth{Tokens: ft}}, &ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.Connect(context.Background()); err != nil {
		t.Fatalf("Connect with an expired, refreshable token: %v", err)
	}
	if _, err := c.CallTool(context.Background(), "count", json.RawMessage(`{"text":"a b"}`)); err != nil {
		t.Fatalf("call: %v", err)
	}
	if len(p.grants) != 1 || p.grants[0] != "refresh_token:r1" {
		t.Errorf("token endpoint saw %v, want one refresh with r1", p.grants)
	}
	s, err := ft.Load()
	if err != nil || s == nil || s.Token.AccessToken != "tok2" || s.Token.RefreshToken != "r2" {
		t.Fatalf("stored session after the refresh: %+v, %v", s, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode: %v, %v; want 0600", st.Mode(), err)
	}
}

// TestOAuthLoginRequired: without stored tokens and without a person
// (Authorize nil), a server that answers 401 fails the connection with
// ErrLoginRequired, and agrun asks the authorization server nothing (no
// metadata, no dynamic registration).
func TestOAuthLoginRequired(t *testing.T) {
	p := newOAuthPeer(t)
	c, err := NewClient("srv", HTTP{URL: p.srv.URL + "/mcp", OAuth: &OAuth{Tokens: FileTokens{Path: filepath.Join(t.TempDir(), "none.json")}}}, &ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = c.Connect(context.Background())
	if !errors.Is(err, ErrLoginRequired) {
		t.Fatalf("Connect: %v, want ErrLoginRequired", err)
	}
	if len(p.hits) != 0 {
		t.Errorf("the authorization server was asked %v", p.hits)
	}
	// Without OAuth at all, the 401 says the server wants authorization.
	c2, _ := NewClient("srv", HTTP{URL: p.srv.URL + "/mcp"}, &ClientOptions{Timeout: 10 * time.Second})
	defer c2.Close(context.Background())
	if err := c2.Connect(context.Background()); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Connect without OAuth: %v, want ErrUnauthorized naming the 401", err)
	}
}

// TestOAuthClientRefusesPrivate: the authorization requests' client
// refuses loopback and private addresses unless allowed (a remote
// server's metadata cannot point agrun at the machine or its network).
func TestOAuthClientRefusesPrivate(t *testing.T) {
	p := newOAuthPeer(t)
	_, err := authClient(false, "mcp.example.com").Get(p.srv.URL + "/.well-known/oauth-authorization-server")
	var ge *netguard.Error
	if !errors.As(err, &ge) {
		t.Fatalf("GET of a loopback address: %v, want refused by netguard", err)
	}
	resp, err := authClient(true, "mcp.example.com").Get(p.srv.URL + "/.well-known/oauth-authorization-server")
	if err != nil {
		t.Fatalf("allowed: %v", err)
	}
	resp.Body.Close()
	// A LAN server's metadata cannot point at this machine's loopback.
	if _, err := authClient(false, "10.0.0.5").Get(p.srv.URL + "/x"); !errors.As(err, &ge) {
		t.Errorf("a private server's redirect to loopback: %v, want refused", err)
	}
	if isLocalHost("169.254.169.254") {
		t.Error("the metadata address counted as a server's own")
	}
	if isLocalHost("example.com") || !isLocalHost("127.0.0.1") || !isLocalHost("localhost") || !isLocalHost("10.1.2.3") {
		t.Error("isLocalHost")
	}
}

// TestOAuthSecretNotStored: a configured client secret is not written to
// the token file (it stays in the operator's variable), and a refresh
// after loading still sends it.
func TestOAuthSecretNotStored(t *testing.T) {
	p := newOAuthPeer(t)
	path := filepath.Join(t.TempDir(), "srv.json")
	ft := FileTokens{Path: path}
	url := p.srv.URL + "/mcp"
	ft.Save(&OAuthSession{Server: url, Config: oauth2.Config{ClientID: "c1", Endpoint: oauth2.Endpoint{TokenURL: p.srv.URL + "/token"}},
		Token: oauth2.Token{AccessToken: "old", RefreshToken: "r1", Expiry: time.Now().Add(-time.Minute)}})
	c, err := NewClient("srv", HTTP{URL: url, OAuth: &OAuth{ClientID: "c1", ClientSecret: "s3cret-value", Tokens: ft}}, &ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "s3cret-value") {
		t.Fatalf("the token file holds the configured secret: %s", b)
	}
}

// TestHeadersStayWithTheEndpoint: configured headers (a token) are not
// sent to another origin a redirect leads to.
func TestHeadersStayWithTheEndpoint(t *testing.T) {
	var got string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	c, _ := NewClient("srv", HTTP{URL: srv.URL + "/mcp", Headers: map[string]string{"Authorization": "Bearer secret-token"}}, &ClientOptions{Timeout: 5 * time.Second})
	defer c.Close(context.Background())
	c.Connect(context.Background())
	if got != "" {
		t.Fatalf("the redirect's target got Authorization %q", got)
	}
}
