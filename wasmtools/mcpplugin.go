package wasmtools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
)

// PluginInterface is the interface an MCP-style plug-in exports.
type PluginInterface string

// The MCP-style plug-in interfaces LoadMCPPlugin understands.
const (
	// HyperMCP is hyper-mcp's plug-in interface: list_tools takes
	// {"context":{...}} and answers {"tools":[...]}; call_tool takes
	// {"context":{...},"request":{"name":...,"arguments":{...}}} and
	// answers an MCP CallToolResult.
	HyperMCP PluginInterface = "hyper-mcp"
	// Servlet is an mcp.run servlet's (and hyper-mcp's first) interface:
	// describe answers {"tools":[...]}; call takes
	// {"method":"tools/call","params":{"name":...,"arguments":{...}}} and
	// answers an MCP CallToolResult.
	Servlet PluginInterface = "mcp.run"
)

// MaxPluginTools bounds the tools one MCP-style plug-in may list; a longer
// list refuses the plug-in.
const MaxPluginTools = 256

// maxPluginToolName bounds a listed tool's own name (before
// registry.PrefixedName shortens it).
const maxPluginToolName = 256

// MCPPlugin describes an MCP-style plug-in to LoadMCPPlugin: an Extism
// plug-in that lists its own tools, as hyper-mcp's plug-ins and mcp.run's
// servlets do. What its tools may do is the operator's to say
// (agrun.toml's [plugins.NAME]): the plug-in's list gives names,
// descriptions and schemas only.
type MCPPlugin struct {
	// Name is the plug-in's name: each tool TOOL it lists is registered as
	// registry.PrefixedName(Name, TOOL), "Name__TOOL". It must be a valid
	// tool name without "__".
	Name string
	// Permissions are what every tool of the plug-in declares; they decide,
	// with the grant, what its calls get (declared ∩ granted), and the
	// permission policy checks them before each call.
	Permissions []permission.Permission
	// Config is what the plug-in reads with config_get (at most
	// runtime.MaxPluginConfigBytes in all).
	Config map[string]string
}

// pluginCall is how a tool of an MCP-style plug-in calls it.
type pluginCall struct {
	iface  PluginInterface
	tool   string     // the tool's name in the plug-in's list
	refs   *sharedMod // the module the plug-in's tools share
	closed sync.Once  // this tool's hold on refs is released once
}

// sharedMod closes a module once the last tool sharing it is closed.
type sharedMod struct {
	mu sync.Mutex
	n  int
}

// LoadMCPPlugin compiles an MCP-style plug-in, runs its listing function
// once (list_tools, or describe: in a fresh instance under the grant's
// limits, with config_get answering p.Config), and returns one Tool per
// tool it lists, sorted by name, all sharing the compiled module (it is
// released when the last of them is closed). The list is untrusted and
// bounded: at most MaxPluginTools tools; names cleaned into registry
// names (two that map to one name refuse the plug-in); descriptions, and
// descriptions and titles inside schemas, cleaned and cut
// (registry.CleanSchema); every schema at most registry.MaxSchemaBytes and
// compiled (cost bounded) as Register would, a schema that does not
// compile refusing the plug-in with the tool named; the listing's output
// is capped by the grant's output limit like any call's.
//
// Each tool's Execute calls call_tool (or call) with its name and the
// arguments, in a fresh instance, like any Extism plug-in's call (see
// LoadPlugin); the plug-in's answer, an MCP CallToolResult, becomes the
// result as for an MCP server's tool: structuredContent when present,
// else the content blocks' text as one JSON string (images and audio as
// placeholders), every string cleaned; isError an execution_failed error
// with the content's text.
//
// LoadMCPPlugin fails as LoadPlugin does, when the module exports neither
// list_tools and call_tool nor describe and call, and when the listing
// fails or its answer is not a tool list within the bounds above.
func LoadMCPPlugin(ctx context.Context, rt *runtime.Runtime, wasm []byte, p MCPPlugin, grant Grant) ([]*Tool, error) {
	if err := checkPin(wasm, grant.SHA256); err != nil {
		return nil, err
	}
	if !registry.ValidName(p.Name) || strings.Contains(p.Name, "__") || strings.HasPrefix(p.Name, "_") || strings.HasSuffix(p.Name, "_") {
		return nil, fmt.Errorf("%w: plug-in name %q must match %s without \"__\", and not start or end with \"_\"", registry.ErrInvalidName, textsafe.Truncate(p.Name, 80), registry.NamePattern)
	}
	if err := checkPluginConfig(p.Config); err != nil {
		return nil, err
	}
	m := Manifest{Name: p.Name, Description: "MCP-style plug-in " + p.Name, Permissions: slices.Clone(p.Permissions), Output: OutputJSON}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	base, err := load(ctx, rt, wasm, m.normalized(), grant)
	if err != nil {
		return nil, err
	}
	iface, list, call, err := pluginInterface(base.mod)
	if err != nil {
		base.Close(context.Background())
		return nil, err
	}
	cfg := maps.Clone(p.Config)
	base.plugin = &runtime.Plugin{Function: list, Config: cfg}
	input := `{"context":{"_meta":{},"id":0}}`
	if iface == Servlet {
		input = `{}`
	}
	out, err := base.Execute(ctx, json.RawMessage(input))
	if err != nil {
		base.Close(context.Background())
		return nil, fmt.Errorf("the plug-in's %s failed: %w", list, err)
	}
	tools, err := base.pluginTools(out, iface, call, cfg)
	if err != nil {
		base.Close(context.Background())
		return nil, fmt.Errorf("the plug-in's %s answer: %w", list, err)
	}
	if len(tools) == 0 {
		base.Close(context.Background())
		return nil, fmt.Errorf("the plug-in's %s lists no tools", list)
	}
	return tools, nil
}

// pluginInterface finds the interface the module exports, and its
// listing and calling functions.
func pluginInterface(mod *runtime.Module) (iface PluginInterface, list, call string, err error) {
	if mod.PluginFunction("list_tools") == nil && mod.PluginFunction("call_tool") == nil {
		return HyperMCP, "list_tools", "call_tool", nil
	}
	if mod.PluginFunction("describe") == nil && mod.PluginFunction("call") == nil {
		return Servlet, "describe", "call", nil
	}
	if !mod.IsPlugin() {
		return "", "", "", mod.PluginFunction("list_tools") // says the module is not a plug-in
	}
	return "", "", "", fmt.Errorf("%w: the plug-in exports neither list_tools and call_tool (hyper-mcp's interface) nor describe and call (mcp.run's) as Extism functions", runtime.ErrCompile)
}

// listedTool is one entry of a plug-in's tool list (MCP's Tool).
type listedTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// pluginTools turns a listing's answer into tools, copies of base.
func (base *Tool) pluginTools(out json.RawMessage, iface PluginInterface, call string, cfg map[string]string) ([]*Tool, error) {
	var list struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("want {\"tools\":[...]}: %s", textsafe.Clean(err.Error(), 200))
	}
	if len(list.Tools) > MaxPluginTools {
		return nil, fmt.Errorf("%d tools, at most %d", len(list.Tools), MaxPluginTools)
	}
	refs := &sharedMod{n: len(list.Tools)}
	byName := map[string]string{}
	var tools []*Tool
	for i, raw := range list.Tools {
		var lt listedTool
		if err := json.Unmarshal(raw, &lt); err != nil {
			return nil, fmt.Errorf("tool %d: %s", i, textsafe.Clean(err.Error(), 200))
		}
		if lt.Name == "" || len(lt.Name) > maxPluginToolName {
			return nil, fmt.Errorf("tool %d: a name of 1 to %d bytes is needed, got %d", i, maxPluginToolName, len(lt.Name))
		}
		shown := textsafe.Clean(lt.Name, 100)
		name := registry.PrefixedName(base.name, lt.Name)
		if prev, dup := byName[name]; dup {
			return nil, fmt.Errorf("tools %q and %q both map to the name %q", prev, shown, name)
		}
		byName[name] = shown
		var schema any
		if len(bytes.TrimSpace(lt.InputSchema)) > 0 {
			schema = lt.InputSchema
		}
		params, err := registry.CleanSchema(schema)
		if err == nil {
			_, err = registry.CompileSchema(params)
		}
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", shown, textsafe.WrapError(err, 300))
		}
		t := *base
		t.name = name
		t.man.Name = name
		t.man.Description = textsafe.Clean(lt.Description, registry.MaxDescriptionBytes)
		t.man.Parameters = params
		t.man.Permissions = slices.Clone(base.man.Permissions)
		t.params = params
		t.plugin = &runtime.Plugin{Function: call, Config: cfg}
		t.call = &pluginCall{iface: iface, tool: lt.Name, refs: refs}
		tools = append(tools, &t)
	}
	slices.SortFunc(tools, func(a, b *Tool) int { return strings.Compare(a.name, b.name) })
	return tools, nil
}

// PluginTool returns, for a tool of an MCP-style plug-in, its interface and
// its name in the plug-in's list; ok is false for any other tool.
func (t *Tool) PluginTool() (iface PluginInterface, tool string, ok bool) {
	if t.call == nil {
		return "", "", false
	}
	return t.call.iface, t.call.tool, true
}

// callInput is the plug-in's input for a call of t with args.
func (c *pluginCall) input(args json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	req := struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}{c.tool, args}
	if c.iface == Servlet {
		return json.Marshal(struct {
			Method string `json:"method"`
			Params any    `json:"params"`
		}{"tools/call", req})
	}
	return json.Marshal(struct {
		Context json.RawMessage `json:"context"`
		Request any             `json:"request"`
	}{json.RawMessage(`{"_meta":{},"id":0}`), req})
}

// callResult is an MCP CallToolResult as a plug-in answers it.
type callResult struct {
	Content           []contentBlock  `json:"content"`
	IsError           bool            `json:"isError"`
	StructuredContent json.RawMessage `json:"structuredContent"`
}

// contentBlock is one MCP content block (text, image, audio,
// resource_link, resource), as much of it as a result needs.
type contentBlock struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Data     string `json:"data"`
	MIMEType string `json:"mimeType"`
	URI      string `json:"uri"`
	Resource *struct {
		URI      string  `json:"uri"`
		MIMEType string  `json:"mimeType"`
		Text     string  `json:"text"`
		Blob     *string `json:"blob"`
	} `json:"resource"`
}

// result maps the plug-in's CallToolResult to the tool's result, as
// package mcp maps an MCP server's (see LoadMCPPlugin).
func (c *pluginCall) result(tool string, out json.RawMessage) (json.RawMessage, error) {
	var r callResult
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, registry.Errorf(registry.ExecutionFailed, tool, "the plug-in's answer is not an MCP tool result: %s", textsafe.Clean(err.Error(), 200))
	}
	if r.IsError {
		msg := textsafe.Clean(contentText(r.Content), maxErrorMessage)
		if strings.TrimSpace(msg) == "" {
			msg = "the tool reported an error without a message"
		}
		return nil, registry.NewError(registry.ExecutionFailed, tool, errors.New(msg))
	}
	if s := bytes.TrimSpace(r.StructuredContent); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		b, err := textsafe.CleanJSON(s)
		if err != nil {
			return nil, registry.Errorf(registry.ExecutionFailed, tool, "structuredContent: %s", textsafe.Clean(err.Error(), 200))
		}
		return b, nil
	}
	b, _ := json.Marshal(textsafe.Clean(contentText(r.Content), 0))
	return b, nil
}

// contentText renders content blocks as text: text as it is, images and
// audio as a placeholder (type, MIME type, size), resource links as their
// URI, embedded resources as their text (or a placeholder for a blob),
// joined with newlines.
func contentText(blocks []contentBlock) string {
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "image", "audio":
			parts = append(parts, fmt.Sprintf("[%s: %s, %d bytes]", b.Type, mimeOrUnknown(b.MIMEType), len(b.Data)))
		case "resource_link":
			parts = append(parts, b.URI)
		case "resource":
			switch r := b.Resource; {
			case r == nil:
				parts = append(parts, "[resource]")
			case r.Blob != nil:
				parts = append(parts, fmt.Sprintf("[resource %s: %s, %d bytes]", r.URI, mimeOrUnknown(r.MIMEType), len(*r.Blob)))
			default:
				parts = append(parts, r.Text)
			}
		default:
			parts = append(parts, fmt.Sprintf("[%s content]", textsafe.Clean(b.Type, 40)))
		}
	}
	return strings.Join(parts, "\n")
}

func mimeOrUnknown(mime string) string {
	if mime == "" {
		return "unknown type"
	}
	return textsafe.Clean(mime, 100)
}

// close releases c's hold on the shared module; true when it was the
// last, and the module is to be closed.
func (c *pluginCall) close() bool {
	last := false
	c.closed.Do(func() { last = c.refs.release() })
	return last
}

// release drops one hold on the shared module; true when it was the last.
func (s *sharedMod) release() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n <= 0 {
		return false
	}
	s.n--
	return s.n == 0
}

// checkPluginConfig bounds a plug-in's config.
func checkPluginConfig(cfg map[string]string) error {
	n := 0
	for k, v := range cfg {
		n += len(k) + len(v)
	}
	if n > runtime.MaxPluginConfigBytes {
		return fmt.Errorf("%w: the plug-in's config is %d bytes, at most %d", ErrInvalidGrant, n, runtime.MaxPluginConfigBytes)
	}
	return nil
}
