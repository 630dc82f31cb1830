package runtime

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzHTTPRequest feeds any bytes to the host side of agrun.http_request:
// request decoding, URL and host checks, and (for allowed hosts) the dial
// check. The grant allows only addresses that AllowPrivate=false refuses at
// dial time, so no input can reach the network or DNS. Whatever the guest
// wrote, the host does not panic, the pending response is JSON, and it is
// never a success. (Part of the hostile-input suite; see internal/testing/hostile
// and docs/SECURITY.md.) Seeds: testdata/fuzz/FuzzHTTPRequest.
func FuzzHTTPRequest(f *testing.F) {
	for _, s := range []string{
		`{"method":"GET","url":"http://127.0.0.1:8080/x"}`,
		`{"url":"http://[::1]/","headers":{"A":["b"]},"body":"aGk="}`,
		`{"url":"http://10.0.0.1:80@evil/","method":"POST"}`,
		`{"url":"http://2130706433/"}`,
		`{"url":"file:///etc/passwd"}`,
		`{"url":"http://[::ffff:127.0.0.1]:1/"}`,
		`{"url":"http://127.0.0.1:8080/","proxy":"x"}`,
		`{"url":"http://127.0.0.1:8080/"} {}`,
		`{"method":"GET / HTTP/1.1\r\nX: y","url":"http://127.0.0.1:8080/"}`,
	} {
		f.Add([]byte(s))
	}
	c := newNetClient(&NetworkGrant{AllowedHosts: []string{"127.0.0.1:8080", "[::1]", "10.0.0.1", "[::ffff:127.0.0.1]:1", "169.254.169.254"}})
	defer c.close()
	f.Fuzz(func(t *testing.T, raw []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		doc, ra := c.do(ctx, raw)
		// The JSON decoder turns each invalid byte into U+FFFD (3 bytes):
		// the only way a decoded host outgrows the request.
		if len(ra.Host) > 3*len(raw) {
			t.Fatalf("audit %+v holds more than the request", ra)
		}
		if ra.Method != "" && !validMethod(ra.Method) {
			t.Fatalf("audit %+v records a method that cannot be sent", ra)
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("pending response does not encode: %v", err)
		}
		var resp struct {
			Status int `json:"status"`
			Error  *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatalf("pending response %s: %v", b, err)
		}
		if resp.Error == nil || resp.Status != 0 {
			t.Fatalf("request %q succeeded: %s", raw, b)
		}
		switch resp.Error.Code {
		case "bad_request", "forbidden", "network", "timeout":
		default:
			t.Fatalf("unexpected error code %q for %q", resp.Error.Code, raw)
		}
	})
}

// FuzzCheckURL: a URL that passes the grant's check names an allowed host
// (and port) exactly, whatever its spelling.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"http://api.example.com/", "https://API.example.com.:443/x", "http://api.example.com@evil/",
		"http://evil/?api.example.com", "http://api.example.com:8080/", "http://[::1]:80/", "http://0x7f.1/"} {
		f.Add(s)
	}
	c := newNetClient(&NetworkGrant{AllowedHosts: []string{"api.example.com", "h.example:8080", "[::1]:80"}})
	defer c.close()
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil || c.checkURL(u) != nil {
			return
		}
		host := normHost(u.Hostname())
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		if u.User != nil || (u.Scheme != "http" && u.Scheme != "https") {
			t.Fatalf("%q passed with user info or scheme %q", s, u.Scheme)
		}
		switch net.JoinHostPort(host, port) {
		case net.JoinHostPort("h.example", "8080"), net.JoinHostPort("::1", "80"):
		default:
			if host != "api.example.com" || strings.ContainsAny(host, "@/?#") {
				t.Fatalf("%q passed: host %q port %q", s, host, port)
			}
		}
	})
}
