// Package setup builds what an agrun.toml describes: the sandbox, the
// registry with every configured tool (WebAssembly modules, Extism and
// MCP-style plug-ins, MCP servers), the module store of `oci =` tools and
// their signature checks, the model loop's configuration, and the options
// of `agrun serve`. It is the agrun command's (internal/cli/...: only
// cmd/agrun imports it), which keeps the flags, help, hints and the
// terminal; setup has no terminal and prints nothing.
//
//	cfg, err := config.Load("agrun.toml")
//	e, err := setup.New(ctx, cfg, logger, nil, setup.Hooks{})
//	defer e.Close()
//	inv := e.Registry.Invoke(ctx, "word_count", args)
//
// A tool that fails to load does not stop the others: it is recorded
// (Broken, BrokenFor) and registered as refused, so that every call to
// it fails with module_refused and the reason. Errors that are the
// configuration's fault are *ConfigError (the command's exit code 2).
package setup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/telemetry"
	"github.com/agcore/agrun/wasmtools"
)

// ConfigError is a configuration problem: what the agrun command exits
// with code 2 for.
type ConfigError struct{ Err error }

// Error returns the cause's message.
func (e *ConfigError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// Env is everything a command needs: the config, the sandbox, the
// registry with every tool that loaded, and what failed to load. Its
// methods are safe for concurrent use; Close it when done.
type Env struct {
	// Config is the configuration the Env was built from.
	Config *config.Config
	// Runtime is the sandbox every WebAssembly tool runs in.
	Runtime *runtime.Runtime
	// Registry holds every configured tool, refused ones included.
	Registry *registry.Registry
	// Checker is the [permissions] policy.
	Checker *permission.Checker
	// Log is where the sandbox and the MCP clients log.
	Log *slog.Logger
	// FileTool is the tool of `agrun call FILE.wasm` (OpenFile), whose
	// grants are flags; "" for an Env of configured tools.
	FileTool string

	mu       sync.Mutex
	sources  map[string]string   // tool name -> source
	broken   map[string]error    // config name (tool or "mcp:<server>") -> load error
	warnings map[string][]string // tool name -> grants it cannot use
	clients  []*mcp.Client
	hooks    Hooks
	tools    []*wasmtools.Tool
	tel      atomic.Pointer[telemetry.Telemetry] // MCP clients' spans, once UseTelemetry is called
}

// Filter selects what New loads: every tool (nil), or only what one
// tool name needs (so `agrun call word_count` does not start MCP servers).
// kind is "wasm" ([tools.NAME]), "plugin" ([plugins.NAME]) or "mcp"
// ([mcp.NAME]).
type Filter func(kind, name string) bool

// Only is the Filter of one tool name: its [tools] entry, or the
// [plugins] or [mcp] section whose tools are named NAME__*.
func Only(tool string) Filter {
	return func(kind, name string) bool {
		if kind == "wasm" {
			return name == tool
		}
		return strings.HasPrefix(tool, name+"__")
	}
}

// Named is the Filter of the tool names given (each as Only), and the
// first of them that cfg has no tool of ("" when it has them all: a
// [tools] entry, or NAME__TOOL of an [mcp.NAME] or [plugins.NAME]
// section).
func Named(cfg *config.Config, names []string) (Filter, string) {
	for _, n := range names {
		if _, ok := cfg.Tools[n]; ok {
			continue
		}
		if server, _, ok := strings.Cut(n, "__"); ok {
			if _, ok := cfg.MCP[server]; ok {
				continue
			}
			if _, ok := cfg.Plugins[server]; ok {
				continue
			}
		}
		return nil, n
	}
	return func(kind, name string) bool {
		for _, n := range names {
			if Only(n)(kind, name) {
				return true
			}
		}
		return false
	}, ""
}

// Hooks are what a command that has a person at hand gives its Env.
type Hooks struct {
	// Elicit answers MCP servers' questions for the person; nil: the
	// servers are offered no elicitation (serve, worker, mcp serve: no
	// one to ask).
	Elicit func(context.Context, *mcp.Elicitation) (*mcp.ElicitAnswer, error)
	// Progress shows MCP servers' progress notifications; nil: calls
	// carry no progress token.
	Progress func(mcp.Progress)
	// Sampler serves MCP servers' sampling requests with the [llm]
	// model; nil: the servers are offered no sampling (serve, worker,
	// mcp serve).
	Sampler *Sampler
}

// New builds the sandbox and the registry from cfg, loading what filter
// selects (nil: everything) in parallel. Tools that fail to load are
// recorded, not fatal; the error is the sandbox's.
func New(ctx context.Context, cfg *config.Config, log *slog.Logger, filter Filter, hooks Hooks) (*Env, error) {
	e := &Env{
		hooks:    hooks,
		Config:   cfg,
		Checker:  permission.NewChecker(cfg.PermissionConfig()),
		Log:      log,
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
		Limits:              SandboxLimits(cfg.Sandbox.Timeout, cfg.Sandbox.Memory, cfg.Sandbox.MaxOutput, cfg.Sandbox.MaxWrite, cfg.Sandbox.Fuel),
		Logger:              e.Log,
	})
	if err != nil {
		return nil, err
	}
	e.Runtime = rt
	e.Registry = e.NewRegistry()

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

// NewRegistry returns an empty registry with the env's policy and limits:
// the env's own, or a narrower one for a run (run --tools), or a tenant's.
func (e *Env) NewRegistry() *registry.Registry {
	return registry.New(registry.WithPermissionChecker(e.Checker), registry.WithMaxParallel(e.Config.Sandbox.MaxParallel))
}

// SandboxLimits are the runtime's limits of a [sandbox] section or a
// [tools.NAME] entry's overrides.
func SandboxLimits(timeout config.Duration, memory, maxOutput, maxWrite config.Size, fuel int64) runtime.Limits {
	return runtime.Limits{Timeout: timeout.Std(), MemoryBytes: int64(memory), MaxStdout: int64(maxOutput), MaxWriteBytes: int64(maxWrite), Fuel: fuel}
}

func (e *Env) fail(key string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.broken[key] = err
}

// loadWasm loads [tools.name] and registers it; a tool that fails to load
// is registered as a refusedTool, so that every call to it, from any
// front end, fails with module_refused and the reason.
func (e *Env) loadWasm(ctx context.Context, name string, t config.Tool) {
	s := ToolSettings(name, t)
	tool, err := e.OpenWasm(ctx, name, t, s)
	if err == nil && tool.Name() != name {
		tool = tool.Renamed(name)
	}
	e.Register(name, ToolSource(t), tool, err, GrantWarnings(t, s, tool))
}

// Register adds a loaded WASM tool (err nil) or the refusal of one (err
// the reason it failed to load), with where it comes from (source, as
// `agrun tools` shows it) and the grants it cannot use. A tool that
// cannot be registered (its name is taken) is closed and recorded as
// refused.
func (e *Env) Register(name, source string, tool *wasmtools.Tool, err error, warnings []string) {
	if err == nil {
		if err = e.Registry.Register(tool); err != nil {
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
		e.Registry.Register(&refusedTool{name: name, err: refused}) // a duplicate name keeps the first tool
	}
}

// OpenWasm reads and loads the module t describes (name is the tool
// name, which an Extism plug-in needs: see plugin.go; "" for a file
// named on the command line), with t's grant. s names the settings in
// messages.
func (e *Env) OpenWasm(ctx context.Context, name string, t config.Tool, s Settings) (*wasmtools.Tool, error) {
	wasm, err := ReadModule(ctx, e.Config, t, s) // oci.go: the file, or the module store for oci =
	if err != nil {
		return nil, err
	}
	grant := ToolGrant(t)
	if wasmtools.IsPlugin(wasm) {
		return e.openPlugin(ctx, name, wasm, t, grant)
	}
	if t.Manifest != "" {
		m, err := wasmtools.ReadManifestFile(t.Manifest)
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, s.Manifest)
		}
		return wasmtools.LoadWithManifest(ctx, e.Runtime, wasm, m, grant)
	}
	tool, err := wasmtools.Load(ctx, e.Runtime, wasm, grant)
	switch {
	case errors.Is(err, wasmtools.ErrNoManifest):
		err = fmt.Errorf("%w (add one with `agrun pack`, or give a manifest with %s)", err, s.Manifest)
	case errors.Is(err, wasmtools.ErrIntegrity):
		err = fmt.Errorf("%s does not match the module: %w", s.SHA256, err)
	}
	return tool, err
}

// ToolGrant is what [tools.NAME] offers its module: the one mapping of a
// tool's grant keys to wasmtools' Grant (loading it, and describing it in
// agrun audit).
func ToolGrant(t config.Tool) wasmtools.Grant {
	g := wasmtools.Grant{
		AllowedHosts: t.AllowedHosts,
		AllowPrivate: t.AllowPrivate,
		Limits:       SandboxLimits(t.Timeout, t.Memory, t.MaxOutput, t.MaxWrite, t.Fuel),
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

// Refused reports whether t is the stand-in of a tool that failed to
// load (Register with an error).
func Refused(t registry.Tool) bool {
	_, ok := t.(*refusedTool)
	return ok
}

func (e *Env) loadMCP(ctx context.Context, name string, s config.MCPServer) {
	tr, err := MCPTransport(name, s)
	if err != nil {
		e.fail("mcp:"+name, err)
		return
	}
	cl, err := mcp.NewClient(name, tr, &mcp.ClientOptions{Timeout: s.Timeout.Std(), Permissions: s.Permissions, Logger: e.Log, Roots: s.Roots, Elicit: e.hooks.Sampler.Elicit(e.hooks.Elicit), ResourceTool: s.Resources, Progress: e.hooks.Progress, Observe: e.observeMCP,
		Sample: e.hooks.Sampler.For(name, s), SamplingMaxTokens: s.SamplingMaxTokens})
	if err != nil {
		e.fail("mcp:"+name, err)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout(s.Timeout.Std()))
	defer cancel()
	if err := cl.Connect(cctx); err != nil {
		cl.Close(context.Background())
		if hint := mcpHint(name, s, err); hint != "" {
			err = Hinted{err, hint}
		}
		e.fail("mcp:"+name, err)
		return
	}
	if err := cl.Sync(e.Registry); err != nil {
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

// Clients are the MCP servers that connected, in the order they did.
func (e *Env) Clients() []*mcp.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*mcp.Client(nil), e.clients...)
}

// Loaded counts the tools that loaded (WASM and MCP), whether or not the
// policy lets them run.
func (e *Env) Loaded() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, name := range e.Registry.List() {
		if _, broken := e.broken[name]; !broken {
			n++
		}
	}
	return n
}

// Close shuts every MCP server down and releases the sandbox.
func (e *Env) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, cl := range e.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cl.Close(ctx); err != nil {
				e.Log.Warn("closing MCP server", "error", err)
			}
		}()
	}
	wg.Wait()
	e.Runtime.Close(ctx)
}

// Broken is what failed to load, by config name: a tool's ([tools.NAME]
// or a file's), "mcp:NAME" for an MCP server, "plugin:NAME" for an
// MCP-style plug-in. The map is a copy.
func (e *Env) Broken() map[string]error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.broken)
}

// Warnings are the grants of the tool called name that it cannot use.
func (e *Env) Warnings(name string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.warnings[name]
}

// Source says where a registered tool comes from: its .wasm file, or its
// MCP server (derived from the name, since a server may add tools later).
func (e *Env) Source(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.sources[name]; ok {
		return s
	}
	if server, _, ok := strings.Cut(name, "__"); ok {
		if _, ok := e.Config.MCP[server]; ok {
			return "mcp:" + server
		}
	}
	return ""
}

// BrokenFor returns the load error behind a tool name, if any: its own,
// or its MCP server's or plug-in's.
func (e *Env) BrokenFor(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
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
