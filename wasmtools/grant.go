package wasmtools

import (
	"slices"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
)

var _ registry.GrantDescriber = (*Tool)(nil)

// Grant implements registry.GrantDescriber: what a call of t can touch —
// the declared permissions, the mounts the sandbox links (declared ∩
// granted, with their host paths and modes), the hosts it may reach and
// the call's limits with the runtime's defaults filled in.
func (t *Tool) Grant() registry.Grant {
	g := describe(t.rt.Effective(t.limits), t.caps.Mounts, t.caps.Network)
	g.Permissions = t.Permissions()
	return g
}

// Describe is g as a registry.Grant, before any manifest narrows it: every
// mount and host it offers, and its limits with each zero field taken
// from defaults and then the runtime's package defaults (runtime.Limits.Or).
// Permissions is nil: they are the module's to declare. It is what a
// description of the offer itself shows (agrun audit's suggested block);
// a loaded tool's Grant is the offer intersected with its declarations.
func (g Grant) Describe(defaults runtime.Limits) registry.Grant {
	var n *runtime.NetworkGrant
	if len(g.AllowedHosts) > 0 || g.AllowPrivate {
		n = g.network()
	}
	return describe(g.Limits.Or(defaults), g.Mounts, n)
}

// describe is the one mapping of the sandbox's grant parts to a
// registry.Grant (without permissions).
func describe(l runtime.Limits, mounts []Mount, n *runtime.NetworkGrant) registry.Grant {
	g := registry.Grant{
		Source:         "wasm",
		Timeout:        l.Timeout,
		MemoryBytes:    l.MemoryBytes,
		MaxOutputBytes: l.MaxStdout,
	}
	for _, m := range mounts {
		if m.Writable {
			g.MaxWriteBytes = l.MaxWriteBytes
		}
		g.Mounts = append(g.Mounts, registry.GrantMount{Guest: m.Guest, Host: m.Host, Mode: registry.MountModeOf(m.Writable, m.AllowDelete)})
	}
	if n != nil {
		g.AllowedHosts = slices.Clone(n.AllowedHosts)
		g.AllowPrivate = n.AllowPrivate
	}
	return g
}
