package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/cmd/agrun/internal/config"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// configError is a configuration problem: exit code 2.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// loadConfig finds and decodes the config (-c, $AGRUN_CONFIG, ./agrun.toml).
// A missing ./agrun.toml (not named by the user) gives the defaults, with
// an empty Path.
func (c *cli) loadConfig() (*config.Config, error) {
	path, explicit := config.Locate(c.configPath)
	if _, err := os.Stat(path); err != nil && !explicit && errors.Is(err, os.ErrNotExist) {
		return config.Default(), nil
	}
	cfg, err := config.Load(path)
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
	e, err := newEnvWith(ctx, cfg, c.logger(), filter, envHooks{elicit: c.elicit, progress: (&progressLines{c: c, last: map[string]time.Time{}}).show})
	stop()
	if err != nil {
		return nil, err
	}
	if warn {
		e.warnBroken(c.stderr)
	}
	return e, nil
}

// toolInfo describes one configured tool, loaded or not.
type toolInfo struct {
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

// env is everything a command needs: the config, the sandbox, the registry
// with every tool that loaded, and what failed to load.
type env struct {
	cfg     *config.Config
	rt      *runtime.Runtime
	reg     *registry.Registry
	checker *permission.Checker
	log     *slog.Logger

	mu       sync.Mutex
	sources  map[string]string   // tool name -> source
	broken   map[string]error    // config name (tool or "mcp:<server>") -> load error
	warnings map[string][]string // tool name -> grants it cannot use
	clients  []*mcp.Client
	hooks    envHooks
	// fileTool is the tool of `agrun call FILE.wasm`, whose grants are
	// flags (explain names them).
	fileTool string
	tools    []*wasmtools.Tool
}

// loadFilter selects what newEnv loads: every tool (nil), or only what one
// tool name needs (so `agrun call word_count` does not start MCP servers).
type loadFilter func(kind, name string) bool

func only(tool string) loadFilter {
	return func(kind, name string) bool {
		if kind == "wasm" {
			return name == tool
		}
		return strings.HasPrefix(tool, name+"__")
	}
}

// newEnv builds the sandbox and the registry from cfg. Tools that fail to
// load are recorded in broken, not fatal.
func newEnv(ctx context.Context, cfg *config.Config, log *slog.Logger, filter loadFilter) (*env, error) {
	return newEnvWith(ctx, cfg, log, filter, envHooks{})
}

// envHooks are what a command that has a person at hand gives its env.
type envHooks struct {
	// elicit answers MCP servers' questions for the person (elicit.go);
	// nil: the servers are offered no elicitation (serve, worker, mcp
	// serve: no one to ask).
	elicit func(context.Context, *mcp.Elicitation) (*mcp.ElicitAnswer, error)
	// progress shows MCP servers' progress notifications (elicit.go);
	// nil: calls carry no progress token.
	progress func(mcp.Progress)
}

// newEnvWith is newEnv with hooks.
func newEnvWith(ctx context.Context, cfg *config.Config, log *slog.Logger, filter loadFilter, hooks envHooks) (*env, error) {
	e := &env{
		hooks:    hooks,
		cfg:      cfg,
		checker:  permission.NewChecker(cfg.PermissionConfig()),
		log:      log,
		sources:  map[string]string{},
		broken:   map[string]error{},
		warnings: map[string][]string{},
	}
	rt, err := runtime.New(ctx, runtime.Config{
		CacheDir:       cfg.Sandbox.CacheDir,
		DisableCache:   cfg.Sandbox.NoCache,
		DisablePrepare: cfg.Sandbox.NoPrepare,
		MaxInstances:   cfg.Sandbox.MaxInstances,
		MaxStackBytes:  int64(cfg.Sandbox.MaxStack),
		MaxCompiles:    cfg.Sandbox.MaxCompiles,
		// The compile bounds of docs/SECURITY.md, "Compiling".
		MaxMeteredCodeBytes: int64(cfg.Sandbox.MaxMeteredCode),
		Limits:              sandboxLimits(cfg.Sandbox.Timeout, cfg.Sandbox.Memory, cfg.Sandbox.MaxOutput, cfg.Sandbox.MaxWrite, cfg.Sandbox.Fuel),
		Logger:              e.log,
	})
	if err != nil {
		return nil, err
	}
	e.rt = rt
	e.reg = e.newRegistry()

	var wg sync.WaitGroup
	for name, t := range cfg.Tools {
		if filter != nil && !filter("wasm", name) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.loadWasm(ctx, name, t)
		}()
	}
	for name, p := range cfg.Plugins {
		if filter != nil && !filter("plugin", name) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.loadPlugin(ctx, name, p)
		}()
	}
	for name, s := range cfg.MCP {
		if filter != nil && !filter("mcp", name) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.loadMCP(ctx, name, s)
		}()
	}
	wg.Wait()
	return e, nil
}

// newRegistry returns an empty registry with the env's policy and limits:
// the env's own, or a narrower one for a run (run --tools).
func (e *env) newRegistry() *registry.Registry {
	return registry.New(registry.WithPermissionChecker(e.checker), registry.WithMaxParallel(e.cfg.Sandbox.MaxParallel))
}

func sandboxLimits(timeout config.Duration, memory, maxOutput, maxWrite config.Size, fuel int64) runtime.Limits {
	return runtime.Limits{Timeout: timeout.Std(), MemoryBytes: int64(memory), MaxStdout: int64(maxOutput), MaxWriteBytes: int64(maxWrite), Fuel: fuel}
}

func (e *env) fail(key string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.broken[key] = err
}

// loadWasm loads [tools.name] and registers it; a tool that fails to load
// is registered as a refusedTool, so that every call to it, from any
// front end, fails with module_refused and the reason.
func (e *env) loadWasm(ctx context.Context, name string, t config.Tool) {
	s := configSettings(name, t)
	tool, err := e.openWasm(ctx, name, t, s)
	if err == nil && tool.Name() != name {
		tool = tool.Renamed(name)
	}
	e.register(name, toolSource(t), tool, err, grantWarnings(t, s, tool))
}

// register adds a loaded WASM tool (err nil) or the refusal of one. A
// tool that cannot be registered (its name is taken) is closed.
func (e *env) register(name, source string, tool *wasmtools.Tool, err error, warnings []string) {
	if err == nil {
		if err = e.reg.Register(tool); err != nil {
			tool.Close(context.Background())
		} else {
			e.mu.Lock()
			e.sources[name] = source
			e.tools = append(e.tools, tool)
			if len(warnings) > 0 {
				e.warnings[name] = warnings
			}
			e.mu.Unlock()
			return
		}
	}
	msg := err.Error()
	var re *registry.Error
	if errors.As(err, &re) {
		msg = re.Message()
	}
	refused := registry.Errorf(registry.ModuleRefused, name, "the tool failed to load: %s", msg)
	e.fail(name, refused)
	if registry.ValidName(name) {
		e.reg.Register(&refusedTool{name: name, err: refused}) // a duplicate name keeps the first tool
	}
}

// openWasm reads and loads the module t describes (the tool name, for
// an Extism plug-in: see plugin.go), with t's grant. s names the settings
// in messages.
func (e *env) openWasm(ctx context.Context, name string, t config.Tool, s settings) (*wasmtools.Tool, error) {
	wasm, err := readModule(ctx, e.cfg, t, s) // cmd_oci.go: the file, or the module store for oci =
	if err != nil {
		return nil, err
	}
	grant := toolGrant(t)
	if wasmtools.IsPlugin(wasm) {
		return e.openPlugin(ctx, name, wasm, t, grant)
	}
	if t.Manifest != "" {
		m, err := wasmtools.ReadManifestFile(t.Manifest)
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, s.manifest)
		}
		return wasmtools.LoadWithManifest(ctx, e.rt, wasm, m, grant)
	}
	tool, err := wasmtools.Load(ctx, e.rt, wasm, grant)
	switch {
	case errors.Is(err, wasmtools.ErrNoManifest):
		err = fmt.Errorf("%w (add one with `agrun pack`, or give a manifest with %s)", err, s.manifest)
	case errors.Is(err, wasmtools.ErrIntegrity):
		err = fmt.Errorf("%s does not match the module: %w", s.sha256, err)
	}
	return tool, err
}

// toolGrant is what [tools.NAME] offers its module: the one mapping of a
// tool's grant keys to wasmtools' Grant (loading it, and describing it in
// agrun audit).
func toolGrant(t config.Tool) wasmtools.Grant {
	g := wasmtools.Grant{
		AllowedHosts: t.AllowedHosts,
		AllowPrivate: t.AllowPrivate,
		Limits:       sandboxLimits(t.Timeout, t.Memory, t.MaxOutput, t.MaxWrite, t.Fuel),
		SHA256:       t.SHA256,
	}
	for _, m := range t.Mounts {
		g.Mounts = append(g.Mounts, wasmtools.Mount{Host: m.Host, Guest: m.Guest, Writable: m.Writable, AllowDelete: m.AllowDelete})
	}
	return g
}

// refusedTool stands in the registry for a configured tool whose module
// failed to load: it is Unavailable (never offered to the model, nor by
// mcp serve), and a call to it fails with module_refused.
type refusedTool struct {
	name string
	err  *registry.Error
}

func (r *refusedTool) Name() string                         { return r.name }
func (r *refusedTool) Description() string                  { return "" }
func (r *refusedTool) Parameters() json.RawMessage          { return json.RawMessage(`{"type":"object"}`) }
func (r *refusedTool) Permissions() []permission.Permission { return nil }
func (r *refusedTool) Unavailable() error                   { return r.err }
func (r *refusedTool) Execute(context.Context, json.RawMessage) (json.RawMessage, error) {
	return nil, r.err
}

func (e *env) loadMCP(ctx context.Context, name string, s config.MCPServer) {
	tr, err := mcpTransport(name, s)
	if err != nil {
		e.fail("mcp:"+name, err)
		return
	}
	cl, err := mcp.NewClient(name, tr, &mcp.ClientOptions{Timeout: s.Timeout.Std(), Permissions: s.Permissions, Logger: e.log, Roots: s.Roots, Elicit: e.hooks.elicit, ResourceTool: s.Resources, Progress: e.hooks.progress})
	if err != nil {
		e.fail("mcp:"+name, err)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout(s.Timeout.Std()))
	defer cancel()
	if err := cl.Connect(cctx); err != nil {
		cl.Close(context.Background())
		if hint := mcpHint(name, s, err); hint != "" {
			err = hinted{err, hint}
		}
		e.fail("mcp:"+name, err)
		return
	}
	if err := cl.Sync(e.reg); err != nil {
		cl.Close(context.Background())
		e.fail("mcp:"+name, err)
		return
	}
	e.mu.Lock()
	e.clients = append(e.clients, cl)
	e.mu.Unlock()
}

func connectTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return 30 * time.Second
	}
	return d
}

// loaded counts the tools that loaded (WASM and MCP), whether or not the
// policy lets them run.
func (e *env) loaded() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, name := range e.reg.List() {
		if _, broken := e.broken[name]; !broken {
			n++
		}
	}
	return n
}

// close shuts every MCP server down and releases the sandbox.
func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, cl := range e.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cl.Close(ctx); err != nil {
				e.log.Warn("closing MCP server", "error", err)
			}
		}()
	}
	wg.Wait()
	e.rt.Close(ctx)
}

// infos lists every tool, loaded or broken, sorted by name.
func (e *env) infos() []toolInfo {
	var out []toolInfo
	for _, name := range e.reg.List() {
		t, ok := e.reg.Get(name)
		if _, refused := t.(*refusedTool); !ok || refused {
			continue
		}
		ti := toolInfo{Name: name, Source: e.source(name), Permissions: permission.Strings(t.Permissions()), Allowed: true,
			Description: safe(firstLine(t.Description(), 200)), Warnings: e.warnings[name]}
		if err := e.reg.Allowed(name); err != nil {
			ti.Allowed = false
			ti.Kind = string(registry.KindOf(err))
			ti.Denied = safe(e.explain(name, err))
		}
		out = append(out, ti)
	}
	for key, err := range e.broken {
		ti := toolInfo{Name: key, Error: safe(e.explain(key, err)), Kind: string(registry.KindOf(err))}
		if s, ok := strings.CutPrefix(key, "mcp:"); ok {
			ti.Name, ti.Source = s+"__*", key
		} else if p, ok := strings.CutPrefix(key, "plugin:"); ok {
			ti.Name, ti.Source = p+"__*", toolSource(e.cfg.Plugins[p])
		} else if t, ok := e.cfg.Tools[key]; ok {
			ti.Source = toolSource(t)
		}
		out = append(out, ti)
	}
	slices.SortFunc(out, func(a, b toolInfo) int { return strings.Compare(a.Name, b.Name) })
	for i := range out {
		if out[i].Permissions == nil {
			out[i].Permissions = []string{}
		}
	}
	return out
}

// source says where a registered tool comes from: its .wasm file, or its
// MCP server (derived from the name, since a server may add tools later).
func (e *env) source(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.sources[name]; ok {
		return s
	}
	if server, _, ok := strings.Cut(name, "__"); ok {
		if _, ok := e.cfg.MCP[server]; ok {
			return "mcp:" + server
		}
	}
	return ""
}

// brokenFor returns the load error behind a tool name, if any.
func (e *env) brokenFor(name string) error {
	if err, ok := e.broken[name]; ok {
		return err
	}
	for key, err := range e.broken {
		s, ok := strings.CutPrefix(key, "mcp:")
		if !ok {
			s, ok = strings.CutPrefix(key, "plugin:")
		}
		if ok && strings.HasPrefix(name, s+"__") {
			return err
		}
	}
	return nil
}

func firstLine(s string, max int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return textsafe.Truncate(s, max)
}

// safe makes text from tools, servers and models safe for a terminal:
// textsafe.Escape shows every unsafe rune (control characters, escape
// sequences included, and invisible ones) as a \x.. or \u.... escape;
// invalid UTF-8 becomes U+FFFD. Newlines and tabs stay.
func safe(s string) string { return textsafe.Escape(s) }
