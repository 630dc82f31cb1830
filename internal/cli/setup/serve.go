package setup

import (
	"fmt"
	"slices"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// ServeTenants reads the bearer tokens: each tenant's from its
// tokens_env ([serve.tenants.NAME]; a token of two tenants, a tenant
// without one, or one too short is a configuration error naming the
// key), or without tenants those of [serve] tokens_env. tokens is every
// token, for the listener's policy.
func ServeTenants(cfg *config.Config, getenv func(string) string) (tenants []server.Tenant, tokens []string, err error) {
	if len(cfg.Serve.Tenants) == 0 {
		tokens = server.TokensFromEnv(cfg.Serve.TokensEnv)
		if err := server.CheckTokens(tokens); err != nil {
			return nil, nil, &ConfigError{fmt.Errorf("$%s: %w", cfg.Serve.TokensEnv, err)}
		}
		return nil, tokens, nil
	}
	byTenant, err := cfg.TenantTokens(getenv)
	if err != nil {
		return nil, nil, &ConfigError{err}
	}
	names := make([]string, 0, len(cfg.Serve.Tenants))
	for name := range cfg.Serve.Tenants {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t := cfg.Serve.Tenants[name]
		toks := byTenant[name]
		if len(toks) == 0 {
			return nil, nil, &ConfigError{fmt.Errorf("%s: serve.tenants.%s.tokens_env: $%s holds no token (comma-separated bearer tokens)", cfg.Path, name, t.TokensEnv)}
		}
		if err := server.CheckTokens(toks); err != nil {
			return nil, nil, &ConfigError{fmt.Errorf("%s: serve.tenants.%s.tokens_env: $%s: %w", cfg.Path, name, t.TokensEnv, err)}
		}
		tenants = append(tenants, server.Tenant{
			Name: name, Tokens: toks, Uploads: UploadsGrant(t.Uploads),
			MaxModules: t.MaxModules, MaxStorage: int64(t.MaxStorage),
			MaxConcurrentCalls: t.MaxConcurrentCalls, CallsPerMinute: t.CallsPerMinute,
		})
		tokens = append(tokens, toks...)
	}
	return tenants, tokens, nil
}

// UploadsGrant is an uploads table ([serve.uploads], or a tenant's
// ceiling) as the grant of uploaded tools.
func UploadsGrant(u config.Uploads) wasmtools.Grant {
	return wasmtools.Grant{
		AllowedHosts: u.AllowedHosts,
		AllowPrivate: u.AllowPrivate,
		Limits:       runtime.Limits{Timeout: u.Timeout.Std(), MemoryBytes: int64(u.Memory), MaxStdout: int64(u.MaxOutput)},
	}
}

// ServeOptions maps [serve] into the server's options (as New maps
// [sandbox] into runtime.Config): limits, the names it answers for, the
// data directory and the grant of uploaded tools. tokens_env is read by
// the caller.
func ServeOptions(sv config.Serve) server.Options {
	return server.Options{
		Addr:                    sv.Addr,
		AllowedHosts:            sv.AllowedHosts,
		DataDir:                 sv.DataDir,
		Uploads:                 UploadsGrant(sv.Uploads),
		MaxUpload:               int64(sv.MaxUpload),
		MaxBody:                 int64(sv.MaxBody),
		MaxConcurrentCalls:      sv.MaxConcurrentCalls,
		MaxCallsPerClient:       sv.MaxCallsPerClient,
		CallTimeout:             sv.CallTimeout.Std(),
		ReadTimeout:             sv.ReadTimeout.Std(),
		WriteTimeout:            sv.WriteTimeout.Std(),
		BodyTimeout:             sv.BodyTimeout.Std(),
		UploadsPerMinute:        sv.UploadsPerMinute,
		MaxConnections:          sv.MaxConnections,
		MaxConnectionsPerClient: sv.MaxConnectionsPerClient,
		ApprovalTimeout:         sv.ApprovalTimeout.Std(),
	}
}
