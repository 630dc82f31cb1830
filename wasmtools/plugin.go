package wasmtools

import (
	"context"
	"maps"
	"slices"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/agcore/agrun/runtime"
)

// Plugin describes an Extism plug-in (a module importing
// extism:host/env) to LoadPlugin. A plug-in has no manifest section: its
// name, description, parameters, permissions and output come from
// Manifest, which the operator writes (agrun.toml's [tools.NAME]), as for
// a bare WASI program.
type Plugin struct {
	// Manifest describes the tool; it is validated as LoadWithManifest's.
	Manifest Manifest
	// Function is the export each call runs. If empty, Manifest.Name.
	Function string
	// Config is what the plug-in reads with config_get (at most
	// runtime.MaxPluginConfigBytes in all).
	Config map[string]string
}

// IsPlugin reports whether wasm is an Extism plug-in: a well-formed module
// that imports from extism:host/env.
func IsPlugin(wasm []byte) bool {
	m, err := wasmbin.ParseImports(wasm)
	if err != nil {
		return false
	}
	for _, im := range m.Imports {
		if im.Module == runtime.ExtismModule {
			return true
		}
	}
	return false
}

// LoadPlugin compiles an Extism plug-in and returns it as a Tool. Each
// Execute runs Function in a fresh instance (or one restored from the
// snapshot taken after its _initialize) under the grant's limits: the
// arguments are the plug-in's input, its output_set the result (with
// Manifest.Output "json" it must be valid JSON, with "text" it becomes a
// JSON string), an error_set message or a non-zero status an
// execution_failed error. Mounts are what Extism calls allowed_paths;
// AllowedHosts go through agrun's network grant (exact host or
// host:port, never Extism's globs). LoadPlugin fails as LoadWithManifest
// does, and when the module is not a plug-in or does not export Function
// as a function taking nothing and returning an i32 or nothing.
func LoadPlugin(ctx context.Context, rt *runtime.Runtime, wasm []byte, p Plugin, grant Grant) (*Tool, error) {
	if err := checkPin(wasm, grant.SHA256); err != nil {
		return nil, err
	}
	m := p.Manifest
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if err := checkPluginConfig(p.Config); err != nil {
		return nil, err
	}
	m.Parameters = slices.Clone(m.Parameters)
	m.Permissions = slices.Clone(m.Permissions)
	t, err := load(ctx, rt, wasm, m.normalized(), grant)
	if err != nil {
		return nil, err
	}
	fn := p.Function
	if fn == "" {
		fn = m.Name
	}
	if err := t.mod.PluginFunction(fn); err != nil {
		t.Close(context.Background())
		return nil, err
	}
	t.plugin = &runtime.Plugin{Function: fn, Config: maps.Clone(p.Config)}
	return t, nil
}

// PluginFunction returns the export a plug-in's calls run, or "" if the
// tool is not an Extism plug-in.
func (t *Tool) PluginFunction() string {
	if t.plugin == nil {
		return ""
	}
	return t.plugin.Function
}
