package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

const pin = "registry.example.com/tools/wc:1.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestOCIKeys(t *testing.T) {
	c, err := Parse("/cfg/agrun.toml", []byte(`
[oci]
dir = "modules"

[registries."localhost:5000"]
insecure = true

[registries."ghcr.io"]
username_env = "GH_USER"
password_env = "GH_TOKEN"

[tools.wc]
oci = "`+pin+`"
sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tools["wc"].OCI != pin || c.Tools["wc"].Wasm != "" {
		t.Errorf("tool %+v", c.Tools["wc"])
	}
	if c.OCI.Dir != filepath.FromSlash("/cfg/modules") {
		t.Errorf("[oci] dir = %q, want it relative to the config", c.OCI.Dir)
	}
	if !c.Registries["localhost:5000"].Insecure || c.Registries["ghcr.io"].PasswordEnv != "GH_TOKEN" {
		t.Errorf("registries %+v", c.Registries)
	}
}

func TestOCIErrors(t *testing.T) {
	for _, tc := range []struct{ name, toml, want string }{
		{"neither", "[tools.wc]\ntimeout = \"1s\"\n", `hostile.toml:1: tools.wc: missing "wasm" (the path of the .wasm file) or "oci"`},
		{"both", "[tools.wc]\nwasm = \"a.wasm\"\noci = \"" + pin + "\"\n", `hostile.toml:1: tools.wc: has both "wasm" and "oci"`},
		{"a tag alone", "[tools.wc]\noci = \"registry.example.com/tools/wc:1.0\"\n",
			"hostile.toml:2: tools.wc.oci: \"registry.example.com/tools/wc:1.0\" is not pinned to a digest: run `agrun pull registry.example.com/tools/wc:1.0` and write the line it prints"},
		{"short digest", "[tools.wc]\noci = \"r.example/wc@sha256:abc\"\n", "tools.wc.oci: \"r.example/wc@sha256:abc\" is not pinned"},
		{"registry with scheme", "[registries.\"https://ghcr.io\"]\ninsecure = true\n", `hostile.toml:1: registries."https://ghcr.io": registry "https://ghcr.io": want HOST or HOST:PORT`},
		{"username without password", "[registries.\"ghcr.io\"]\nusername_env = \"U\"\n", `needs both "username_env" and "password_env"`},
		{"unknown registry key", "[registries.\"ghcr.io\"]\ntoken = \"x\"\n", `hostile.toml:2: registries."ghcr.io".token: unknown key`},
		{"allowed registry with scheme", "[serve]\nallowed_registries = [\"https://ghcr.io\"]\n", `hostile.toml:2: serve.allowed_registries: registry "https://ghcr.io"`},
		{"unknown oci key", "[oci]\ncache = \"x\"\n", `hostile.toml:2: oci.cache: unknown key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("hostile.toml", []byte(tc.toml))
			var ce *Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v\nwant an *Error containing %q", err, tc.want)
			}
		})
	}
}
