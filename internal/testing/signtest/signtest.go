// Package signtest signs modules in tests as cosign does, with keys made
// in the test: a key pair (the public half PEM-encoded as cosign.pub),
// the simple-signing payload of a manifest digest, and its signature
// pushed to a registry under cosign's sha256-<hex>.sig tag with oras-go
// (no agrun code), so that a test of verification does not trust the
// code it tests to make what it checks.
//
//	k := signtest.NewKey(t)
//	os.WriteFile("cosign.pub", k.PublicPEM, 0o644)
//	signtest.PushCosign(t, host, "tools/wc", digest, k.Sign(signtest.Payload(digest)))
package signtest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// Key is a signing key made for one test: ECDSA P-256, as cosign
// generate-key-pair makes.
type Key struct {
	Private *ecdsa.PrivateKey
	// PublicPEM is the public key as cosign.pub holds it.
	PublicPEM []byte
}

// NewKey makes a key pair.
func NewKey(t testing.TB) Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return Key{Private: k, PublicPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})}
}

// Sign signs payload as cosign does (ECDSA over its SHA-256, ASN.1) and
// returns the signature base64-encoded, as cosign's annotation holds it.
func (k Key) Sign(payload []byte) string {
	sum := sha256.Sum256(payload)
	sig, err := k.Private.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		panic(err) // an ECDSA key made by NewKey always signs
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// Payload is the simple-signing payload cosign signs for the manifest
// digest ("sha256:<hex>").
func Payload(digest string) []byte {
	b, _ := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": "example.test/tools"},
			"image":    map[string]string{"docker-manifest-digest": digest},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	return b
}

// Sig is one signature layer: a payload and its base64 signature.
type Sig struct {
	Payload   []byte
	Signature string
}

func repository(t testing.TB, host, repo string) *remote.Repository {
	t.Helper()
	r, err := remote.NewRepository(host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	r.PlainHTTP = true
	return r
}

// Bundle signs data with a new key as sigstore-go signs a blob with a
// key (a message signature, no transparency log) and returns the
// bundle's JSON and the key's public PEM.
func Bundle(t testing.TB, data []byte) (bundleJSON, publicPEM []byte) {
	t.Helper()
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	return BundleWith(t, kp, data), PublicPEM(t, kp)
}

// NewBundleKey makes a key for BundleWith.
func NewBundleKey(t testing.TB) *sign.EphemeralKeypair {
	t.Helper()
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// PublicPEM is kp's public key as cosign.pub holds one.
func PublicPEM(t testing.TB, kp *sign.EphemeralKeypair) []byte {
	t.Helper()
	p, err := kp.GetPublicKeyPem()
	if err != nil {
		t.Fatal(err)
	}
	return []byte(p)
}

// BundleWith signs data with kp into a sigstore bundle's JSON.
func BundleWith(t testing.TB, kp *sign.EphemeralKeypair, data []byte) []byte {
	t.Helper()
	pb, err := sign.Bundle(&sign.PlainData{Data: data}, kp, sign.BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// StatementBundleWith signs, with kp, an in-toto statement whose subject
// is the manifest digest ("sha256:<hex>") in a DSSE envelope, as cosign
// 3 signs an image in its bundle format, and returns the bundle's JSON.
func StatementBundleWith(t testing.TB, kp *sign.EphemeralKeypair, digest string) []byte {
	t.Helper()
	st, _ := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"name": "example.test/tools", "digest": map[string]string{"sha256": strings.TrimPrefix(digest, "sha256:")}}},
		"predicateType": "https://sigstore.dev/cosign/sign/v1",
		"predicate":     map[string]any{},
	})
	pb, err := sign.Bundle(&sign.DSSEData{Data: st, PayloadType: "application/vnd.in-toto+json"}, kp, sign.BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PushBundleReferrer attaches bundleJSON to the manifest subject in
// host/repo as cosign's new bundle format does: an OCI 1.1 manifest of
// artifact type application/vnd.dev.sigstore.bundle.v0.3+json whose one
// layer is the bundle.
func PushBundleReferrer(t testing.TB, host, repo string, subject ocispec.Descriptor, bundleJSON []byte) {
	t.Helper()
	ctx := context.Background()
	r := repository(t, host, repo)
	const mt = "application/vnd.dev.sigstore.bundle.v0.3+json"
	l := content.NewDescriptorFromBytes(mt, bundleJSON)
	if err := r.Push(ctx, l, bytes.NewReader(bundleJSON)); err != nil {
		t.Fatal(err)
	}
	subject = ocispec.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size}
	if _, err := oras.PackManifest(ctx, r, oras.PackManifestVersion1_1, mt, oras.PackManifestOptions{Layers: []ocispec.Descriptor{l}, Subject: &subject}); err != nil {
		t.Fatal(err)
	}
}

// PushCosign pushes sigs as cosign's signature manifest of digest in
// host/repo (plain HTTP: a test registry), tagged sha256-<hex>.sig.
func PushCosign(t testing.TB, host, repo, digest string, sigs ...Sig) {
	t.Helper()
	ctx := context.Background()
	r := repository(t, host, repo)
	push := func(mt string, b []byte, ann map[string]string) ocispec.Descriptor {
		d := content.NewDescriptorFromBytes(mt, b)
		if err := r.Push(ctx, d, bytes.NewReader(b)); err != nil && !strings.Contains(err.Error(), "exists") {
			t.Fatal(err)
		}
		d.Annotations = ann
		return d
	}
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    push("application/vnd.oci.image.config.v1+json", []byte("{}"), nil),
	}
	for _, s := range sigs {
		m.Layers = append(m.Layers, push("application/vnd.dev.cosign.simplesigning.v1+json", s.Payload,
			map[string]string{"dev.cosignproject.cosign/signature": s.Signature}))
	}
	raw, _ := json.Marshal(m)
	d := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, raw)
	tag := strings.Replace(digest, ":", "-", 1) + ".sig"
	if err := r.PushReference(ctx, d, bytes.NewReader(raw), tag); err != nil {
		t.Fatal(err)
	}
}

// Keyless is a sigstore instance of the test's own (sigstore-go's
// VirtualSigstore: a Fulcio CA, a Rekor log and a timestamp authority,
// keys made in the test), for keyless signatures checked offline.
type Keyless struct{ vs *ca.VirtualSigstore }

// NewKeyless starts one.
func NewKeyless(t testing.TB) *Keyless {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	return &Keyless{vs: vs}
}

// TrustedRoot is the instance's trusted_root.json (its Fulcio CA, Rekor
// log and timestamp authority; no CT log: its certificates carry no
// signed certificate timestamps).
func (k *Keyless) TrustedRoot(t testing.TB) []byte {
	t.Helper()
	// VirtualSigstore names its log by the hex of its key ID in ID; a
	// trusted root file holds the key ID itself.
	logs := map[string]*root.TransparencyLog{}
	for id, l := range k.vs.RekorLogs() {
		raw, err := hex.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}
		c := *l
		c.ID = raw
		logs[id] = &c
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, k.vs.FulcioCertificateAuthorities(), nil, k.vs.TimestampingAuthorities(), logs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Bundle signs artifact keylessly as identity (the certificate's
// subject) from issuer, logged in the instance's Rekor, and returns the
// sigstore bundle's JSON (v0.1: the entry has a signed entry timestamp,
// no inclusion proof).
func (k *Keyless) Bundle(t testing.TB, identity, issuer string, artifact []byte) []byte {
	t.Helper()
	e, err := k.vs.Sign(identity, issuer, artifact)
	if err != nil {
		t.Fatal(err)
	}
	vc, _ := e.VerificationContent()
	sc, _ := e.SignatureContent()
	ms := sc.MessageSignatureContent()
	entries, _ := e.TlogEntries()
	var tles []*protorekor.TransparencyLogEntry
	logID, err := k.vs.RekorLogID()
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		// The entry as a bundle carries it: its kind and its signed entry
		// timestamp (the instance's Rekor signs it again).
		tle := proto.Clone(en.TransparencyLogEntry()).(*protorekor.TransparencyLogEntry)
		set, err := k.vs.RekorSignPayload(tlog.RekorPayload{LogID: logID, IntegratedTime: tle.IntegratedTime, LogIndex: tle.LogIndex,
			Body: base64.StdEncoding.EncodeToString(tle.CanonicalizedBody)})
		if err != nil {
			t.Fatal(err)
		}
		tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
		tle.KindVersion = &protorekor.KindVersion{Kind: "hashedrekord", Version: "0.0.1"}
		tles = append(tles, tle)
	}
	pb := &protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle+json;version=0.1",
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_X509CertificateChain{X509CertificateChain: &protocommon.X509CertificateChain{
				Certificates: []*protocommon.X509Certificate{{RawBytes: vc.Certificate().Raw}},
			}},
			TlogEntries: tles,
		},
		Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: ms.Digest()},
			Signature:     ms.Signature(),
		}},
	}
	b, err := protojson.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// CosignKeyPair makes a key pair as cosign generate-key-pair writes it
// (sigstore's own code: an ENCRYPTED SIGSTORE PRIVATE KEY sealed with
// password, and the PUBLIC KEY).
func CosignKeyPair(t testing.TB, password string) (privatePEM, publicPEM []byte) {
	t.Helper()
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc([]byte(password)))
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}
