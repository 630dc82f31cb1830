package mcp

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// Defaults of NewHTTPHandler's session limits (see ServerOptions).
const (
	DefaultSessionTimeout       = 5 * time.Minute
	DefaultMaxSessions          = 256
	DefaultMaxSessionsPerClient = 16
)

// sessionRetryAfter is the Retry-After of a refused session, in seconds.
const sessionRetryAfter = 30

// NewHTTPHandler returns a streamable HTTP handler serving reg (see
// NewServer) to any number of clients. Mount it on the MCP endpoint path,
// e.g. mux.Handle("/mcp", h).
//
// What a client can make it hold is bounded: a request body is capped at
// ServerOptions.MaxRequestBytes (413 beyond); at most
// ServerOptions.MaxSessions sessions are kept, at most
// ServerOptions.MaxSessionsPerClient per client address, and a session
// that receives no request for the session timeout is closed. A request
// that would open a session past a cap (any POST without an
// Mcp-Session-Id header) is refused, 503 or 429 with Retry-After and a
// JSON-RPC error body, before its body is read. It has no authentication
// of its own: wrap it (agrun mcp serve requires bearer tokens off
// loopback). It is safe for concurrent use.
func NewHTTPHandler(reg *registry.Registry, opts *ServerOptions) http.Handler {
	var o ServerOptions
	if opts != nil {
		o = *opts
	}
	o.transport = "tcp"
	srv := NewServer(reg, &o)
	var ho sdk.StreamableHTTPOptions
	if o.HTTP != nil {
		ho = *o.HTTP
	}
	if ho.SessionTimeout == 0 {
		ho.SessionTimeout = DefaultSessionTimeout
	}
	if ho.MaxRequestBodyBytes == 0 {
		ho.MaxRequestBodyBytes = int64(o.maxRequestBytes())
	}
	l := &sessionLimiter{
		srv:       srv,
		next:      sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &ho),
		max:       orDefault(o.MaxSessions, DefaultMaxSessions),
		perClient: orDefault(o.MaxSessionsPerClient, DefaultMaxSessionsPerClient),
		owner:     map[string]string{},
		pending:   map[string]int{},
	}
	return l
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// sessionLimiter admits a request that would open a session only within
// the caps. The sessions the SDK holds are the truth: owner records which
// client opened each, and entries for sessions that closed (idle timeout,
// DELETE, failed initialize) are dropped at each admission.
type sessionLimiter struct {
	srv            *sdk.Server
	next           http.Handler
	max, perClient int

	mu           sync.Mutex
	owner        map[string]string // session id -> client key
	pending      map[string]int    // client key -> requests opening a session now
	pendingTotal int
}

func (l *sessionLimiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
		l.next.ServeHTTP(w, r)
		return
	}
	client := clientKey(r.RemoteAddr)
	if status, msg := l.admit(client); status != 0 {
		w.Header().Set("Retry-After", strconv.Itoa(sessionRetryAfter))
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(errorReply(nil, codeServerError, msg))
		return
	}
	defer func() { l.done(client, w.Header().Get("Mcp-Session-Id")) }()
	l.next.ServeHTTP(w, r)
}

// admit reserves a session slot for client, or returns the refusal.
func (l *sessionLimiter) admit(client string) (status int, msg string) {
	live := map[string]bool{}
	for ss := range l.srv.Sessions() {
		live[ss.ID()] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	mine := l.pending[client]
	for id, c := range l.owner {
		switch {
		case !live[id]:
			delete(l.owner, id)
		case c == client:
			mine++
		}
	}
	if len(l.owner)+l.pendingTotal >= l.max {
		return http.StatusServiceUnavailable, fmt.Sprintf("too many sessions (the server keeps at most %d); try again later", l.max)
	}
	if mine >= l.perClient {
		return http.StatusTooManyRequests, fmt.Sprintf("too many sessions from your address (at most %d); close some (DELETE) or let them expire", l.perClient)
	}
	l.pending[client]++
	l.pendingTotal++
	return 0, ""
}

// done releases client's reservation; id is the session the request
// opened, if any (a session that closed already is dropped by the next
// admit).
func (l *sessionLimiter) done(client, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending[client]--; l.pending[client] <= 0 {
		delete(l.pending, client)
	}
	l.pendingTotal--
	if id != "" {
		l.owner[id] = client
	}
}

// clientKey is the address a client's sessions are counted under: an IPv4
// address, or the /64 of an IPv6 one (one host usually holds a whole /64).
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
