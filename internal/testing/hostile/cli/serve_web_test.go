package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/testing/syncbuf"
)

// webServe is a running `agrun serve` (the built binary) whose operator
// tool "toucher" fetches a URL when called: the toucher's peer counts the
// calls that really ran, and the model's peer counts the runs that really
// started.
type webServe struct {
	t      *testing.T
	base   string // http://127.0.0.1:PORT
	port   string
	stderr *syncbuf.Buffer
	tool   *hostile.Peer // what the toucher reaches
	model  *hostile.Peer // the [llm] base_url
}

// startWebServe starts `agrun serve` with serveExtra in [serve] and the
// tokens (comma-separated, may be empty) in $AGRUN_TOKENS; toolPeer
// answers the toucher.
func startWebServe(t *testing.T, serveExtra, tokens string, toolPeer http.HandlerFunc) *webServe {
	t.Helper()
	w := &webServe{t: t, stderr: &syncbuf.Buffer{}, tool: hostile.NewPeer(t, toolPeer), model: hostile.NewPeer(t, nil)}
	toucher := hostile.WriteTemp(t, "toucher.wasm", hostile.Pack(t, hostile.HostileWasm(t), "toucher", "network"))
	e := hostile.NewCLIEnv(t, w.model.URL+"/v1", fmt.Sprintf(`
[tools.toucher]
wasm = %q
allowed_hosts = [%q]
allow_private = true
timeout = "60s"

[serve]
data_dir = %q
call_timeout = "60s"
%s
`, toucher, w.tool.Host, filepath.Join(t.TempDir(), "serve"), serveExtra))
	w.base, _ = startServe(t, e, w.stderr, "AGRUN_TOKENS="+tokens, "HOSTILE_TEST_KEY=k")
	_, w.port, _ = net.SplitHostPort(strings.TrimPrefix(w.base, "http://"))
	return w
}

// webAnswer is an answer of the API, read whole.
type webAnswer struct {
	status int
	raw    string
	OK     bool `json:"ok"`
	Error  struct {
		Kind string `json:"kind"`
	} `json:"error"`
}

// send makes a request with the headers given as name, value pairs
// ("Host" sets the Host the request names).
func (w *webServe) send(method, path, body string, header ...string) webAnswer {
	w.t.Helper()
	req, err := http.NewRequest(method, w.base+path, strings.NewReader(body))
	hostile.Must(w.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		w.t.Errorf("%s %s: %v (server stderr: %s)", method, path, err, hostile.Truncate(w.stderr.String(), 2000))
		return webAnswer{status: -1}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := webAnswer{status: resp.StatusCode, raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &a); err != nil {
			w.t.Errorf("%s %s: answer is not JSON: %q", method, path, hostile.Truncate(string(raw), 300))
		}
	}
	hostile.CheckTerminalSafe(w.t, method+" "+path+" answer", raw)
	return a
}

func (w *webServe) toucherArgs() string {
	return `{"op":"http","url":"` + w.tool.URL + `/touched"}`
}

// TestServeRefusesWebPages: DNS rebinding (a foreign Host) and cross-site
// "simple" requests from a page in the operator's browser (a foreign
// Origin, text/plain, a form type) neither list the tools, nor run one,
// nor start a run; the server's own clients still do.
func TestServeRefusesWebPages(t *testing.T) {
	w := startWebServe(t, "", "", nil)
	const ctJSON = "application/json"
	for _, host := range []string{"rebind.attacker.example:" + w.port, "rebind.attacker.example", "localhost:80"} {
		a := w.send("GET", "/v1/tools", "", "Host", host)
		if a.status != http.StatusMisdirectedRequest || a.Error.Kind != "bad_host" || strings.Contains(a.raw, "toucher") || strings.Contains(a.raw, "word_count") {
			t.Errorf("Host %q: the tool list answered %d %s", host, a.status, hostile.Truncate(a.raw, 300))
		}
		if a := w.send("POST", "/v1/tools/toucher/call", w.toucherArgs(), "Host", host, "Content-Type", ctJSON); a.status != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: a call answered %d %s", host, a.status, hostile.Truncate(a.raw, 300))
		}
	}
	for _, c := range []struct {
		name   string
		header []string
		status int
		kind   string
	}{
		{"foreign origin", []string{"Origin", "http://evil.example", "Content-Type", ctJSON}, 403, "cross_origin"},
		{"foreign origin, text/plain", []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, 403, "cross_origin"},
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site", "Content-Type", ctJSON}, 403, "cross_origin"},
		{"text/plain", []string{"Content-Type", "text/plain;charset=UTF-8"}, 415, "unsupported_media_type"},
		{"form", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"multipart", []string{"Content-Type", "multipart/form-data; boundary=b"}, 415, "unsupported_media_type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if a := w.send("POST", "/v1/tools/toucher/call", w.toucherArgs(), c.header...); a.status != c.status || a.Error.Kind != c.kind {
				t.Errorf("call: %d %s; want %d %s", a.status, hostile.Truncate(a.raw, 300), c.status, c.kind)
			}
			if a := w.send("POST", "/v1/runs", `{"prompt":"call toucher"}`, c.header...); a.status != c.status || a.Error.Kind != c.kind {
				t.Errorf("run: %d %s; want %d %s", a.status, hostile.Truncate(a.raw, 300), c.status, c.kind)
			}
		})
	}
	if n := w.tool.Hits.Load(); n != 0 {
		t.Fatalf("requests from web pages ran the tool %d times", n)
	}
	if n := w.model.Hits.Load(); n != 0 {
		t.Fatalf("requests from web pages started %d model requests", n)
	}
	// The server's own clients: curl-like (no Origin) and the server's own
	// origin. The tool really runs (its peer sees it).
	if a := w.send("POST", "/v1/tools/toucher/call", w.toucherArgs(), "Content-Type", ctJSON); a.status != 200 || !a.OK {
		t.Errorf("a legitimate call: %d %s", a.status, hostile.Truncate(a.raw, 300))
	}
	if a := w.send("POST", "/v1/tools/toucher/call", w.toucherArgs(), "Content-Type", ctJSON, "Origin", "http://localhost:"+w.port); a.status != 200 || !a.OK {
		t.Errorf("a call from the server's own origin: %d %s", a.status, hostile.Truncate(a.raw, 300))
	}
	if a := w.send("GET", "/v1/tools", "", "Host", "localhost:"+w.port); a.status != 200 || !strings.Contains(a.raw, "toucher") {
		t.Errorf("the tool list for localhost: %d %s", a.status, hostile.Truncate(a.raw, 300))
	}
	if n := w.tool.Hits.Load(); n != 2 {
		t.Errorf("the tool ran %d times for 2 legitimate calls", n)
	}
}

// TestServeSlowBodies: clients that hold many connections, each sending
// its body a byte at a time, do not keep another client out: its call
// succeeds while they stall, and the stalled ones are cut off by
// body_timeout.
func TestServeSlowBodies(t *testing.T) {
	w := startWebServe(t, `max_concurrent_calls = 2
read_timeout = "10m"
body_timeout = "3s"`, "", nil)
	var conns []net.Conn
	for i := 0; i < 8; i++ {
		conn, err := net.Dial("tcp", strings.TrimPrefix(w.base, "http://"))
		hostile.Must(t, err)
		defer conn.Close()
		path, ctype := "/v1/tools/toucher/call", "application/json"
		if i%2 == 1 {
			path, ctype = "/v1/tools", "application/wasm"
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nContent-Type: %s\r\nContent-Length: 4096\r\n\r\n{", path, w.port, ctype)
		conns = append(conns, conn)
	}
	time.Sleep(time.Second) // their headers are read; their handlers wait for the bodies
	start := time.Now()
	if a := w.send("POST", "/v1/tools/toucher/call", w.toucherArgs(), "Content-Type", "application/json"); a.status != 200 || !a.OK {
		t.Fatalf("a call while slow clients stall: %d %s", a.status, hostile.Truncate(a.raw, 300))
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the call took %v while slow clients stalled", d)
	}
	// Every stalled body is answered 408 (or its connection closed) well
	// within a generous bound, far below read_timeout.
	for i, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("slow client %d: still connected after 2 minutes", i)
			}
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("slow client %d: answered %d, want 408", i, resp.StatusCode)
		}
	}
}

// TestServeTokenShare: one token's clients holding every call slot they
// may cannot starve another token.
func TestServeTokenShare(t *testing.T) {
	const a, b = "token-a-0123456789abcdef", "token-b-0123456789abcdef"
	gate := make(chan struct{})
	arrived := make(chan struct{}, 16)
	w := startWebServe(t, `max_concurrent_calls = 2`, a+","+b, func(rw http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-gate:
		case <-r.Context().Done():
		}
		io.WriteString(rw, "done")
	})
	call := func(tok string, out chan<- webAnswer) {
		out <- w.send("POST", "/v1/tools/toucher/call", w.toucherArgs(), "Content-Type", "application/json", "Authorization", "Bearer "+tok)
	}
	waitArrived := func(who string) {
		t.Helper()
		select {
		case <-arrived:
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s's call never reached the tool's peer", who)
		}
	}
	fromA := make(chan webAnswer, 2)
	go call(a, fromA)
	waitArrived("token a")
	go call(a, fromA)
	select {
	case r := <-fromA:
		if r.status != http.StatusTooManyRequests || r.Error.Kind != "busy" {
			t.Errorf("token a's second call: %d %s; want 429 busy", r.status, hostile.Truncate(r.raw, 300))
		}
	case <-arrived:
		t.Errorf("token a took every call slot")
	case <-time.After(2 * time.Minute):
		t.Fatal("token a's second call got no answer")
	}
	fromB := make(chan webAnswer, 1)
	go call(b, fromB)
	select {
	case <-arrived:
	case r := <-fromB:
		t.Fatalf("token b was refused while token a held its share: %d %s", r.status, hostile.Truncate(r.raw, 300))
	case <-time.After(2 * time.Minute):
		t.Fatal("token b's call never ran")
	}
	close(gate)
	for _, r := range []webAnswer{<-fromA, <-fromB} {
		if r.status != 200 || !r.OK {
			t.Errorf("a call within its share: %d %s", r.status, hostile.Truncate(r.raw, 300))
		}
	}
}
