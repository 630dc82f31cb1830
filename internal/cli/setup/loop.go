package setup

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
)

// LoopConfig is the model loop of the config's [llm] section, for the
// CLI's runs and the server's (History and OnMessage are set per run).
// The API key comes only from the variable api_key_env names. It fails
// (a *ConfigError) when the provider cannot be made.
func LoopConfig(cfg *config.Config) (loop.Config, error) {
	p, err := Provider(&cfg.LLM)
	if err != nil {
		return loop.Config{}, &ConfigError{fmt.Errorf("[llm]: %w", err)}
	}
	lc := loop.Config{
		Provider: p,
		System:   cfg.LLM.System,
		Limits: loop.Limits{
			MaxTurns:          cfg.LLM.MaxTurns,
			RequestTimeout:    cfg.LLM.Timeout.Std(),
			StreamIdleTimeout: cfg.LLM.StreamIdleTimeout.Std(),
			MaxRetryWait:      cfg.LLM.MaxRetryWait.Std(),
			MaxTotalTokens:    cfg.LLM.MaxTotalTokens,
			MaxToolCalls:      cfg.LLM.MaxToolCalls,
		},
	}
	if cfg.LLM.MaxRetries != nil {
		lc.MaxRetries = *cfg.LLM.MaxRetries
		if lc.MaxRetries == 0 {
			lc.MaxRetries = -1 // "max_retries = 0" means none; the loop's 0 means its default
		}
	}
	applyLoopOptions(&lc, cfg)
	return lc, nil
}

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

// CheckAPIKey fails a run that would send no API key to a provider that
// needs one, before any request (exit 2).
func CheckAPIKey(cfg *config.Config) error {
	if os.Getenv(cfg.LLM.APIKeyEnv) != "" || IsLoopbackURL(cfg.LLM.BaseURL) {
		return nil
	}
	return &ConfigError{fmt.Errorf("%s is not set ([llm] api_key_env); local servers need none: set base_url", cfg.LLM.APIKeyEnv)}
}

// IsLoopbackURL reports whether raw is a URL of this machine (localhost,
// 127.0.0.0/8, ::1): a local server (Ollama, llama.cpp) that needs no key.
func IsLoopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := strings.ToLower(u.Hostname())
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
