package config

import (
	"fmt"
	"regexp"
	"strings"
)

// Tenant is one [serve.tenants.NAME] section of `agrun serve`: a party
// with its own bearer tokens, uploads, runs and quotas, untrusted by
// every other tenant (docs/API.md "Tenants").
type Tenant struct {
	// TokensEnv names the variable holding this tenant's bearer tokens,
	// comma-separated. Required.
	TokensEnv string `toml:"tokens_env"`
	// MaxModules bounds the tools this tenant stores; 0: only the
	// server's bound.
	MaxModules int `toml:"max_modules"`
	// MaxStorage bounds the bytes of this tenant's stored modules; 0:
	// only the server's bound.
	MaxStorage Size `toml:"max_storage"`
	// MaxConcurrentCalls bounds this tenant's calls and runs in progress
	// at once; 0: [serve] max_calls_per_client.
	MaxConcurrentCalls int `toml:"max_concurrent_calls"`
	// CallsPerMinute bounds this tenant's calls and runs started per
	// minute (a token bucket: bursts of that many); 0: no bound.
	CallsPerMinute int `toml:"calls_per_minute"`
	// Uploads is the grant ceiling of this tenant's uploaded tools, the
	// shape of [serve.uploads]; unset: nothing is granted (pure compute).
	Uploads Uploads `toml:"uploads"`

	line int // of the section's header, for errors found after decoding
}

// tenantNameRE is what a tenant may be called: it names a folder of the
// data directory and appears in messages.
var tenantNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// checkTenants checks [serve.tenants]: names, tokens_env, quotas and
// ceilings, and the keys that mean nothing beside tenants.
func (c *Config) checkTenants(lines *lineIndex, errAt func(msg string, key ...string) error) error {
	if len(c.Serve.Tenants) == 0 {
		return nil
	}
	if c.Serve.TokensEnv != "" {
		return errAt("with [serve.tenants] every token belongs to a tenant: move it to [serve.tenants.NAME] tokens_env", "serve", "tokens_env")
	}
	if uploadsSet(c.Serve.Uploads) {
		return errAt("with [serve.tenants] each tenant has its own ceiling: move it to [serve.tenants.NAME.uploads]", "serve", "uploads")
	}
	for _, name := range sortedKeys(c.Serve.Tenants) {
		t := c.Serve.Tenants[name]
		if !tenantNameRE.MatchString(name) {
			return errAt("tenant name must match "+tenantNameRE.String(), "serve", "tenants", name)
		}
		if t.TokensEnv == "" {
			return errAt(`needs "tokens_env" (the variable holding this tenant's bearer tokens)`, "serve", "tenants", name)
		}
		for _, q := range []struct {
			key string
			v   int64
		}{{"max_modules", int64(t.MaxModules)}, {"max_storage", int64(t.MaxStorage)},
			{"max_concurrent_calls", int64(t.MaxConcurrentCalls)}, {"calls_per_minute", int64(t.CallsPerMinute)}} {
			if q.v < 0 {
				return errAt("must be positive (0: no bound of the tenant's own)", "serve", "tenants", name, q.key)
			}
		}
		for _, h := range t.Uploads.AllowedHosts {
			if !hostRE.MatchString(h) {
				return errAt(fmt.Sprintf("allowed host %q: want a host name or host:port, without scheme or path", h), "serve", "tenants", name, "uploads", "allowed_hosts")
			}
		}
		t.line = lines.find([]string{"serve", "tenants", name, "tokens_env"})
		c.Serve.Tenants[name] = t
	}
	return nil
}

// uploadsSet reports whether any key of an uploads table is set.
func uploadsSet(u Uploads) bool {
	return len(u.AllowedHosts) > 0 || u.AllowPrivate || u.Timeout != 0 || u.Memory != 0 || u.MaxOutput != 0
}

// TenantTokens reads each tenant's tokens from the variable its
// tokens_env names (getenv: os.Getenv), comma-separated, blanks and
// repeats dropped. A token listed for two tenants is an *Error naming
// both keys: a token identifies one tenant. Token lengths are the
// server's to check.
func (c *Config) TenantTokens(getenv func(string) string) (map[string][]string, error) {
	out := make(map[string][]string, len(c.Serve.Tenants))
	owner := map[string]string{}
	for _, name := range sortedKeys(c.Serve.Tenants) {
		t := c.Serve.Tenants[name]
		seen := map[string]bool{}
		for _, tok := range strings.Split(getenv(t.TokensEnv), ",") {
			if tok = strings.TrimSpace(tok); tok == "" || seen[tok] {
				continue
			}
			seen[tok] = true
			if other, dup := owner[tok]; dup {
				o := c.Serve.Tenants[other]
				return nil, &Error{File: c.Path, Line: t.line, Key: "serve.tenants." + name + ".tokens_env",
					Msg: fmt.Sprintf("a token of $%s is also listed for tenant %q (serve.tenants.%s.tokens_env, $%s, line %d): a token belongs to one tenant",
						t.TokensEnv, other, other, o.TokensEnv, o.line)}
			}
			owner[tok] = name
			out[name] = append(out[name], tok)
		}
	}
	return out, nil
}
