// Package sigverify checks the signatures of a module, offline, against
// the public keys (and, for keyless signatures, the sigstore trusted
// root) an operator trusts (issue 26, design.md "Extism plug-ins and
// OCI"). It verifies what package oci kept in its store when it pulled
// the module, so that a requirement is enforced every time a tool loads,
// with no network:
//
//	v, err := sigverify.New(sigverify.Options{Keys: [][]byte{cosignPub}})
//	sigs, err := st.Signatures(ctx, digest) // what agrun pull kept
//	err = v.VerifyManifest(digest, sigs)     // nil: signed by a trusted key
//
// and a module file with a sigstore bundle beside it:
//
//	err = v.VerifyBlob(wasm, bundleJSON)
//
// # What is verified
//
//   - A cosign key-pair signature (the sha256-<hex>.sig tag): the
//     signature over the simple-signing payload, with one of the keys
//     (ECDSA P-256/P-384/P-521 with SHA-256, as cosign signs; RSA
//     PKCS#1 v1.5; Ed25519), then the payload's
//     critical.image.docker-manifest-digest, which must be the manifest's
//     digest. Its docker-reference (the repository signed) is not
//     compared: a module copied to another registry keeps its signature,
//     as cosign verify allows.
//   - A sigstore bundle (a referrer of the manifest, or a file beside a
//     module): with sigstore-go, against the keys (no timestamp needed:
//     a key has no validity period here), or, for a keyless bundle (a
//     Fulcio certificate), against the trusted root file and one of the
//     configured identities, with its transparency log entry, an
//     observer timestamp and (if the trusted root lists CT logs) its
//     signed certificate timestamp all checked offline from the trusted
//     root's keys. The artifact is the manifest
//     digest (or the file's SHA-256).
//
// Nothing here reaches the network: revocation (a key withdrawn after it
// signed) is not checked, and a trusted root is as fresh as its file.
//
// A Verifier is immutable and safe for concurrent use.
package sigverify

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/oci"
)

// Sentinel errors, wrapped in an *Error: match them with errors.Is.
var (
	// ErrUnsigned: the module has no signature at all.
	ErrUnsigned = errors.New("no signature")
	// ErrUntrusted: no signature verifies with a trusted key (or, keyless,
	// with the trusted root and an accepted identity).
	ErrUntrusted = errors.New("not signed by a trusted key")
	// ErrOtherArtifact: a signature verifies, but it signs another
	// manifest (or file) than this one.
	ErrOtherArtifact = errors.New("the signature is for another artifact")
	// ErrKey: a public key or a trusted root that cannot be used.
	ErrKey = errors.New("not a usable public key")
)

// Error is a refused module: the cause (one of the sentinels) and what
// was found, e.g. "not signed by a trusted key: 2 signatures checked
// against 1 key (...)".
type Error struct {
	Err    error
	Detail string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Detail
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// Identity is a keyless signer accepted with a trusted root: the OIDC
// issuer of its certificate and its subject (the certificate's SAN: an
// e-mail address or, for a CI workflow, its URI), both compared exactly.
type Identity struct {
	Issuer  string
	Subject string
}

// Options are what a Verifier trusts.
type Options struct {
	// Keys are PEM public keys ("PUBLIC KEY" blocks, as cosign
	// generate-key-pair writes cosign.pub).
	Keys [][]byte
	// TrustedRoot is a sigstore trusted_root.json (the public-good one is
	// what `cosign trusted-root` or sigstore's TUF repository publishes);
	// nil: keyless signatures are not accepted.
	TrustedRoot []byte
	// Identities are the keyless signers accepted with TrustedRoot; a
	// keyless bundle by any other identity is refused.
	Identities []Identity
}

// Verifier checks signatures against Options. The zero value trusts
// nothing: every module is refused.
type Verifier struct {
	keys       []key
	keyless    *verify.Verifier // nil without a trusted root
	identities []verify.CertificateIdentity
}

var timeZero time.Time // a key's validity: no start, no end

type key struct {
	verifier signature.Verifier
	bundles  *verify.Verifier // the same key as trusted material for bundles
}

// New returns the Verifier of opts; a key or a trusted root that cannot
// be parsed is an *Error wrapping ErrKey.
func New(opts Options) (*Verifier, error) {
	v := &Verifier{}
	for i, p := range opts.Keys {
		sv, err := LoadKey(p)
		if err != nil {
			return nil, &Error{Err: ErrKey, Detail: fmt.Sprintf("key %d: %v", i+1, err)}
		}
		ek := root.NewExpiringKey(sv, timeZero, timeZero)
		tm := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) { return ek, nil })
		bv, err := verify.NewVerifier(tm, verify.WithNoObserverTimestamps())
		if err != nil {
			return nil, &Error{Err: ErrKey, Detail: err.Error()}
		}
		v.keys = append(v.keys, key{verifier: sv, bundles: bv})
	}
	if opts.TrustedRoot != nil {
		tr, err := root.NewTrustedRootFromJSON(opts.TrustedRoot)
		if err != nil {
			return nil, &Error{Err: ErrKey, Detail: "the trusted root: " + textsafe.Clean(err.Error(), 300)}
		}
		vopts := []verify.VerifierOption{verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1)}
		if len(tr.CTLogs()) > 0 { // a private instance may run no CT log
			vopts = append(vopts, verify.WithSignedCertificateTimestamps(1))
		}
		kv, err := verify.NewVerifier(tr, vopts...)
		if err != nil {
			return nil, &Error{Err: ErrKey, Detail: err.Error()}
		}
		v.keyless = kv
		for _, id := range opts.Identities {
			ci, err := verify.NewShortCertificateIdentity(id.Issuer, "", id.Subject, "")
			if err != nil {
				return nil, &Error{Err: ErrKey, Detail: fmt.Sprintf("identity %q: %v", id.Subject, err)}
			}
			v.identities = append(v.identities, ci)
		}
	}
	return v, nil
}

// LoadKey parses a PEM public key (ECDSA, RSA or Ed25519, PKIX "PUBLIC
// KEY" as cosign writes it) into a verifier (SHA-256 for ECDSA and RSA).
func LoadKey(p []byte) (signature.Verifier, error) {
	pub, err := ParsePublicKey(p)
	if err != nil {
		return nil, err
	}
	return signature.LoadVerifier(pub, crypto.SHA256)
}

// ParsePublicKey parses a PEM "PUBLIC KEY" block (PKIX) holding an
// ECDSA, RSA or Ed25519 key.
func ParsePublicKey(p []byte) (crypto.PublicKey, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("not PEM (want a -----BEGIN PUBLIC KEY----- block, as cosign.pub)")
	}
	if b.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("a PEM %q block, not a PUBLIC KEY (a private key is never configured: give cosign.pub)", textsafe.Clean(b.Type, 40))
	}
	pub, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a PKIX public key: %v", err)
	}
	switch pub.(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
		return pub, nil
	}
	return nil, fmt.Errorf("a %T key; want ECDSA, RSA or Ed25519", pub)
}

// VerifyManifest checks that at least one of sigs (what oci.Store.Signatures
// returns for digest) is a valid signature of the manifest digest
// ("sha256:<hex>") by a trusted signer. Every refusal is an *Error:
// ErrUnsigned (no signatures), ErrOtherArtifact (only signatures of
// other manifests verify), else ErrUntrusted.
func (v *Verifier) VerifyManifest(digest string, sigs []oci.Signature) error {
	want, ok := strings.CutPrefix(digest, "sha256:")
	sum, err := hex.DecodeString(want)
	if !ok || err != nil || len(sum) != sha256.Size {
		return &Error{Err: ErrOtherArtifact, Detail: fmt.Sprintf("%q is not a sha256 digest", textsafe.Clean(digest, 100))}
	}
	if len(sigs) == 0 {
		return &Error{Err: ErrUnsigned, Detail: "the registry published none for " + digest + " when it was pulled (cosign's " + oci.CosignTag(digest) + " tag, or a sigstore bundle referrer)"}
	}
	var fails []error
	for _, s := range sigs {
		var err error
		if s.Bundle != nil {
			err = v.bundle(s.Bundle, verify.WithArtifactDigest("sha256", sum))
		} else {
			err = v.cosign(s, digest)
		}
		if err == nil {
			return nil
		}
		fails = append(fails, err)
	}
	return v.refusal(len(sigs), fails)
}

// VerifyBlob checks that bundle (a sigstore bundle's JSON) is a valid
// signature of artifact by a trusted signer. Refusals are as
// VerifyManifest's.
func (v *Verifier) VerifyBlob(artifact, bundleJSON []byte) error {
	if len(bundleJSON) == 0 {
		return &Error{Err: ErrUnsigned, Detail: "an empty bundle"}
	}
	sum := sha256.Sum256(artifact)
	if err := v.bundle(bundleJSON, verify.WithArtifactDigest("sha256", sum[:])); err != nil {
		return v.refusal(1, []error{err})
	}
	return nil
}

// refusal is the error of n signatures that all failed: ErrOtherArtifact
// if every failure was a good signature of something else.
func (v *Verifier) refusal(n int, fails []error) error {
	other := true
	for _, f := range fails {
		other = other && errors.Is(f, ErrOtherArtifact)
	}
	what := fmt.Sprintf("%d signature%s checked against %d key%s", n, plural(n), len(v.keys), plural(len(v.keys)))
	if v.keyless != nil {
		what += fmt.Sprintf(" and the trusted root (%d identit%s)", len(v.identities), map[bool]string{true: "y", false: "ies"}[len(v.identities) == 1])
	}
	if other {
		return &Error{Err: ErrOtherArtifact, Detail: what + "; " + strings.TrimPrefix(fails[0].Error(), ErrOtherArtifact.Error()+": ")}
	}
	var first error
	for _, f := range fails {
		if !errors.Is(f, ErrOtherArtifact) {
			first = f
			break
		}
	}
	return &Error{Err: ErrUntrusted, Detail: what + " (" + textsafe.Clean(first.Error(), 300) + ")"}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// simpleSigning is the payload cosign signs.
type simpleSigning struct {
	Critical struct {
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

// cosign checks one cosign signature: first the signature over the
// payload with each key, then what the verified payload signs.
func (v *Verifier) cosign(s oci.Signature, digest string) error {
	sig, err := base64.StdEncoding.DecodeString(s.Signature)
	if err != nil {
		return fmt.Errorf("the signature annotation is not base64")
	}
	var ok bool
	for _, k := range v.keys {
		if k.verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(s.Payload)) == nil {
			ok = true
			break
		}
	}
	if !ok {
		return errors.New("a cosign signature verifies with none of the keys")
	}
	var p simpleSigning
	if err := json.Unmarshal(s.Payload, &p); err != nil {
		return fmt.Errorf("the signed payload is not simple-signing JSON")
	}
	switch p.Critical.Type {
	case "cosign container image signature", "atomic container signature":
	default:
		return fmt.Errorf("the signed payload's type is %q, not a container image signature", textsafe.Clean(p.Critical.Type, 100))
	}
	if got := p.Critical.Image.DockerManifestDigest; got != digest {
		return fmt.Errorf("%w: it signs manifest %s, not %s", ErrOtherArtifact, textsafe.Clean(got, 100), digest)
	}
	return nil
}

// bundle checks one sigstore bundle against the keys, or, keyless,
// against the trusted root and the identities.
func (v *Verifier) bundle(raw []byte, artifact verify.ArtifactPolicyOption) error {
	var b bundle.Bundle
	if err := b.UnmarshalJSON(raw); err != nil {
		return fmt.Errorf("not a sigstore bundle: %s", textsafe.Clean(err.Error(), 200))
	}
	vc, err := b.VerificationContent()
	if err != nil {
		return fmt.Errorf("the bundle's verification material: %s", textsafe.Clean(err.Error(), 200))
	}
	what := "a bundle signed with a key"
	if vc.Certificate() != nil {
		what = "a keyless bundle"
	}
	err = v.verifyBundle(&b, vc.Certificate() != nil, artifact)
	if err == nil {
		return nil
	}
	msg := textsafe.Clean(err.Error(), 200)
	if !strings.Contains(msg, "artifact digest") && !strings.Contains(msg, "provided artifact") && !strings.Contains(msg, "artifact does not match") {
		return fmt.Errorf("%s: %s", what, msg)
	}
	// sigstore-go compares the artifact before the signature: a bundle of
	// another artifact is one by a trusted signer only if it verifies
	// for the artifact it names itself.
	if self, ok := selfArtifact(&b); ok && v.verifyBundle(&b, vc.Certificate() != nil, self) == nil {
		return fmt.Errorf("%w: %s of another artifact (%s)", ErrOtherArtifact, what, msg)
	}
	return fmt.Errorf("%s of another artifact, and not by a trusted signer (%s)", what, msg)
}

// verifyBundle checks b against the keys, or, keyless, against the
// trusted root and the identities.
func (v *Verifier) verifyBundle(b *bundle.Bundle, keyless bool, artifact verify.ArtifactPolicyOption) error {
	if keyless {
		if v.keyless == nil {
			return errors.New("a keyless bundle (a certificate, no key), and no trusted root is configured")
		}
		if len(v.identities) == 0 {
			return errors.New("a keyless bundle, and no identity is configured to accept")
		}
		var last error
		for _, id := range v.identities {
			if _, last = v.keyless.Verify(b, verify.NewPolicy(artifact, verify.WithCertificateIdentity(id))); last == nil {
				return nil
			}
		}
		return last
	}
	last := errors.New("no key is configured")
	for _, k := range v.keys {
		if _, last = k.bundles.Verify(b, verify.NewPolicy(artifact, verify.WithKey())); last == nil {
			return nil
		}
	}
	return last
}

// selfArtifact is the artifact b names itself: a message signature's
// digest, or, for an envelope (whose signature does not depend on the
// artifact), none at all.
func selfArtifact(b *bundle.Bundle) (verify.ArtifactPolicyOption, bool) {
	sc, err := b.SignatureContent()
	if err != nil {
		return nil, false
	}
	if sc.EnvelopeContent() != nil {
		return verify.WithoutArtifactUnsafe(), true
	}
	m := sc.MessageSignatureContent()
	if m == nil {
		return nil, false
	}
	alg, ok := map[string]string{"SHA2_256": "sha256", "SHA2_384": "sha384", "SHA2_512": "sha512"}[m.DigestAlgorithm()]
	if !ok {
		return nil, false
	}
	return verify.WithArtifactDigest(alg, m.Digest()), true
}

// LoadSigningKey reads a private key file as cosign generate-key-pair
// writes it (cosign.key: an ENCRYPTED SIGSTORE PRIVATE KEY block, sealed
// with password) or an unencrypted PKCS#8, EC or PKCS#1 PEM key, for
// oci.Client.Sign. A wrong password or a file that is no private key is
// an *Error wrapping ErrKey.
func LoadSigningKey(p []byte, password string) (crypto.Signer, error) {
	k, err := cryptoutils.UnmarshalPEMToPrivateKey(p, cryptoutils.StaticPasswordFunc([]byte(password)))
	if err != nil {
		return nil, &Error{Err: ErrKey, Detail: "the private key (a wrong password? cosign's is $COSIGN_PASSWORD): " + textsafe.Clean(err.Error(), 200)}
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, &Error{Err: ErrKey, Detail: fmt.Sprintf("a %T private key cannot sign", k)}
	}
	return s, nil
}
