package config

import (
	"errors"
	"strings"
	"testing"
)

const tenantsTOML = `[serve.tenants.acme]
tokens_env = "ACME_TOKENS"
max_modules = 50
max_storage = "256MiB"
max_concurrent_calls = 4
calls_per_minute = 600
[serve.tenants.acme.uploads]
allowed_hosts = ["api.acme.example"]

[serve.tenants.globex]
tokens_env = "GLOBEX_TOKENS"
`

// TestTenants: [serve.tenants.NAME] decodes with its quotas and ceiling;
// a tenant without an uploads table is granted nothing.
func TestTenants(t *testing.T) {
	c, err := Parse("agrun.toml", []byte(tenantsTOML))
	if err != nil {
		t.Fatal(err)
	}
	a, g := c.Serve.Tenants["acme"], c.Serve.Tenants["globex"]
	if a.TokensEnv != "ACME_TOKENS" || a.MaxModules != 50 || a.MaxStorage != 256<<20 || a.MaxConcurrentCalls != 4 || a.CallsPerMinute != 600 {
		t.Errorf("acme = %+v", a)
	}
	if len(a.Uploads.AllowedHosts) != 1 || a.Uploads.AllowedHosts[0] != "api.acme.example" {
		t.Errorf("acme's ceiling = %+v", a.Uploads)
	}
	if uploadsSet(g.Uploads) {
		t.Errorf("globex has no uploads table but a ceiling %+v", g.Uploads)
	}
}

// TestTenantErrors: every mistake is an *Error with the key and its line.
func TestTenantErrors(t *testing.T) {
	for _, c := range []struct {
		name, toml, key string
		line            int
	}{
		{"unknown key", "[serve.tenants.a]\ntokens_env = \"A\"\nmax_moduls = 3\n", "serve.tenants.a.max_moduls", 3},
		{"unknown uploads key", "[serve.tenants.a]\ntokens_env = \"A\"\n[serve.tenants.a.uploads]\nhosts = []\n", "serve.tenants.a.uploads.hosts", 4},
		{"no tokens_env", "[serve.tenants.a]\nmax_modules = 3\n", "serve.tenants.a", 1},
		{"bad name", "[serve.tenants.\"A/../b\"]\ntokens_env = \"A\"\n", "serve.tenants.\"A/../b\"", 1},
		{"negative", "[serve.tenants.a]\ntokens_env = \"A\"\ncalls_per_minute = -1\n", "serve.tenants.a.calls_per_minute", 3},
		{"bad host", "[serve.tenants.a]\ntokens_env = \"A\"\n[serve.tenants.a.uploads]\nallowed_hosts = [\"http://x\"]\n", "serve.tenants.a.uploads.allowed_hosts", 4},
		{"serve tokens_env beside tenants", "[serve]\ntokens_env = \"T\"\n[serve.tenants.a]\ntokens_env = \"A\"\n", "serve.tokens_env", 2},
		{"serve uploads beside tenants", "[serve.uploads]\nallow_private = true\n[serve.tenants.a]\ntokens_env = \"A\"\n", "serve.uploads", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("agrun.toml", []byte(c.toml))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			if ce.Key != c.key || ce.Line != c.line {
				t.Errorf("error %q: key %q line %d, want %q line %d", err, ce.Key, ce.Line, c.key, c.line)
			}
		})
	}
}

// TestTenantTokens: each tenant's tokens from its variable; a token
// listed for two tenants is an error naming both keys and lines.
func TestTenantTokens(t *testing.T) {
	c, err := Parse("agrun.toml", []byte(tenantsTOML))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ACME_TOKENS": " a-token-of-acme-1 , a-token-of-acme-2,a-token-of-acme-1,", "GLOBEX_TOKENS": "a-token-of-globex"}
	got, err := c.TenantTokens(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got["acme"], ",") != "a-token-of-acme-1,a-token-of-acme-2" || strings.Join(got["globex"], ",") != "a-token-of-globex" {
		t.Errorf("tokens = %q", got)
	}
	env["GLOBEX_TOKENS"] = "x-token-of-globex,a-token-of-acme-2"
	_, err = c.TenantTokens(func(k string) string { return env[k] })
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "serve.tenants.globex.tokens_env" || ce.Line != 11 ||
		!strings.Contains(ce.Msg, "serve.tenants.acme.tokens_env") || !strings.Contains(ce.Msg, "line 2") {
		t.Fatalf("a token of two tenants: %v", err)
	}
	if strings.Contains(err.Error(), "a-token-of-acme-2") {
		t.Errorf("the message shows the token: %v", err)
	}
}

// TestTenantsInClusterMode: tenants and [cluster] go together (issue 27
// item 3: each tenant's uploads are kept apart in the shared store).
func TestTenantsInClusterMode(t *testing.T) {
	c, err := Parse("agrun.toml", []byte("[cluster]\ntemporal_address = \"127.0.0.1:7233\"\nmodule_store = \"/tmp/x\"\n[serve.tenants.a]\ntokens_env = \"A\"\nmax_modules = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Cluster.Enabled() || c.Serve.Tenants["a"].MaxModules != 2 {
		t.Errorf("cluster %+v, tenants %+v", c.Cluster, c.Serve.Tenants)
	}
}
