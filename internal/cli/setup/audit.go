package setup

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agcore/agrun/audit/lpriv"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/session"
)

// AuditQuery selects the records `agrun audit` reads. The zero value
// reads every call of every session, for every tool.
type AuditQuery struct {
	// Session is the one session to read ("": all of the store).
	Session string
	// Tool is the one tool to report ("": every configured tool and
	// plug-in, and the other recorded tools).
	Tool string
	// Tenant is the agrun serve tenant whose records are read ("": any);
	// a record of another tenant is left out.
	Tenant string
	// Since is the start of the window (zero: every record).
	Since time.Time
}

// Audit reads the call records of st (nil: no session) that q selects
// and compares them with the grant of each WebAssembly tool and plug-in
// of cfg (lpriv.Analyze); a recorded tool without a grant in cfg is
// counted in Other. An unknown q.Session is an error wrapping
// session.ErrNotFound, a bad one session.ErrBadID.
func Audit(cfg *config.Config, st *session.Files, q AuditQuery) (lpriv.Summary, error) {
	calls, n, warnings, err := recordedCalls(st, q.Session)
	if err != nil {
		return lpriv.Summary{}, err
	}
	rep := lpriv.Summary{Since: q.Since, Tenant: q.Tenant, Sessions: n, Tools: []lpriv.Report{}, Other: []lpriv.OtherTool{}, Warnings: warnings}
	byTool := map[string][]lpriv.Observation{}
	for _, call := range calls {
		if call.Time.Before(q.Since) || (q.Tool != "" && call.Tool != q.Tool) {
			continue
		}
		if q.Tenant != "" && call.Tenant != "" && call.Tenant != q.Tenant {
			continue // another tenant's record (a file moved between folders)
		}
		byTool[call.Tool] = append(byTool[call.Tool], lpriv.Observation{
			Time: call.Time, Duration: time.Duration(call.DurationMS) * time.Millisecond, Kind: call.ErrorKind, Audit: call.Audit,
		})
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Tools)) {
		if q.Tool != "" && name != q.Tool {
			continue
		}
		rep.Tools = append(rep.Tools, lpriv.Analyze(name, sourceOf(cfg, cfg.Tools[name]), GrantOf(cfg, cfg.Tools[name]), byTool[name]))
	}
	recorded := slices.Sorted(maps.Keys(byTool))
	for _, name := range slices.Sorted(maps.Keys(cfg.Plugins)) {
		if q.Tool != "" {
			break
		}
		var obs []lpriv.Observation // the calls of every tool the plug-in lists
		for _, tn := range recorded {
			if _, _, ok := cfg.PluginOf(tn); ok && strings.HasPrefix(tn, name+"__") {
				obs = append(obs, byTool[tn]...)
			}
		}
		p := cfg.Plugins[name]
		rep.Tools = append(rep.Tools, lpriv.AnalyzeIn("plugins", name, sourceOf(cfg, p), GrantOf(cfg, p), obs))
	}
	for _, name := range recorded {
		if _, _, plugin := cfg.PluginOf(name); plugin && q.Tool == "" {
			continue
		}
		if _, ok := cfg.Tools[name]; !ok {
			rep.Other = append(rep.Other, lpriv.OtherTool{Tool: name, Calls: len(byTool[name])})
		}
	}
	return rep, nil
}

// TenantSessions is the sessions folder of agrun serve tenant name: one
// of [serve.tenants], or without tenants server.DefaultTenant; nil when
// the tenant has run nothing yet (a read does not make the folder). A
// name the config does not know is an error that lists the known ones.
func TenantSessions(cfg *config.Config, name string) (*session.Files, error) {
	if _, ok := cfg.Serve.Tenants[name]; !ok && (len(cfg.Serve.Tenants) > 0 || name != server.DefaultTenant) {
		if len(cfg.Serve.Tenants) == 0 {
			return nil, fmt.Errorf("no tenant %q: without [serve.tenants] agrun serve has one, %q", textsafe.Escape(name), server.DefaultTenant)
		}
		return nil, fmt.Errorf("no tenant %q in [serve.tenants] (%s)", textsafe.Escape(name), strings.Join(slices.Sorted(maps.Keys(cfg.Serve.Tenants)), ", "))
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

// GrantOf is what [tools.NAME] grants t, as the registry describes a
// grant, with the effective limits (the write limit when a mount is
// writable): the tool's own, else [sandbox]'s, else the sandbox's
// defaults. The mounts' host paths are relative to the config's folder
// when inside it, as a hand-written config would have them (Audit passes
// the wasm key so too). It is read from the config alone, without loading
// the module: the declared permissions are not known (nil), and every
// offered mount and host is in it, as the block to paste over says them,
// where wasmtools' Grant holds only those the manifest declares.
func GrantOf(cfg *config.Config, t config.Tool) registry.Grant {
	sb := cfg.Sandbox
	g := ToolGrant(t).Describe(SandboxLimits(sb.Timeout, sb.Memory, sb.MaxOutput, sb.MaxWrite, sb.Fuel))
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
