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

// auditOf is the registry's view of a run's audit: the sandbox's, with
// the tool's part set (Source, Fuel, the mounts' host directories) and
// each guest-chosen string cleaned and cut (textsafe). The Output's
// slices are the call's own: they are cleaned in place.
func auditOf(out *runtime.Output, mounts []runtime.Mount) *registry.Audit {
	a := out.Audit
	a.Source, a.Fuel = "wasm", out.Fuel
	for i := range a.Mounts {
		m := &a.Mounts[i]
		if i < len(mounts) {
			m.Host = mounts[i].Host
		}
		for j := range m.Paths {
			m.Paths[j].Path = textsafe.Clean(m.Paths[j].Path, maxAuditPath)
		}
	}
	for i := range a.Requests {
		q := &a.Requests[i]
		q.Method, q.Host = textsafe.Clean(q.Method, maxAuditMethod), textsafe.Clean(q.Host, maxAuditHost)
	}
	return &a
}
