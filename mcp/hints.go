package mcp

import (
	"slices"

	"github.com/agcore/agrun/permission"

	"github.com/agcore/agrun/registry"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// annotationHints turns a tool's MCP annotations into the hints of its
// registry.Grant, with the MCP defaults for unset hints: destructiveHint
// unset means true and openWorldHint unset means true (both only when the
// server sent annotations at all). The hints are:
//
//   - "read_only": readOnlyHint is true (destructiveHint is then ignored,
//     as MCP says);
//   - "destructive": not read-only and destructiveHint is true or unset —
//     approvals count it as "write" and "delete";
//   - "additive": not read-only and destructiveHint is false — counted as
//     "write";
//   - "idempotent": idempotentHint is true (informative);
//   - "open_world": openWorldHint is true or unset — counted as "network".
//
// A tool without annotations has no hints: only the permissions the
// configuration gives its server count. Hints never change the
// [permissions] check, which stays on the configured permissions: they
// are the server's own claims, used to decide what to ask a person
// about, not to grant anything.
func annotationHints(a *sdk.ToolAnnotations) []string {
	if a == nil {
		return nil
	}
	var h []string
	switch {
	case a.ReadOnlyHint:
		h = append(h, "read_only")
	case a.DestructiveHint == nil || *a.DestructiveHint:
		h = append(h, "destructive")
	default:
		h = append(h, "additive")
	}
	if a.IdempotentHint {
		h = append(h, "idempotent")
	}
	if a.OpenWorldHint == nil || *a.OpenWorldHint {
		h = append(h, "open_world")
	}
	return h
}

var _ registry.GrantDescriber = (*tool)(nil)

// Grant implements registry.GrantDescriber: the server's name, the
// permissions its configuration gives and the tool's annotation hints.
func (t *tool) Grant() registry.Grant {
	return registry.Grant{
		Source:      "mcp",
		Permissions: slices.Clone(t.perms),
		Server:      t.c.name,
		Hints:       slices.Clone(t.hints),
	}
}

// serveAnnotations are the MCP annotations agrun mcp serve gives a tool,
// from what its calls can exercise (registry.Grant.Uses: the declared
// permissions, writable mounts, allowed hosts and, for an upstream MCP
// tool, its server's hints). They only ever say less than the tool may
// do, never more; a tool that does not describe its grant
// (registry.GrantDescriber) gets none:
//
//   - readOnlyHint: the calls can use nothing but "read" and
//     "filesystem" (read-only mounts) — no write, delete, network, shell
//     or custom permission; an upstream tool's only if its server said so
//     and agrun's config gives its server nothing but read, filesystem or
//     network;
//   - destructiveHint (when not read-only): true when they can write or
//     delete (a writable mount can overwrite), or use shell or a custom
//     permission, or the upstream tool is destructive; false only for an
//     upstream tool marked additive that agrun grants nothing more;
//   - openWorldHint: true when they can reach the network (allowed hosts,
//     "network") and for every upstream MCP tool (its server runs outside
//     the sandbox), false otherwise: a sandboxed tool without a network
//     grant cannot;
//   - idempotentHint: the upstream tool's, if it said so.
func serveAnnotations(g registry.Grant, title string) *sdk.ToolAnnotations {
	if g.Source == "" {
		return nil // a tool that does not describe its grant: nothing is claimed
	}
	uses := g.Uses()
	has := func(p permission.Permission) bool { return slices.Contains(uses, p) }
	readOnly := true
	if g.Source == "mcp" {
		// The upstream's claim, if agrun's config grants nothing that writes.
		readOnly = slices.Contains(g.Hints, "read_only")
		for _, p := range g.Permissions {
			if p != permission.Read && p != permission.Filesystem && p != permission.Network {
				readOnly = false
			}
		}
	} else {
		for _, u := range uses {
			if u != permission.Read && u != permission.Filesystem {
				readOnly = false // network included: a request may change the world
			}
		}
	}
	open := has(permission.Network) || g.Source == "mcp" // an MCP server's tool may reach anything its server can
	a := &sdk.ToolAnnotations{Title: title, ReadOnlyHint: readOnly, OpenWorldHint: &open}
	if !readOnly {
		destructive := true
		if slices.Contains(g.Hints, "additive") && !has(permission.Delete) && !has(permission.Shell) && len(g.Mounts) == 0 {
			destructive = false
		}
		a.DestructiveHint = &destructive
		a.IdempotentHint = slices.Contains(g.Hints, "idempotent")
	}
	return a
}
