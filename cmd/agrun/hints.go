package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// Errors that say what to do.
//
// The runtime and wasmtools know the limits and grants of a call, not
// where they came from: their messages name the limit and its value
// ("timeout after 1s", "stderr exceeded 64KiB"). The CLI knows agrun.toml,
// so it adds the setting to change ("([tools.x] timeout)", or a flag of
// `agrun call FILE.wasm`) where the operator reads the message: `agrun
// call` (stderr and --json), `agrun tools`, and the warnings printed at
// load. The model's tool messages and the HTTP API keep the message
// without it: neither the model nor an HTTP client can change the config,
// and it is the operator's business. Load failures are the exception:
// they name the key in every front end (the key is part of why the module
// was refused).

// settings names, for one tool, what controls each of its limits and
// grants: config keys for a configured tool, flags for `call FILE.wasm`.
type settings struct {
	wasm, manifest, sha256           string
	timeout, memory, maxOutput, fuel string
	hosts, private, mounts           string
}

// configSettings are the keys of [tools.name] (t). A limit the tool does
// not set comes from [sandbox]: that key is named first.
func configSettings(name string, t config.Tool) settings { return sectionSettings("tools", name, t) }

// sectionSettings are the keys of [section.name] (t): [tools.name], or
// [plugins.name] for every tool of an MCP-style plug-in.
func sectionSettings(section, name string, t config.Tool) settings {
	k := func(key string) string { return fmt.Sprintf("[%s.%s] %s", section, name, key) }
	lim := func(key string, set bool) string {
		if set {
			return k(key)
		}
		return fmt.Sprintf("[sandbox] %s, or %s for this tool", key, k(key))
	}
	return settings{
		wasm: k("wasm"), manifest: k("manifest"), sha256: k("sha256"),
		timeout: lim("timeout", t.Timeout != 0), memory: lim("memory", t.Memory != 0),
		maxOutput: lim("max_output", t.MaxOutput != 0), fuel: lim("fuel", t.Fuel != 0),
		hosts: k("allowed_hosts"), private: k("allow_private = true"), mounts: k("mounts"),
	}
}

// fileSettings are the flags of `agrun call FILE.wasm`.
var fileSettings = settings{
	wasm: "", manifest: "--manifest FILE", sha256: "sha256",
	timeout: "--timeout", memory: "--memory", maxOutput: "[sandbox] max_output", fuel: "[sandbox] fuel",
	hosts: "--allow-host HOST", private: "--allow-private", mounts: "--mount HOST:GUEST[:MODE]",
}

// settingsFor names the settings of the tool called name in this env.
func (e *env) settingsFor(name string) settings {
	if e.fileTool != "" && name == e.fileTool {
		return fileSettings
	}
	if _, ok := e.cfg.Tools[name]; !ok {
		if t, p, ok := e.cfg.PluginOf(name); ok {
			return sectionSettings("plugins", p, t)
		}
	}
	return configSettings(name, e.cfg.Tools[name])
}

// explain returns err's message with what to change, for the operator.
func (e *env) explain(name string, err error) string {
	var h hinted
	if errors.As(err, &h) {
		return e.explain(name, h.err) + " (" + h.hint + ")"
	}
	msg := err.Error()
	var re *registry.Error
	if errors.As(err, &re) {
		msg = re.Message()
	}
	var d *permission.DeniedError
	if errors.As(err, &d) {
		return e.explainDenied(d)
	}
	if re == nil {
		return msg
	}
	s := e.settingsFor(name)
	hint := ""
	switch re.Kind {
	case registry.Timeout:
		hint = s.timeout
		if errors.Is(err, runtime.ErrFuelExhausted) {
			hint = s.fuel
		}
	case registry.MemoryLimit:
		hint = s.memory
	case registry.OutputLimit:
		if strings.HasPrefix(msg, "stdout") {
			hint = s.maxOutput
		}
	case registry.PermissionDenied:
		if errors.Is(err, runtime.ErrNotGranted) {
			hint = `the tool must declare "network", and ` + s.hosts + " list its hosts"
		}
	case registry.ExecutionFailed:
		// The sandbox's refusals reach the tool as answers to its request,
		// and come back inside the tool's own message.
		switch {
		case strings.Contains(msg, "is not in the allowed hosts"):
			hint = s.hosts
		case strings.Contains(msg, "resolves to") && strings.Contains(msg, " address"):
			hint = s.private + " lets allowed hosts resolve to loopback and private addresses"
		}
	}
	if hint == "" {
		return msg
	}
	return msg + " (" + hint + ")"
}

// explainDenied says which rule of the policy refused a tool, and where
// that rule is set.
func (e *env) explainDenied(d *permission.DeniedError) string {
	note := ""
	switch {
	case e.cfg.Path == "":
		note = " (the default policy: no config file; `agrun init` writes one)"
	case e.fileTool != "":
		note = " (in " + e.cfg.Path + ")"
	}
	p := d.Permission.String()
	var why string
	switch {
	case d.Permission.IsZero():
		why = fmt.Sprintf("tool %q declares no permissions, and [permissions] allow_unspecified is false%s", d.Tool, note)
	case d.Rule == permission.RuleDenyList:
		why = fmt.Sprintf("tool %q needs %q: %s is in [permissions] denied%s", d.Tool, p, p, note)
	case d.Rule == permission.RuleNotAllowed:
		why = fmt.Sprintf("tool %q needs %q: %s is not in [permissions] allowed%s", d.Tool, p, p, note)
	default:
		why = fmt.Sprintf("tool %q needs %q: [permissions] allowed is empty and allow_unspecified is false%s", d.Tool, p, note)
	}
	if e.fileTool != "" && d.Tool == e.fileTool {
		switch d.Permission {
		case permission.Filesystem, permission.Read:
			why += "; grant a directory with --mount HOST:GUEST[:MODE]"
		case permission.Write:
			why += "; grant a writable directory with --mount HOST:GUEST:rw"
		case permission.Delete:
			why += "; --mount HOST:GUEST:rwd grants deletion"
		case permission.Network:
			why += "; grant hosts with --allow-host HOST"
		}
	}
	return why
}

// grantWarnings lists the grants of t that tool cannot use: it does not
// declare the permission that would link them (wasmtools computes which:
// Tool.Unused; this names the settings).
func grantWarnings(t config.Tool, s settings, tool *wasmtools.Tool) []string {
	if tool == nil {
		return nil
	}
	if s == fileSettings {
		// The flags as given: "--allow-host api.example.com", not the
		// flag's placeholder.
		s.hosts = "--allow-host " + strings.Join(t.AllowedHosts, " --allow-host ")
		var ms []string
		for _, m := range t.Mounts {
			ms = append(ms, m.String())
		}
		s.mounts = "--mount " + strings.Join(ms, " --mount ")
	}
	var w []string
	for _, u := range tool.Unused() {
		switch u.What {
		case "allowed_hosts":
			w = append(w, fmt.Sprintf("%s has no effect: the tool does not declare %q", s.hosts, u.Needs.String()))
		case "mounts":
			w = append(w, fmt.Sprintf("%s has no effect: the tool does not declare %q", s.mounts, u.Needs.String()))
		case "write":
			w = append(w, fmt.Sprintf("mount %s is read-only for this tool: it does not declare %q", mountAt(t, u.Mount), u.Needs.String()))
		case "delete":
			w = append(w, fmt.Sprintf("mount %s does not allow deletion for this tool: it does not declare %q", mountAt(t, u.Mount), u.Needs.String()))
		case "allow_private":
			w = append(w, fmt.Sprintf("%s has no effect: the tool does not declare %q", strings.TrimSuffix(s.private, " = true"), u.Needs.String()))
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

// limitError is a run that stopped at one of its limits, with the
// settings that raise it: the loop names the limit, the CLI its keys and
// flags.
type limitError struct {
	err     error
	setting string
}

func (e *limitError) Error() string { return e.err.Error() + " (to allow more: " + e.setting + ")" }
func (e *limitError) Unwrap() error { return e.err }

// withLimitHint returns err with the settings to change when it is a run
// limit (turns, token and tool call budgets, the stream's idle timeout),
// else err.
func withLimitHint(err error) error {
	var setting string
	switch {
	case err == nil:
		return nil
	case errors.Is(err, loop.ErrMaxTurns):
		setting = "[llm] max_turns, or run --max-turns N"
	case errors.Is(err, loop.ErrTokenBudget):
		setting = "[llm] max_total_tokens, or run --max-tokens N"
	case errors.Is(err, loop.ErrToolCallBudget):
		setting = "[llm] max_tool_calls, or run --max-tool-calls N"
	case errors.Is(err, loop.ErrStreamIdle):
		setting = "[llm] stream_idle_timeout"
	default:
		return err
	}
	return &limitError{err: err, setting: setting}
}

// hinted is an error with what to do about it, for the operator: explain
// adds the hint after the message.
type hinted struct {
	err  error
	hint string
}

func (h hinted) Error() string { return h.err.Error() + " (" + h.hint + ")" }
func (h hinted) Unwrap() error { return h.err }
