package config

import (
	"fmt"
	"regexp"
	"strings"
)

// OCI is the [oci] section: where `agrun pull` stores modules and where
// tools with `oci =` are loaded from.
type OCI struct {
	// Dir is the local module store; "": $XDG_DATA_HOME/agrun/modules
	// (oci.DefaultDir).
	Dir string `toml:"dir"`
}

// Registry is one [registries."HOST:PORT"] section (the key as references
// write the registry: "HOST" or "HOST:PORT").
type Registry struct {
	// Insecure allows plain HTTP to this registry (loopback needs no mark).
	Insecure bool `toml:"insecure"`
	// UsernameEnv and PasswordEnv name the variables holding the
	// credentials; unset: the Docker config file's.
	UsernameEnv string `toml:"username_env"`
	PasswordEnv string `toml:"password_env"`
}

// pinnedRE is a reference with a sha256 digest: HOST/REPO[:TAG]@sha256:HEX
// (oci.ParseRef checks the rest when the tool loads).
var pinnedRE = regexp.MustCompile(`^[^/\s@]+/[^\s@]+@sha256:[0-9a-f]{64}$`)

// checkModule: a tool names exactly one of wasm and oci, and oci is
// pinned to a digest.
// section is "tools" or "plugins".
func checkModule(t Tool, section, name string, errAt func(msg string, key ...string) error) error {
	switch {
	case t.Wasm == "" && t.OCI == "":
		return errAt(`missing "wasm" (the path of the .wasm file) or "oci" (a reference pulled with agrun pull)`, section, name)
	case t.Wasm != "" && t.OCI != "":
		return errAt(`has both "wasm" and "oci"; choose one`, section, name)
	case t.OCI != "" && !pinnedRE.MatchString(t.OCI):
		return errAt(fmt.Sprintf("%q is not pinned to a digest: run `agrun pull %s` and write the line it prints (oci = \"HOST/REPO:TAG@sha256:...\")",
			t.OCI, strings.TrimSpace(t.OCI)), section, name, "oci")
	}
	return nil
}

func (c *Config) checkRegistries(errAt func(msg string, key ...string) error) error {
	for _, h := range c.Serve.AllowedRegistries {
		if !hostRE.MatchString(h) {
			return errAt(fmt.Sprintf("registry %q: want HOST or HOST:PORT, without scheme or path", h), "serve", "allowed_registries")
		}
	}
	for _, host := range sortedKeys(c.Registries) {
		r := c.Registries[host]
		if !hostRE.MatchString(host) {
			return errAt(fmt.Sprintf("registry %q: want HOST or HOST:PORT, without scheme or path", host), "registries", host)
		}
		if (r.UsernameEnv == "") != (r.PasswordEnv == "") {
			return errAt(`needs both "username_env" and "password_env" (or neither: the Docker config's credentials)`, "registries", host)
		}
	}
	return nil
}
