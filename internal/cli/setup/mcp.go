package setup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/mcp"
)

// MCPTransport is how [mcp.name] is reached: a stdio command, or
// streamable HTTP with its headers (headers_env read now: an unset
// variable is a configuration error) and OAuth with the tokens `agrun mcp
// login` stored (no person takes part here: a server that needs a new
// authorization fails with mcp.ErrLoginRequired).
func MCPTransport(name string, s config.MCPServer) (mcp.Transport, error) {
	if s.URL == "" {
		var envv []string
		for k, v := range s.Env {
			envv = append(envv, k+"="+v)
		}
		slices.Sort(envv)
		return mcp.Stdio{Command: s.Command, Args: s.Args, Env: envv, Dir: s.Dir}, nil
	}
	h := mcp.HTTP{URL: s.URL, Headers: maps.Clone(s.Headers)}
	for header, v := range s.HeadersEnv {
		val, ok := os.LookupEnv(v)
		if !ok || val == "" {
			return nil, &ConfigError{fmt.Errorf("[mcp.%s] headers_env: %s is not set (it holds the %s header)", name, v, header)}
		}
		if h.Headers == nil {
			h.Headers = map[string]string{}
		}
		h.Headers[header] = val
	}
	if s.OAuth != nil {
		o, err := mcpOAuth(name, s)
		if err != nil {
			return nil, err
		}
		h.OAuth = o
	}
	return h, nil
}

// mcpOAuth is the OAuth of [mcp.name], its tokens in MCPTokenPath.
func mcpOAuth(name string, s config.MCPServer) (*mcp.OAuth, error) {
	o := &mcp.OAuth{ClientID: s.OAuth.ClientID, ClientMetadataURL: s.OAuth.ClientMetadataURL, AllowPrivate: s.OAuth.AllowPrivate}
	if v := s.OAuth.ClientSecretEnv; v != "" {
		o.ClientSecret = os.Getenv(v)
		if o.ClientSecret == "" {
			return nil, &ConfigError{fmt.Errorf("[mcp.%s] oauth.client_secret_env: %s is not set", name, v)}
		}
	}
	if s.OAuth.ClientCredentials {
		// A machine client: a new token when needed, none stored.
		o.ClientCredentials = true
		if f := s.OAuth.PrivateKeyFile; f != "" {
			key, err := os.ReadFile(f)
			if err != nil {
				return nil, &ConfigError{fmt.Errorf("[mcp.%s] oauth.private_key_file: %w", name, err)}
			}
			o.PrivateKey = key
		}
		return o, nil
	}
	p, err := MCPTokenPath(name, s.URL)
	if err != nil {
		return nil, err
	}
	o.Tokens = mcp.FileTokens{Path: p}
	return o, nil
}

// MCPTokenPath is where the OAuth tokens of [mcp.name] at url are kept:
// the user's config directory (agrun/mcp-tokens/NAME-HASH.json, 0600;
// the hash of the URL, so that another server under the same name never
// gets them).
func MCPTokenPath(name, url string) (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no user config directory for the OAuth tokens: %w", err)
	}
	sum := sha256.Sum256([]byte(url))
	return filepath.Join(dir, "agrun", "mcp-tokens", name+"-"+hex.EncodeToString(sum[:4])+".json"), nil
}

// mcpHint is what to do about an MCP server's connection error err, or "".
func mcpHint(name string, s config.MCPServer, err error) string {
	switch {
	case errors.Is(err, mcp.ErrLoginRequired):
		return fmt.Sprintf("run `agrun mcp login %s` once, on a machine with a browser", name)
	case errors.Is(err, mcp.ErrUnauthorized) && s.OAuth == nil:
		return fmt.Sprintf("add oauth = {} to [mcp.%s] and run `agrun mcp login %s`, or give a token with [mcp.%s] headers_env", name, name, name)
	}
	return ""
}
