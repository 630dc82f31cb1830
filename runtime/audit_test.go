package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
)

// TestAuditRecordsWhatTheGuestDid: a real guest reads, writes, renames,
// lists, deletes, is refused a write, reads its stdin and fetches from a
// local HTTP server and a forbidden host; the call's Audit says exactly
// that, for a command and for a reactor started from a snapshot.
func TestAuditRecordsWhatTheGuestDid(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "abc") }))
	t.Cleanup(srv.Close)
	host := mustHost(t, srv.URL)
	r := newRuntime(t, Config{})
	for _, build := range []struct {
		name string
		wasm []byte
	}{{"command", probe(t)}, {"reactor", probeReactor(t)}} {
		t.Run(build.name, func(t *testing.T) {
			m := compile(t, r, build.wasm)
			data, ro := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(ro, "in.txt"), []byte("content"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := r.Run(context.Background(), m, Input{
				Args:    []string{"probe", "audit", get(srv.URL + "/x"), get("http://forbidden.example/y")},
				Stdin:   []byte("xyz"),
				Mounts:  []Mount{{Host: data, Guest: "/data", Writable: true, AllowDelete: true}, {Host: ro, Guest: "/ro"}},
				Network: &NetworkGrant{AllowedHosts: []string{host}, AllowPrivate: true},
			})
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, out.Stderr)
			}
			a := out.Audit
			if a.BytesIn != 3 || a.BytesOut != int64(len(out.Stdout)) || a.StderrBytes != int64(len(out.Stderr)) {
				t.Errorf("stdio: %d %d %d (stdout %d, stderr %d bytes)", a.BytesIn, a.BytesOut, a.StderrBytes, len(out.Stdout), len(out.Stderr))
			}
			if a.MemoryPeak < 65536 || a.MemoryPeak%65536 != 0 {
				t.Errorf("memory peak %d", a.MemoryPeak)
			}
			if goruntime.GOOS == "linux" && a.CPU <= 0 {
				t.Errorf("CPU %v", a.CPU)
			}
			// Two requests, each an http_request and two http_response
			// (the probe asks with a small buffer first).
			if a.HostCalls != 6 {
				t.Errorf("host calls %d, want 6", a.HostCalls)
			}
			if len(a.Requests) != 2 {
				t.Fatalf("requests %+v", a.Requests)
			}
			if q := a.Requests[0]; q.Method != "GET" || q.Host != host || q.Status != 200 || q.Bytes != 3 || q.Error != "" || q.Duration <= 0 {
				t.Errorf("request 0: %+v", q)
			}
			if q := a.Requests[1]; q.Method != "GET" || q.Host != "forbidden.example" || q.Status != 0 || q.Error != "forbidden" {
				t.Errorf("request 1: %+v", q)
			}
			if len(a.Mounts) != 2 {
				t.Fatalf("mounts %+v", a.Mounts)
			}
			want := []PathAudit{
				{Path: "/data/out.txt", Ops: []string{"open", "write", "create", "rename_from", "truncate"}, WrittenBytes: 5},
				{Path: "/data/moved.txt", Ops: []string{"rename_to", "delete"}},
				{Path: "/data/sub", Ops: []string{"create"}},
				{Path: "/data", Ops: []string{"list"}}, // the root's open is wazero's preopen, not recorded
			}
			d := a.Mounts[0]
			if d.Guest != "/data" || !d.Writable || d.WrittenBytes != 5 || d.ReadBytes != 0 || d.Refused != 0 || !equalJSON(d.Paths, want) {
				t.Errorf("/data: %s\nwant paths %s", js(d), js(want))
			}
			wantRO := []PathAudit{
				{Path: "/ro/in.txt", Ops: []string{"open", "read"}, ReadBytes: 7},
				{Path: "/ro/x", Ops: []string{"refused"}},
			}
			o := a.Mounts[1]
			if o.Guest != "/ro" || o.Writable || o.ReadBytes != 7 || o.WrittenBytes != 0 || o.Refused != 1 || o.Opened != 1 || !equalJSON(o.Paths, wantRO) {
				t.Errorf("/ro: %s\nwant paths %s", js(o), js(wantRO))
			}
		})
	}
}

// TestAuditBounded: a guest that touches thousands of paths leaves an
// audit of MaxAuditPaths paths and counts (the rest of the set is capped
// too), not one entry per path.
func TestAuditBounded(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	data := t.TempDir()
	const n = 5000
	out, err := r.Run(context.Background(), m, Input{
		Args:   []string{"probe", "creates", "5000"},
		Mounts: []Mount{{Host: data, Guest: "/data", Writable: true}},
		Limits: Limits{Timeout: time.Minute},
	})
	if err != nil {
		t.Fatalf("Run: %v %s", err, out.Stdout)
	}
	a := out.Audit.Mounts[0]
	if len(a.Paths) != MaxAuditPaths || a.Opened != n || a.MorePaths != 4096 {
		t.Fatalf("paths %d, opened %d, more %d", len(a.Paths), a.Opened, a.MorePaths)
	}
	if b, _ := json.Marshal(out.Audit); len(b) > 16<<10 {
		t.Fatalf("audit of %d bytes", len(b))
	}
}

func mustHost(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Host
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func equalJSON(a, b any) bool { return js(a) == js(b) }

// TestAuditHoldsNoGuestStrings: the hosts and methods an audit keeps are
// cut copies, not substrings holding the guest's whole request alive.
func TestAuditHoldsNoGuestStrings(t *testing.T) {
	var a auditState
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	for i := range MaxAuditRequests {
		big := fmt.Sprintf("h%04d.example", i) + strings.Repeat("x", 1<<20)
		a.request(RequestAudit{Method: big, Host: big})
	}
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 8<<20 {
		t.Fatalf("the audit holds %d MiB for %d requests", grown>>20, MaxAuditRequests)
	}
	if len(a.reqs) != MaxAuditRequests || len(a.reqs[0].Host) != maxAuditHost {
		t.Fatalf("%d requests, host %d bytes", len(a.reqs), len(a.reqs[0].Host))
	}
}
