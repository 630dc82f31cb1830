package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agcore/agrun/audit/lpriv"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/session"
)

// auditReport is what `agrun audit --json` prints.
type auditReport struct {
	// Since is the start of the window read (zero: every record).
	Since time.Time `json:"since,omitzero"`
	// Tenant is the agrun serve tenant whose runs were read (--tenant).
	Tenant string `json:"tenant,omitempty"`
	// Sessions is how many sessions were read.
	Sessions int `json:"sessions"`
	// Tools are the configured WebAssembly tools, sorted by name.
	Tools []lpriv.Report `json:"tools"`
	// Other are recorded tools that are not WebAssembly tools of this
	// config (MCP tools, tools since removed): calls only, no grant to
	// compare with.
	Other []otherTool `json:"other"`
	// Warnings are lines of the session files that could not be read.
	Warnings []string `json:"warnings,omitempty"`
}

// otherTool counts the recorded calls of a tool audit has no grant for.
type otherTool struct {
	Tool  string `json:"tool"`
	Calls int    `json:"calls"`
}

// audit is `agrun audit [--tenant NAME] [--session ID] [--tool NAME]
// [--since AGE] [--json]`: the call records of the saved sessions (what each tool call
// did, as the sandbox saw it) against each configured WebAssembly tool's
// grant, and the smaller grant that would have let every recorded call do
// what it did (package lpriv).
//
// It reads only call records, which `agrun run`, `agrun chat` and agrun
// serve's runs write; a grant is only as well measured as the calls
// recorded, which the report says (calls, first and last). With
// --tenant it reads the sessions of that agrun serve tenant's runs, in
// [serve] data_dir, and only the records of that tenant.
func (c *cli) audit(ctx context.Context, args []string) error {
	fs := newFlags("audit")
	sessionID := fs.String("session", "", "read only session `ID`")
	tool := fs.String("tool", "", "report only the tool `NAME`")
	since := fs.String("since", "", "read only the calls of the last `AGE`: 7d, 12h, 90m (default: every recorded call)")
	tenant := fs.String("tenant", "", "read the runs of agrun serve tenant `NAME` (in [serve] data_dir) instead of the [sessions] folder")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments (--session ID, --tool NAME, --tenant NAME)")
	}
	var from time.Time
	if *since != "" {
		age, err := parseAge(*since)
		if err != nil {
			return usageOf(fs, "--since: %v", err)
		}
		from = time.Now().Add(-age)
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if *tool != "" {
		if _, ok := cfg.Tools[*tool]; !ok {
			return usageOf(fs, "--tool: no WebAssembly tool %q in the config (`agrun tools` lists them; the audit compares a [tools.NAME] grant with its calls)", safe(*tool))
		}
	}
	var st *session.Files
	if *tenant != "" {
		if st, err = tenantSessions(cfg, *tenant); err != nil {
			return usageOf(fs, "--tenant: %v", err)
		}
	} else if st, err = c.sessionStoreFor(cfg); err != nil {
		return err
	}
	calls, n, warnings, err := recordedCalls(st, *sessionID)
	if err != nil {
		if errors.Is(err, session.ErrBadID) {
			return usageOf(fs, "%v", err)
		}
		return err
	}
	rep := auditReport{Since: from, Tenant: *tenant, Sessions: n, Tools: []lpriv.Report{}, Other: []otherTool{}, Warnings: warnings}
	byTool := map[string][]lpriv.Observation{}
	for _, call := range calls {
		if call.Time.Before(from) || (*tool != "" && call.Tool != *tool) {
			continue
		}
		if *tenant != "" && call.Tenant != "" && call.Tenant != *tenant {
			continue // another tenant's record (a file moved between folders)
		}
		byTool[call.Tool] = append(byTool[call.Tool], lpriv.Observation{
			Time: call.Time, Duration: time.Duration(call.DurationMS) * time.Millisecond, Kind: call.ErrorKind, Audit: call.Audit,
		})
	}
	for _, name := range sortedKeys(cfg.Tools) {
		if *tool != "" && name != *tool {
			continue
		}
		rep.Tools = append(rep.Tools, lpriv.Analyze(name, sourceOf(cfg, cfg.Tools[name]), grantOf(cfg, cfg.Tools[name]), byTool[name]))
	}
	for _, name := range sortedKeys(cfg.Plugins) {
		if *tool != "" {
			break
		}
		var obs []lpriv.Observation // the calls of every tool the plug-in lists
		for _, tn := range sortedKeys(byTool) {
			if _, _, ok := cfg.PluginOf(tn); ok && strings.HasPrefix(tn, name+"__") {
				obs = append(obs, byTool[tn]...)
			}
		}
		p := cfg.Plugins[name]
		rep.Tools = append(rep.Tools, lpriv.AnalyzeIn("plugins", name, sourceOf(cfg, p), grantOf(cfg, p), obs))
	}
	for _, name := range sortedKeys(byTool) {
		if _, _, plugin := cfg.PluginOf(name); plugin && *tool == "" {
			continue
		}
		if _, ok := cfg.Tools[name]; !ok {
			rep.Other = append(rep.Other, otherTool{Tool: name, Calls: len(byTool[name])})
		}
	}
	if *asJSON {
		writeJSONLine(c.stdout, rep)
		return nil
	}
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "agrun: %s\n", reportLine(w, 512))
	}
	writeAudit(c.stdout, rep)
	return nil
}

// tenantSessions is the sessions folder of agrun serve tenant name:
// one of [serve.tenants], or without tenants "default"; nil when the
// tenant has run nothing yet (the folder is not made by a read).
func tenantSessions(cfg *config.Config, name string) (*session.Files, error) {
	if _, ok := cfg.Serve.Tenants[name]; !ok && (len(cfg.Serve.Tenants) > 0 || name != server.DefaultTenant) {
		if len(cfg.Serve.Tenants) == 0 {
			return nil, fmt.Errorf("no tenant %q: without [serve.tenants] agrun serve has one, %q", safe(name), server.DefaultTenant)
		}
		return nil, fmt.Errorf("no tenant %q in [serve.tenants] (%s)", safe(name), strings.Join(sortedKeys(cfg.Serve.Tenants), ", "))
	}
	dataDir := cfg.Serve.DataDir
	if dataDir == "" {
		dataDir = server.DefaultDataDir()
	}
	dir := server.TenantSessionsDir(dataDir, name)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return session.OpenFiles(dir)
}

// recordedCalls reads the call records of session id, or of every saved
// session when id is empty, and how many sessions it read. An unknown id
// is an error. A nil st holds no session.
func recordedCalls(st *session.Files, id string) ([]session.CallAt, int, []string, error) {
	if st == nil {
		if id != "" {
			return nil, 0, nil, fmt.Errorf("session %q: %w", id, session.ErrNotFound)
		}
		return nil, 0, nil, nil
	}
	ids := []string{id}
	if id == "" {
		infos, err := st.Infos()
		if err != nil {
			return nil, 0, nil, err
		}
		ids = ids[:0]
		for _, in := range infos {
			ids = append(ids, in.ID)
		}
	}
	var all []session.CallAt
	var warnings []string
	for _, sid := range ids {
		calls, w, err := st.Calls(sid)
		if errors.Is(err, session.ErrNotFound) && id == "" {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, 0, nil, err
		}
		for _, x := range w {
			warnings = append(warnings, "session "+sid+": "+x)
		}
		all = append(all, calls...)
	}
	return all, len(ids), warnings, nil
}

// grantOf is what [tools.NAME] grants t, as the registry describes a
// grant, with the effective limits (the write limit when a mount is
// writable): the tool's own, else [sandbox]'s, else the sandbox's
// defaults. The mounts' host paths are relative to the config's folder
// when inside it, as a hand-written config would have them (audit passes
// the wasm key so too). It is read from the config alone, without loading
// the module: the declared permissions are not known (nil), and every
// offered mount and host is in it, as the block to paste over says them,
// where wasmtools' Grant holds only those the manifest declares.
func grantOf(cfg *config.Config, t config.Tool) registry.Grant {
	sb := cfg.Sandbox
	g := toolGrant(t).Describe(sandboxLimits(sb.Timeout, sb.Memory, sb.MaxOutput, sb.MaxWrite, sb.Fuel))
	for i := range g.Mounts {
		g.Mounts[i].Host = relToConfig(cfg, g.Mounts[i].Host)
	}
	return g
}

// sourceOf is t's source as lpriv takes it: its wasm path relative to the
// config, or "oci:" and its pinned reference.
func sourceOf(cfg *config.Config, t config.Tool) string {
	if t.OCI != "" {
		return "oci:" + t.OCI
	}
	return relToConfig(cfg, t.Wasm)
}

// relToConfig is p relative to the config file's folder ("./docs") when p
// is inside it, else p.
func relToConfig(cfg *config.Config, p string) string {
	if cfg.Path == "" || p == "" {
		return p
	}
	rel, err := filepath.Rel(filepath.Dir(cfg.Path), p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return p
	}
	return "./" + filepath.ToSlash(rel)
}

// writeAudit prints rep for a person: per tool its calls, each mount,
// host and limit against what the calls used, the notes, and the
// suggested block to paste into agrun.toml.
func writeAudit(w io.Writer, rep auditReport) {
	window := "every recorded call"
	if !rep.Since.IsZero() {
		window = "calls since " + rep.Since.Local().Format("2006-01-02 15:04")
	}
	if rep.Tenant != "" {
		window = "tenant " + reportLine(rep.Tenant, 64) + "'s " + window
	}
	fmt.Fprintf(w, "# agrun audit: %s, %s\n", window, plural(rep.Sessions, "session"))
	if len(rep.Tools) == 0 {
		fmt.Fprintln(w, "\nNo WebAssembly tools are configured.")
	}
	for _, r := range rep.Tools {
		fmt.Fprintf(w, "\n## %s: %s", reportLine(r.Tool, 64), plural(r.Calls, "call"))
		if r.Calls == 0 {
			fmt.Fprintln(w, " recorded: nothing to compare its grant with (a tool never called may not be needed at all)")
			continue
		}
		if r.Failed > 0 {
			fmt.Fprintf(w, " (%d failed)", r.Failed)
		}
		fmt.Fprintf(w, ", %s .. %s\n", r.First.Local().Format("2006-01-02 15:04"), r.Last.Local().Format("2006-01-02 15:04"))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if len(r.Mounts) > 0 {
			fmt.Fprintln(tw, "  mount\tgranted\tused\tsuggest")
			for _, m := range r.Mounts {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", reportLine(m.Guest, 256), m.Mode, mountUse(m), orDrop(m.Suggest))
			}
		}
		if len(r.Hosts) > 0 {
			fmt.Fprintln(tw, "  host\t\tused\tsuggest")
			for _, h := range r.Hosts {
				used, keep := "never contacted", "drop"
				if h.Keep {
					used, keep = plural(h.Requests, "request"), "keep"
				}
				fmt.Fprintf(tw, "  %s\t\t%s\t%s\n", reportLine(h.Host, 256), used, keep)
			}
		}
		fmt.Fprintln(tw, "  limit\tgranted\tobserved max\tsuggest")
		fmt.Fprintf(tw, "  timeout\t%s\t%s\t%s\n", time.Duration(r.Timeout.Current), time.Duration(r.Timeout.Observed).Round(time.Millisecond), limitSuggest(r.Timeout, func(v int64) string { return time.Duration(v).String() }))
		fmt.Fprintf(tw, "  memory\t%s\t%s\t%s\n", sizeText(r.Memory.Current), sizeText(r.Memory.Observed), limitSuggest(r.Memory, sizeText))
		fmt.Fprintf(tw, "  max_output\t%s\t%s\t%s\n", sizeText(r.Output.Current), sizeText(r.Output.Observed), limitSuggest(r.Output, sizeText))
		tw.Flush()
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  note: %s\n", reportLine(n, 1024))
		}
		fmt.Fprintf(w, "\n  suggested grant (paste over [tools.%s] in agrun.toml; keep any other keys it has):\n\n", reportLine(r.Tool, 64))
		for _, l := range strings.Split(strings.TrimSuffix(r.TOML, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", reportLine(l, 4096))
		}
	}
	if len(rep.Other) > 0 {
		fmt.Fprintln(w, "\nAlso recorded (no WebAssembly grant in this config to compare with):")
		unknown := 0
		for _, o := range rep.Other {
			if !registry.ValidName(o.Tool) { // a model's invented name: counted, not printed
				unknown += o.Calls
				continue
			}
			fmt.Fprintf(w, "  %s: %s\n", reportLine(o.Tool, 64), plural(o.Calls, "call"))
		}
		if unknown > 0 {
			fmt.Fprintf(w, "  (calls of names no tool can have: %d)\n", unknown)
		}
	}
}

// mountUse says how the calls used a mount.
func mountUse(m lpriv.MountUse) string {
	var did []string
	if m.Read {
		did = append(did, "read")
	}
	if m.Wrote {
		did = append(did, "wrote")
	}
	if m.Deleted {
		did = append(did, "deleted")
	}
	if len(did) == 0 {
		return "never touched"
	}
	s := strings.Join(did, ", ") + " (" + plural(m.Calls, "call") + ")"
	if m.Mode != registry.ReadOnly && !m.Wrote && !m.Deleted {
		s = "only read (" + plural(m.Calls, "call") + ")"
	}
	return s
}

func orDrop(mode string) string {
	if mode == "" {
		return "drop"
	}
	return mode
}

func limitSuggest(l lpriv.Limit, show func(int64) string) string {
	switch {
	case l.Hit:
		return show(l.Suggest) + " (a call hit it)"
	case l.Observed == 0:
		return show(l.Suggest) + " (nothing observed)"
	}
	return show(l.Suggest)
}

// sizeText shows n bytes as the config writes sizes.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// reportLine is s as one line of the report: cleaned and cut to max bytes
// (textsafe), then escaped, newlines and tabs included (oneLine), so that
// nothing a session file holds (a model's tool name, a guest's path or
// host) can forge a line of the report, such as a suggested grant to
// paste.
func reportLine(s string, max int) string { return oneLine(textsafe.Clean(s, max)) }
