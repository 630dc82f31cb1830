package setup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/wasmtools"
)

// openPlugin loads an Extism plug-in: it has no manifest, so [tools.NAME]
// describes it (function, description, parameters, output, permissions,
// config).
func (e *Env) openPlugin(ctx context.Context, name string, wasm []byte, t config.Tool, grant wasmtools.Grant) (*wasmtools.Tool, error) {
	if name == "" {
		return nil, errors.New("the module is an Extism plug-in (it imports extism:host/env), which has no manifest: configure it as [tools.NAME] with description (and function, parameters, output) in agrun.toml")
	}
	if t.Manifest != "" {
		return nil, fmt.Errorf("[tools.%s] manifest: the module is an Extism plug-in, described by [tools.%s] itself (description, function, parameters, output, permissions), not by a manifest file", name, name)
	}
	m := wasmtools.Manifest{Name: name, Description: t.Description, Output: t.Output, Permissions: t.Permissions}
	if t.Parameters != nil {
		m.Parameters = json.RawMessage(t.Parameters)
	}
	if t.Permissions == nil {
		m.Permissions = impliedPermissions(t)
	}
	tool, err := wasmtools.LoadPlugin(ctx, e.Runtime, wasm, wasmtools.Plugin{Manifest: m, Function: t.Function, Config: t.Config}, grant)
	var me *wasmtools.ManifestError
	if errors.As(err, &me) && me.Field != "" {
		err = fmt.Errorf("[tools.%s] %s: %w", name, me.Field, err)
	}
	return tool, err
}

// impliedPermissions are a plug-in's permissions when [tools.NAME] lists
// none: what its grant offers (a plug-in declares nothing itself).
func impliedPermissions(t config.Tool) []permission.Permission {
	var ps []permission.Permission
	add := func(p permission.Permission) {
		if !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	if len(t.AllowedHosts) > 0 {
		add(permission.Network)
	}
	for _, m := range t.Mounts {
		add(permission.Filesystem)
		add(permission.Read)
		if m.Writable {
			add(permission.Write)
		}
		if m.AllowDelete {
			add(permission.Delete)
		}
	}
	return ps
}

// loadPlugin loads the MCP-style plug-in [plugins.name] and registers
// each tool it lists as name__TOOL, with the section's grant and
// permissions (declared for every tool; default: what the grant
// implies). A plug-in that fails to load is recorded as "plugin:name"
// (shown as name__*), as an MCP server that cannot be reached is.
func (e *Env) loadPlugin(ctx context.Context, name string, t config.Tool) {
	s := SectionSettings("plugins", name, t)
	tools, err := e.openMCPPlugin(ctx, name, t, s)
	if err != nil {
		var re *registry.Error
		msg := err.Error()
		if errors.As(err, &re) {
			msg = re.Message()
		}
		e.fail("plugin:"+name, registry.Errorf(registry.ModuleRefused, name+"__*", "the plug-in failed to load: %s", msg))
		return
	}
	for _, tool := range tools {
		e.Register(tool.Name(), ToolSource(t), tool, nil, GrantWarnings(t, s, tool))
	}
}

func (e *Env) openMCPPlugin(ctx context.Context, name string, t config.Tool, s Settings) ([]*wasmtools.Tool, error) {
	wasm, err := ReadModule(ctx, e.Config, t, s)
	if err != nil {
		return nil, err
	}
	perms := t.Permissions
	if perms == nil {
		perms = impliedPermissions(t)
	}
	tools, err := wasmtools.LoadMCPPlugin(ctx, e.Runtime, wasm, wasmtools.MCPPlugin{Name: name, Permissions: perms, Config: t.Config}, ToolGrant(t))
	if errors.Is(err, wasmtools.ErrIntegrity) {
		err = fmt.Errorf("%s does not match the module: %w", s.SHA256, err)
	}
	return tools, err
}
