package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/netguard"
)

// Defaults of a NetworkGrant.
const (
	defaultMaxResponseBytes = 4 << 20
	defaultMaxRequests      = 16
	maxResponseHeaderBytes  = 64 << 10
	maxRedirects            = 10
)

// httpRequest is the request JSON of agrun.http_request.
type httpRequest struct {
	Method  string              `json:"method"`
	URL     string              `json:"url"`
	Headers map[string][]string `json:"headers"`
	Body    []byte              `json:"body"` // base64 in JSON
}

// httpResponse is a successful pending response.
type httpResponse struct {
	Status  int                 `json:"status"`
	Headers map[string][]string `json:"headers"`
	Body    []byte              `json:"body"` // base64 in JSON
}

// forbiddenError reports a request the grant does not allow.
type forbiddenError struct{ msg string }

func (e *forbiddenError) Error() string { return e.msg }

// netClient performs one call's requests under its NetworkGrant.
type netClient struct {
	grant     *NetworkGrant
	anyPort   map[string]bool // allowed host names, every port
	hostPorts map[string]bool // allowed "host:port"
	transport *http.Transport
	client    *http.Client
}

func newNetClient(g *NetworkGrant) *netClient {
	c := &netClient{grant: g, anyPort: map[string]bool{}, hostPorts: map[string]bool{}}
	for _, h := range g.AllowedHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if host, port, err := net.SplitHostPort(h); err == nil {
			c.hostPorts[net.JoinHostPort(normHost(host), port)] = true
		} else {
			c.anyPort[normHost(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))] = true
		}
	}
	c.transport = &http.Transport{
		Proxy:                  nil, // never the environment's proxies
		DialContext:            c.dial,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		DisableCompression:     true, // a small compressed body must not expand past the cap unseen
		MaxIdleConnsPerHost:    2,
	}
	c.client = &http.Client{Transport: c.transport, CheckRedirect: c.checkRedirect}
	return c
}

func (c *netClient) close() { c.transport.CloseIdleConnections() }

func normHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// checkURL refuses URLs outside the grant: scheme, user info, host.
func (c *netClient) checkURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return &forbiddenError{fmt.Sprintf("scheme %q is not allowed (http or https only)", u.Scheme)}
	}
	if u.User != nil {
		return &forbiddenError{"user info in the URL is not allowed"}
	}
	host := normHost(u.Hostname())
	if host == "" {
		return &forbiddenError{"the URL has no host"}
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if c.anyPort[host] || c.hostPorts[net.JoinHostPort(host, port)] {
		return nil
	}
	return &forbiddenError{fmt.Sprintf("host %q is not in the allowed hosts", u.Host)}
}

func (c *netClient) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return &forbiddenError{fmt.Sprintf("more than %d redirects", maxRedirects)}
	}
	if err := c.checkURL(req.URL); err != nil {
		return &forbiddenError{"redirect refused: " + err.Error()}
	}
	return nil
}

// dial resolves the host itself and connects only to addresses that pass
// the grant's address check, so a name cannot be re-resolved to a private
// address between the check and the connection.
func (c *netClient) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := netguard.Dialer{AllowPrivate: c.grant.AllowPrivate}
	conn, err := d.DialContext(ctx, network, addr)
	var ge *netguard.Error
	if errors.As(err, &ge) {
		return nil, &forbiddenError{ge.Error()}
	}
	return conn, err
}

// do performs one request and returns the pending response value.
func (c *netClient) do(ctx context.Context, raw []byte) (any, RequestAudit) {
	start := time.Now()
	resp, ra := c.exchange(ctx, raw)
	ra.Duration = time.Since(start)
	if e, ok := resp.(struct {
		Error apiError `json:"error"`
	}); ok {
		ra.Error = e.Error.Code
	}
	return resp, ra
}

// exchange performs the request raw describes and returns the pending
// response document, with what the audit keeps of the request.
func (c *netClient) exchange(ctx context.Context, raw []byte) (any, RequestAudit) {
	var ra RequestAudit
	var in httpRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return errorResponse("bad_request", "invalid request JSON: "+err.Error()), ra
	}
	if dec.More() {
		return errorResponse("bad_request", "invalid request JSON: data after the object"), ra
	}
	if in.Method == "" {
		in.Method = http.MethodGet
	}
	if !validMethod(in.Method) {
		// Refused before it is recorded: the audit keeps only a method
		// that could have been sent.
		return errorResponse("bad_request", "invalid method: an HTTP token of at most 32 bytes is required"), ra
	}
	ra.Method = in.Method
	u, err := url.Parse(in.URL)
	if err != nil {
		return errorResponse("bad_request", "invalid url: "+err.Error()), ra
	}
	ra.Host = u.Host
	if err := c.checkURL(u); err != nil {
		return errorResponse("forbidden", err.Error()), ra
	}
	req, err := http.NewRequestWithContext(ctx, in.Method, u.String(), bytes.NewReader(in.Body))
	if err != nil {
		return errorResponse("bad_request", err.Error()), ra
	}
	for k, vs := range in.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return requestError(ctx, err), ra
	}
	defer resp.Body.Close()
	ra.Status = resp.StatusCode
	max := c.grant.MaxResponseBytes
	if max <= 0 {
		max = defaultMaxResponseBytes
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	ra.Bytes = int64(len(body))
	if err != nil {
		return requestError(ctx, err), ra
	}
	if int64(len(body)) > max {
		return errorResponse("too_large", fmt.Sprintf("response body over the limit of %d bytes", max)), ra
	}
	return httpResponse{Status: resp.StatusCode, Headers: resp.Header, Body: body}, ra
}

func requestError(ctx context.Context, err error) any {
	var fe *forbiddenError
	switch {
	case errors.As(err, &fe):
		return errorResponse("forbidden", fe.msg)
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return errorResponse("timeout", "the call's deadline passed during the request")
	}
	return errorResponse("network", err.Error())
}

// validMethod reports whether m is an HTTP method token (RFC 9110
// section 5.6.2) of at most 32 bytes: what net/http would send, and what
// an audit may record.
func validMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
