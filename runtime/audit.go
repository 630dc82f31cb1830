package runtime

import (
	"bytes"
	"github.com/agcore/agrun/internal/audit"
	"slices"
	"strings"
	"sync"

	"github.com/agcore/agrun/runtime/internal/sandboxfs"
)

// Audit is what one call's guest did, as the sandbox saw it (the one
// audit type: package audit). Every Run collects it (the counters sit
// on paths the call takes anyway), and its size is bounded whatever the
// guest does: MaxAuditPaths paths per mount, MaxAuditRequests requests,
// each string cut. Paths and hosts are the guest's own words (cut, not
// cleaned): clean them before showing them. The sandbox sets neither
// Source nor Fuel (Output.Fuel) nor a mount's Host.
type Audit = audit.Call

// MountAudit is what the guest did under one mount.
type MountAudit = audit.Mount

// PathAudit is what the guest did to one path.
type PathAudit = audit.Path

// RequestAudit is one HTTP request of the guest.
type RequestAudit = audit.Request

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
		BytesIn: g.stdin.n, BytesOut: g.stdout.total, StderrBytes: g.stderr.total,
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
