package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/agcore/agrun/internal/atomicfile"
	"github.com/agcore/agrun/internal/netguard"
	"github.com/agcore/agrun/internal/textsafe"
)

// ErrLoginRequired is wrapped by the error of a connection to a server
// that asks for authorization when no person can take part (OAuth.Authorize
// is nil) and no stored token works: the person runs the login (agrun mcp
// login NAME) once, and later connections use its tokens.
var ErrLoginRequired = errors.New("the server requires authorization (OAuth) and no valid token is stored")

// OAuth authorizes the requests of an [HTTP] transport as MCP's
// authorization specification (2025-11-25) says, through the go-sdk's
// auth.AuthorizationCodeHandler: on a 401 it reads the server's protected
// resource metadata and its authorization server's metadata, registers a
// client (a pre-registered ClientID, a client ID metadata document, or
// dynamic registration, in that order of preference), runs the
// authorization code flow with PKCE and the resource indicator, and
// exchanges the code for tokens, which Tokens keeps; an expired access
// token is refreshed with the refresh token when there is one.
//
// The requests it makes for this (metadata, registration, tokens) go
// through internal/netguard: an address that is loopback, private,
// link-local (the cloud metadata address) or otherwise not public is
// refused, so that a server's metadata cannot point agrun at the machine
// or its network, unless AllowPrivate is set; a local MCP server's own
// host may be reached, and loopback when the server itself is on loopback
// (a local server's authorization server usually sits beside it). Redirects are followed at most 5 times, each checked the same
// way. Answers are bounded (1 MiB).
//
// Use one OAuth value per server: it holds the handler and its tokens
// across the Client's reconnections.
type OAuth struct {
	// ClientID (and ClientSecret, for a confidential client) identify a
	// client registered with the authorization server beforehand.
	ClientID, ClientSecret string
	// ClientMetadataURL is the HTTPS URL of a client ID metadata document
	// (the client_id itself), used when ClientID is empty and the server
	// supports such documents.
	ClientMetadataURL string
	// RedirectURL is where the authorization server sends the browser back
	// with the code: the loopback listener of the login. Required for a
	// login (Authorize set); ignored otherwise.
	RedirectURL string
	// Authorize takes a person through the authorization step: it is given
	// the URL to open and returns what the authorization server redirected
	// to RedirectURL with (code, state, and iss when present). Nil: no
	// person can take part, and a server that needs a new authorization
	// fails the connection with ErrLoginRequired, without any request to
	// the authorization server.
	Authorize func(ctx context.Context, authURL string) (*auth.AuthorizationResult, error)
	// Tokens keeps the tokens between processes; nil: in memory only.
	Tokens TokenStore
	// AllowPrivate lets the authorization requests reach non-public
	// addresses (see above).
	AllowPrivate bool
	// ClientCredentials uses OAuth's client credentials grant (MCP's
	// ext-auth SEP-1046) instead of the authorization code flow: a
	// machine client authorizes itself, with no person, browser,
	// registration or refresh token (a new token is asked for when one
	// expires; none is stored: Tokens and Authorize are not used). It
	// needs ClientID and either ClientSecret (client_secret_basic, or
	// client_secret_post where the server supports only that) or
	// PrivateKey.
	ClientCredentials bool
	// PrivateKey, with ClientCredentials, is the PEM private key (PKCS
	// #8, SEC 1 or PKCS #1: ECDSA P-256/384/521, RSA of 2048 bits or
	// more, Ed25519) that signs the client's assertion
	// (private_key_jwt, RFC 7523): issuer and subject the client id,
	// audience the authorization server's issuer and token endpoint,
	// valid 5 minutes.
	PrivateKey []byte

	once    sync.Once
	handler *oauthHandler
	err     error
}

// TokenStore keeps a server's OAuth session: the client's OAuth
// configuration (endpoints, client ID and secret) and its tokens.
type TokenStore interface {
	// Load returns the stored session, or nil and no error if there is
	// none.
	Load() (*OAuthSession, error)
	// Save replaces the stored session.
	Save(*OAuthSession) error
}

// OAuthSession is what a TokenStore keeps: enough to use and refresh the
// access token without another login.
type OAuthSession struct {
	// Server is the MCP endpoint the tokens are for; a store's session for
	// another URL is not used.
	Server string        `json:"server"`
	Config oauth2.Config `json:"config"`
	Token  oauth2.Token  `json:"token"`
}

// FileTokens is a TokenStore in one file, written atomically with mode
// 0600 (its folder 0700): agrun keeps each server's in the user's config
// directory, never in agrun.toml.
type FileTokens struct {
	Path string
}

// maxTokenFile bounds a token file read.
const maxTokenFile = 1 << 20

// Load implements TokenStore.
func (f FileTokens) Load() (*OAuthSession, error) {
	fh, err := os.Open(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxTokenFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTokenFile {
		return nil, fmt.Errorf("%s: over %d bytes", f.Path, maxTokenFile)
	}
	var s OAuthSession
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return &s, nil
}

// Save implements TokenStore.
func (f FileTokens) Save(s *OAuthSession) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(f.Path, b, 0o600)
}

// oauthHandler is auth.OAuthHandler around the SDK's authorization code
// handler: no authorization flow without a person (Authorize nil).
type oauthHandler struct {
	o      *OAuth
	server string
	inner  auth.OAuthHandler // the SDK's authorization code flow, or ccHandler
	client *http.Client

	mu      sync.Mutex
	lastErr error // the last authorization's failure, nil after a success
}

// failure is why the last authorization failed (the SDK reports it to
// the session only as "rejected by transport"), or nil.
func (h *oauthHandler) failure() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastErr
}

func (h *oauthHandler) record(err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
	if err != nil && !errors.Is(err, ErrLoginRequired) {
		h.lastErr = fmt.Errorf("authorization failed: %w", textsafe.WrapError(err, 1024))
	}
	return err
}

// handlerFor returns o's handler for the MCP endpoint server, built once.
func (o *OAuth) handlerFor(server string) (*oauthHandler, error) {
	o.once.Do(func() { o.handler, o.err = o.newHandler(server) })
	return o.handler, o.err
}

func (o *OAuth) newHandler(server string) (*oauthHandler, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	h := &oauthHandler{o: o, server: server, client: authClient(o.AllowPrivate, u.Hostname())}
	if o.ClientCredentials {
		h.inner, err = newCCHandler(o, server, h.client)
		if err != nil {
			return nil, err
		}
		return h, nil
	}
	save := func(cfg *oauth2.Config, tok *oauth2.Token) error {
		if o.Tokens == nil {
			return nil
		}
		c := *cfg
		c.ClientSecret = "" // a configured secret stays where the operator keeps it (OAuth.ClientSecret)
		if o.ClientSecret == "" {
			c.ClientSecret = cfg.ClientSecret // one the server gave at registration: only the file keeps it
		}
		return o.Tokens.Save(&OAuthSession{Server: server, Config: c, Token: *tok})
	}
	redirect := o.RedirectURL
	if redirect == "" {
		redirect = "http://127.0.0.1/callback" // never used: without Authorize there is no flow
	}
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL: redirect,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			if o.Authorize == nil {
				return nil, ErrLoginRequired
			}
			return o.Authorize(ctx, args.URL)
		},
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
			Metadata: &oauthex.ClientRegistrationMetadata{
				ClientName:   "agrun",
				RedirectURIs: []string{redirect},
				GrantTypes:   []string{"authorization_code", "refresh_token"},
			},
		},
		RequestRefreshToken: true,
		Client:              h.client,
		NewTokenSource: func(ctx context.Context, cfg *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			c := *cfg
			return newSavingTokenSource(c.TokenSource(ctx, tok), &c, nil, save), nil
		},
	}
	if o.ClientMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: o.ClientMetadataURL}
	}
	if o.ClientID != "" {
		cred := &oauthex.ClientCredentials{ClientID: o.ClientID}
		if o.ClientSecret != "" {
			cred.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: o.ClientSecret}
		}
		cfg.PreregisteredClient = cred
	}
	if o.Tokens != nil {
		s, err := o.Tokens.Load()
		if err != nil {
			return nil, fmt.Errorf("the stored OAuth tokens: %w", err)
		}
		if s != nil && s.Server == server {
			ctx := context.WithValue(context.Background(), oauth2.HTTPClient, h.client)
			c, tok := s.Config, s.Token
			if c.ClientSecret == "" && o.ClientID != "" && c.ClientID == o.ClientID {
				c.ClientSecret = o.ClientSecret
			}
			cfg.InitialTokenSource = newSavingTokenSource(c.TokenSource(ctx, &tok), &c, &tok, save)
		}
	}
	h.inner, err = auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	return h, nil
}

// TokenSource implements auth.OAuthHandler. A token that cannot be had
// (expired, and its refresh refused) is reported as ErrLoginRequired
// when no person can log in.
func (h *oauthHandler) TokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	ts, err := h.inner.TokenSource(ctx)
	if ts == nil || err != nil || h.o.Authorize != nil || h.o.ClientCredentials {
		return ts, err
	}
	return loginHint{ts, h}, nil
}

// Authorize implements auth.OAuthHandler: the SDK's flow, or, with no
// person to take part, ErrLoginRequired at once (no discovery, no
// registration: a run without a terminal must not register clients).
func (h *oauthHandler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	if h.o.Authorize == nil && !h.o.ClientCredentials {
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		return h.record(ErrLoginRequired)
	}
	return h.record(h.inner.Authorize(ctx, req, resp))
}

// savingTokenSource saves the session each time the access token changes
// (a new login, a refresh), so that the next process starts with it.
type savingTokenSource struct {
	ts   oauth2.TokenSource
	cfg  *oauth2.Config
	save func(*oauth2.Config, *oauth2.Token) error

	mu   sync.Mutex
	last string // the access token last saved (or loaded)
}

func newSavingTokenSource(ts oauth2.TokenSource, cfg *oauth2.Config, initial *oauth2.Token, save func(*oauth2.Config, *oauth2.Token) error) oauth2.TokenSource {
	s := &savingTokenSource{ts: oauth2.ReuseTokenSource(initial, ts), cfg: cfg, save: save}
	if initial != nil {
		s.last = initial.AccessToken
	}
	return s
}

// Token implements oauth2.TokenSource. A failure to save is returned: a
// token that cannot be kept would be lost with the process, and the
// server may have revoked the refresh token it replaced.
func (s *savingTokenSource) Token() (*oauth2.Token, error) {
	t, err := s.ts.Token()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.AccessToken != s.last {
		if err := s.save(s.cfg, t); err != nil {
			return nil, fmt.Errorf("saving the OAuth tokens: %w", err)
		}
		s.last = t.AccessToken
	}
	return t, nil
}

// loginHint turns a failed refresh into ErrLoginRequired.
type loginHint struct {
	ts oauth2.TokenSource
	h  *oauthHandler
}

func (l loginHint) Token() (*oauth2.Token, error) {
	tok, err := l.ts.Token()
	if err != nil {
		return nil, l.h.record(fmt.Errorf("%w (refreshing it failed: %s)", ErrLoginRequired, textsafe.Clean(err.Error(), 300)))
	}
	return tok, nil
}

// maxAuthBody bounds an answer of an authorization server.
const maxAuthBody = 1 << 20

// authClient is the HTTP client of the authorization requests: public
// addresses only (unless allowPrivate), at most 5 redirects, bounded
// answers.
func authClient(allowPrivate bool, serverHost string) *http.Client {
	d := &netguard.Dialer{Dialer: net.Dialer{Timeout: 10 * time.Second}, AllowPrivate: allowPrivate}
	open := &netguard.Dialer{Dialer: net.Dialer{Timeout: 10 * time.Second}, AllowPrivate: true}
	loopback := isLoopbackHost(serverHost)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // a proxy would dial on agrun's behalf, past the address check
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		// A local MCP server's own host may be reached, and, when the
		// server is on loopback, loopback (its authorization server
		// beside it); nothing else non-public, the metadata address never.
		if !allowPrivate && (strings.EqualFold(host, serverHost) && isLocalHost(serverHost) || loopback && isLoopbackHost(host)) {
			return open.DialContext(ctx, network, addr)
		}
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{
		Transport: &bodyCap{base: tr, max: maxAuthBody},
		Timeout:   30 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("more than 5 redirects")
			}
			return nil
		},
	}
}

// bodyCap bounds every answer's body.
type bodyCap struct {
	base http.RoundTripper
	max  int64
}

func (b *bodyCap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: b.max}
	return resp, nil
}

// isLoopbackHost reports whether host is localhost or a loopback literal.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// isLocalHost reports whether host (a URL's host name) is localhost or a
// non-public address literal (not link-local: the metadata address is
// never a server's own).
func isLocalHost(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && netguard.Forbidden(ip) != "" && !ip.Unmap().IsLinkLocalUnicast()
}
