package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// The committed example tools.
func exampleTool(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name+".wasm"))
	if err != nil {
		t.Fatalf("example tool: %v", err)
	}
	return b
}

// okTool is testdata/ok.wat (writes {"ok":true}) packed as a tool called name.
func okTool(t *testing.T, name string) []byte {
	t.Helper()
	return pack(t, testguest.WAT(t, "testdata/ok.wat"), wasmtools.Manifest{Name: name, Description: "answers ok"})
}

func pack(t *testing.T, wasm []byte, m wasmtools.Manifest) []byte {
	t.Helper()
	out, err := wasmtools.Pack(wasm, m)
	if err != nil {
		t.Fatalf("pack: %v", err)
	}
	return out
}

// withCustomSection appends a custom section to a module, whatever its
// payload (Pack refuses invalid manifests; an attacker does not use Pack).
func withCustomSection(wasm []byte, name string, payload []byte) []byte {
	return wasmbin.AppendCustomSection(bytes.Clone(wasm), name, payload)
}

// testServer is a Server on a real loopback listener, served by
// Server.Serve with its timeouts.
type testServer struct {
	t      *testing.T
	srv    *server.Server
	url    string
	token  string
	rt     *runtime.Runtime
	reg    *registry.Registry
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// setup is what a test may change before the server starts.
type setup struct {
	opts    server.Options
	dataDir string
	rt      *runtime.Runtime // shared by a restart
}

func startServer(t *testing.T, s setup) *testServer {
	t.Helper()
	rt := s.rt
	if rt == nil {
		rt = testrt.New(t, runtime.Config{})
	}
	o := s.opts
	o.Runtime = rt
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	if o.Registry == nil {
		o.Registry = registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	}
	if s.dataDir == "" {
		s.dataDir = t.TempDir()
	}
	o.DataDir = s.dataDir
	srv, err := server.New(context.Background(), o)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{t: t, srv: srv, url: "http://" + ln.Addr().String(), rt: rt, reg: o.Registry, cancel: cancel, done: make(chan error, 1)}
	if len(o.Tokens) > 0 {
		ts.token = o.Tokens[0]
	}
	go func() { ts.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(ts.stop)
	return ts
}

// stop shuts the server down (gracefully) and closes it.
func (ts *testServer) stop() {
	ts.once.Do(func() {
		ts.cancel()
		if err := <-ts.done; err != nil {
			ts.t.Errorf("Serve: %v", err)
		}
		ts.srv.Close(context.Background())
	})
}

// response is an answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("answer is not JSON (%d): %v\n%s", r.status, err, r.body)
	}
}

// errorKind returns the kind of an {"ok":false,"error":{...}} answer.
func (r response) errorKind(t *testing.T) server.Kind {
	t.Helper()
	var res server.Result
	r.json(t, &res)
	if res.OK || res.Error == nil {
		t.Fatalf("answer is not an error: %d %s", r.status, r.body)
	}
	return server.Kind(res.Error.Kind)
}

// request sends a request with the server's token (if any).
func (ts *testServer) request(method, path, contentType string, body []byte) response {
	return ts.requestAs(ts.token, method, path, contentType, body)
}

func (ts *testServer) requestAs(token, method, path, contentType string, body []byte) response {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url+path, bytes.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// Errors are reported with Errorf, not Fatalf: requests are also made
	// from goroutines other than the test's.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Errorf("%s %s: %v", method, path, err)
		return response{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Errorf("%s %s: reading the answer: %v", method, path, err)
		return response{status: -1, body: []byte(err.Error())}
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (ts *testServer) upload(wasm []byte, query string) response {
	ts.t.Helper()
	return ts.request("POST", "/v1/tools"+query, "application/wasm", wasm)
}

func (ts *testServer) call(name, args string) response {
	ts.t.Helper()
	return ts.request("POST", "/v1/tools/"+name+"/call", "application/json", []byte(args))
}

// mustUpload uploads wasm and wants status.
func (ts *testServer) mustUpload(wasm []byte, query string, status int) server.ToolInfo {
	ts.t.Helper()
	r := ts.upload(wasm, query)
	if r.status != status {
		ts.t.Fatalf("upload: status %d, want %d: %s", r.status, status, r.body)
	}
	var info server.ToolInfo
	r.json(ts.t, &info)
	return info
}

// ok reports whether r is a successful call's answer (safe to use from
// any goroutine).
func (r response) ok() bool {
	var res server.Result
	return r.status == http.StatusOK && json.Unmarshal(r.body, &res) == nil && res.OK
}

// callResult decodes a call's answer.
func callResult(t *testing.T, r response) server.Result {
	t.Helper()
	var res server.Result
	r.json(t, &res)
	return res
}

// storedTools returns the names in the data dir's index.
func storedTools(t *testing.T, dataDir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "index.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ix struct {
		Tools map[string]json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(b, &ix); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	var names []string
	for n := range ix.Tools {
		names = append(names, n)
	}
	return names
}

// moduleFiles returns the files of the data dir's modules folder.
func moduleFiles(t *testing.T, dataDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir, "modules"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// blockingWeather is a stand-in for the Open-Meteo forecast API whose
// answers wait until release is called; arrived receives one value per
// request as it arrives.
type blockingWeather struct {
	srv     *http.Server
	url     string
	arrived chan string
	gate    chan struct{}
	once    sync.Once
}

func newBlockingWeather(t *testing.T) *blockingWeather {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blockingWeather{url: "http://" + ln.Addr().String(), arrived: make(chan string, 16), gate: make(chan struct{})}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.arrived <- r.URL.Path
		select {
		case <-b.gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"current_weather":{"time":"2026-01-01T12:00","temperature":21.5,"windspeed":3,"winddirection":90,"weathercode":1}}`)
	})}
	go b.srv.Serve(ln)
	t.Cleanup(func() {
		b.release()
		b.srv.Close()
	})
	return b
}

func (b *blockingWeather) release() { b.once.Do(func() { close(b.gate) }) }

// waitArrived waits for a request to reach the weather server.
func (b *blockingWeather) waitArrived(t *testing.T) {
	t.Helper()
	select {
	case <-b.arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the tool's request never reached the weather server")
	}
}

// weatherArgs are get_weather arguments that make one request to base.
func weatherArgs(base string) string {
	return `{"latitude":48.85,"longitude":2.35,"api_base":"` + base + `"}`
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func hasNote(notes []string, sub string) bool {
	for _, n := range notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// testWriter sends the server's log to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
