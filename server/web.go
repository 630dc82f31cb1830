package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
)

// This file holds what keeps a browser page, or a client that only holds
// connections open, from using the server: the Host allow-list (DNS
// rebinding), the Origin check (cross-site requests), the media type of
// JSON bodies, bodies read under their own deadline and byte budget before
// a slot is taken, and the per-client share of the slots.

// hostPolicy decides which Host and Origin values the server answers. It
// is immutable once built.
type hostPolicy struct {
	anyPort  map[string]bool // allowed_hosts entries without a port (lower case)
	withPort map[string]bool // allowed_hosts entries with a port, as host:port
	addrHost string          // the host of the configured addr, unless unspecified
}

// newHostPolicy builds the policy of the configured address addr and the
// extra names allowed. An entry is a host name or IP, optionally with a
// port; without a port it matches every port.
func newHostPolicy(addr string, allowed []string) (*hostPolicy, error) {
	p := &hostPolicy{anyPort: map[string]bool{}, withPort: map[string]bool{}}
	for _, e := range allowed {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" || strings.ContainsAny(e, "/@ \t?#") {
			return nil, fmt.Errorf("allowed host %q: want a host name or host:port, without scheme or path", e)
		}
		if h, port, err := net.SplitHostPort(e); err == nil {
			if h == "" || !validPort(port) {
				return nil, fmt.Errorf("allowed host %q: want a host name or host:port", e)
			}
			p.withPort[net.JoinHostPort(h, port)] = true
			continue
		}
		p.anyPort[strings.Trim(e, "[]")] = true
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			p.addrHost = strings.ToLower(h)
		}
	}
	return p, nil
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n > 0 && n < 65536
}

// splitHost splits a Host value (host, host:port, [v6], [v6]:port) into
// its lower-case host and its port, defPort if it has none.
func splitHost(hostport, defPort string) (host, port string, ok bool) {
	hostport = strings.ToLower(hostport)
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p, h != "" && validPort(p)
	}
	if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		hostport = hostport[1 : len(hostport)-1]
	} else if strings.Contains(hostport, ":") {
		return "", "", false
	}
	return hostport, defPort, hostport != ""
}

// allows reports whether the host and port a request names are this
// server: an allowed_hosts entry; or, on the port the connection reached
// (any port if local is nil), localhost, a loopback IP, the IP the
// connection reached, or the configured address's host.
func (p *hostPolicy) allows(host, port string, local *net.TCPAddr) bool {
	if p.anyPort[host] || p.withPort[net.JoinHostPort(host, port)] {
		return true
	}
	if local != nil && port != fmt.Sprint(local.Port) {
		return false
	}
	if host == "localhost" || host == p.addrHost {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || local != nil && ip.Equal(local.IP))
}

// localTCP returns the local address of r's connection; ok is false for a
// connection that is not TCP (a unix socket).
func localTCP(r *http.Request) (addr *net.TCPAddr, ok bool) {
	switch a := r.Context().Value(http.LocalAddrContextKey).(type) {
	case *net.TCPAddr:
		return a, true
	case nil:
		return nil, true // a handler served without a connection: no port to compare
	default:
		return nil, false
	}
}

// checkSite refuses a request that a web page, rather than a program, may
// have sent to this server: a Host that is not this server's (DNS
// rebinding), an Origin that is not its own, or a fetch the browser marks
// cross-site or same-site. Requests without these headers (curl,
// programs) pass.
func (s *Server) checkSite(r *http.Request) *apiError {
	local, tcp := localTCP(r)
	if tcp {
		host, port, ok := splitHost(r.Host, "80")
		if !ok || !s.hosts.allows(host, port, local) {
			return errorf(http.StatusMisdirectedRequest, KindBadHost, "this server does not answer for host %q (add it to [serve] allowed_hosts)", textsafe.Clean(r.Host, 80))
		}
	}
	if o, present := r.Header["Origin"]; present {
		if len(o) != 1 || !s.ownOrigin(o[0], local) {
			return errorf(http.StatusForbidden, KindCrossOrigin, "requests from web pages of another origin are refused (Origin %q)", textsafe.Clean(strings.Join(o, ","), 80))
		}
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return errorf(http.StatusForbidden, KindCrossOrigin, "requests from web pages of another origin are refused (Sec-Fetch-Site %q)", textsafe.Clean(site, 40))
	}
	return nil
}

// ownOrigin reports whether origin is http:// or https:// and one of the
// hosts the server answers for.
func (s *Server) ownOrigin(origin string, local *net.TCPAddr) bool {
	u, err := url.Parse(origin)
	if err != nil || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return false
	}
	def := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	if def == "" {
		return false
	}
	host, port, ok := splitHost(u.Host, def)
	return ok && s.hosts.allows(host, port, local)
}

// requireMedia refuses (415) a request whose Content-Type is not one of
// types (parameters such as charset allowed).
func requireMedia(r *http.Request, types ...string) *apiError {
	mt := mediaType(r)
	for _, t := range types {
		if mt == t {
			return nil
		}
	}
	return errorf(http.StatusUnsupportedMediaType, KindUnsupportedMedia, "the body must be sent as Content-Type: %s (got %q)", strings.Join(types, " or "), textsafe.Clean(mt, 80))
}

// clientKeyCtx is the context key of the client key the handler found
// when it authenticated the request.
type clientKeyCtx struct{}

// clientKey identifies the client of an authenticated request for rate
// limits and shares: its token, or without tokens its address.
func (s *Server) clientKey(r *http.Request) string {
	if k, ok := r.Context().Value(clientKeyCtx{}).(string); ok {
		return k
	}
	if !s.auth.open() {
		k, _, _, _ := s.auth.check(r)
		return k
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr-" + host
}

// quota is a counting semaphore shared by clients: at most total units
// held at once, at most perKey of them by one key. It never waits. It is
// safe for concurrent use.
type quota struct {
	total, perKey int64

	mu   sync.Mutex
	used int64
	held map[string]int64
}

func newQuota(total, perKey int64) *quota {
	return &quota{total: total, perKey: min(perKey, total), held: map[string]int64{}}
}

// Reasons take fails.
const (
	quotaFull  = 1 // the total is held
	quotaShare = 2 // key holds its share
)

// take takes n units for key; on failure it takes nothing and says why.
func (q *quota) take(key string, n int64) (ok bool, why int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.held[key]+n > q.perKey:
		return false, quotaShare
	case q.used+n > q.total:
		return false, quotaFull
	}
	q.used += n
	q.held[key] += n
	return true, 0
}

// give returns n units key took.
func (q *quota) give(key string, n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used -= n
	if q.held[key] -= n; q.held[key] <= 0 {
		delete(q.held, key)
	}
}

// slot takes one unit of q for r's client, or answers why not (429 busy,
// Retry-After set). what names the slots in the message.
func (s *Server) slot(w http.ResponseWriter, r *http.Request, q *quota, what string) (release func(), err error) {
	key := s.clientKey(r)
	ok, why := q.take(key, 1)
	if !ok {
		retryAfter(w, time.Second)
		if why == quotaShare {
			return nil, errorf(http.StatusTooManyRequests, KindBusy, "this client has %d %s in progress, its share of the server's %d; try again", q.perKey, what, q.total)
		}
		return nil, errorf(http.StatusTooManyRequests, KindBusy, "%d %s are in progress; try again", q.total, what)
	}
	var once sync.Once
	return func() { once.Do(func() { q.give(key, 1) }) }, nil
}

// body is a request body read whole; release gives its bytes back to the
// server's budget.
// admitCall admits a tool call or a run: one of the tenant's
// calls_per_minute, a JSON body read whole (at most MaxBody) before any
// slot is taken, then a slot of the tenant's own and one of the server's
// calls quota. done releases them.
func (s *Server) admitCall(w http.ResponseWriter, r *http.Request) (data []byte, done func(), err error) {
	if err := requireMedia(r, "application/json"); err != nil {
		return nil, nil, err
	}
	tn := s.tenantOf(r)
	if err := tn.takeRate(w); err != nil { // before the body: a spent rate reads nothing
		return nil, nil, err
	}
	b, err := s.readBody(w, r, s.limits.MaxBody)
	if err != nil {
		return nil, nil, err
	}
	own, err := tn.takeCall(w)
	if err != nil {
		b.release()
		return nil, nil, err
	}
	release, err := s.slot(w, r, s.calls, "calls and runs")
	if err != nil {
		own()
		b.release()
		return nil, nil, err
	}
	return b.data, func() { release(); own(); b.release() }, nil
}

type body struct {
	data    []byte
	release func()
}

// readBody reads r's whole body, at most limit bytes (more is a 413),
// before the request takes any slot. The client has BodyTimeout to send it
// (else 408), and the bytes received count against the budget of bodies
// held in memory, per client too (else 429): a client that sends slowly
// holds no slot and only the bytes it sent. Call release when the body is
// no longer needed.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) (*body, error) {
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		return nil, errorf(http.StatusRequestEntityTooLarge, KindBodyTooLarge, "the body is %d bytes; the limit is %d", r.ContentLength, limit)
	}
	cr := &chargedReader{r: r.Body, charges: []charge{{s.bodyBytes, s.clientKey(r), errBodyBudget}}}
	if tn := s.tenantOf(r); tn.bodyBytes != nil {
		// The tenant's share first: a tenant over it is refused before
		// it takes any of what the others share.
		cr.charges = append([]charge{{tn.bodyBytes, "", errTenantBodyBudget}}, cr.charges...)
	}
	b := &body{release: cr.giveBack}
	if r.Body == nil || r.Body == http.NoBody {
		return b, nil
	}
	// The deadline is set only while a body remains: once it is read to
	// its end, net/http clears the connection's read deadline itself.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(min(s.limits.BodyTimeout, s.limits.ReadTimeout)))
	var buf bytes.Buffer
	_, err := buf.ReadFrom(http.MaxBytesReader(w, io.NopCloser(cr), limit))
	if err == nil {
		b.data = buf.Bytes()
		return b, nil
	}
	cr.giveBack()
	w.Header().Set("Connection", "close")
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, errorf(http.StatusRequestEntityTooLarge, KindBodyTooLarge, "the body is larger than the limit of %d bytes", limit)
	case errors.Is(err, errBodyBudget):
		retryAfter(w, time.Second)
		return nil, errorf(http.StatusTooManyRequests, KindBusy, "the server is receiving too many request bodies; try again")
	case errors.Is(err, errTenantBodyBudget):
		retryAfter(w, time.Second)
		return nil, errorf(http.StatusTooManyRequests, KindBusy, "this tenant's request bodies take its share of the server's memory for them; try again")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, errorf(http.StatusRequestTimeout, KindBodyTimeout, "the body did not arrive within %v", min(s.limits.BodyTimeout, s.limits.ReadTimeout))
	}
	return nil, errorf(http.StatusBadRequest, KindBadRequest, "reading the body: %v", err)
}

var (
	errBodyBudget       = errors.New("the budget of request bodies is spent")
	errTenantBodyBudget = errors.New("the tenant's share of the budget of request bodies is spent")
)

// charge is a quota a chargedReader charges, the key it charges, and
// the error when it is spent.
type charge struct {
	q     *quota
	key   string
	spent error
}

// chargedReader charges the bytes it reads to every one of its quotas,
// or to none.
type chargedReader struct {
	r       io.Reader
	charges []charge

	mu      sync.Mutex
	charged int64
}

func (c *chargedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		for i, ch := range c.charges {
			if ok, _ := ch.q.take(ch.key, int64(n)); !ok {
				for _, back := range c.charges[:i] {
					back.q.give(back.key, int64(n))
				}
				return 0, ch.spent
			}
		}
		c.mu.Lock()
		c.charged += int64(n)
		c.mu.Unlock()
	}
	return n, err
}

// giveBack returns every byte charged (idempotent).
func (c *chargedReader) giveBack() {
	c.mu.Lock()
	n := c.charged
	c.charged = 0
	c.mu.Unlock()
	if n > 0 {
		for _, ch := range c.charges {
			ch.q.give(ch.key, n)
		}
	}
}
