package cluster

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
)

// RunSettings are the per-run choices of `agrun run` and `agrun chat`
// (-m, -s, --tools, --no-tools, --schema, --max-tokens, --max-tool-calls)
// that a run carries to its model steps. Whoever can start workflows
// chooses them, so a worker applies each only within its own config,
// which stays the ceiling (docs/SECURITY.md): a model only among those it
// allows (Activities.Models), a tool filter only narrowing its tools,
// budgets only lowering its own. A base URL is not among them: it would
// send the worker's API key wherever the starter says.
type RunSettings struct {
	// Model, if set, is the model asked for: the worker's [llm] model or
	// one of Activities.Models; another ends the run (permission_denied).
	Model string `json:"model,omitempty"`
	// System, if set, replaces the system prompt ("" for none): at most
	// MaxSettingBytes.
	System *string `json:"system,omitempty"`
	// Tools, if set, are the only tools offered, of the worker's: a name
	// it does not have is not offered. NoTools offers none.
	Tools   []string `json:"tools,omitempty"`
	NoTools bool     `json:"no_tools,omitempty"`
	// Schema, if set, is the JSON Schema the final answer must match
	// (loop.Config.ResponseSchema): at most MaxSettingBytes.
	Schema json.RawMessage `json:"schema,omitempty"`
	// MaxTotalTokens and MaxToolCalls, if positive, lower the worker's
	// [llm] max_total_tokens and max_tool_calls for the run (a larger
	// value than the worker's is the worker's).
	MaxTotalTokens int64 `json:"max_total_tokens,omitempty"`
	MaxToolCalls   int   `json:"max_tool_calls,omitempty"`
	// Tenant, if set, is the agrun serve tenant the run is for (serve
	// sets it on the runs it starts, from the caller's token): its model
	// steps and calls are offered the tools the worker's config gives
	// that tenant's runs (Activities.Tenants: its uploaded tools, with
	// the ceiling of the worker's [serve.tenants.NAME.uploads]). Whoever
	// starts a workflow can name any tenant, so it gets no more than
	// that tenant's ceiling; a name the worker's config has no tenant
	// of gets the worker's tools alone.
	Tenant string `json:"tenant,omitempty"`
}

// tenant is s's Tenant ("" for nil).
func (s *RunSettings) tenant() string {
	if s == nil {
		return ""
	}
	return s.Tenant
}

// MaxSettingBytes bounds RunSettings.System and Schema: the registry caps a
// schema at 64 KiB, and a system prompt is sent with every request.
const MaxSettingBytes = 64 << 10

// Check refuses settings a worker would refuse whatever its config: a
// system prompt or schema over MaxSettingBytes, too many tool names.
func (s *RunSettings) Check() error {
	if s == nil {
		return nil
	}
	if s.System != nil && len(*s.System) > MaxSettingBytes {
		return fmt.Errorf("the system prompt is %d bytes, over %d", len(*s.System), MaxSettingBytes)
	}
	if len(s.Schema) > MaxSettingBytes {
		return fmt.Errorf("the schema is %d bytes, over %d", len(s.Schema), MaxSettingBytes)
	}
	if len(s.Schema) > 0 {
		// Compiled here, so that a schema that does not compile ends the
		// run as a refused setting (permission_denied, its text cleaned
		// and capped) rather than failing the step with the validator's
		// text repeated in Temporal's wrapping.
		if _, err := registry.CompileSchema(s.Schema); err != nil {
			return fmt.Errorf("the schema: %s", textsafe.Clean(err.Error(), 512))
		}
	}
	if len(s.Tenant) > 64 {
		return fmt.Errorf("the tenant name is %d bytes, over 64", len(s.Tenant))
	}
	if len(s.Tools) > maxToolNames {
		return fmt.Errorf("%d tool names, over %d", len(s.Tools), maxToolNames)
	}
	return nil
}

// maxToolNames bounds RunSettings.Tools (the registry of a worker holds at
// most a few hundred tools).
const maxToolNames = 1024

// settle applies the run's settings to the worker's loop configuration
// and registry, within them: it returns the configuration and the tools
// the step offers, or the error of a setting the worker's config does not
// allow (the run then ends, kind permission_denied).
func (a *Activities) settle(s *RunSettings) (loop.Config, *registry.Registry, error) {
	cfg, reg := a.Loop, a.Registry
	if s == nil {
		return cfg, reg, nil
	}
	if err := s.Check(); err != nil {
		return cfg, nil, err
	}
	if s.Model != "" && (cfg.Provider == nil || s.Model != cfg.Provider.Info().Model) {
		p, ok := a.Models[s.Model]
		if !ok {
			return cfg, nil, fmt.Errorf("model %q is not allowed by the worker's config (its [llm] model, or one of [cluster] models)", textsafe.Clean(s.Model, 200))
		}
		cfg.Provider = p
	}
	if s.System != nil {
		cfg.System = *s.System
	}
	if len(s.Schema) > 0 {
		cfg.ResponseSchema = s.Schema
	}
	cfg.MaxTotalTokens = lower(cfg.MaxTotalTokens, s.MaxTotalTokens)
	cfg.MaxToolCalls = int(lower(int64(cfg.MaxToolCalls), int64(s.MaxToolCalls)))
	switch {
	case s.NoTools:
		reg = nil
	case len(s.Tools) > 0 && reg != nil:
		reg = reg.Subset(func(name string) bool { return slices.Contains(s.Tools, name) })
	}
	return cfg, reg, nil
}

// lower is the lower of two limits, where 0 (or less) is none.
func lower(worker, run int64) int64 {
	switch {
	case run <= 0:
		return worker
	case worker <= 0:
		return run
	}
	return min(worker, run)
}
