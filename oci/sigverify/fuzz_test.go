package sigverify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/signtest"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/oci/sigverify"
)

// FuzzVerifyManifest: whatever a registry published as a signature (a
// payload, a signature annotation, a bundle) is refused with one of the
// sentinels, its text safe to show, and never panics; only a signature
// by the trusted key of this digest verifies.
func FuzzVerifyManifest(f *testing.F) {
	k := signtest.NewKey(f)
	digest := "sha256:" + strings.Repeat("ab", 32)
	good := signtest.Payload(digest)
	b, pub := signtest.Bundle(f, []byte("x"))
	f.Add(good, k.Sign(good), []byte(nil))
	f.Add([]byte(`{"critical":{"image":{"docker-manifest-digest":"\u001b[31m"},"type":"cosign container image signature"}}`), "", []byte(nil))
	f.Add([]byte(nil), "", b)
	f.Add([]byte(nil), "", []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{}}`))
	v, err := sigverify.New(sigverify.Options{Keys: [][]byte{k.PublicPEM, pub}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte, sig string, bundle []byte) {
		err := v.VerifyManifest(digest, []oci.Signature{{Payload: payload, Signature: sig, Bundle: bundle}})
		if err == nil {
			if bundle != nil || string(payload) != string(good) {
				t.Fatalf("verified: payload %q, bundle %q", payload, bundle)
			}
			return
		}
		if !errors.Is(err, sigverify.ErrUntrusted) && !errors.Is(err, sigverify.ErrOtherArtifact) && !errors.Is(err, sigverify.ErrUnsigned) {
			t.Fatalf("not a sentinel: %v", err)
		}
		if !textsafe.IsSafe(err.Error()) {
			t.Fatalf("unsafe text in %q", err.Error())
		}
	})
}
