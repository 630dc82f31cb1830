package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"github.com/agcore/agrun/internal/textsafe"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// MinTokenLength is the shortest bearer token New accepts.
const MinTokenLength = 16

// ErrNoTokens is returned by CheckListener for a non-loopback address when
// no token is configured.
var ErrNoTokens = errors.New("no bearer tokens configured: refusing to listen on a non-loopback address (set the variable named by [serve] tokens_env)")

// TokensFromEnv returns the comma-separated tokens in the environment
// variable name; blanks around each token and empty entries are dropped.
func TokensFromEnv(name string) []string {
	if name == "" {
		return nil
	}
	var out []string
	for _, t := range strings.Split(os.Getenv(name), ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// CheckListener refuses ln if it listens on anything but a loopback address
// while tokens is empty (an unauthenticated server must not be reachable
// from the network). An unspecified address (0.0.0.0, ::) is not loopback.
func CheckListener(ln net.Listener, tokens []string) error {
	if len(tokens) > 0 {
		return nil
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		if ln.Addr().Network() == "unix" {
			return nil // a socket file: reachable only through the file system
		}
		return fmt.Errorf("%w: %s", ErrNoTokens, ln.Addr())
	}
	if !addr.IP.IsLoopback() {
		return fmt.Errorf("%w: %s", ErrNoTokens, ln.Addr())
	}
	return nil
}

// authenticator checks bearer tokens in constant time. Tokens are compared
// by their SHA-256 digests, so neither their content nor their length
// leaks through timing, and every configured token is compared on every
// request.
type authenticator struct {
	digests [][32]byte
	owners  []*tenant // owners[i] is the tenant of digests[i]
	// custom is Options.Authenticate, customTenant
	// Options.AuthenticateTenant.
	custom       func(*http.Request) (string, error)
	customTenant func(*http.Request) (tenant, client string, err error)
	tenants      map[string]*tenant
	def          *tenant // the tenant of Options.Tokens and Options.Authenticate
	log          func(msg string, args ...any)
}

// setTenants gives each token its tenant: Options.Tokens are
// DefaultTenant's; with Options.Tenants each tenant's tokens are its own,
// and a token listed for two tenants is refused.
func (a *authenticator) setTenants(opts Options, tenants map[string]*tenant) error {
	a.tenants, a.def = tenants, tenants[DefaultTenant]
	a.customTenant = opts.AuthenticateTenant
	if len(opts.Tenants) == 0 {
		for range a.digests {
			a.owners = append(a.owners, a.def)
		}
		return nil
	}
	owner := map[[32]byte]string{}
	for _, t := range opts.Tenants {
		if len(t.Tokens) > 0 && opts.AuthenticateTenant != nil {
			return fmt.Errorf("server.Options.Tenants: tenant %q has tokens beside AuthenticateTenant: use one", t.Name)
		}
		if err := CheckTokens(t.Tokens); err != nil {
			return fmt.Errorf("tenant %q: %w", t.Name, err)
		}
		for _, tok := range t.Tokens {
			d := sha256.Sum256([]byte(tok))
			if other, dup := owner[d]; dup {
				if other == t.Name {
					continue
				}
				return fmt.Errorf("a token of tenant %q is also listed for tenant %q: a token belongs to one tenant", t.Name, other)
			}
			owner[d] = t.Name
			a.digests = append(a.digests, d)
			a.owners = append(a.owners, tenants[t.Name])
		}
	}
	if len(a.digests) == 0 && a.customTenant == nil {
		return errors.New("server.Options.Tenants: no tenant has a token (and AuthenticateTenant is nil)")
	}
	return nil
}

// CheckTokens returns an error if a token is shorter than MinTokenLength
// (New refuses such tokens too; callers may check before loading anything).
func CheckTokens(tokens []string) error {
	for i, t := range tokens {
		if len(t) < MinTokenLength {
			return fmt.Errorf("token %d is shorter than %d characters", i+1, MinTokenLength)
		}
	}
	return nil
}

func newAuthenticator(tokens []string) (*authenticator, error) {
	if err := CheckTokens(tokens); err != nil {
		return nil, err
	}
	a := &authenticator{}
	for _, t := range tokens {
		a.digests = append(a.digests, sha256.Sum256([]byte(t)))
	}
	return a, nil
}

// open reports whether no token and no Authenticate is configured
// (loopback-only mode).
func (a *authenticator) open() bool {
	return len(a.digests) == 0 && a.custom == nil && a.customTenant == nil
}

// check returns the key that identifies the caller for rate limits (the
// index of its token, or the app's identity of it), its tenant and
// whether the request is authenticated; why is the app's reason for a
// refusal.
func (a *authenticator) check(r *http.Request) (key string, tn *tenant, ok bool, why string) {
	if a.customTenant != nil {
		name, client, err := a.customTenant(r)
		switch {
		case err != nil:
			return "", nil, false, textsafe.Clean(err.Error(), 200)
		case client == "":
			return "", nil, false, "not authenticated"
		}
		if tn = a.tenants[name]; tn == nil {
			if a.log != nil {
				a.log("AuthenticateTenant named a tenant that is not configured", "tenant", textsafe.Clean(name, 80))
			}
			return "", nil, false, "not authenticated"
		}
		return "app-" + tn.name + "/" + textsafe.Clean(client, 200), tn, true, ""
	}
	if a.custom != nil {
		client, err := a.custom(r)
		switch {
		case err != nil:
			return "", nil, false, textsafe.Clean(err.Error(), 200)
		case client == "":
			return "", nil, false, "not authenticated"
		}
		// Identities are the app's: kept apart from the token keys.
		return "app-" + textsafe.Clean(client, 200), a.def, true, ""
	}
	if a.open() {
		return "anonymous", a.def, true, ""
	}
	match := bearerMatch(a.digests, r)
	if match == 0 {
		return "", nil, false, ""
	}
	return fmt.Sprintf("token-%d", match), a.owners[match-1], true, ""
}

// RequireBearer passes on to next only the requests carrying
// "Authorization: Bearer <one of tokens>" (compared as the server
// compares them: by SHA-256 digest, in constant time, every token on
// every request, so neither content nor length leaks through timing);
// the others go to refuse, their body never read. No tokens: no check
// (CheckListener keeps such a listener on loopback). It is what an
// endpoint beside the API (agrun mcp serve --http) uses so that both
// check tokens one way.
func RequireBearer(tokens []string, next, refuse http.Handler) http.Handler {
	if len(tokens) == 0 {
		return next
	}
	digests := make([][32]byte, len(tokens))
	for i, t := range tokens {
		digests[i] = sha256.Sum256([]byte(t))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bearerMatch(digests, r) == 0 {
			refuse.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerMatch is the 1-based index of the token of r's Authorization
// header among digests, 0 if it carries none of them.
func bearerMatch(digests [][32]byte, r *http.Request) int {
	h := r.Header.Get("Authorization")
	tok, found := strings.CutPrefix(h, "Bearer ")
	if !found {
		tok, found = strings.CutPrefix(h, "bearer ")
	}
	if !found {
		return 0
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := 0
	for i := range digests {
		if subtle.ConstantTimeCompare(d[:], digests[i][:]) == 1 {
			match = i + 1
		}
	}
	return match
}

// rateLimiter is a token bucket per key: burst perMinute, refilled at
// perMinute per minute. It is safe for concurrent use.
type rateLimiter struct {
	perMinute float64
	now       func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets is the number of clients' buckets kept before the full ones
// are dropped: with an app's own identities, or without tokens (a bucket
// per address), the clients are not a fixed set.
const maxBuckets = 4096

// prune drops the buckets that have refilled (untouched for a minute):
// a new bucket for their key starts full, so nothing changes for it.
func (l *rateLimiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if now.Sub(b.last) >= time.Minute {
			delete(l.buckets, k)
		}
	}
}

func newRateLimiter(perMinute int) *rateLimiter {
	return &rateLimiter{perMinute: float64(perMinute), now: time.Now, buckets: map[string]*bucket{}}
}

// take spends one token of key's bucket. If none is left it returns false
// and how long until one is.
func (l *rateLimiter) take(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.perMinute, last: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.perMinute, b.tokens+now.Sub(b.last).Minutes()*l.perMinute)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.perMinute * float64(time.Minute))
	return false, wait
}
