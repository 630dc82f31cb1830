package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a slog.Handler keeping every record.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *recorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recorder) WithGroup(string) slog.Handler      { return h }

func TestLog(t *testing.T) {
	rec := &recorder{}
	r := newRuntime(t, Config{Logger: slog.New(rec)})
	m := compile(t, r, probe(t))
	long := strings.Repeat("z", 5000)
	out, err := run(t, r, m, Input{Args: []string{"probe", "log", "debug msg", "info msg", "warn msg", "error msg", long}})
	if err != nil || strings.TrimSpace(string(out.Stdout)) != "logged" {
		t.Fatalf("%v %q %q", err, out.Stdout, out.Stderr)
	}
	want := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelDebug, "debug msg"}, {slog.LevelInfo, "info msg"}, {slog.LevelWarn, "warn msg"},
		{slog.LevelError, "error msg"}, {slog.LevelError, long[:4096]}, // level 4 clamps to error
	}
	if len(rec.recs) != len(want) {
		t.Fatalf("%d records, want %d (the out-of-range one dropped)", len(rec.recs), len(want))
	}
	for i, w := range want {
		if rec.recs[i].Level != w.level || rec.recs[i].Message != w.msg {
			t.Errorf("record %d = %v %.20q, want %v %.20q", i, rec.recs[i].Level, rec.recs[i].Message, w.level, w.msg)
		}
	}
}

// fetchAll runs the probe's http mode with the given request JSONs and
// returns the pending responses it printed, one per request.
func fetchAll(t *testing.T, r *Runtime, m *Module, grant *NetworkGrant, reqs ...string) ([]map[string]any, error) {
	t.Helper()
	out, err := r.Run(context.Background(), m, Input{Args: append([]string{"probe", "http"}, reqs...), Network: grant, Limits: Limits{Timeout: 20 * time.Second}})
	var res []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(out.Stdout)), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("guest printed %q (stderr %q)", out.Stdout, out.Stderr)
		}
		res = append(res, v)
	}
	return res, err
}

func get(u string) string {
	return fmt.Sprintf(`{"method":"GET","url":%q,"headers":{"X-Probe":["1"]}}`, u)
}

func errCode(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestHTTPRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/big":
			w.Write(bytes.Repeat([]byte("b"), 2000))
		case "/hugeheader":
			w.Header().Set("X-Huge", strings.Repeat("h", 100<<10))
		case "/post":
			b, _ := io.ReadAll(req.Body)
			fmt.Fprintf(w, "%s %s", req.Method, b)
		default:
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "hello %s", req.Header.Get("X-Probe"))
		}
	}))
	defer srv.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		t.Error("a request reached a host that is not allowed")
	}))
	defer other.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, other.URL+"/stolen", http.StatusFound)
	}))
	defer redirect.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	redirectHost := strings.TrimPrefix(redirect.URL, "http://")

	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	grant := &NetworkGrant{AllowedHosts: []string{host, redirectHost}, AllowPrivate: true, MaxResponseBytes: 1000}

	t.Run("allowed", func(t *testing.T) {
		res, err := fetchAll(t, r, m, grant, get(srv.URL+"/"),
			`{"method":"POST","url":"`+srv.URL+`/post","body":"`+"cGF5bG9hZA=="+`"}`)
		if err != nil {
			t.Fatal(err)
		}
		if res[0]["status"] != 200.0 || res[0]["body"] != "aGVsbG8gMQ==" { // "hello 1"
			t.Errorf("response = %v", res[0])
		}
		if h, _ := res[0]["headers"].(map[string]any); fmt.Sprint(h["Content-Type"]) != "[text/plain]" {
			t.Errorf("headers = %v", h)
		}
		if res[1]["body"] != "UE9TVCBwYXlsb2Fk" { // "POST payload"
			t.Errorf("POST response = %v", res[1])
		}
	})
	for _, tt := range []struct {
		name, req, code string
		grant           *NetworkGrant
	}{
		{"loopback without AllowPrivate", get(srv.URL), "forbidden", &NetworkGrant{AllowedHosts: []string{host}}},
		{"host not allowed", get(other.URL), "forbidden", grant},
		{"host allowed on another port only", get(other.URL), "forbidden", &NetworkGrant{AllowedHosts: []string{"127.0.0.1:1"}, AllowPrivate: true}},
		{"redirect to a host not allowed", get(redirect.URL), "forbidden", grant},
		{"scheme", `{"method":"GET","url":"file:///etc/passwd"}`, "forbidden", grant},
		{"user info", get("http://u:p@" + host + "/"), "forbidden", grant},
		{"body over the cap", get(srv.URL + "/big"), "too_large", grant},
		{"headers over the cap", get(srv.URL + "/hugeheader"), "network", grant},
		{"malformed request", `{"method":"GET","url":`, "bad_request", grant},
		{"unknown field", `{"url":"` + srv.URL + `","verb":"x"}`, "bad_request", grant},
		{"unresolvable", get("http://does-not-exist.invalid/"), "network", &NetworkGrant{AllowedHosts: []string{"does-not-exist.invalid"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := fetchAll(t, r, m, tt.grant, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if errCode(res[0]) != tt.code {
				t.Errorf("response = %v, want code %s", res[0], tt.code)
			}
		})
	}
	t.Run("too many requests", func(t *testing.T) {
		g := *grant
		g.MaxRequests = 2
		res, err := fetchAll(t, r, m, &g, get(srv.URL), get(srv.URL), get(srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		if res[1]["status"] != 200.0 || errCode(res[2]) != "too_many_requests" {
			t.Errorf("responses = %v", res)
		}
	})
	t.Run("environment proxy ignored", func(t *testing.T) {
		proxied := false
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { proxied = true }))
		defer proxy.Close()
		t.Setenv("HTTP_PROXY", proxy.URL)
		t.Setenv("http_proxy", proxy.URL)
		res, err := fetchAll(t, r, m, grant, get(srv.URL))
		if err != nil || res[0]["status"] != 200.0 || proxied {
			t.Errorf("err %v, response %v, proxied %v", err, res[0], proxied)
		}
	})
}

func TestHTTPNotGranted(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	out, err := run(t, r, m, Input{Args: []string{"probe", "nogrant"}})
	if !errors.Is(err, ErrNotGranted) {
		t.Fatalf("err = %v, want ErrNotGranted", err)
	}
	if !strings.Contains(string(out.Stdout), `"code":"not_granted"`) || !strings.Contains(string(out.Stdout), "ignored the refusal") {
		t.Errorf("stdout = %q", out.Stdout)
	}
}

// Out-of-range pointers get error codes; the host never traps.
func TestHTTPPointerChecks(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	out, err := run(t, r, m, Input{Args: []string{"probe", "httpfault"}, Network: &NetworkGrant{AllowedHosts: []string{"example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out.Stdout)); got != "-1 -2 -4 -1" {
		t.Errorf("codes = %q, want -1 -2 -4 -1", got)
	}
}

// A guest blocked in http_request ends at its deadline.
func TestHTTPBlockedHostCallTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	const limit = 500 * time.Millisecond
	floor := callFloor(t, r, m)
	out, err := r.Run(context.Background(), m, Input{
		Args:    []string{"probe", "http", get(srv.URL)},
		Network: &NetworkGrant{AllowedHosts: []string{strings.TrimPrefix(srv.URL, "http://")}, AllowPrivate: true},
		Limits:  Limits{Timeout: limit},
	})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if out.Duration > 2*limit+2*floor {
		t.Errorf("stopped after %v, limit %v (an empty call takes %v here)", out.Duration, limit, floor)
	}
}

// MaxWriteBytes bounds what one call writes, across all of its mounts;
// the next call has a fresh budget.
func TestMountWriteLimit(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	r := newRuntime(t, Config{Limits: Limits{MaxWriteBytes: 10}})
	m := compile(t, r, probe(t))
	mounts := []Mount{{Host: a, Guest: "/a", Writable: true}, {Host: b, Guest: "/b", Writable: true}}
	call := func(args ...string) *Output {
		t.Helper()
		out, err := r.Run(context.Background(), m, Input{Args: append([]string{"probe", "write"}, args...), Mounts: mounts})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := call("/a/one", "123456", "/b/two", "7890"); out.ExitCode != 0 {
		t.Fatalf("10 bytes in two mounts: exit %d, %q", out.ExitCode, out.Stdout)
	}
	out := call("/a/three", "123456", "/b/four", "7890x")
	if out.ExitCode == 0 || !strings.Contains(string(out.Stdout), "error:") {
		t.Errorf("11 bytes in two mounts: exit %d, %q; want the write to fail", out.ExitCode, out.Stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(b, "four")); len(b) != 4 {
		t.Errorf("four holds %q; want the 4 bytes left of the budget", b)
	}
	// A per-call limit overrides the Runtime's default.
	out, err := r.Run(context.Background(), m, Input{Args: []string{"probe", "write", "/a/five", "0123456789abc"}, Mounts: mounts, Limits: Limits{MaxWriteBytes: 20}})
	if err != nil || out.ExitCode != 0 {
		t.Errorf("13 bytes with a limit of 20: %v, exit %d, %q", err, out.ExitCode, out.Stdout)
	}
	var l Limits
	if got := l.withDefaults(packageLimits).MaxWriteBytes; got != DefaultMaxWriteBytes {
		t.Errorf("default MaxWriteBytes = %d, want %d", got, DefaultMaxWriteBytes)
	}
}

// A guest that returns normally after its deadline passed inside
// http_request still ends with ErrTimeout: the call did not finish in time.
// The guest calls proc_exit(0) as soon as the host call returns, which
// nearly always beats wazero's own close on the deadline; whichever comes
// first, the call must end with ErrTimeout (TestClassifyExpired pins the
// decision without the race).
func TestHTTPDeadlineThenExitIsTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		<-req.Context().Done()
	}))
	defer srv.Close()
	r := newRuntime(t, Config{})
	m := compile(t, r, wat(t, "httpexit"))
	for range 5 {
		out, err := r.Run(context.Background(), m, Input{
			Args:    []string{"httpexit", get(srv.URL)},
			Network: &NetworkGrant{AllowedHosts: []string{strings.TrimPrefix(srv.URL, "http://")}, AllowPrivate: true},
			Limits:  Limits{Timeout: 100 * time.Millisecond},
		})
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v (exit %d), want ErrTimeout", err, out.ExitCode)
		}
	}
}

// TestClassifyExpired: a guest that ended without error is a success only
// if the time limit had not passed when it ended.
func TestClassifyExpired(t *testing.T) {
	st := &callState{}
	expiredCtx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := st.classify(context.Background(), expiredCtx, expiredCtx, true, nil, &Output{}); !errors.Is(err, ErrTimeout) {
		t.Errorf("guest returned after the deadline: err = %v, want ErrTimeout", err)
	}
	live, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := st.classify(context.Background(), live, live, false, nil, &Output{}); err != nil {
		t.Errorf("guest returned in time: err = %v, want nil", err)
	}
}

func TestMounts(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	call := func(mount Mount, args ...string) (*Output, error) {
		return r.Run(context.Background(), m, Input{Args: append([]string{"probe"}, args...), Mounts: []Mount{mount}})
	}
	ro := Mount{Host: dir, Guest: "/data"}
	rw := Mount{Host: dir, Guest: "/data", Writable: true}
	rwd := Mount{Host: dir, Guest: "/data", Writable: true, AllowDelete: true}

	out, err := call(ro, "read", "/data/in.txt")
	if err != nil || string(out.Stdout) != "from the host" {
		t.Fatalf("read through a read-only mount: %v %q", err, out.Stdout)
	}
	out, err = call(ro, "write", "/data/new.txt", "x")
	if err != nil || out.ExitCode == 0 {
		t.Fatalf("write through a read-only mount: %v %q", err, out.Stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a read-only mount created a file: %v", err)
	}
	out, err = call(rw, "write", "/data/new.txt", "guest data")
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("write through a writable mount: %v %q", err, out.Stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new.txt")); string(b) != "guest data" {
		t.Fatalf("host sees %q", b)
	}
	out, err = call(rw, "remove", "/data/new.txt")
	if err != nil || out.ExitCode == 0 {
		t.Fatalf("remove without AllowDelete: %v %q", err, out.Stdout)
	}
	out, err = call(rwd, "remove", "/data/new.txt")
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("remove with AllowDelete: %v %q", err, out.Stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	// Nothing outside the mount is visible.
	out, err = call(ro, "read", "/etc/passwd")
	if err != nil || out.ExitCode == 0 {
		t.Fatalf("read outside the mount: %v %q", err, out.Stdout)
	}
	for _, bad := range []Mount{
		{Host: dir, Guest: "data"},
		{Host: dir, Guest: "/data/../etc"},
		{Host: filepath.Join(dir, "missing"), Guest: "/data"},
		{Host: dir, Guest: "/data", AllowDelete: true},
	} {
		if _, err := call(bad, "read", "/data/in.txt"); err == nil {
			t.Errorf("mount %+v accepted", bad)
		}
	}
}
