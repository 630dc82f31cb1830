package config

import (
	"fmt"
	"regexp"
	"strings"
)

// MCPOAuth is [mcp.NAME] oauth: the server is authorized with OAuth 2.1
// as MCP's authorization specification says; `agrun mcp login NAME` runs
// the browser step once and keeps the tokens in the user's config
// directory (never in agrun.toml). An empty table (oauth = {}) registers
// agrun with the authorization server by itself (dynamic registration,
// or a client ID metadata document with client_metadata_url).
type MCPOAuth struct {
	// ClientID is a client registered with the authorization server
	// beforehand; ClientSecretEnv the variable holding its secret (a
	// confidential client).
	ClientID        string `toml:"client_id"`
	ClientSecretEnv string `toml:"client_secret_env"`
	// ClientMetadataURL is the HTTPS URL of a client ID metadata document
	// to use as client_id where the server supports it.
	ClientMetadataURL string `toml:"client_metadata_url"`
	// RedirectPort is the loopback port of the login's redirect
	// (http://127.0.0.1:PORT/callback), for a client registered with a
	// fixed one; 0: any free port.
	RedirectPort int `toml:"redirect_port"`
	// AllowPrivate lets the authorization requests (metadata,
	// registration, tokens) reach loopback and private addresses for a
	// server that is not itself on one.
	AllowPrivate bool `toml:"allow_private"`
	// ClientCredentials authorizes agrun as a machine client with the
	// client credentials grant: no login, no person; it needs ClientID
	// and ClientSecretEnv or PrivateKeyFile.
	ClientCredentials bool `toml:"client_credentials"`
	// PrivateKeyFile is the PEM private key that signs the client's
	// assertion (private_key_jwt), relative to the config's folder; the
	// file holds the secret, agrun.toml only its path.
	PrivateKeyFile string `toml:"private_key_file"`
}

// Sampling bounds of [mcp.NAME] (docs/MCP.md, "Sampling").
const (
	// DefaultSamplingRunTokens is sampling_max_run_tokens when unset.
	DefaultSamplingRunTokens = 16384
	// MaxSamplingTokens is the most sampling_max_tokens may be.
	MaxSamplingTokens = 32768
)

// checkMCPSampling checks sampling, sampling_max_tokens and
// sampling_max_run_tokens of [mcp.name].
func checkMCPSampling(name string, s MCPServer, errAt func(msg string, key ...string) error) error {
	switch {
	case s.Sampling != "" && s.Sampling != "ask" && s.Sampling != "allow" && s.Sampling != "deny":
		return errAt(`must be "ask", "allow" or "deny"`, "mcp", name, "sampling")
	case s.SamplingMaxTokens < 0 || s.SamplingMaxTokens > MaxSamplingTokens:
		return errAt(fmt.Sprintf("must be 1 to %d tokens (0: 1024)", MaxSamplingTokens), "mcp", name, "sampling_max_tokens")
	case s.SamplingMaxRunTokens < 0:
		return errAt(fmt.Sprintf("must be positive (0: %d)", DefaultSamplingRunTokens), "mcp", name, "sampling_max_run_tokens")
	}
	return nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkMCPAuth checks headers_env and oauth of [mcp.name].
func checkMCPAuth(name string, s MCPServer, errAt func(msg string, key ...string) error) error {
	for _, h := range sortedKeys(s.HeadersEnv) {
		if !envNameRE.MatchString(s.HeadersEnv[h]) {
			return errAt(fmt.Sprintf("header %q: %q is not a variable name", h, s.HeadersEnv[h]), "mcp", name, "headers_env")
		}
		if _, dup := s.Headers[h]; dup {
			return errAt(fmt.Sprintf("header %q is in headers too; keep one", h), "mcp", name, "headers_env")
		}
	}
	if (len(s.HeadersEnv) > 0 || s.OAuth != nil) && s.URL == "" {
		key := "oauth"
		if len(s.HeadersEnv) > 0 {
			key = "headers_env"
		}
		return errAt("is for a streamable-HTTP server (url = ...), not a command", "mcp", name, key)
	}
	o := s.OAuth
	if o == nil {
		return nil
	}
	switch {
	case o.ClientSecretEnv != "" && o.ClientID == "":
		return errAt("client_secret_env needs client_id (the client the secret belongs to)", "mcp", name, "oauth", "client_secret_env")
	case o.ClientSecretEnv != "" && !envNameRE.MatchString(o.ClientSecretEnv):
		return errAt(fmt.Sprintf("%q is not a variable name", o.ClientSecretEnv), "mcp", name, "oauth", "client_secret_env")
	case o.ClientMetadataURL != "" && (!strings.HasPrefix(o.ClientMetadataURL, "https://") || strings.Count(o.ClientMetadataURL, "/") < 3 || strings.HasSuffix(o.ClientMetadataURL, "://")):
		return errAt("must be an https:// URL with a path (a client ID metadata document)", "mcp", name, "oauth", "client_metadata_url")
	case o.RedirectPort < 0 || o.RedirectPort > 65535:
		return errAt("must be a port, 1 to 65535 (0: any free port)", "mcp", name, "oauth", "redirect_port")
	case o.PrivateKeyFile != "" && !o.ClientCredentials:
		return errAt("is for the client credentials grant (client_credentials = true)", "mcp", name, "oauth", "private_key_file")
	case o.ClientCredentials && o.ClientID == "":
		return errAt("client_credentials needs client_id (the client registered for agrun)", "mcp", name, "oauth", "client_credentials")
	case o.ClientCredentials && (o.ClientSecretEnv == "") == (o.PrivateKeyFile == ""):
		return errAt("client_credentials needs client_secret_env (a secret) or private_key_file (a signed assertion), one of them", "mcp", name, "oauth", "client_credentials")
	case o.ClientCredentials && (o.ClientMetadataURL != "" || o.RedirectPort != 0):
		return errAt("client_credentials has no login: client_metadata_url and redirect_port do not apply", "mcp", name, "oauth", "client_credentials")
	}
	return nil
}
