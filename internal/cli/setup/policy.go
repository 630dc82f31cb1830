package setup

import (
	"slices"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/session"
)

// AsksAnything reports whether cfg can ask about any call.
func AsksAnything(cfg *config.Config) bool {
	if len(cfg.Approvals.Ask) > 0 {
		return true
	}
	for _, t := range cfg.Tools {
		if t.Approve != "" && t.Approve != config.ApproveAlways {
			return true
		}
	}
	for _, s := range cfg.MCP {
		if s.Approve != "" && s.Approve != config.ApproveAlways {
			return true
		}
	}
	for _, p := range cfg.Plugins {
		if p.Approve != "" && p.Approve != config.ApproveAlways {
			return true
		}
	}
	return false
}

// SessionsDir is the sessions folder of cfg.
func SessionsDir(cfg *config.Config) string {
	if cfg.Sessions.Dir != "" {
		return cfg.Sessions.Dir
	}
	return session.DefaultDir()
}

// Consent adds to the policy the permissions the grants of t need: a
// grant given for one call (`agrun call FILE.wasm --mount ...`) is the
// operator's consent to what it needs, even where the policy denies it.
func Consent(p config.Permissions, pc permission.Config, t config.Tool) config.Permissions {
	var need []permission.Permission
	if len(t.AllowedHosts) > 0 {
		need = append(need, permission.Network)
	}
	for _, m := range t.Mounts {
		need = append(need, permission.Filesystem, permission.Read)
		if m.Writable {
			need = append(need, permission.Write)
		}
		if m.AllowDelete {
			need = append(need, permission.Delete)
		}
	}
	p.Denied = slices.DeleteFunc(slices.Clone(p.Denied), func(d permission.Permission) bool { return slices.Contains(need, d) })
	// With an empty allow-list the policy allows what is not denied (if
	// allow_unspecified): adding to it would switch to allow-list mode.
	if len(pc.Allowed) > 0 || !pc.AllowUnspecified {
		for _, n := range need {
			if !slices.Contains(p.Allowed, n) {
				p.Allowed = append(p.Allowed, n)
			}
		}
	}
	return p
}

// SessionStore opens the sessions folder of cfg ([sessions] dir, else
// session.DefaultDir).
func SessionStore(cfg *config.Config) (*session.Files, error) {
	return session.OpenFiles(SessionsDir(cfg))
}
