package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/termsafe"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// call runs one tool through the registry, without a model: a configured
// tool by NAME, or a .wasm file with the grants given as flags (see
// isFile and setup.OpenFile). With --json it prints exactly one object on
// stdout for every outcome.
func (c *cli) call(ctx context.Context, args []string) int {
	fs := newFlags("call")
	asJSON := fs.Bool("json", false, "print one JSON object for every outcome: {\"ok\":true,\"result\":...} or {\"ok\":false,\"error\":{\"kind\",\"message\"}}")
	withAudit := fs.Bool("audit", false, "with --json: add \"audit\", what the call did as the sandbox saw it (files, HTTP requests, memory, CPU, bytes)")
	var g fileGrant
	fs.Var(&g.hosts, "allow-host", "FILE.wasm only: let the tool reach HOST (a name or host:port; repeatable)")
	fs.BoolVar(&g.private, "allow-private", false, "FILE.wasm only: let allowed hosts resolve to loopback and private addresses")
	fs.Var(&g.mounts, "mount", "FILE.wasm only: show host directory HOST at GUEST, MODE ro (default), rw or rwd (HOST:GUEST[:MODE]; repeatable)")
	fs.Var(&g.timeout, "timeout", "FILE.wasm only: the call's time limit (default: [sandbox] timeout, else 10s)")
	fs.Var(&g.memory, "memory", "FILE.wasm only: the guest's memory limit, e.g. 32MiB (default: [sandbox] memory, else 64MiB)")
	fs.StringVar(&g.manifest, "manifest", "", "FILE.wasm only: the manifest (TOML or JSON) of a module without one")
	pos, err := c.parseFlags(fs, args)
	if isHelp(err) {
		return c.exit(err)
	}
	if err == nil && (len(pos) < 1 || len(pos) > 2) {
		err = usageOf(fs, "needs a tool NAME or a FILE.wasm, then optionally ARGS_JSON")
	}
	if err == nil {
		g.set = flagsSet(fs)
	}
	if err == nil && *withAudit && !*asJSON {
		err = usageOf(fs, "--audit needs --json (the audit is a field of its object)")
	}
	var out json.RawMessage
	var text bool
	var audit *registry.Audit
	if err == nil {
		out, text, audit, err = c.callTool(ctx, pos, g)
	}
	// A flag error can stop parsing before --json is read: the contract
	// (one object for every outcome) holds for it too.
	if *asJSON || err != nil && (slices.Contains(args, "--json") || slices.Contains(args, "-json")) {
		res := callResult(out, err)
		if *withAudit {
			res.Audit = audit
		}
		writeJSONLine(c.stdout, res)
		c.usageHint(err)
		switch {
		case err == nil:
			return exitOK
		case isUsage(err), badArgs(err):
			return exitUsage
		}
		return exitFailure
	}
	if err != nil {
		code := c.exit(err)
		if badArgs(err) {
			code = exitUsage
		}
		return code
	}
	if text {
		// output = "text": the tool's text as it wrote it (cleaned for the
		// terminal), not a JSON string.
		var s string
		if json.Unmarshal(out, &s) == nil {
			s = safe(s)
			if !strings.HasSuffix(s, "\n") {
				s += "\n"
			}
			io.WriteString(c.stdout, s)
			return exitOK
		}
	}
	fmt.Fprintf(c.stdout, "%s\n", termsafe.JSON(out))
	return exitOK
}

// badArgs reports whether err is the tool refusing ARGS_JSON (not JSON,
// or not what its schema takes): on `call` the arguments are the command
// line's, so that is a usage error (exit 2), keeping its kind
// invalid_arguments in --json.
func badArgs(err error) bool { return registry.KindOf(err) == registry.InvalidArguments }

// callTool runs the call; text reports a tool whose output is "text",
// audit what the call did (nil when it did not run or its tool reports
// none).
func (c *cli) callTool(ctx context.Context, pos []string, g fileGrant) (out json.RawMessage, text bool, audit *registry.Audit, err error) {
	target := pos[0]
	var args []byte
	if len(pos) == 2 {
		args = []byte(pos[1])
	} else {
		if c.isTTY(c.stdin) {
			fmt.Fprintln(c.stderr, "agrun: reading ARGS_JSON from stdin (type it, then Ctrl-D; or give it after the name)")
		}
		if args, err = io.ReadAll(io.LimitReader(c.stdin, registry.DefaultMaxArgsBytes+1)); err != nil {
			return nil, false, nil, fmt.Errorf("reading arguments from stdin: %w", err)
		}
	}
	var e *env
	name := target
	if isFile(target) {
		e, name, err = c.openFileEnv(ctx, target, g)
	} else {
		if len(g.set) > 0 {
			verb := "applies"
			if len(g.set) > 1 {
				verb = "apply"
			}
			return nil, false, nil, usagef("call: %s %s to a FILE.wasm only; %q is a configured tool, whose grants are set in its [tools.%s] section", strings.Join(g.set, ", "), verb, target, target)
		}
		e, err = c.openEnv(ctx, setup.Only(target), false)
	}
	if err != nil {
		return nil, false, nil, err
	}
	defer e.close()
	if berr := e.BrokenFor(name); berr != nil {
		if registry.KindOf(berr) != registry.ModuleRefused {
			berr = registry.Errorf(registry.ModuleRefused, name, "the tool failed to load: %s", berr.Error())
		}
		return nil, false, nil, &configError{explained{berr, e.explain(name, berr)}}
	}
	t, ok := e.reg.Get(name)
	if !ok {
		return nil, false, nil, &configError{registry.Errorf(registry.NotFound, name, "no tool named %q %s", textsafe.Truncate(name, 80), e.whereTools())}
	}
	if wt, ok := t.(*wasmtools.Tool); ok {
		text = wt.Manifest().Output == wasmtools.OutputText
	}
	inv := e.reg.Invoke(ctx, name, args)
	if inv.Err != nil {
		return nil, text, inv.Audit, explained{inv.Err, e.explain(name, inv.Err)}
	}
	return inv.Output, text, inv.Audit, nil
}

// whereTools says where the tools of a call by name come from.
func (e *env) whereTools() string {
	if e.cfg.Path == "" {
		return "(no config file found: -c FILE, $AGRUN_CONFIG or ./agrun.toml; `agrun init` writes one, and `agrun call ./tool.wasm` runs a file without one)"
	}
	return fmt.Sprintf("in %s (`agrun tools` lists them; a .wasm file is called by its path, e.g. ./tool.wasm)", e.cfg.Path)
}

// explained is a tool error with the operator's version of its message
// (explain): the kind and the chain are err's.
type explained struct {
	err error
	msg string
}

func (x explained) Error() string {
	var re *registry.Error
	if errors.As(x.err, &re) {
		if re.Tool == "" {
			return fmt.Sprintf("%s: %s", re.Kind, x.msg)
		}
		return fmt.Sprintf("tool %q: %s: %s", re.Tool, re.Kind, x.msg)
	}
	return x.msg
}

func (x explained) Unwrap() error { return x.err }

// callResult is the shape of `call --json`, shared with the HTTP API:
// {"ok":true,"result":...} or {"ok":false,"error":{"kind","message"}}.
func callResult(out json.RawMessage, err error) server.Result {
	if err == nil {
		return server.CallResult(out, nil)
	}
	return server.Result{Error: errorOf(err)}
}

// The CLI's own kinds, of the outcomes that exit 2 (design.md, "error
// kinds"): a bad configuration, a bad command line.
const (
	kindConfig registry.Kind = "config"
	kindUsage  registry.Kind = "usage"
)

// errorOf gives an error its stable kind and message for JSON output.
// Configuration and usage errors have kinds "config" and "usage", unless
// they carry a tool's kind (a call to a tool that failed to load:
// module_refused; to an unknown name: not_found; both exit 2).
func errorOf(err error) *server.ErrorInfo {
	var ue *usageError
	var x explained
	var re *registry.Error
	switch {
	case errors.As(err, &x) && errors.As(err, &re):
		return &server.ErrorInfo{Kind: string(re.Kind), Message: x.msg}
	case errors.As(err, &re) && isConfigError(err):
		return &server.ErrorInfo{Kind: string(re.Kind), Message: re.Message()}
	case isConfigError(err):
		return &server.ErrorInfo{Kind: string(kindConfig), Message: err.Error()}
	case errors.As(err, &ue):
		return &server.ErrorInfo{Kind: string(kindUsage), Message: err.Error()}
	}
	return server.ErrorOf(err)
}

// writeJSONLine writes v as one line of JSON that is safe on a terminal
// (see terminalSafeJSON).
func writeJSONLine(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(callResult(nil, err))
	}
	w.Write(append(termsafe.JSON(b), '\n'))
}

// tools lists every configured tool: name, source, permissions, whether
// the policy lets it run, and why a broken one failed to load.
func (c *cli) tools(ctx context.Context, args []string) error {
	fs := newFlags("tools")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments")
	}
	e, err := c.openEnv(ctx, nil, false)
	if err != nil {
		return err
	}
	defer e.close()
	if e.cfg.Path == "" {
		fmt.Fprintln(c.stderr, "agrun: no config file found (-c FILE, $AGRUN_CONFIG, or ./agrun.toml), so no tools are configured; `agrun init` writes a commented agrun.toml to start from (docs/CONFIG.md explains every key)")
	}
	infos := e.infos()
	if *asJSON {
		if infos == nil {
			infos = []toolInfo{}
		}
		writeJSONLine(c.stdout, infos)
		return setup.MCPDown(infos)
	}
	// The table stays one line per tool: long reasons and descriptions
	// are cut (--json has them whole).
	cut, err := setup.WriteToolTable(c.stdout, infos)
	if err != nil {
		return err
	}
	if cut {
		fmt.Fprintln(c.stdout, "(reasons cut to fit: `agrun tools --json` has them whole)")
	}
	return setup.MCPDown(infos)
}
