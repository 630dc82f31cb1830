package wasmtools

import (
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
)

// Caps on the strings of an audit (guest paths and hosts are the guest's
// own words).
const (
	maxAuditPath   = 512
	maxAuditHost   = 256
	maxAuditMethod = 32
)

// auditOf is the registry's view of a run's audit: the same data, each
// guest-chosen string cleaned and cut (textsafe), the mounts' host
// directories added.
func auditOf(out *runtime.Output, mounts []runtime.Mount) *registry.Audit {
	a := out.Audit
	ra := &registry.Audit{
		Source: "wasm", CPU: a.CPU, MemoryPeak: a.MemoryPeak,
		BytesIn: a.StdinBytes, BytesOut: a.StdoutBytes, StderrBytes: a.StderrBytes,
		HostCalls: a.HostCalls, Fuel: out.Fuel, MoreRequests: a.MoreRequests,
	}
	for i, m := range a.Mounts {
		ma := registry.MountAudit{
			Guest: m.Guest, Writable: m.Writable, MorePaths: m.MorePaths, Opened: m.Opened,
			ReadBytes: m.ReadBytes, WrittenBytes: m.WrittenBytes, Refused: m.Refused,
		}
		if i < len(mounts) {
			ma.Host = mounts[i].Host
		}
		for _, p := range m.Paths {
			ma.Paths = append(ma.Paths, registry.PathAudit{
				Path: textsafe.Clean(p.Path, maxAuditPath), Ops: p.Ops,
				ReadBytes: p.ReadBytes, WrittenBytes: p.WrittenBytes,
			})
		}
		ra.Mounts = append(ra.Mounts, ma)
	}
	for _, q := range a.Requests {
		ra.Requests = append(ra.Requests, registry.RequestAudit{
			Method: textsafe.Clean(q.Method, maxAuditMethod), Host: textsafe.Clean(q.Host, maxAuditHost),
			Status: q.Status, Error: q.Error, Bytes: q.Bytes, Duration: q.Duration,
		})
	}
	return ra
}
