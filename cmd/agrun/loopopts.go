package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
)

// applyLoopOptions maps the [llm] keys of bounded tool results, context
// window and structured output (and the per-tool max_tool_result of
// [tools.X], [mcp.X] and [plugins.X]) into lc.
func applyLoopOptions(lc *loop.Config, cfg *config.Config) {
	lc.MaxToolMessageBytes = toolResultCap(cfg.LLM.MaxToolResult)
	lc.ContextWindow = cfg.LLM.ContextWindow
	if cfg.LLM.SchemaMode != "auto" {
		lc.SchemaMode = loop.SchemaMode(cfg.LLM.SchemaMode)
	}
	caps := map[string]int{}   // wasm tool -> cap
	prefix := map[string]int{} // "server__" -> cap
	for name, t := range cfg.Tools {
		if t.MaxToolResult != nil {
			caps[name] = toolResultCap(t.MaxToolResult)
		}
	}
	for name, s := range cfg.MCP {
		if s.MaxToolResult != nil {
			prefix[name+"__"] = toolResultCap(s.MaxToolResult)
		}
	}
	for name, p := range cfg.Plugins {
		if p.MaxToolResult != nil {
			prefix[name+"__"] = toolResultCap(p.MaxToolResult)
		}
	}
	if len(caps) == 0 && len(prefix) == 0 {
		return
	}
	lc.ToolResultLimit = func(tool string) int {
		if v, ok := caps[tool]; ok {
			return v
		}
		if server, _, ok := strings.Cut(tool, "__"); ok {
			return prefix[server+"__"]
		}
		return 0
	}
}

// toolResultCap is a max_tool_result as the loop takes it: unset is the
// loop's default (0), "0" no cap (-1).
func toolResultCap(s *config.Size) int {
	switch {
	case s == nil:
		return 0
	case *s == 0:
		return -1
	case int64(*s) > 1<<30:
		return 1 << 30
	}
	return int(*s)
}

// maxSchemaFile bounds a --schema file (the registry caps a schema at 64 KiB).
const maxSchemaFile = 1 << 20

// readSchema is the value of --schema: inline JSON (it starts with "{"),
// or the path of a JSON file. It must be JSON; the loop checks it is a
// schema.
func readSchema(arg string) (json.RawMessage, error) {
	data := []byte(arg)
	if !strings.HasPrefix(strings.TrimSpace(arg), "{") {
		f, err := os.Open(arg)
		if err != nil {
			return nil, usagef("--schema: %v", err)
		}
		defer f.Close()
		data, err = io.ReadAll(io.LimitReader(f, maxSchemaFile+1))
		if err != nil {
			return nil, usagef("--schema: %v", err)
		}
		if len(data) > maxSchemaFile {
			return nil, usagef("--schema: %s is larger than %d bytes", arg, maxSchemaFile)
		}
	}
	if !json.Valid(data) {
		return nil, usagef("--schema: not JSON (give a JSON Schema inline or the path of a .json file)")
	}
	return data, nil
}
