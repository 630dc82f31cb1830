package mcp

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// ccHandler is auth.OAuthHandler for OAuth.ClientCredentials: the client
// credentials grant (RFC 6749 section 4.4; MCP's ext-auth SEP-1046) for a
// machine client, no person and no browser. On a 401 it reads the
// protected resource metadata and the authorization server's metadata
// (the SDK's discovery, as the authorization code flow does, through the
// same checked HTTP client), then asks the token endpoint for a token,
// authenticated with the client secret (client_secret_basic, or
// client_secret_post when the server supports only that) or with a
// client assertion signed by PrivateKey (private_key_jwt, RFC 7523).
type ccHandler struct {
	o      *OAuth
	server string
	client *http.Client
	key    crypto.Signer           // nil: the client secret
	alg    jose.SignatureAlgorithm // of key

	mu sync.Mutex
	ts oauth2.TokenSource // nil until authorized
}

// assertionType is RFC 7523's client_assertion_type.
const assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

func newCCHandler(o *OAuth, server string, client *http.Client) (*ccHandler, error) {
	h := &ccHandler{o: o, server: server, client: client}
	switch {
	case o.ClientID == "":
		return nil, errors.New("oauth: the client credentials grant needs a client id")
	case (o.ClientSecret == "") == (len(o.PrivateKey) == 0):
		return nil, errors.New("oauth: the client credentials grant needs a client secret or a private key, not both")
	}
	if len(o.PrivateKey) > 0 {
		key, alg, err := parsePrivateKey(o.PrivateKey)
		if err != nil {
			return nil, err
		}
		h.key, h.alg = key, alg
	}
	return h, nil
}

// parsePrivateKey reads a PEM private key (PKCS #8, or SEC 1 "EC PRIVATE
// KEY", or PKCS #1 "RSA PRIVATE KEY") for private_key_jwt, and the JWS
// algorithm that signs with it: ES256, ES384 or ES512 by the curve, RS256
// for RSA (at least 2048 bits), EdDSA for Ed25519.
func parsePrivateKey(pemBytes []byte) (crypto.Signer, jose.SignatureAlgorithm, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, "", errors.New("the private key is not PEM")
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, "", fmt.Errorf("the private key: %w", err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			return k, jose.ES256, nil
		case elliptic.P384():
			return k, jose.ES384, nil
		case elliptic.P521():
			return k, jose.ES512, nil
		}
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return nil, "", fmt.Errorf("the RSA private key has %d bits; at least 2048 are needed", k.N.BitLen())
		}
		return k, jose.RS256, nil
	case ed25519.PrivateKey:
		return k, jose.EdDSA, nil
	}
	return nil, "", fmt.Errorf("the private key is a %T; want ECDSA (P-256, P-384, P-521), RSA or Ed25519", key)
}

// TokenSource implements auth.OAuthHandler.
func (h *ccHandler) TokenSource(context.Context) (oauth2.TokenSource, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ts, nil
}

// Authorize implements auth.OAuthHandler: discovery, then a token.
func (h *ccHandler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	if resp != nil && resp.Body != nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxAuthBody))
		resp.Body.Close()
	}
	var challenges []oauthex.Challenge
	if resp != nil {
		challenges, _ = oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	}
	prm, err := h.resourceMetadata(ctx, challenges)
	if err != nil {
		return err
	}
	asm, err := auth.GetAuthServerMetadata(ctx, prm.AuthorizationServers[0], h.client)
	if err != nil {
		return fmt.Errorf("the authorization server's metadata: %w", err)
	}
	if asm == nil || asm.TokenEndpoint == "" {
		return fmt.Errorf("the authorization server %s publishes no metadata with a token endpoint", prm.AuthorizationServers[0])
	}
	var scopes []string
	for _, c := range challenges {
		if s := c.Params["scope"]; s != "" {
			scopes = strings.Fields(s)
		}
	}
	if len(scopes) == 0 {
		scopes = prm.ScopesSupported
	}
	resource := prm.Resource
	if resource == "" {
		resource = h.server
	}
	cfg := clientcredentials.Config{
		ClientID:       h.o.ClientID,
		ClientSecret:   h.o.ClientSecret,
		TokenURL:       asm.TokenEndpoint,
		Scopes:         scopes,
		EndpointParams: url.Values{"resource": {resource}},
	}
	methods := asm.TokenEndpointAuthMethodsSupported
	switch {
	case h.key != nil:
		cfg.AuthStyle = oauth2.AuthStyleInParams // client_id beside the assertion, no secret
	case slices.Contains(methods, "client_secret_basic") || len(methods) == 0:
		cfg.AuthStyle = oauth2.AuthStyleInHeader // RFC 6749's default
	case slices.Contains(methods, "client_secret_post"):
		cfg.AuthStyle = oauth2.AuthStyleInParams
	}
	tctx := context.WithValue(context.Background(), oauth2.HTTPClient, h.client)
	var src oauth2.TokenSource = cfg.TokenSource(tctx)
	if h.key != nil {
		src = &assertionSource{h: h, cfg: cfg, ctx: tctx, audience: jwt.Audience{asm.Issuer, asm.TokenEndpoint}}
	}
	ts := oauth2.ReuseTokenSource(nil, src)
	if _, err := ts.Token(); err != nil {
		return fmt.Errorf("the client credentials token request: %w", err)
	}
	h.mu.Lock()
	h.ts = ts
	h.mu.Unlock()
	return nil
}

// resourceMetadata is the server's protected resource metadata (RFC
// 9728), found where MCP says to look: the URL of the 401's
// WWW-Authenticate, then at the endpoint's path, then at the root. Its
// resource must be the server (the SDK checks it).
func (h *ccHandler) resourceMetadata(ctx context.Context, challenges []oauthex.Challenge) (*oauthex.ProtectedResourceMetadata, error) {
	u, err := url.Parse(h.server)
	if err != nil {
		return nil, err
	}
	type candidate struct{ meta, resource string }
	var cands []candidate
	for _, c := range challenges {
		if m := c.Params["resource_metadata"]; m != "" {
			cands = append(cands, candidate{m, h.server})
		}
	}
	at := *u
	at.RawQuery, at.Fragment = "", ""
	at.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(u.Path, "/")
	cands = append(cands, candidate{at.String(), h.server})
	at.Path = "/.well-known/oauth-protected-resource"
	root := *u
	root.Path, root.RawQuery, root.Fragment = "", "", ""
	cands = append(cands, candidate{at.String(), root.String()})
	var first error
	for _, c := range cands {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, c.meta, c.resource, h.client)
		if err != nil || prm == nil {
			if first == nil {
				first = err // the most specific place's failure says most
			}
			continue
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, errors.New("the protected resource metadata names no authorization server")
		}
		return prm, nil
	}
	if first == nil {
		first = errors.New("none found")
	}
	return nil, fmt.Errorf("the server's protected resource metadata: %w", first)
}

// assertionSource asks for a token with a fresh client assertion each
// time (RFC 7523 section 2.2): a JWT whose issuer and subject are the
// client id, for the authorization server (its issuer and token
// endpoint), valid 5 minutes, with a random id.
type assertionSource struct {
	h        *ccHandler
	cfg      clientcredentials.Config
	ctx      context.Context
	audience jwt.Audience
}

func (a *assertionSource) Token() (*oauth2.Token, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: a.h.alg, Key: a.h.key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, err
	}
	id := make([]byte, 16)
	rand.Read(id)
	now := time.Now()
	raw, err := jwt.Signed(signer).Claims(jwt.Claims{
		Issuer:   a.cfg.ClientID,
		Subject:  a.cfg.ClientID,
		Audience: a.audience,
		IssuedAt: jwt.NewNumericDate(now),
		Expiry:   jwt.NewNumericDate(now.Add(5 * time.Minute)),
		ID:       hex.EncodeToString(id),
	}).Serialize()
	if err != nil {
		return nil, fmt.Errorf("signing the client assertion: %w", err)
	}
	cfg := a.cfg
	cfg.EndpointParams = url.Values{"client_assertion_type": {assertionType}, "client_assertion": {raw}}
	for k, v := range a.cfg.EndpointParams {
		cfg.EndpointParams[k] = v
	}
	return cfg.Token(a.ctx)
}
