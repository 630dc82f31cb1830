package config

import (
	"slices"

	"github.com/agcore/agrun/permission"
)

// Approvals is the [approvals] section: which tool calls need a person's
// yes before they run (see docs/CONFIG.md).
type Approvals struct {
	// Ask lists the permissions whose use needs a yes: a call is asked
	// about if the permissions it can exercise (registry.Grant.Uses: the
	// declared ones, writable mounts, allowed hosts, MCP hints) include
	// one of them. Empty (the default): no call is asked about unless its
	// tool or server says approve = "ask".
	Ask []permission.Permission `toml:"ask"`
}

// The values of approve in [tools.X] and [mcp.X].
const (
	// ApproveAsk: every call is asked about.
	ApproveAsk = "ask"
	// ApproveAlways: calls run without asking, whatever [approvals] ask says.
	ApproveAlways = "always"
	// ApproveNever: calls are denied without asking.
	ApproveNever = "never"
)

// validApprove reports whether s is a value of approve ("" is unset).
func validApprove(s string) bool {
	return s == "" || s == ApproveAsk || s == ApproveAlways || s == ApproveNever
}

// ApprovalFor returns what the configuration says about calls of the tool
// registered under name (an MCP tool is server__tool; server is its
// server's config name, "" for other tools; a plug-in's tool is
// plugin__tool) that can exercise uses: one
// of ApproveAsk, ApproveAlways, ApproveNever. A tool's or server's own
// approve wins; otherwise ask if a use is in [approvals] ask, else
// always.
func (c *Config) ApprovalFor(name, server string, uses []permission.Permission) string {
	if t, ok := c.Tools[name]; ok && t.Approve != "" {
		return t.Approve
	}
	if s, ok := c.MCP[server]; ok && server != "" && s.Approve != "" {
		return s.Approve
	}
	if _, ok := c.Tools[name]; !ok {
		if p, _, ok := c.PluginOf(name); ok && p.Approve != "" {
			return p.Approve
		}
	}
	for _, u := range uses {
		if slices.Contains(c.Approvals.Ask, u) {
			return ApproveAsk
		}
	}
	return ApproveAlways
}

// checkApprovals checks the approve keys of [tools.X] and [mcp.X].
func (c *Config) checkApprovals(errAt func(msg string, key ...string) error) error {
	const msg = `must be "ask", "always" or "never"`
	for _, name := range sortedKeys(c.Tools) {
		if !validApprove(c.Tools[name].Approve) {
			return errAt(msg, "tools", name, "approve")
		}
	}
	for _, name := range sortedKeys(c.MCP) {
		if !validApprove(c.MCP[name].Approve) {
			return errAt(msg, "mcp", name, "approve")
		}
	}
	return nil
}
