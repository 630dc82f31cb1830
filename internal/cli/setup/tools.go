package setup

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// ToolInfo describes one configured tool, loaded or not: a row of `agrun
// tools` and an element of `agrun tools --json`.
type ToolInfo struct {
	Name        string   `json:"name"`
	Source      string   `json:"source"` // "wasm:<path>", "oci:<ref>" or "mcp:<server>"
	Permissions []string `json:"permissions"`
	Allowed     bool     `json:"allowed"`            // the permission policy lets it run
	Denied      string   `json:"denied,omitempty"`   // why not
	Error       string   `json:"error,omitempty"`    // why it failed to load
	Kind        string   `json:"kind,omitempty"`     // the error kind of Denied or Error: permission_denied, module_refused
	Warnings    []string `json:"warnings,omitempty"` // grants the tool cannot use
	Description string   `json:"description,omitempty"`
}

// ToolInfos lists every tool of e, loaded or broken, sorted by name. A
// broken MCP server or plug-in is one row named "NAME__*". explain
// words a load error or a policy's refusal for the operator (the
// command adds the key to change); its result and every text from a
// tool are escaped (textsafe.Escape). Permissions is never nil.
func (e *Env) ToolInfos(explain func(name string, err error) string) []ToolInfo {
	var out []ToolInfo
	for _, name := range e.Registry.List() {
		t, ok := e.Registry.Get(name)
		if !ok || Refused(t) {
			continue
		}
		ti := ToolInfo{Name: name, Source: e.Source(name), Permissions: permission.Strings(t.Permissions()), Allowed: true,
			Description: textsafe.Escape(textsafe.FirstLine(t.Description(), 200)), Warnings: e.Warnings(name)}
		if err := e.Registry.Allowed(name); err != nil {
			ti.Allowed = false
			ti.Kind = string(registry.KindOf(err))
			ti.Denied = textsafe.Escape(explain(name, err))
		}
		out = append(out, ti)
	}
	for key, err := range e.Broken() {
		ti := ToolInfo{Name: key, Error: textsafe.Escape(explain(key, err)), Kind: string(registry.KindOf(err))}
		if s, ok := strings.CutPrefix(key, "mcp:"); ok {
			ti.Name, ti.Source = s+"__*", key
		} else if p, ok := strings.CutPrefix(key, "plugin:"); ok {
			ti.Name, ti.Source = p+"__*", ToolSource(e.Config.Plugins[p])
		} else if t, ok := e.Config.Tools[key]; ok {
			ti.Source = ToolSource(t)
		}
		out = append(out, ti)
	}
	slices.SortFunc(out, func(a, b ToolInfo) int { return strings.Compare(a.Name, b.Name) })
	for i := range out {
		if out[i].Permissions == nil {
			out[i].Permissions = []string{}
		}
	}
	return out
}

// MCPDown is `agrun tools`'s outcome for infos: nil, or an error naming
// the configured MCP servers that could not be used (not reachable, a
// failed handshake, a login needed, a header variable unset), for exit
// code 1. Design.md's exit codes: 1 is "a tool/run failure", which a
// server that cannot be reached is; the listing itself is whole (stdout
// keeps its shape, --json included), so a script that checks the exit
// code learns that not every configured tool can run. A WASM tool that
// fails to load keeps exit 0 (its row says why): the operator's files,
// not a server that may come back.
func MCPDown(infos []ToolInfo) error {
	var down []string
	for _, ti := range infos {
		if s, ok := strings.CutPrefix(ti.Source, "mcp:"); ok && ti.Error != "" {
			down = append(down, s)
		}
	}
	if len(down) == 0 {
		return nil
	}
	return fmt.Errorf("MCP server %s cannot be used (the listing says why)", strings.Join(down, ", "))
}

// WriteToolTable writes infos as the table `agrun tools` prints: name,
// source, permissions, status (ok; broken or denied, with why; the
// warnings) and description, one line per tool. Long reasons and
// descriptions are cut to keep it so; cut says whether any was (`agrun
// tools --json` has them whole). Text from a tool is escaped.
func WriteToolTable(w io.Writer, infos []ToolInfo) (cut bool, err error) {
	const maxStatus, maxDesc = 80, 60
	clip := func(s string, max int) string {
		t := textsafe.FirstLine(s, max)
		if t != strings.TrimSpace(s) {
			cut = true
		}
		return t
	}
	safe := textsafe.Escape
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tPERMISSIONS\tSTATUS\tDESCRIPTION")
	for _, ti := range infos {
		status := "ok"
		switch {
		case ti.Error != "":
			status = "broken: " + ti.shortReason(ti.Error)
		case !ti.Allowed:
			status = "denied: " + ti.shortReason(ti.Denied)
		case len(ti.Warnings) > 0:
			status = "ok; warning: " + strings.Join(ti.Warnings, "; ")
		}
		perms := strings.Join(ti.Permissions, ",")
		if perms == "" {
			perms = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safe(ti.Name), safe(ti.Source), perms, safe(clip(status, maxStatus)), safe(textsafe.Truncate(ti.Description, maxDesc)))
	}
	return cut, tw.Flush()
}

// shortReason drops from a reason what the table's other columns say
// (the tool's name, its file), so that the key to change stays visible.
func (ti ToolInfo) shortReason(reason string) string {
	reason = strings.TrimPrefix(reason, "the tool failed to load: ")
	reason = strings.TrimPrefix(reason, fmt.Sprintf("tool %q ", ti.Name))
	if path, ok := strings.CutPrefix(ti.Source, "wasm:"); ok {
		reason = strings.TrimPrefix(reason, "open "+path+": ")
	}
	return reason
}
