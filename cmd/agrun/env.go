package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
)

// What a config describes is built by internal/cli/setup; this file is
// the command's side of it: finding the config, the tools listing, and
// the names the command's files know setup's functions by.

// configError is a configuration problem: exit code 2 (as is setup's
// *setup.ConfigError: isConfigError).
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// isConfigError reports whether err is a configuration error, the
// command's or setup's.
func isConfigError(err error) bool {
	var ce *configError
	var se *setup.ConfigError
	return errors.As(err, &ce) || errors.As(err, &se)
}

// The config's mappings, as the command's files (and tests) call them.
var (
	loopConfig   = setup.LoopConfig
	serveOptions = setup.ServeOptions
	serveTenants = setup.ServeTenants
)

// loadFilter selects what newEnv loads (setup.Filter).
type loadFilter = setup.Filter

// loadConfig finds and decodes the config (-c, $AGRUN_CONFIG, ./agrun.toml:
// config.Find).
func (c *cli) loadConfig() (*config.Config, error) {
	cfg, err := config.Find(c.configPath)
	if err != nil {
		return nil, &configError{err}
	}
	return cfg, nil
}

// openEnv loads the config and builds the environment of a command: the
// tools filter selects (nil: all). With warn, tools that failed to load are
// named on stderr. The caller closes the env.
func (c *cli) openEnv(ctx context.Context, filter loadFilter, warn bool) (*env, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return nil, err
	}
	return c.envFor(ctx, cfg, filter, warn)
}

// envFor is openEnv for a config already loaded (and perhaps changed by
// flags).
func (c *cli) envFor(ctx context.Context, cfg *config.Config, filter loadFilter, warn bool) (*env, error) {
	stop := c.slowNotice("loading the tools: a module is compiled the first time it is used (cached afterwards)…")
	c.samp = setup.NewSampler(cfg, c.askSampling)
	e, err := newEnvWith(ctx, cfg, c.logger(), filter, setup.Hooks{Elicit: c.elicit, Progress: (&progressLines{c: c, last: map[string]time.Time{}}).show, Sampler: c.samp})
	stop()
	if err != nil {
		return nil, err
	}
	if warn {
		e.warnBroken(c.stderr)
	}
	return e, nil
}

// toolInfo describes one configured tool, loaded or not (`agrun tools`).
type toolInfo = setup.ToolInfo

// env is a command's setup.Env, with the short names the command's files
// use, and what only the command knows.
type env struct {
	*setup.Env
	cfg *config.Config
	rt  *runtime.Runtime
	reg *registry.Registry
	log *slog.Logger
}

// newEnv builds the sandbox and the registry from cfg. Tools that fail to
// load are recorded in broken, not fatal.
func newEnv(ctx context.Context, cfg *config.Config, log *slog.Logger, filter loadFilter) (*env, error) {
	return newEnvWith(ctx, cfg, log, filter, setup.Hooks{})
}

// newEnvWith is newEnv with hooks.
func newEnvWith(ctx context.Context, cfg *config.Config, log *slog.Logger, filter loadFilter, hooks setup.Hooks) (*env, error) {
	se, err := setup.New(ctx, cfg, log, filter, hooks)
	if err != nil {
		return nil, err
	}
	return wrapEnv(se), nil
}

// wrapEnv is se under the command's names.
func wrapEnv(se *setup.Env) *env {
	return &env{Env: se, cfg: se.Config, rt: se.Runtime, reg: se.Registry, log: se.Log}
}

// close shuts every MCP server down and releases the sandbox.
func (e *env) close() { e.Close() }

// infos lists every tool, loaded or broken, sorted by name, with what
// to change for the operator (explain).
func (e *env) infos() []toolInfo { return e.ToolInfos(e.explain) }

// firstLine is the first line of s cut to max bytes (textsafe.FirstLine).
var firstLine = textsafe.FirstLine

// safe makes text from tools, servers and models safe for a terminal:
// textsafe.Escape shows every unsafe rune (control characters, escape
// sequences included, and invisible ones) as a \x.. or \u.... escape;
// invalid UTF-8 becomes U+FFFD. Newlines and tabs stay.
func safe(s string) string { return textsafe.Escape(s) }
