package config

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Trust is the [trust] section: whose signatures a module may carry
// (oci/sigverify checks them, offline, each time a tool loads).
type Trust struct {
	// Keys are PEM public key files (cosign.pub, as cosign
	// generate-key-pair writes it: ECDSA, or RSA, Ed25519).
	Keys []string `toml:"keys"`
	// TrustedRoot is a sigstore trusted_root.json: keyless signatures
	// (sigstore bundles with a Fulcio certificate) are accepted from
	// Identities, checked against it offline.
	TrustedRoot string `toml:"trusted_root"`
	// Identities are the keyless signers accepted with TrustedRoot.
	Identities []Identity `toml:"identities"`
	// RequireSignature refuses every tool whose module has no valid
	// signature by one of Keys (or an Identity); a tool's own
	// require_signature overrides it.
	RequireSignature bool `toml:"require_signature"`

	// KeyPEMs and TrustedRootJSON are the files' contents, read once by
	// Parse (so that what was checked is what is used).
	KeyPEMs         [][]byte `toml:"-"`
	TrustedRootJSON []byte   `toml:"-"`
}

// Identity is one keyless signer: its certificate's OIDC issuer and
// subject (the SAN: an e-mail address, or a CI workflow's URI), both
// exact.
type Identity struct {
	Issuer  string `toml:"issuer"`
	Subject string `toml:"subject"`
}

// Trusts reports whether [trust] names anything to verify with.
func (t Trust) Trusts() bool { return len(t.Keys) > 0 || t.TrustedRoot != "" }

// SignatureRequired reports whether the tool t must carry a valid
// signature: its require_signature if set, else [trust]'s.
func (c *Config) SignatureRequired(t Tool) bool {
	if t.RequireSignature != nil {
		return *t.RequireSignature
	}
	return c.Trust.RequireSignature
}

// maxTrustFile bounds a key or trusted root file (the public-good
// trusted root is about 10 KiB).
const maxTrustFile = 1 << 20

// checkTrust resolves [trust]'s paths and the tools' signature files
// against dir, reads the files and checks them and the
// require_signature keys.
func (c *Config) checkTrust(dir string, errAt func(msg string, key ...string) error) error {
	t := &c.Trust
	for i, k := range t.Keys {
		t.Keys[i] = absPath(dir, k)
		b, err := readTrustFile(t.Keys[i])
		if err == nil {
			err = checkPublicKey(b)
		}
		if err != nil {
			return errAt(fmt.Sprintf("%s: %v", k, err), "trust", "keys")
		}
		t.KeyPEMs = append(t.KeyPEMs, b)
	}
	if t.TrustedRoot != "" {
		name := t.TrustedRoot
		t.TrustedRoot = absPath(dir, name)
		b, err := readTrustFile(t.TrustedRoot)
		if err == nil {
			var v struct {
				MediaType string `json:"mediaType"`
			}
			if json.Unmarshal(b, &v) != nil || !strings.HasPrefix(v.MediaType, "application/vnd.dev.sigstore.trustedroot") {
				err = fmt.Errorf("not a sigstore trusted root (JSON with mediaType application/vnd.dev.sigstore.trustedroot...; `cosign trusted-root create`, or sigstore's TUF repository, writes one)")
			}
		}
		if err != nil {
			return errAt(fmt.Sprintf("%s: %v", name, err), "trust", "trusted_root")
		}
		t.TrustedRootJSON = b
	}
	for _, id := range t.Identities {
		switch {
		case t.TrustedRoot == "":
			return errAt(`keyless identities need "trusted_root" (the sigstore trusted_root.json their certificates chain to)`, "trust", "identities")
		case id.Issuer == "" || id.Subject == "":
			return errAt(`each identity needs "issuer" (the OIDC issuer URL) and "subject" (the e-mail or workflow URI signed as)`, "trust", "identities")
		}
	}
	if t.RequireSignature && !t.Trusts() {
		return errAt(`needs "keys" (cosign.pub files) or "trusted_root" to verify signatures with`, "trust", "require_signature")
	}
	for _, sec := range []struct {
		name  string
		tools map[string]Tool
	}{{"tools", c.Tools}, {"plugins", c.Plugins}} {
		for _, name := range sortedKeys(sec.tools) {
			tool := sec.tools[name]
			if tool.RequireSignature != nil && *tool.RequireSignature && !t.Trusts() {
				return errAt(`needs [trust] "keys" (cosign.pub files) or "trusted_root" to verify signatures with`, sec.name, name, "require_signature")
			}
			if tool.Signature == "" {
				if tool.Wasm != "" && tool.RequireSignature != nil && *tool.RequireSignature {
					return errAt(`a wasm file's signature is a sigstore bundle beside it: add signature = "FILE.sigstore.json" (an oci tool's signatures are pulled with it)`, sec.name, name, "require_signature")
				}
				continue
			}
			if tool.OCI != "" {
				return errAt(`is for wasm = FILE; an oci tool's signatures are pulled with it (agrun pull)`, sec.name, name, "signature")
			}
			if !t.Trusts() {
				return errAt(`needs [trust] "keys" (cosign.pub files) or "trusted_root" to verify the bundle with`, sec.name, name, "signature")
			}
			sig := tool.Signature
			tool.Signature = absPath(dir, sig)
			if fi, err := os.Stat(tool.Signature); err != nil || !fi.Mode().IsRegular() {
				if err == nil {
					err = errors.New("not a regular file")
				}
				return errAt(fmt.Sprintf("%s: %v", sig, statError(err)), sec.name, name, "signature")
			}
			sec.tools[name] = tool
		}
	}
	return nil
}

// readTrustFile reads a key or trusted root file: a regular file (a FIFO
// or a device would block or never end) of at most maxTrustFile bytes.
func readTrustFile(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, statError(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file")
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, statError(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTrustFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTrustFile {
		return nil, fmt.Errorf("over %d bytes", maxTrustFile)
	}
	return b, nil
}

// statError is err without the path (the message names the file as
// written).
func statError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// checkPublicKey: a PEM "PUBLIC KEY" block holding an ECDSA, RSA or
// Ed25519 key (what oci/sigverify.ParsePublicKey takes).
func checkPublicKey(b []byte) error {
	blk, _ := pem.Decode(b)
	switch {
	case blk == nil:
		return fmt.Errorf("not a PEM public key (want a -----BEGIN PUBLIC KEY----- block, as cosign.pub)")
	case blk.Type != "PUBLIC KEY":
		return fmt.Errorf("a PEM %q block, not a PUBLIC KEY (configure the public half: cosign.pub)", blk.Type)
	}
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return fmt.Errorf("not a valid public key: %v", err)
	}
	switch pub.(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("a %T key; want ECDSA, RSA or Ed25519", pub)
}

// absPath resolves p as resolvePaths does: relative to dir, "~/" to the
// home folder.
func absPath(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, rest)
		}
	}
	return filepath.Join(dir, p)
}
