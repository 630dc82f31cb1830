package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testprovider"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/server"
)

// countingTool is an operator tool whose every run is counted: the proof
// that a refused request ran nothing.
type countingTool struct{ runs *atomic.Int64 }

func (countingTool) Name() string                         { return "counter" }
func (countingTool) Description() string                  { return "counts its runs" }
func (countingTool) Parameters() json.RawMessage          { return json.RawMessage(`{"type":"object"}`) }
func (countingTool) Permissions() []permission.Permission { return nil }
func (c countingTool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(fmt.Sprint(c.runs.Add(1))), nil
}

// gateTool is an operator tool whose runs wait for the gate to open; each
// run announces itself on arrived first.
type gateTool struct {
	arrived chan struct{}
	gate    chan struct{}
}

func newGateTool() *gateTool {
	return &gateTool{arrived: make(chan struct{}, 64), gate: make(chan struct{})}
}

func (*gateTool) Name() string                         { return "gate" }
func (*gateTool) Description() string                  { return "waits for the gate" }
func (*gateTool) Parameters() json.RawMessage          { return json.RawMessage(`{"type":"object"}`) }
func (*gateTool) Permissions() []permission.Permission { return nil }
func (g *gateTool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	g.arrived <- struct{}{}
	select {
	case <-g.gate:
		return json.RawMessage(`"through"`), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitArrivals waits for n runs of the gate tool to have started.
func (g *gateTool) waitArrivals(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-g.arrived:
		case <-time.After(60 * time.Second):
			t.Fatalf("only %d of %d calls reached the tool", i, n)
		}
	}
}

// operatorRegistry is a registry with the default policy holding tools.
func operatorRegistry(t *testing.T, tools ...registry.Tool) *registry.Registry {
	t.Helper()
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	for _, tl := range tools {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// do sends a request built by the test (its Host and headers as they are),
// with the server's token if it has one, and reads the whole answer.
func (ts *testServer) do(req *http.Request) response {
	ts.t.Helper()
	if ts.token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+ts.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
		return response{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (ts *testServer) newRequest(method, path, contentType, body string, header ...string) *http.Request {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

func (ts *testServer) port() string {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(ts.url, "http://"))
	return p
}

// DNS rebinding: a page of rebind.attacker.example whose name now resolves
// to 127.0.0.1 reaches the server with its own name in Host. It gets
// neither the tool list nor a call, with or without tokens.
func TestForeignHostRefused(t *testing.T) {
	for _, tokens := range [][]string{nil, {"host-token-0123456789abcdef"}} {
		t.Run(fmt.Sprintf("tokens=%d", len(tokens)), func(t *testing.T) {
			var runs atomic.Int64
			ts := startServer(t, setup{opts: server.Options{
				Tokens:       tokens,
				Registry:     operatorRegistry(t, countingTool{&runs}),
				AllowedHosts: []string{"api.example.com", "pinned.example.com:8443"},
			}})
			port := ts.port()
			for _, host := range []string{
				"rebind.attacker.example:" + port,
				"rebind.attacker.example",
				"localhost:1",              // another port of this machine: another origin
				"127.0.0.1:1",              // the same
				"api.example.com.attacker", // a suffix is not the name
				"pinned.example.com:" + port,
				"10.1.2.3:" + port,
			} {
				r := ts.do(ts.newRequest("GET", "/v1/tools", "", "", "Host", host))
				if r.status != http.StatusMisdirectedRequest || r.errorKind(t) != server.KindBadHost {
					t.Errorf("Host %q: %d %s", host, r.status, r.body)
				}
				if bytes.Contains(r.body, []byte("counter")) {
					t.Errorf("Host %q: the tool list was served: %s", host, r.body)
				}
				r = ts.do(ts.newRequest("POST", "/v1/tools/counter/call", "application/json", `{}`, "Host", host))
				if r.status != http.StatusMisdirectedRequest {
					t.Errorf("Host %q: call answered %d %s", host, r.status, r.body)
				}
			}
			if n := runs.Load(); n != 0 {
				t.Fatalf("the tool ran %d times for foreign hosts", n)
			}
			for _, host := range []string{
				"localhost:" + port, "LocalHost:" + port, "127.0.0.1:" + port, "127.3.4.5:" + port, "[::1]:" + port,
				"api.example.com", "api.example.com:443", "API.example.com:" + port, "pinned.example.com:8443",
			} {
				r := ts.do(ts.newRequest("GET", "/v1/tools", "", "", "Host", host))
				if r.status != http.StatusOK || !bytes.Contains(r.body, []byte("counter")) {
					t.Errorf("Host %q: %d %s", host, r.status, r.body)
				}
			}
			// /healthz reveals nothing and answers whatever the Host (probes).
			if r := ts.do(ts.newRequest("GET", "/healthz", "", "", "Host", "probe.internal")); r.status != http.StatusOK {
				t.Errorf("healthz: %d %s", r.status, r.body)
			}
		})
	}
}

// A page of another site in the operator's browser sends "simple"
// cross-site requests (no preflight): a foreign Origin, text/plain or a
// form type. None of them runs anything or starts a run.
func TestCrossSiteRequestsRunNothing(t *testing.T) {
	var runs atomic.Int64
	chat := chattest.New(t) // no replies: the check below fails on any model request
	ts := startServer(t, setup{opts: server.Options{
		Registry: operatorRegistry(t, countingTool{&runs}),
		Loop:     &loop.Config{Provider: testprovider.Chat(t, chat.URL)},
	}})
	port := ts.port()
	for _, c := range []struct {
		name        string
		contentType string
		header      []string
		status      int
		kind        server.Kind
	}{
		{"foreign origin", "application/json", []string{"Origin", "http://evil.example"}, 403, server.KindCrossOrigin},
		{"foreign origin, text/plain", "text/plain", []string{"Origin", "http://evil.example"}, 403, server.KindCrossOrigin},
		{"another port of localhost", "application/json", []string{"Origin", "http://localhost:1"}, 403, server.KindCrossOrigin},
		{"opaque origin", "application/json", []string{"Origin", "null"}, 403, server.KindCrossOrigin},
		{"origin with a path", "application/json", []string{"Origin", "http://127.0.0.1:" + port + "/x"}, 403, server.KindCrossOrigin},
		{"cross-site fetch", "application/json", []string{"Sec-Fetch-Site", "cross-site"}, 403, server.KindCrossOrigin},
		{"same-site fetch (another port)", "application/json", []string{"Sec-Fetch-Site", "same-site"}, 403, server.KindCrossOrigin},
		{"text/plain", "text/plain", nil, 415, server.KindUnsupportedMedia},
		{"text/plain with charset", "text/plain;charset=UTF-8", nil, 415, server.KindUnsupportedMedia},
		{"form", "application/x-www-form-urlencoded", nil, 415, server.KindUnsupportedMedia},
		{"multipart", "multipart/form-data; boundary=x", nil, 415, server.KindUnsupportedMedia},
		{"no content type", "", nil, 415, server.KindUnsupportedMedia},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, p := range []struct{ path, body string }{
				{"/v1/tools/counter/call", `{}`},
				{"/v1/runs", `{"prompt":"call counter"}`},
			} {
				r := ts.do(ts.newRequest("POST", p.path, c.contentType, p.body, c.header...))
				if r.status != c.status || r.errorKind(t) != c.kind {
					t.Errorf("%s: %d %s; want %d %s", p.path, r.status, r.body, c.status, c.kind)
				}
			}
			r := ts.do(ts.newRequest("POST", "/v1/tools", c.contentType, "\x00asm\x01\x00\x00\x00", c.header...))
			if r.status != c.status {
				t.Errorf("upload: %d %s; want %d", r.status, r.body, c.status)
			}
		})
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("cross-site requests ran the tool %d times", n)
	}
	if reqs := bodies(chat); len(reqs) != 0 {
		t.Fatalf("cross-site requests started %d model requests", len(reqs))
	}
	if n := storedTools(t, ts.srv.DataDir()); len(n) != 0 {
		t.Fatalf("cross-site uploads were stored: %v", n)
	}
	// The server's own origin, JSON with parameters, and fetches the
	// browser marks same-origin or user-initiated are served.
	for _, h := range [][]string{
		{"Origin", "http://127.0.0.1:" + port},
		{"Origin", "http://localhost:" + port, "Sec-Fetch-Site", "same-origin"},
		{"Sec-Fetch-Site", "none"},
		nil,
	} {
		r := ts.do(ts.newRequest("POST", "/v1/tools/counter/call", "application/json; charset=utf-8", `{}`, h...))
		if res := callResult(t, r); r.status != http.StatusOK || !res.OK {
			t.Errorf("headers %q: %d %s", h, r.status, r.body)
		}
	}
	if n := runs.Load(); n != 4 {
		t.Errorf("the tool ran %d times, want 4", n)
	}
}

// slowBody opens a connection and sends a request whose body never
// finishes: the headers, then one byte of a body of size bytes.
func slowBody(t *testing.T, ts *testServer, path, contentType string, size int, header string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if ts.token != "" && header == "" {
		header = "Authorization: Bearer " + ts.token + "\r\n"
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n{", path, ts.port(), contentType, size, header)
	return conn
}

// Clients that take every call (and upload) slot and send their bodies a
// byte at a time do not keep anyone else out: a body is read before a slot
// is taken, and a body that does not arrive in body_timeout is answered
// 408 without ever holding a slot.
func TestSlowBodiesHoldNoSlot(t *testing.T) {
	var runs atomic.Int64
	ts := startServer(t, setup{opts: server.Options{
		Registry:             operatorRegistry(t, countingTool{&runs}),
		MaxConcurrentUploads: 1,
		MaxConcurrentCalls:   2,
		ReadTimeout:          5 * time.Minute,
		BodyTimeout:          time.Minute,
	}})
	var conns []net.Conn
	for i := 0; i < 6; i++ {
		conns = append(conns, slowBody(t, ts, "/v1/tools/counter/call", "application/json", 100, ""))
		conns = append(conns, slowBody(t, ts, "/v1/tools", "application/wasm", 1000, ""))
	}
	// Let the server read their headers and reach their handlers (where
	// slots used to be taken, before the body).
	time.Sleep(time.Second)
	for i := 0; i < 3; i++ {
		r := ts.call("counter", `{}`)
		if res := callResult(t, r); r.status != http.StatusOK || !res.OK {
			t.Fatalf("call %d while slow clients hold their connections: %d %s", i, r.status, r.body)
		}
	}
	ts.mustUpload(okTool(t, "fast_upload"), "", http.StatusCreated)
	for _, c := range conns {
		c.Close()
	}
}

// A body that does not arrive within body_timeout is answered 408
// body_timeout, long before read_timeout.
func TestSlowBodyTimesOut(t *testing.T) {
	ts := startServer(t, setup{opts: server.Options{ReadTimeout: 10 * time.Minute,
		BodyTimeout: time.Second}})
	for _, p := range []struct{ path, ctype string }{{"/v1/tools/x/call", "application/json"}, {"/v1/tools", "application/wasm"}} {
		conn := slowBody(t, ts, p.path, p.ctype, 100, "")
		conn.SetReadDeadline(time.Now().Add(2 * time.Minute)) // generous: "it ended"
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer to a slow body: %v", p.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := response{status: resp.StatusCode, header: resp.Header, body: b}
		if r.status != http.StatusRequestTimeout || r.errorKind(t) != server.KindBodyTimeout {
			t.Errorf("%s: %d %s", p.path, r.status, r.body)
		}
	}
}

// With every call slot one token may hold taken by its clients, another
// token still gets a slot.
func TestOneTokenCannotTakeEverySlot(t *testing.T) {
	const a, b = "token-a-0123456789abcdef", "token-b-0123456789abcdef"
	g := newGateTool()
	ts := startServer(t, setup{opts: server.Options{
		Tokens:             []string{a, b},
		Registry:           operatorRegistry(t, g),
		MaxConcurrentCalls: 4,
	}})
	share := ts.srv.Limits().MaxCallsPerClient
	if share != 2 {
		t.Fatalf("MaxCallsPerClient = %d, want half of 4", share)
	}
	call := func(tok string, out chan<- response) {
		out <- ts.requestAs(tok, "POST", "/v1/tools/gate/call", "application/json", []byte(`{}`))
	}
	// Token a's clients try to take all 4 slots: share of them run, the
	// others are refused at once.
	fromA := make(chan response, 4)
	for i := 0; i < 4; i++ {
		go call(a, fromA)
	}
	g.waitArrivals(t, share)
	for i := 0; i < 4-share; i++ {
		select {
		case r := <-fromA:
			if r.status != http.StatusTooManyRequests || r.errorKind(t) != server.KindBusy || r.header.Get("Retry-After") == "" {
				t.Errorf("token a over its share: %d %s", r.status, r.body)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("token a took more than its share of the slots")
		}
	}
	// Token b still gets a slot.
	fromB := make(chan response, 1)
	go call(b, fromB)
	select {
	case <-g.arrived:
	case r := <-fromB:
		t.Fatalf("token b was refused while token a held its share: %d %s", r.status, r.body)
	case <-time.After(60 * time.Second):
		t.Fatal("token b's call never ran")
	}
	close(g.gate)
	for _, r := range []response{<-fromA, <-fromA, <-fromB} {
		if res := callResult(t, r); r.status != http.StatusOK || !res.OK {
			t.Errorf("a call within its share: %d %s", r.status, r.body)
		}
	}
}

// Without tokens, the share is per client address: a client on 127.0.0.2
// holding its share leaves slots for one on 127.0.0.1.
func TestOneAddressCannotTakeEverySlot(t *testing.T) {
	g := newGateTool()
	ts := startServer(t, setup{opts: server.Options{
		Registry:           operatorRegistry(t, g),
		MaxConcurrentCalls: 2, MaxCallsPerClient: 1,
	}})
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	other := from("127.0.0.2")
	post := func(c *http.Client) (int, string) {
		resp, err := c.Post(ts.url+"/v1/tools/gate/call", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Errorf("call: %v", err)
			return -1, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	done := make(chan int, 2)
	go func() { s, _ := post(other); done <- s }()
	g.waitArrivals(t, 1)
	if s, body := post(other); s != http.StatusTooManyRequests {
		t.Errorf("127.0.0.2 over its share: %d %s", s, body)
	}
	go func() { s, _ := post(http.DefaultClient); done <- s }()
	g.waitArrivals(t, 1)
	close(g.gate)
	for i := 0; i < 2; i++ {
		if s := <-done; s != http.StatusOK {
			t.Errorf("a call within its share: %d", s)
		}
	}
}

// The bodies read before a slot is taken are held under a byte budget:
// a client stalled near the end of a big body holds the bytes it sent,
// another body that would go over is answered 429 busy, and the bytes
// come back when the stalled body times out.
func TestBodyMemoryBudget(t *testing.T) {
	const a, b = "token-a-0123456789abcdef", "token-b-0123456789abcdef"
	ts := startServer(t, setup{opts: server.Options{
		Tokens:           []string{a, b},
		MaxBodyMemory:    100 << 10,
		MaxUpload:        64 << 10,
		UploadsPerMinute: 1000,
		ReadTimeout:      10 * time.Minute,
		BodyTimeout:      3 * time.Second,
	}})
	if got := ts.srv.Limits().MaxBodyMemory; got != 100<<10 {
		t.Fatalf("MaxBodyMemory = %d", got)
	}
	conn := slowBody(t, ts, "/v1/tools", "application/wasm", 64<<10, "Authorization: Bearer "+a+"\r\n")
	if _, err := conn.Write(bytes.Repeat([]byte{'x'}, 60<<10-1)); err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte{'y'}, 60<<10)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := ts.requestAs(b, "POST", "/v1/tools", "application/wasm", garbage)
		if r.status == http.StatusTooManyRequests {
			if r.errorKind(t) != server.KindBusy || r.header.Get("Retry-After") == "" {
				t.Errorf("over the budget: %d %v %s", r.status, r.header, r.body)
			}
			break
		}
		if r.status != http.StatusBadRequest || time.Now().After(deadline) {
			t.Fatalf("a body over the budget: %d %s", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond) // the stalled body is not all read yet
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("the stalled body: %v %v", resp, err)
	}
	resp.Body.Close()
	if r := ts.requestAs(b, "POST", "/v1/tools", "application/wasm", garbage); r.status != http.StatusBadRequest || r.errorKind(t) != server.KindMalformedModule {
		t.Errorf("after the stalled body was cut off: %d %s", r.status, r.body)
	}
}

// A refused Host or Origin is quoted in the answer short and clean.
func TestRefusalsQuoteCleanly(t *testing.T) {
	ts := startServer(t, setup{})
	evil := "http://evil.example/\u202egnp." + strings.Repeat("\u200bA", 5000)
	r := ts.do(ts.newRequest("POST", "/v1/tools/x/call", "application/json", `{}`, "Origin", evil))
	var res server.Result
	r.json(t, &res)
	if r.status != http.StatusForbidden || res.Error == nil || res.Error.Kind != string(server.KindCrossOrigin) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if m := res.Error.Message; len(m) > 200 || strings.ContainsAny(m, "\u202e\u200b") {
		t.Errorf("the message quotes the Origin raw: %q", m)
	}
	r = ts.do(ts.newRequest("GET", "/v1/tools", "", "", "Host", strings.Repeat("h", 5000)+".example"))
	if r.status != http.StatusMisdirectedRequest || len(r.body) > 400 {
		t.Errorf("a long Host: %d, %d bytes", r.status, len(r.body))
	}
}
