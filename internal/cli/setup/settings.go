package setup

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/wasmtools"
)

// Load failures name the setting to change in every front end (the key
// is part of why the module was refused); the agrun command adds the
// settings of run-time failures where the operator reads them
// (cmd/agrun/hints.go).

// Settings names, for one tool, what controls each of its limits and
// grants: config keys for a configured tool, flags for `call FILE.wasm`.
type Settings struct {
	Wasm, Manifest, SHA256           string
	Timeout, Memory, MaxOutput, Fuel string
	Hosts, Private, Mounts           string
}

// ToolSettings are the keys of [tools.name] (t). A limit the tool does
// not set comes from [sandbox]: that key is named first.
func ToolSettings(name string, t config.Tool) Settings { return SectionSettings("tools", name, t) }

// SectionSettings are the keys of [section.name] (t): [tools.name], or
// [plugins.name] for every tool of an MCP-style plug-in.
func SectionSettings(section, name string, t config.Tool) Settings {
	k := func(key string) string { return fmt.Sprintf("[%s.%s] %s", section, name, key) }
	lim := func(key string, set bool) string {
		if set {
			return k(key)
		}
		return fmt.Sprintf("[sandbox] %s, or %s for this tool", key, k(key))
	}
	return Settings{
		Wasm: k("wasm"), Manifest: k("manifest"), SHA256: k("sha256"),
		Timeout: lim("timeout", t.Timeout != 0), Memory: lim("memory", t.Memory != 0),
		MaxOutput: lim("max_output", t.MaxOutput != 0), Fuel: lim("fuel", t.Fuel != 0),
		Hosts: k("allowed_hosts"), Private: k("allow_private = true"), Mounts: k("mounts"),
	}
}

// FileSettings are the flags of `agrun call FILE.wasm`.
var FileSettings = Settings{
	Wasm: "", Manifest: "--manifest FILE", SHA256: "sha256",
	Timeout: "--timeout", Memory: "--memory", MaxOutput: "[sandbox] max_output", Fuel: "[sandbox] fuel",
	Hosts: "--allow-host HOST", Private: "--allow-private", Mounts: "--mount HOST:GUEST[:MODE]",
}

// GrantWarnings lists the grants of t that tool cannot use: it does not
// declare the permission that would link them (wasmtools computes which:
// Tool.Unused; this names the settings).
func GrantWarnings(t config.Tool, s Settings, tool *wasmtools.Tool) []string {
	if tool == nil {
		return nil
	}
	if s == FileSettings {
		// The flags as given: "--allow-host api.example.com", not the
		// flag's placeholder.
		s.Hosts = "--allow-host " + strings.Join(t.AllowedHosts, " --allow-host ")
		var ms []string
		for _, m := range t.Mounts {
			ms = append(ms, m.String())
		}
		s.Mounts = "--mount " + strings.Join(ms, " --mount ")
	}
	var w []string
	for _, u := range tool.Unused() {
		switch u.What {
		case "allowed_hosts":
			w = append(w, fmt.Sprintf("%s has no effect: the tool does not declare %q", s.Hosts, u.Needs.String()))
		case "mounts":
			w = append(w, fmt.Sprintf("%s has no effect: the tool does not declare %q", s.Mounts, u.Needs.String()))
		case "write":
			w = append(w, fmt.Sprintf("mount %s is read-only for this tool: it does not declare %q", mountAt(t, u.Mount), u.Needs.String()))
		case "delete":
			w = append(w, fmt.Sprintf("mount %s does not allow deletion for this tool: it does not declare %q", mountAt(t, u.Mount), u.Needs.String()))
		case "allow_private":
			w = append(w, fmt.Sprintf("%s has no effect: the tool does not declare %q", strings.TrimSuffix(s.Private, " = true"), u.Needs.String()))
		}
	}
	return w
}

// mountAt is t's mount i as written in the config (the grant's mounts
// are t's, in order).
func mountAt(t config.Tool, i int) string {
	if i < len(t.Mounts) {
		return t.Mounts[i].String()
	}
	return fmt.Sprint(i)
}

// Settings names the settings of the tool called name in e: the flags
// of `agrun call FILE.wasm` for its FileTool, the keys of [plugins.NAME]
// for a plug-in's tool, else those of [tools.name].
func (e *Env) Settings(name string) Settings {
	if e.FileTool != "" && name == e.FileTool {
		return FileSettings
	}
	if _, ok := e.Config.Tools[name]; !ok {
		if t, p, ok := e.Config.PluginOf(name); ok {
			return SectionSettings("plugins", p, t)
		}
	}
	return ToolSettings(name, e.Config.Tools[name])
}

// Hinted is an error with what to do about it, for the operator: the
// agrun command's explain adds Hint after the message.
type Hinted struct {
	Err  error
	Hint string
}

// Error is the message followed by the hint in parentheses.
func (h Hinted) Error() string { return h.Err.Error() + " (" + h.Hint + ")" }

// Unwrap returns the cause.
func (h Hinted) Unwrap() error { return h.Err }

// OpenFile builds the Env of `agrun call FILE.wasm`: cfg's sandbox and
// policy, no configured tool loaded, and the module t.Wasm registered
// under its manifest's name, which it returns with the grants of t the
// tool cannot use (GrantWarnings). t is what the command line grants
// (FileSettings): the operator's consent for this call, so the
// permissions it needs are allowed even where the policy denies them
// (Consent); relative mount paths are made absolute, and [trust]
// require_signature does not apply (it is for the configured tools).
// A module that does not load is a *ConfigError of kind module_refused.
// The caller closes the Env.
func OpenFile(ctx context.Context, cfg *config.Config, log *slog.Logger, t config.Tool) (e *Env, name string, warnings []string, err error) {
	unsigned := false
	t.RequireSignature = &unsigned
	t.Mounts = slices.Clone(t.Mounts)
	for i, m := range t.Mounts {
		if abs, err := filepath.Abs(m.Host); err == nil {
			t.Mounts[i].Host = abs
		}
	}
	cfg.Permissions = Consent(cfg.Permissions, cfg.PermissionConfig(), t)
	if e, err = New(ctx, cfg, log, func(string, string) bool { return false }, Hooks{}); err != nil {
		return nil, "", nil, err
	}
	tool, err := e.OpenWasm(ctx, "", t, FileSettings)
	if err != nil {
		e.Close()
		return nil, "", nil, &ConfigError{registry.Errorf(registry.ModuleRefused, "", "%s: %v", t.Wasm, err)}
	}
	name = tool.Name()
	e.FileTool = name
	warnings = GrantWarnings(t, FileSettings, tool)
	e.Register(name, "wasm:"+t.Wasm, tool, nil, warnings)
	return e, name, warnings, nil
}
