package sandbox

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestNetworkRefusals: every request that the grant does not allow is
// refused before it reaches a server; the guest sees an error code and the
// call itself succeeds (the guest handles the refusal) or, for a capability
// never granted, fails with permission_denied.
func TestNetworkRefusals(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	target := hostile.NewPeer(t, nil)
	// A redirector that is allowed (and reachable: AllowPrivate) and sends
	// the guest elsewhere.
	redirector := hostile.NewPeer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})

	f.Hostile(t, "net_declared_not_granted", wasmtools.Grant{}, "network")
	f.Hostile(t, "net_undeclared", wasmtools.Grant{AllowedHosts: []string{target.Host}, AllowPrivate: true})
	// Allowed by name, but every name here resolves to loopback and
	// AllowPrivate is off.
	f.Hostile(t, "net_public_only", wasmtools.Grant{AllowedHosts: []string{
		"api.example.com", "localhost", target.Host, "[::ffff:127.0.0.1]", "[::1]", "169.254.169.254",
		"2130706433", "0x7f000001", "0177.0.0.1", "127.1", "metadata.google.internal", "[fd00:ec2::254]", "0.0.0.0",
	}}, "network")
	// Loopback reachable, but only the redirector's exact host:port.
	f.Hostile(t, "net_redirector", wasmtools.Grant{AllowedHosts: []string{redirector.Host}, AllowPrivate: true}, "network")

	type nc struct {
		name, tool, url string
		want            registry.Kind // of the call
		code            string        // error code the guest must see ("" with want set)
	}
	cases := []nc{
		{"declared, not granted", "net_declared_not_granted", target.URL, registry.PermissionDenied, ""},
		{"granted, not declared", "net_undeclared", target.URL, registry.PermissionDenied, ""},
		{"host not on the list", "net_public_only", "http://evil.example/", "", "forbidden"},
		{"allowed name resolving to loopback", "net_public_only", "http://localhost:" + target.Port + "/", "", "forbidden"},
		{"allowed loopback literal", "net_public_only", target.URL + "/", "", "forbidden"},
		{"IPv4-mapped IPv6 loopback", "net_public_only", "http://[::ffff:127.0.0.1]:" + target.Port + "/", "", "forbidden"},
		{"IPv6 loopback", "net_public_only", "http://[::1]:" + target.Port + "/", "", "forbidden"},
		{"decimal IP", "net_public_only", "http://2130706433:" + target.Port + "/", "", ""},
		{"hex IP", "net_public_only", "http://0x7f000001:" + target.Port + "/", "", ""},
		{"octal IP", "net_public_only", "http://0177.0.0.1:" + target.Port + "/", "", ""},
		{"short IP", "net_public_only", "http://127.1:" + target.Port + "/", "", ""},
		{"unspecified address", "net_public_only", "http://0.0.0.0:" + target.Port + "/", "", "forbidden"},
		{"cloud metadata", "net_public_only", "http://169.254.169.254/latest/meta-data/", "", "forbidden"},
		{"AWS IPv6 metadata", "net_public_only", "http://[fd00:ec2::254]/", "", "forbidden"},
		{"user@host: allowed name as user info", "net_public_only", "http://api.example.com@" + target.Host + "/", "", "forbidden"},
		{"user@host: loopback as user info", "net_public_only", "http://" + target.Host + "@evil.example/", "", "forbidden"},
		{"host with trailing dot and case", "net_public_only", "http://LOCALHOST.:" + target.Port + "/", "", ""},
		{"file scheme", "net_public_only", "file:///etc/passwd", "", "forbidden"},
		{"ftp scheme", "net_public_only", "ftp://api.example.com/", "", "forbidden"},
		{"gopher scheme", "net_public_only", "gopher://localhost:" + target.Port + "/", "", "forbidden"},
		{"no scheme", "net_public_only", "//localhost:" + target.Port + "/", "", "forbidden"},
		{"redirect to a host not on the list", "net_redirector", redirector.URL + "/?to=" + target.URL + "/", "", "forbidden"},
		{"redirect to metadata", "net_redirector", redirector.URL + "/?to=http://169.254.169.254/", "", "forbidden"},
		{"redirect to file", "net_redirector", redirector.URL + "/?to=file:///etc/passwd", "", "forbidden"},
		{"redirect with user info", "net_redirector", redirector.URL + "/?to=http://x@" + redirector.Host + "/", "", "forbidden"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			hits := target.Hits.Load()
			got := hostile.Inv(f.Reg.Invoke(context.Background(), c.tool, hostile.ArgsJSON(t, map[string]any{"op": "http", "url": c.url})))
			f.After(t, before, got, c.want)
			if n := target.Hits.Load() - hits; n != 0 {
				t.Errorf("the request reached the forbidden server (%d hits)", n)
			}
			if got.Err != nil {
				return
			}
			r := hostile.DecodeReply(t, got.Out)
			if r.OK || strings.Contains(r.Data, "PEER-REACHED") {
				t.Errorf("the request went through: %+v", r)
			}
			if c.code != "" && !strings.Contains(r.Err, `"code":"`+c.code+`"`) {
				t.Errorf("guest saw %s; want code %s", r.Err, c.code)
			}
		})
	}
}

// TestNetworkResponses: huge, slow, compressed and too many responses from
// an allowed peer.
func TestNetworkResponses(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	huge := bytes.Repeat([]byte("A"), 64<<20)
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	for range 128 { // 128 MiB of zeros, about 128 KiB compressed
		zw.Write(make([]byte, 1<<20))
	}
	zw.Close()
	srv := hostile.NewPeer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/huge":
			w.Write(huge)
		case "/huge-chunked":
			for range 64 {
				w.Write(huge[:1<<20])
				w.(http.Flusher).Flush()
			}
		case "/slow":
			for i := 0; r.Context().Err() == nil && i < 1000; i++ {
				w.Write([]byte("x"))
				w.(http.Flusher).Flush()
				time.Sleep(50 * time.Millisecond)
			}
		case "/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb.Bytes())
		case "/headers":
			for i := range 10000 {
				w.Header().Add(fmt.Sprintf("X-Flood-%d", i), strings.Repeat("v", 100))
			}
		case "/echo-header":
			fmt.Fprintf(w, "injected=%q", r.Header.Get("X-Injected"))
		default:
			w.Write([]byte("ok"))
		}
	})
	g := wasmtools.Grant{AllowedHosts: []string{srv.Host}, AllowPrivate: true, Limits: runtime.Limits{Timeout: 20 * time.Second}}
	f.Hostile(t, "net", g, "network")
	g.Limits.Timeout = time.Second
	f.Hostile(t, "net_short", g, "network")

	for _, c := range []struct {
		name string
		args map[string]any
		want registry.Kind
		code string // error code the guest sees; "" = success
		maxN int64  // bound on the body the guest received
	}{
		{"64 MiB body", map[string]any{"op": "http", "url": srv.URL + "/huge"}, "", "too_large", 0},
		{"64 MiB chunked body", map[string]any{"op": "http", "url": srv.URL + "/huge-chunked"}, "", "too_large", 0},
		{"gzip bomb is not decompressed", map[string]any{"op": "http", "url": srv.URL + "/gzip"}, "", "", int64(bomb.Len())},
		{"header flood", map[string]any{"op": "http", "url": srv.URL + "/headers"}, "", "network", 0},
		{"request-count cap", map[string]any{"op": "http_many", "url": srv.URL + "/", "n": 100}, "", "too_many_requests", 16},
		{"malformed request JSON", map[string]any{"op": "httpraw", "data": `{"url":`}, "", "bad_request", 0},
		{"unknown request field", map[string]any{"op": "httpraw", "data": `{"url":"` + srv.URL + `","proxy":"x"}`}, "", "bad_request", 0},
		{"invalid method", map[string]any{"op": "httpraw", "data": `{"method":"GET / HTTP/1.1\r\nX: y","url":"` + srv.URL + `"}`}, "", "bad_request", 0},
		{"header injection", map[string]any{"op": "httpraw", "data": `{"url":"` + srv.URL + `/echo-header","headers":{"X-A":["v\r\nX-Injected: yes"]}}`}, "", "network", 0},
		{"body is not base64", map[string]any{"op": "httpraw", "data": `{"url":"` + srv.URL + `","body":"%%%"}`}, "", "bad_request", 0},
		{"URL with a NUL", map[string]any{"op": "httpraw", "data": `{"url":"http://` + srv.Host + `\u0000.evil/"}`}, "", "bad_request", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			tool := "net"
			if s, ok := c.args["tool"].(string); ok {
				tool = s
			}
			got := hostile.Inv(f.Reg.Invoke(context.Background(), tool, hostile.ArgsJSON(t, c.args)))
			f.After(t, before, got, c.want)
			if got.Err != nil {
				return
			}
			r := hostile.DecodeReply(t, got.Out)
			if c.code != "" && !strings.Contains(r.Err, `"code":"`+c.code+`"`) {
				t.Errorf("guest saw %+v; want error code %s", r, c.code)
			}
			if c.code == "" && !r.OK {
				t.Errorf("guest saw %+v; want success", r)
			}
			if r.N > c.maxN {
				t.Errorf("the guest received %d bytes; want at most %d", r.N, c.maxN)
			}
			if strings.Contains(r.Data, `injected="yes"`) {
				t.Errorf("header injection reached the server: %s", r.Data)
			}
		})
	}

	t.Run("slow drip ends at the deadline", func(t *testing.T) {
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "net_short", hostile.ArgsJSON(t, map[string]any{"op": "http", "url": srv.URL + "/slow"})))
		// The drip outlasts the 1 s limit, so the deadline always passes
		// inside agrun.http_request. Whether the sandbox stops the guest
		// there, or the guest gets {"code":"timeout"} and exits 0 first,
		// the call ends "timeout" (ABI.md).
		f.After(t, before, got, registry.Timeout)
	})
}
