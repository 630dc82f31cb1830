package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
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

// explain returns err's message with what to change, for the operator.
func (e *env) explain(name string, err error) string {
	var h setup.Hinted
	if errors.As(err, &h) {
		return e.explain(name, h.Err) + " (" + h.Hint + ")"
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
	s := e.Settings(name)
	hint := ""
	switch re.Kind {
	case registry.Timeout:
		hint = s.Timeout
		if errors.Is(err, runtime.ErrFuelExhausted) {
			hint = s.Fuel
		}
	case registry.MemoryLimit:
		hint = s.Memory
	case registry.OutputLimit:
		if strings.HasPrefix(msg, "stdout") {
			hint = s.MaxOutput
		}
	case registry.PermissionDenied:
		if errors.Is(err, runtime.ErrNotGranted) {
			hint = `the tool must declare "network", and ` + s.Hosts + " list its hosts"
		}
	case registry.ExecutionFailed:
		// The sandbox's refusals reach the tool as answers to its request,
		// and come back inside the tool's own message.
		switch {
		case strings.Contains(msg, "is not in the allowed hosts"):
			hint = s.Hosts
		case strings.Contains(msg, "resolves to") && strings.Contains(msg, " address"):
			hint = s.Private + " lets allowed hosts resolve to loopback and private addresses"
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
	case e.FileTool != "":
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
	if e.FileTool != "" && d.Tool == e.FileTool {
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
