package wasmtools

import "github.com/agcore/agrun/registry"

var _ registry.GrantDescriber = (*Tool)(nil)

// Grant implements registry.GrantDescriber: what a call of t can touch —
// the declared permissions, the mounts the sandbox links (declared ∩
// granted, with their host paths and modes), the hosts it may reach and
// the call's limits with the runtime's defaults filled in.
func (t *Tool) Grant() registry.Grant {
	l := t.rt.Effective(t.limits)
	g := registry.Grant{
		Source:         "wasm",
		Permissions:    t.Permissions(),
		Timeout:        l.Timeout,
		MemoryBytes:    l.MemoryBytes,
		MaxOutputBytes: l.MaxStdout,
	}
	for _, m := range t.caps.Mounts {
		mode := registry.MountModeOf(m.Writable, m.AllowDelete)
		if m.Writable {
			g.MaxWriteBytes = l.MaxWriteBytes
		}
		g.Mounts = append(g.Mounts, registry.GrantMount{Guest: m.Guest, Host: m.Host, Mode: mode})
	}
	if n := t.caps.Network; n != nil {
		g.AllowedHosts = append([]string(nil), n.AllowedHosts...)
		g.AllowPrivate = n.AllowPrivate
	}
	return g
}
