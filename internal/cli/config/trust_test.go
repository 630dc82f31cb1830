package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trustDir is a folder with a config's neighbours: cosign.pub (a key made
// here), a trusted root, a module and its bundle.
func trustDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	priv, _ := x509.MarshalECPrivateKey(k)
	for name, data := range map[string][]byte{
		"cosign.pub":         pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}),
		"cosign.key":         pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: priv}),
		"bad.pub":            []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"),
		"trusted_root.json":  []byte(`{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`),
		"tool.wasm":          []byte("\x00asm\x01\x00\x00\x00"),
		"tool.sigstore.json": []byte(`{}`),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestTrustKeys(t *testing.T) {
	dir := trustDir(t)
	c, err := Parse(filepath.Join(dir, "agrun.toml"), []byte(`
[trust]
keys = ["cosign.pub"]
trusted_root = "trusted_root.json"
identities = [{ issuer = "https://token.actions.githubusercontent.com", subject = "https://github.com/acme/tools/.github/workflows/release.yml@refs/tags/v1" }]
require_signature = true

[tools.signed]
wasm = "tool.wasm"
signature = "tool.sigstore.json"

[tools.unchecked]
wasm = "tool.wasm"
require_signature = false

[tools.remote]
oci = "`+pin+`"
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Trust.KeyPEMs) != 1 || !strings.HasPrefix(string(c.Trust.KeyPEMs[0]), "-----BEGIN PUBLIC KEY") || c.Trust.Keys[0] != filepath.Join(dir, "cosign.pub") {
		t.Errorf("keys %q, read %d", c.Trust.Keys, len(c.Trust.KeyPEMs))
	}
	if len(c.Trust.TrustedRootJSON) == 0 || len(c.Trust.Identities) != 1 {
		t.Errorf("trusted root %q, identities %v", c.Trust.TrustedRoot, c.Trust.Identities)
	}
	if c.Tools["signed"].Signature != filepath.Join(dir, "tool.sigstore.json") {
		t.Errorf("signature %q, want it relative to the config", c.Tools["signed"].Signature)
	}
	for name, want := range map[string]bool{"signed": true, "unchecked": false, "remote": true} {
		if got := c.SignatureRequired(c.Tools[name]); got != want {
			t.Errorf("SignatureRequired(%s) = %v, want %v", name, got, want)
		}
	}
	if c, err := Parse(filepath.Join(dir, "agrun.toml"), []byte("[tools.x]\nwasm = \"tool.wasm\"\n")); err != nil || c.SignatureRequired(c.Tools["x"]) {
		t.Errorf("without [trust]: %v, required %v", err, c.SignatureRequired(c.Tools["x"]))
	}
}

// TestTrustErrors: each mistake is an *Error at its key's line.
func TestTrustErrors(t *testing.T) {
	dir := trustDir(t)
	for _, c := range []struct {
		name, toml, key, msg string
		line                 int
	}{
		{"a missing key file", "[trust]\nkeys = [\"nope.pub\"]\n", "trust.keys", "nope.pub: no such file or directory", 2},
		{"bad PEM", "\n[trust]\nkeys = [\"tool.wasm\"]\n", "trust.keys", "tool.wasm: not a PEM public key", 3},
		{"a broken public key", "[trust]\nkeys = [\"cosign.pub\", \"bad.pub\"]\n", "trust.keys", "bad.pub: not a valid public key", 2},
		{"the private key", "[trust]\nkeys = [\"cosign.key\"]\n", "trust.keys", `a PEM "EC PRIVATE KEY" block, not a PUBLIC KEY`, 2},
		{"require_signature without keys", "[trust]\nrequire_signature = true\n", "trust.require_signature", `needs "keys"`, 2},
		{"a tool's require_signature without keys", "[tools.x]\nwasm = \"tool.wasm\"\nrequire_signature = true\n", "tools.x.require_signature", `needs [trust] "keys"`, 3},
		{"a wasm file required signed without a bundle", "[trust]\nkeys = [\"cosign.pub\"]\n[tools.x]\nwasm = \"tool.wasm\"\nrequire_signature = true\n", "tools.x.require_signature", `add signature = "FILE.sigstore.json"`, 5},
		{"signature on an oci tool", "[trust]\nkeys = [\"cosign.pub\"]\n[tools.x]\noci = \"" + pin + "\"\nsignature = \"tool.sigstore.json\"\n", "tools.x.signature", "an oci tool's signatures are pulled with it", 5},
		{"a bundle without keys", "[tools.x]\nwasm = \"tool.wasm\"\nsignature = \"tool.sigstore.json\"\n", "tools.x.signature", `needs [trust] "keys"`, 3},
		{"a missing bundle", "[trust]\nkeys = [\"cosign.pub\"]\n[tools.x]\nwasm = \"tool.wasm\"\nsignature = \"tool.wasm.sigstore.json\"\n", "tools.x.signature", "tool.wasm.sigstore.json: no such file or directory", 5},
		{"identities without a trusted root", "[trust]\nkeys = [\"cosign.pub\"]\nidentities = [{ issuer = \"i\", subject = \"s\" }]\n", "trust.identities", `need "trusted_root"`, 3},
		{"an identity without a subject", "[trust]\ntrusted_root = \"trusted_root.json\"\nidentities = [{ issuer = \"i\" }]\n", "trust.identities", `needs "issuer"`, 3},
		{"a trusted root that is not one", "[trust]\ntrusted_root = \"cosign.pub\"\n", "trust.trusted_root", "not a sigstore trusted root", 2},
		{"a device", "[trust]\nkeys = [\"/dev/zero\"]\n", "trust.keys", "/dev/zero: not a regular file", 2},
		{"an unknown key", "[trust]\nkey = \"cosign.pub\"\n", "trust.key", "unknown key", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "agrun.toml"), []byte(c.toml))
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != c.key || ce.Line != c.line || !strings.Contains(ce.Msg, c.msg) {
				t.Fatalf("got %v (%#v), want %s at line %d: ...%s...", err, ce, c.key, c.line, c.msg)
			}
		})
	}
}
