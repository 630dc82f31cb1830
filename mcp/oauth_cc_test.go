package mcp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

// ccPeer is an MCP server behind bearer tokens and, on the same origin,
// an authorization server that grants client credentials only: to the
// client "c1" with the secret "s1" (client_secret_basic), or with a
// client assertion signed by pub (private_key_jwt), checked as RFC 7523
// says. Its tokens expire after a second.
type ccPeer struct {
	srv *httptest.Server
	pub *ecdsa.PublicKey

	mu     sync.Mutex
	issued map[string]bool
	asks   []string // each token request: "basic", "jwt", or why it was refused
}

func newCCPeer(t *testing.T, pub *ecdsa.PublicKey) *ccPeer {
	p := &ccPeer{pub: pub, issued: map[string]bool{}}
	mux := http.NewServeMux()
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	base := p.srv.URL
	verify := func(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.issued[tok] {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: base + "/.well-known/oauth-protected-resource/mcp"})(NewHTTPHandler(serverRegistry(), nil)))
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"issuer": base, "token_endpoint": base + "/token", "response_types_supported": []string{"code"},
			"grant_types_supported": []string{"client_credentials"}, "code_challenge_methods_supported": []string{"S256"}, "token_endpoint_auth_methods_supported": []string{"client_secret_basic", "private_key_jwt"}})
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		how := p.check(r, base)
		p.mu.Lock()
		p.asks = append(p.asks, how)
		tok := fmt.Sprintf("cc-%d", len(p.asks))
		if how == "basic" || how == "jwt" {
			p.issued[tok] = true
		}
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if how != "basic" && how != "jwt" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 1})
	})
	return p
}

// check is how a token request authenticated, or why it is refused.
func (p *ccPeer) check(r *http.Request, base string) string {
	if r.Form.Get("grant_type") != "client_credentials" || r.Form.Get("resource") != base+"/mcp" {
		return "grant " + r.Form.Get("grant_type") + " for " + r.Form.Get("resource")
	}
	if id, secret, ok := r.BasicAuth(); ok {
		if id == "c1" && secret == "s1" {
			return "basic"
		}
		return "wrong secret"
	}
	if r.Form.Get("client_assertion_type") != assertionType || r.Form.Get("client_id") != "c1" {
		return "no client authentication"
	}
	tok, err := jwt.ParseSigned(r.Form.Get("client_assertion"), []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return err.Error()
	}
	var c jwt.Claims
	if err := tok.Claims(p.pub, &c); err != nil {
		return err.Error()
	}
	if err := c.Validate(jwt.Expected{Issuer: "c1", Subject: "c1", AnyAudience: jwt.Audience{base}, Time: time.Now()}); err != nil {
		return err.Error()
	}
	if c.ID == "" || c.Expiry == nil || time.Until(c.Expiry.Time()) > 10*time.Minute {
		return "no jti or a long expiry"
	}
	return "jwt"
}

func ecKeyPEM(t *testing.T) (*ecdsa.PrivateKey, []byte) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// TestOAuthClientCredentials: a machine client authorizes itself with
// the client credentials grant, found by discovery (protected resource
// and authorization server metadata), with its secret
// (client_secret_basic) or with a client assertion signed by its key
// (private_key_jwt: issuer and subject its id, the authorization server
// its audience, a short expiry, an id), the resource indicator sent; a
// token that expired is replaced by a new grant; a wrong secret fails
// Connect saying so; unusable keys are refused clearly.
func TestOAuthClientCredentials(t *testing.T) {
	ctx := context.Background()
	key, keyPEM := ecKeyPEM(t)
	p := newCCPeer(t, &key.PublicKey)
	for _, tc := range []struct {
		name string
		o    *OAuth
		want string
	}{
		{"basic", &OAuth{ClientCredentials: true, ClientID: "c1", ClientSecret: "s1"}, "basic"},
		{"jwt", &OAuth{ClientCredentials: true, ClientID: "c1", PrivateKey: keyPEM}, "jwt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.mu.Lock()
			p.asks = nil
			p.mu.Unlock()
			c, err := NewClient("srv", HTTP{URL: p.srv.URL + "/mcp", OAuth: tc.o}, &ClientOptions{Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			if err := c.Connect(ctx); err != nil {
				t.Fatalf("Connect: %v", err)
			}
			time.Sleep(1100 * time.Millisecond) // the token expires
			if _, err := c.CallTool(ctx, "count", json.RawMessage(`{"text":"a b"}`)); err != nil {
				t.Fatalf("call after the token expired: %v", err)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.asks) < 2 || p.asks[0] != tc.want || p.asks[len(p.asks)-1] != tc.want {
				t.Errorf("token requests %v; want %s ones, a second once the first token expired", p.asks, tc.want)
			}
		})
	}

	c, err := NewClient("srv", HTTP{URL: p.srv.URL + "/mcp", OAuth: &OAuth{ClientCredentials: true, ClientID: "c1", ClientSecret: "nope"}}, &ClientOptions{Timeout: 10 * time.Second, MaxRestarts: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.Connect(ctx); err == nil || !strings.Contains(err.Error(), "client credentials token request") || !strings.Contains(err.Error(), "invalid_client") {
		t.Errorf("a wrong secret: %v", err)
	}

	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	smallPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(small)})
	for _, tc := range []struct {
		o    *OAuth
		want string
	}{
		{&OAuth{ClientCredentials: true, ClientID: "c1", PrivateKey: []byte("not a key")}, "the private key is not PEM"},
		{&OAuth{ClientCredentials: true, ClientID: "c1", PrivateKey: smallPEM}, "has 1024 bits; at least 2048"},
		{&OAuth{ClientCredentials: true, ClientID: "c1"}, "needs a client secret or a private key"},
		{&OAuth{ClientCredentials: true, ClientSecret: "s1"}, "needs a client id"},
	} {
		c, err := NewClient("srv", HTTP{URL: p.srv.URL + "/mcp", OAuth: tc.o}, &ClientOptions{Timeout: 5 * time.Second, MaxRestarts: -1})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Connect(ctx)
		c.Close(ctx)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Connect: %v; want %q", err, tc.want)
		}
	}
}
