package mcp

import (
	"slices"

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
