package oci

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/agcore/agrun/cluster/store"
)

// Signatures: Pull fetches what the registry publishes as a pulled
// manifest's signatures, bounded like every other answer, and keeps it
// raw in the store beside the module; nothing here checks a signature.
// Package oci/sigverify verifies them, offline, against the keys a
// configuration trusts (so that a requirement is enforced each time a
// tool loads, from the store, with no network).

// Media types of the signature artifacts Pull fetches.
const (
	// MediaTypeSimpleSigning is the layer of a cosign signature manifest
	// (the sha256-<hex>.sig tag): the simple-signing JSON payload, its
	// signature in the AnnotationCosignSignature annotation.
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// AnnotationCosignSignature holds a cosign signature (base64) on its
	// payload layer.
	AnnotationCosignSignature = "dev.cosignproject.cosign/signature"
	// MediaTypeSigstoreBundle is the artifact type (and layer) of a
	// sigstore bundle attached to a manifest as an OCI referrer, as
	// cosign's new bundle format publishes it.
	MediaTypeSigstoreBundle = "application/vnd.dev.sigstore.bundle.v0.3+json"
)

// Bounds of what Pull reads of a manifest's signatures.
const (
	// MaxSignatureManifestBytes bounds a signature manifest (one layer per
	// signature, each a few hundred bytes of JSON).
	MaxSignatureManifestBytes = 64 << 10
	// MaxSignatureBytes bounds one payload or one bundle (a simple-signing
	// payload is under 1 KiB; a bundle with a certificate chain and a
	// transparency log entry under 16 KiB).
	MaxSignatureBytes = 64 << 10
	// MaxSignatures bounds the signatures kept for one manifest; more are
	// left out.
	MaxSignatures = 16
	// maxAnnotation bounds a signature annotation (base64 of an RSA-4096
	// signature: 684 bytes).
	maxAnnotation = 8 << 10
)

// Signature is one signature of a manifest, as the registry published it:
// either a cosign signature (Payload and Signature) or a sigstore bundle
// (Bundle). It is kept as it came; oci/sigverify decides what it proves.
type Signature struct {
	// Payload is the simple-signing JSON a cosign signature signs.
	Payload []byte `json:"payload,omitempty"`
	// Signature is the cosign signature of Payload, base64.
	Signature string `json:"signature,omitempty"`
	// Bundle is a sigstore bundle's JSON.
	Bundle []byte `json:"bundle,omitempty"`
}

// signatureRecord is the store's record of a manifest's signatures.
type signatureRecord struct {
	Digest     string      `json:"digest"`
	Signatures []Signature `json:"signatures"`
}

func signatureKey(digest string) string {
	return "oci/signatures/sha256/" + strings.TrimPrefix(digest, "sha256:") + ".json"
}

// maxReferrerPages bounds the pages of a referrers listing read (each
// at most MaxManifestBytes; a registry pages at 100 referrers or more).
const maxReferrerPages = 4

// maxSignatureRecord bounds the store's record when it is read back.
const maxSignatureRecord = 4 * MaxSignatures * MaxSignatureBytes

// Signatures returns the signatures Pull kept for the manifest digest
// ("sha256:<hex>"), without the network: none (and no error) if the
// registry published none when it was pulled. A damaged record is an
// *Error wrapping ErrNotPulled.
func (s *Store) Signatures(ctx context.Context, digest string) ([]Signature, error) {
	if !digestRE.MatchString(digest) {
		return nil, &Error{Op: "load", Ref: clean(digest), Err: fmt.Errorf("%w: want sha256: and 64 lowercase hex digits", ErrReference)}
	}
	b, err := s.Objects.Get(ctx, signatureKey(digest), maxSignatureRecord)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, &Error{Op: "load", Ref: digest, Err: err}
	}
	var rec signatureRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Digest != digest {
		return nil, &Error{Op: "load", Ref: digest, Err: fmt.Errorf("%w: the store's record of its signatures is damaged (pull it again)", ErrNotPulled)}
	}
	return rec.Signatures, nil
}

// putSignatures replaces the record of digest's signatures (an empty one
// if there are none now: a pull says what the registry holds today).
func (s *Store) putSignatures(ctx context.Context, digest string, sigs []Signature) error {
	b, err := json.Marshal(signatureRecord{Digest: digest, Signatures: sigs})
	if err != nil {
		return err
	}
	if err := s.Objects.Put(ctx, signatureKey(digest), b); err != nil {
		return fmt.Errorf("storing the module's signatures: %w", err)
	}
	return nil
}

// CosignTag is the tag under which cosign publishes the signatures of the
// manifest digest ("sha256:<hex>" → "sha256-<hex>.sig").
func CosignTag(digest string) string {
	return strings.Replace(digest, ":", "-", 1) + ".sig"
}

// fetchSignatures reads the signatures published for desc: the cosign
// signature manifest (CosignTag) and the sigstore bundles among desc's
// referrers. A registry that has neither answers "not found", which is
// no signature, not an error; any other failure is returned with what was
// read before it.
func (c *Client) fetchSignatures(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor) ([]Signature, error) {
	sigs, err := c.cosignSignatures(ctx, repo, desc.Digest.String())
	if err != nil {
		return sigs, fmt.Errorf("the signature tag %s: %w", CosignTag(desc.Digest.String()), err)
	}
	bundles, err := c.bundleReferrers(ctx, repo, desc, MaxSignatures-len(sigs))
	sigs = append(sigs, bundles...)
	if err != nil {
		return sigs, fmt.Errorf("the manifest's referrers: %w", err)
	}
	return sigs, nil
}

// cosignSignatures reads the manifest under CosignTag(digest) and its
// simple-signing layers.
func (c *Client) cosignSignatures(ctx context.Context, repo *remote.Repository, digest string) ([]Signature, error) {
	desc, body, err := repo.Manifests().FetchReference(ctx, CosignTag(digest))
	if errors.Is(err, errdef.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	raw, err := readVerified(body, desc, MaxSignatureManifestBytes, "the signature manifest")
	if err != nil {
		return nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: the signature manifest is not JSON: %v", ErrMediaType, err)
	}
	var sigs []Signature
	for _, l := range m.Layers {
		if len(sigs) == MaxSignatures {
			break
		}
		sig := l.Annotations[AnnotationCosignSignature]
		if l.MediaType != MediaTypeSimpleSigning || sig == "" {
			continue
		}
		if len(sig) > maxAnnotation {
			return sigs, fmt.Errorf("%w: a signature annotation is %d bytes, the limit %d", ErrTooLarge, len(sig), maxAnnotation)
		}
		payload, err := c.fetchSmallBlob(ctx, repo, l, "a signature payload")
		if err != nil {
			return sigs, err
		}
		sigs = append(sigs, Signature{Payload: payload, Signature: sig})
	}
	return sigs, nil
}

// bundleReferrers reads up to max sigstore bundles attached to desc.
func (c *Client) bundleReferrers(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, max int) ([]Signature, error) {
	if max <= 0 {
		return nil, nil
	}
	var refs []ocispec.Descriptor
	err := repo.Referrers(ctx, desc, MediaTypeSigstoreBundle, func(page []ocispec.Descriptor) error {
		for _, d := range page {
			if len(refs) < max && d.ArtifactType == MediaTypeSigstoreBundle {
				refs = append(refs, d)
			}
		}
		if len(refs) == max {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errdef.ErrNotFound) || errors.Is(err, errdef.ErrUnsupported) {
		return nil, nil
	}
	if errors.Is(err, errdef.ErrTooManyPages) {
		return nil, fmt.Errorf("%w: more than %d pages of referrers", ErrTooLarge, maxReferrerPages)
	}
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	var sigs []Signature
	for _, d := range refs {
		if d.Size > MaxSignatureManifestBytes {
			return sigs, fmt.Errorf("%w: a bundle's manifest is %d bytes, the limit %d", ErrTooLarge, d.Size, MaxSignatureManifestBytes)
		}
		rc, err := repo.Manifests().Fetch(ctx, d)
		if err != nil {
			return sigs, err
		}
		raw, err := readVerified(rc, d, MaxSignatureManifestBytes, "a bundle's manifest")
		if err != nil {
			return sigs, err
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return sigs, fmt.Errorf("%w: a bundle's manifest is not JSON: %v", ErrMediaType, err)
		}
		if len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeSigstoreBundle {
			continue
		}
		b, err := c.fetchSmallBlob(ctx, repo, m.Layers[0], "a sigstore bundle")
		if err != nil {
			return sigs, err
		}
		sigs = append(sigs, Signature{Bundle: b})
	}
	return sigs, nil
}

var errEnough = errors.New("enough referrers")

// fetchSmallBlob reads a blob of at most MaxSignatureBytes, checked
// against its digest.
func (c *Client) fetchSmallBlob(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, what string) ([]byte, error) {
	if d.Size < 0 || d.Size > MaxSignatureBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit %d", ErrTooLarge, what, d.Size, MaxSignatureBytes)
	}
	rc, err := repo.Blobs().Fetch(ctx, d)
	if err != nil {
		return nil, err
	}
	return readVerified(rc, d, MaxSignatureBytes, what)
}

// CosignPayload is the simple-signing payload cosign signs for the
// manifest digest of a module at repository (HOST/REPO).
func CosignPayload(repository, digest string) []byte {
	b, _ := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": repository},
			"image":    map[string]string{"docker-manifest-digest": digest},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	return b
}

// Sign signs ref's manifest (ref pinned: HOST/REPO[:TAG]@sha256:DIGEST)
// with signer as cosign sign --key does, and publishes the signature in
// ref's repository under CosignTag(digest), replacing the signatures
// already there (a signature of another key is not kept). ECDSA and RSA
// keys sign the payload's SHA-256, Ed25519 the payload itself. It
// returns the tag; every failure is an *Error.
func (c *Client) Sign(ctx context.Context, ref string, signer crypto.Signer) (string, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	tag, err := c.sign(ctx, ref, signer)
	if err != nil {
		err = timeoutError(ctx, err)
		return "", &Error{Op: "sign", Ref: clean(ref), Err: err}
	}
	return tag, nil
}

func (c *Client) sign(ctx context.Context, ref string, signer crypto.Signer) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	if r.Digest == "" {
		return "", fmt.Errorf("%w: sign a pinned reference (HOST/REPO@sha256:DIGEST): a signature names the digest", ErrReference)
	}
	payload := CosignPayload(r.Registry+"/"+r.Repository, r.Digest)
	var sig []byte
	if _, ok := signer.Public().(ed25519.PublicKey); ok {
		sig, err = signer.Sign(rand.Reader, payload, crypto.Hash(0))
	} else {
		sum := sha256.Sum256(payload)
		sig, err = signer.Sign(rand.Reader, sum[:], crypto.SHA256)
	}
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	repo, err := c.repository(r)
	if err != nil {
		return "", err
	}
	push := func(mt string, b []byte) (ocispec.Descriptor, error) {
		d := content.NewDescriptorFromBytes(mt, b)
		return d, repo.Push(ctx, d, bytes.NewReader(b))
	}
	cfg, err := push(ocispec.MediaTypeImageConfig, []byte("{}"))
	if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return "", err
	}
	layer, err := push(MediaTypeSimpleSigning, payload)
	if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return "", err
	}
	layer.Annotations = map[string]string{AnnotationCosignSignature: base64.StdEncoding.EncodeToString(sig)}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: []ocispec.Descriptor{layer}}
	raw, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	tag := CosignTag(r.Digest)
	if err := repo.PushReference(ctx, content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, raw), bytes.NewReader(raw), tag); err != nil {
		return "", err
	}
	return tag, nil
}
