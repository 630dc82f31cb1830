package config

import (
	"fmt"
	"strings"

	"github.com/agcore/agrun/registry"
)

// A [plugins.NAME] section is an MCP-style plug-in (hyper-mcp's plug-in
// interface, or an mcp.run servlet): a Tool whose module lists its own
// tools, registered as NAME__TOOL. It takes the keys of [tools.NAME] that
// say where the module is and what it is granted (wasm or oci, sha256,
// allowed_hosts, allow_private, mounts, timeout, memory, max_output,
// max_write, fuel, permissions, config, approve, max_tool_result,
// require_signature, signature), which
// hold for every tool it lists; not those that describe one tool
// (manifest, function, description, parameters, output): the plug-in's
// own list does.

// describingKeys are the [tools.NAME] keys a [plugins.NAME] section may
// not set, with what t sets of them.
func describingKeys(t Tool) []string {
	var keys []string
	if t.Manifest != "" {
		keys = append(keys, "manifest")
	}
	for _, k := range t.PluginKeys() {
		if k != "permissions" && k != "config" {
			keys = append(keys, k)
		}
	}
	return keys
}

func (c *Config) checkPlugins(errAt func(msg string, key ...string) error) error {
	for _, name := range sortedKeys(c.Plugins) {
		t := c.Plugins[name]
		switch {
		case strings.Contains(name, "__") || strings.HasPrefix(name, "_") || strings.HasSuffix(name, "_"):
			return errAt(`plug-in name may not contain "__" nor start or end with "_" (NAME__TOOL must say where NAME ends)`, "plugins", name)
		case !registry.ValidName(name):
			return errAt("plug-in name must match "+registry.NamePattern, "plugins", name)
		}
		if _, ok := c.MCP[name]; ok {
			return errAt(fmt.Sprintf("[mcp.%s] has the same name: both would name their tools %s__TOOL; rename one", name, name), "plugins", name)
		}
		if err := checkModule(t, "plugins", name, errAt); err != nil {
			return err
		}
		if keys := describingKeys(t); len(keys) > 0 {
			return errAt(fmt.Sprintf("a plug-in's tools are described by its own list (list_tools or describe), not by %q: that key is for one tool in [tools.NAME]", keys[0]), "plugins", name, keys[0])
		}
		if err := checkGrantKeys(t, "plugins", name, errAt); err != nil {
			return err
		}
		if !validApprove(t.Approve) {
			return errAt(`must be "ask", "always" or "never"`, "plugins", name, "approve")
		}
	}
	return nil
}

// PluginOf returns the [plugins.NAME] section whose tools include the
// tool registered as name (NAME__TOOL), and NAME.
func (c *Config) PluginOf(name string) (Tool, string, bool) {
	p, _, ok := strings.Cut(name, "__")
	if !ok {
		return Tool{}, "", false
	}
	t, ok := c.Plugins[p]
	return t, p, ok
}
