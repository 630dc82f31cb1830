package registry

import (
	"slices"
	"strings"
	"time"

	"github.com/agcore/agrun/permission"
)

// Grant describes, as plain data, what a call of a tool will be able to
// touch: for a WebAssembly tool what the sandbox links (the declared
// permissions intersected with the operator's grant: mounts with their
// host paths and modes, allowed hosts, limits), for an MCP tool the server
// it runs on and the hints the server gave. It is what a person deciding
// on a call is shown (see the loop package's Approver), and what
// audit/lpriv narrows to what a tool's recorded calls used. Strings in it
// come from the configuration or, for MCP tools, from the server (cleaned
// by the mcp package); the zero value means nothing is known beyond the
// tool's declared permissions.
type Grant struct {
	// Source is "wasm", "mcp" or empty (another kind of tool).
	Source string `json:"source,omitempty"`
	// Permissions are the tool's declared permissions.
	Permissions []permission.Permission `json:"permissions"`
	// Mounts are the host directories the call can see.
	Mounts []GrantMount `json:"mounts,omitempty"`
	// AllowedHosts are the hosts the call can reach over HTTP (empty: no
	// network).
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	// AllowPrivate: the allowed hosts may resolve to loopback and private
	// addresses.
	AllowPrivate bool `json:"allow_private,omitempty"`
	// Timeout, MemoryBytes, MaxOutputBytes and MaxWriteBytes are the
	// call's limits (zero: not known or not bounded).
	Timeout        time.Duration `json:"timeout_ns,omitempty"`
	MemoryBytes    int64         `json:"memory_bytes,omitempty"`
	MaxOutputBytes int64         `json:"max_output_bytes,omitempty"`
	MaxWriteBytes  int64         `json:"max_write_bytes,omitempty"`
	// Server is the MCP server's name in the configuration.
	Server string `json:"server,omitempty"`
	// Hints are an MCP tool's annotations, with MCP's defaults for unset
	// ones: "read_only", "destructive" or "additive" (not read-only),
	// "idempotent", "open_world". A tool whose server sent no
	// annotations has none.
	Hints []string `json:"hints,omitempty"`
}

// GrantMount is one mount of a Grant.
type GrantMount struct {
	// Guest is where the tool sees the directory, Host the directory as
	// configured.
	Guest string `json:"guest"`
	Host  string `json:"host"`
	// Mode is what the call can do there ("ro", "rw", "rwd" in JSON),
	// after the intersection with the declared permissions.
	Mode MountMode `json:"mode"`
}

// Uses returns the permissions a call of the tool can exercise: the
// declared permissions, plus "write" and "delete" for writable and
// deleting mounts, "network" when hosts are allowed, and for MCP hints
// "write" (additive), "write" and "delete" (destructive), "network"
// (open_world). Approval policies ask about these. Sorted by name,
// without duplicates.
func (g Grant) Uses() []permission.Permission {
	out := slices.Clone(g.Permissions)
	for _, m := range g.Mounts {
		switch m.Mode {
		case ReadWrite:
			out = append(out, permission.Write)
		case ReadWriteDelete:
			out = append(out, permission.Write, permission.Delete)
		}
	}
	if len(g.AllowedHosts) > 0 {
		out = append(out, permission.Network)
	}
	for _, h := range g.Hints {
		switch h {
		case "additive":
			out = append(out, permission.Write)
		case "destructive":
			out = append(out, permission.Write, permission.Delete)
		case "open_world":
			out = append(out, permission.Network)
		}
	}
	slices.SortFunc(out, func(a, b permission.Permission) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// A GrantDescriber is a Tool that can say what its calls will be able to
// touch. wasmtools.Tool and the mcp package's tools implement it; a tool
// that does not is described by its declared permissions alone
// (DescribeGrant).
type GrantDescriber interface {
	Tool
	Grant() Grant
}

// DescribeGrant returns t's Grant if t is a GrantDescriber, else a Grant
// with t's declared permissions.
func DescribeGrant(t Tool) Grant {
	if d, ok := t.(GrantDescriber); ok {
		g := d.Grant()
		if g.Permissions == nil {
			g.Permissions = []permission.Permission{}
		}
		return g
	}
	p := t.Permissions()
	if p == nil {
		p = []permission.Permission{}
	}
	return Grant{Permissions: p}
}

// Summary is g on one short line, as `agrun approvals` lists it: its
// mounts (GUEST=HOST:MODE), hosts and MCP server, "; " apart, or "-" for
// a grant of none of them. The text is g's as it is: escape it before a
// terminal shows it.
func (g Grant) Summary() string {
	var parts []string
	for _, m := range g.Mounts {
		parts = append(parts, m.Guest+"="+m.Host+":"+m.Mode.String())
	}
	if len(g.AllowedHosts) > 0 {
		parts = append(parts, "hosts "+strings.Join(g.AllowedHosts, ","))
	}
	if g.Server != "" {
		parts = append(parts, "mcp "+g.Server)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}
