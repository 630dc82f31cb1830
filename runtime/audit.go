package runtime

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/runtime/internal/sandboxfs"
)

// Audit is what one call's guest did, as the sandbox saw it. Every Run
// collects it (the counters sit on paths the call takes anyway), and its
// size is bounded whatever the guest does: MaxAuditPaths paths per mount,
// MaxAuditRequests requests, each string cut. Paths and hosts are the
// guest's own words (cut, not cleaned): clean them before showing them.
type Audit struct {
	// CPU is the CPU time of the thread that ran the guest, instantiation
	// included (Linux; zero elsewhere). Host functions (an HTTP request)
	// count while they compute, not while they wait.
	CPU time.Duration `json:"cpu_ns"`
	// MemoryPeak is the size of the guest's linear memory when it ended
	// (a memory only grows), in bytes.
	MemoryPeak int64 `json:"memory_peak"`
	// StdinBytes is what the guest read of its stdin; StdoutBytes and
	// StderrBytes what it wrote, including what went past the caps.
	StdinBytes  int64 `json:"stdin_bytes"`
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// HostCalls counts the guest's calls of agrun host functions (log,
	// http_request, http_response).
	HostCalls int64 `json:"host_calls"`
	// Mounts are the call's mounts, in Input.Mounts order.
	Mounts []MountAudit `json:"mounts,omitempty"`
	// Requests are the guest's HTTP requests, in order, the first
	// MaxAuditRequests of them; MoreRequests counts the rest.
	Requests     []RequestAudit `json:"requests,omitempty"`
	MoreRequests int            `json:"more_requests,omitempty"`
}

// MountAudit is what the guest did under one mount.
type MountAudit struct {
	Guest    string `json:"guest"`
	Writable bool   `json:"writable"`
	// Paths are the first MaxAuditPaths distinct paths touched (guest
	// paths, under Guest), in the order first touched; MorePaths counts
	// further distinct paths (exactly up to 4096, then a lower bound).
	Paths     []PathAudit `json:"paths,omitempty"`
	MorePaths int         `json:"more_paths,omitempty"`
	// Totals over every path.
	Opened       int64 `json:"opened"`
	ReadBytes    int64 `json:"read_bytes"`
	WrittenBytes int64 `json:"written_bytes"`
	// Refused counts operations the mount's mode refused (a write on a
	// read-only mount, a delete without AllowDelete).
	Refused int64 `json:"refused,omitempty"`
}

// PathAudit is what the guest did to one path: Ops among "open", "read",
// "write", "create", "rename_from", "rename_to", "delete", "truncate",
// "list" and "refused".
type PathAudit struct {
	Path         string   `json:"path"`
	Ops          []string `json:"ops"`
	ReadBytes    int64    `json:"read_bytes,omitempty"`
	WrittenBytes int64    `json:"written_bytes,omitempty"`
}

// RequestAudit is one HTTP request of the guest: never its headers or
// bodies.
type RequestAudit struct {
	Method string `json:"method"`
	// Host is the URL's host (and port, if given); empty if the request
	// could not be parsed.
	Host string `json:"host"`
	// Status is the response's status code; 0 if there was no response.
	Status int `json:"status,omitempty"`
	// Error is the ABI's error code when the host refused or failed the
	// request ("not_granted", "forbidden", "bad_request",
	// "too_many_requests", "too_large", "network", "timeout").
	Error string `json:"error,omitempty"`
	// Bytes is the response body's size.
	Bytes    int64         `json:"bytes,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Bounds of an Audit.
const (
	// MaxAuditPaths is the paths kept per mount.
	MaxAuditPaths = sandboxfs.DefaultMaxRecordedPaths
	// MaxAuditRequests is the requests kept per call.
	MaxAuditRequests = 64
	// maxAuditHost cuts a recorded host.
	maxAuditHost = 256
)

// auditState is what a call collects for its Audit beyond the writers'
// and the mounts' counters. Host functions run on the guest's goroutine,
// but the mutex keeps Output's copy safe from a request still finishing.
type auditState struct {
	mu       sync.Mutex
	hostCall int64
	reqs     []RequestAudit
	moreReqs int
}

func (a *auditState) request(ra RequestAudit) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.reqs) >= MaxAuditRequests {
		a.moreReqs++
		return
	}
	// Cut and copied: a cut substring would keep the guest's whole
	// request (up to 1 MiB) alive with the audit.
	if len(ra.Host) > maxAuditHost {
		ra.Host = ra.Host[:maxAuditHost]
	}
	if len(ra.Method) > 32 {
		ra.Method = ra.Method[:32]
	}
	ra.Host, ra.Method = strings.Clone(ra.Host), strings.Clone(ra.Method)
	a.reqs = append(a.reqs, ra)
}

func (a *auditState) hostCalled() {
	a.mu.Lock()
	a.hostCall++
	a.mu.Unlock()
}

// mountAudits turns the mounts' recorders into MountAudits.
func mountAudits(mounts []Mount, recs []*sandboxfs.Recorder) []MountAudit {
	if len(recs) == 0 {
		return nil
	}
	out := make([]MountAudit, len(recs))
	for i, rec := range recs {
		st := rec.Stats()
		ma := MountAudit{
			Guest: mounts[i].Guest, Writable: mounts[i].Writable,
			MorePaths: st.MorePaths, Opened: st.Opened, ReadBytes: st.ReadBytes,
			WrittenBytes: st.WrittenBytes, Refused: st.Refused,
		}
		for _, p := range st.Paths {
			ma.Paths = append(ma.Paths, PathAudit{
				Path: guestPath(mounts[i].Guest, p.Path), Ops: p.Ops.Names(),
				ReadBytes: p.ReadBytes, WrittenBytes: p.Written,
			})
		}
		out[i] = ma
	}
	return out
}

// guestPath joins a mount's guest path and a path relative to it.
func guestPath(mount, rel string) string {
	if rel == "." || rel == "" {
		return mount
	}
	if mount == "/" {
		return "/" + rel
	}
	return mount + "/" + rel
}

// audit assembles the call's Audit once its guest has ended.
func (g *guestRun) audit(memPeak int64, mounts []Mount, recs []*sandboxfs.Recorder) Audit {
	a := &g.st.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	return Audit{
		CPU: g.cpu, MemoryPeak: memPeak,
		StdinBytes: g.stdin.n, StdoutBytes: g.stdout.total, StderrBytes: g.stderr.total,
		HostCalls: a.hostCall, Mounts: mountAudits(mounts, recs),
		Requests: slices.Clone(a.reqs), MoreRequests: a.moreReqs,
	}
}

// countReader counts what the guest reads of its stdin.
type countReader struct {
	r *bytes.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
