package mcp

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/textsafe"
)

// httpPeer speaks raw streamable HTTP to a handler from one source
// address (any of 127.0.0.0/8 works on Linux loopback).
type httpPeer struct {
	t      *testing.T
	url    string
	client *http.Client
}

func newHTTPPeer(t *testing.T, url, from string) *httpPeer {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &httpPeer{t: t, url: url, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

type httpAnswer struct {
	status  int
	session string
	header  http.Header
	body    string
}

// post sends one JSON-RPC message, in session if it is not empty.
func (p *httpPeer) post(session, body string) httpAnswer {
	p.t.Helper()
	req, _ := http.NewRequest("POST", p.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return httpAnswer{resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), resp.Header, string(b)}
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// open initializes a session; it returns the answer whatever it is.
func (p *httpPeer) open() httpAnswer {
	p.t.Helper()
	a := p.post("", initializeBody)
	if a.status == http.StatusOK {
		if a.session == "" {
			p.t.Fatalf("initialize answered 200 without a session id: %s", a.body)
		}
		p.post(a.session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	}
	return a
}

// toolsList reports whether session still answers tools/list.
func (p *httpPeer) toolsList(session string) bool {
	p.t.Helper()
	a := p.post(session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	return a.status == http.StatusOK && strings.Contains(a.body, `"count"`)
}

// checkRefused asserts a is a refusal with status, Retry-After and a
// JSON-RPC error body.
func checkRefused(t *testing.T, a httpAnswer, status int) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d (%s), want %d", a.status, textsafe.Truncate(a.body, 200), status)
	}
	if a.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	var r struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(a.body), &r); err != nil || r.JSONRPC != "2.0" || string(r.ID) != "null" || r.Error.Code != -32000 || !strings.Contains(r.Error.Message, "too many sessions") {
		t.Errorf("body %q is not the JSON-RPC refusal", textsafe.Truncate(a.body, 300))
	}
}

func quietHTTPOptions(o *ServerOptions) *ServerOptions {
	o.Logger, _ = newLogger()
	return o
}

// TestHTTPSessionCapDefaults: with the default caps, one address holds at
// most DefaultMaxSessionsPerClient sessions (429 beyond) and the server at
// most DefaultMaxSessions (503 beyond), however many addresses ask; the
// sessions already open keep working, and closing one (DELETE) makes room.
func TestHTTPSessionCapDefaults(t *testing.T) {
	srv := httptest.NewServer(NewHTTPHandler(serverRegistry(), quietHTTPOptions(&ServerOptions{})))
	defer srv.Close()
	var first string
	opened := 0
	for host := 2; opened < DefaultMaxSessions; host++ {
		p := newHTTPPeer(t, srv.URL, fmt.Sprintf("127.0.0.%d", host))
		for range DefaultMaxSessionsPerClient {
			if opened == DefaultMaxSessions {
				break
			}
			a := p.open()
			if a.status != http.StatusOK {
				t.Fatalf("session %d (from 127.0.0.%d): status %d: %s", opened+1, host, a.status, textsafe.Truncate(a.body, 200))
			}
			if first == "" {
				first = a.session
			}
			opened++
		}
		if opened%DefaultMaxSessionsPerClient == 0 && opened < DefaultMaxSessions {
			checkRefused(t, p.open(), http.StatusTooManyRequests)
		}
	}
	late := newHTTPPeer(t, srv.URL, "127.0.1.1")
	checkRefused(t, late.open(), http.StatusServiceUnavailable)
	checkRefused(t, late.post("", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`), http.StatusServiceUnavailable)

	p := newHTTPPeer(t, srv.URL, "127.0.0.2")
	if !p.toolsList(first) {
		t.Error("an open session stopped answering when the server was full")
	}
	req, _ := http.NewRequest("DELETE", srv.URL, nil)
	req.Header.Set("Mcp-Session-Id", first)
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if a := late.open(); a.status != http.StatusOK {
		t.Errorf("after a DELETE, a new session: status %d: %s", a.status, textsafe.Truncate(a.body, 200))
	}
}

// TestHTTPSessionCaps: ServerOptions sets both caps; a refused request is
// answered before its body is read (a client cannot make a full server
// buffer anything).
func TestHTTPSessionCaps(t *testing.T) {
	srv := httptest.NewServer(NewHTTPHandler(serverRegistry(), quietHTTPOptions(&ServerOptions{MaxSessions: 3, MaxSessionsPerClient: 2})))
	defer srv.Close()
	a, b := newHTTPPeer(t, srv.URL, "127.0.0.2"), newHTTPPeer(t, srv.URL, "127.0.0.3")
	for _, p := range []*httpPeer{a, a, b} {
		if r := p.open(); r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	checkRefused(t, a.open(), http.StatusServiceUnavailable)

	// An endless body: the refusal comes anyway.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		io.WriteString(pw, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"`)
		buf := make([]byte, 64<<10)
		for {
			if _, err := pw.Write(buf); err != nil {
				return
			}
		}
	}()
	req, _ := http.NewRequest("POST", srv.URL, pr)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("endless body: status %d, want 503", resp.StatusCode)
	}
}

// TestHTTPIdleSessionsEvicted: a session that receives no request for the
// session timeout is closed (its id is unknown afterwards) and its slot
// is free again.
func TestHTTPIdleSessionsEvicted(t *testing.T) {
	srv := httptest.NewServer(NewHTTPHandler(serverRegistry(), quietHTTPOptions(&ServerOptions{
		MaxSessions: 2,
		HTTP:        &sdk.StreamableHTTPOptions{SessionTimeout: 300 * time.Millisecond},
	})))
	defer srv.Close()
	p := newHTTPPeer(t, srv.URL, "127.0.0.2")
	s1, s2 := p.open(), p.open()
	if s1.status != http.StatusOK || s2.status != http.StatusOK {
		t.Fatalf("statuses %d %d", s1.status, s2.status)
	}
	checkRefused(t, p.open(), http.StatusServiceUnavailable)
	var again httpAnswer
	eventually(t, "a new session once the idle ones are closed", func() bool {
		again = p.open()
		return again.status == http.StatusOK
	})
	if a := p.post(s1.session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); a.status != http.StatusNotFound {
		t.Errorf("an evicted session answered %d, want 404", a.status)
	}
	if !p.toolsList(again.session) {
		t.Error("the new session does not answer")
	}
}

func TestClientKey(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5000":             "127.0.0.1",
		"[::ffff:10.0.0.1]:80":       "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:443":      "2001:db8:1:3::/64",
		"not an address":             "not an address",
		"[fe80::1%eth0]:1":           "fe80::/64",
	} {
		if got := clientKey(in); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", in, got, want)
		}
	}
}
