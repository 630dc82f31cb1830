package sigverify_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/agcore/agrun/internal/testing/signtest"
	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/oci/sigverify"
)

var module = []byte("\x00asm\x01\x00\x00\x00\x00\x05\x04note")

func newRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u.Host
}

// published pushes module (with extra in it, so that each test has its
// own manifest) to a new repository of host and returns a client with a
// fresh store and the pinned digest.
func published(t *testing.T, host, repo, extra string) (*oci.Client, string) {
	t.Helper()
	st, err := oci.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &oci.Client{Store: st}
	p, err := c.Push(context.Background(), append(append([]byte{}, module...), extra...), host+"/"+repo+":1")
	if err != nil {
		t.Fatal(err)
	}
	return c, p.Digest
}

// pullAndVerify pulls host/repo:1 and verifies what the store kept with v.
func pullAndVerify(t *testing.T, c *oci.Client, host, repo string, v *sigverify.Verifier) (*oci.Pulled, error) {
	t.Helper()
	ctx := context.Background()
	p, err := c.Pull(ctx, host+"/"+repo+":1")
	if err != nil {
		t.Fatal(err)
	}
	sigs, err := c.Store.Signatures(ctx, p.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return p, v.VerifyManifest(p.Digest, sigs)
}

func verifier(t *testing.T, keys ...[]byte) *sigverify.Verifier {
	t.Helper()
	v, err := sigverify.New(sigverify.Options{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCosignSignatures(t *testing.T) {
	host := newRegistry(t, nil)
	trusted, other := signtest.NewKey(t), signtest.NewKey(t)
	v := verifier(t, other.PublicPEM, trusted.PublicPEM)

	for _, c := range []struct {
		name string
		sign func(t *testing.T, repo, digest string)
		want error // nil: verified
	}{
		{"signed by a trusted key", func(t *testing.T, repo, digest string) {
			p := signtest.Payload(digest)
			signtest.PushCosign(t, host, repo, digest, signtest.Sig{Payload: p, Signature: trusted.Sign(p)})
		}, nil},
		{"one good signature among bad ones", func(t *testing.T, repo, digest string) {
			p := signtest.Payload(digest)
			stranger := signtest.NewKey(t)
			signtest.PushCosign(t, host, repo, digest, signtest.Sig{Payload: p, Signature: stranger.Sign(p)},
				signtest.Sig{Payload: p, Signature: "not base64!"}, signtest.Sig{Payload: p, Signature: trusted.Sign(p)})
		}, nil},
		{"unsigned", func(*testing.T, string, string) {}, sigverify.ErrUnsigned},
		{"signed by another key", func(t *testing.T, repo, digest string) {
			p := signtest.Payload(digest)
			signtest.PushCosign(t, host, repo, digest, signtest.Sig{Payload: p, Signature: signtest.NewKey(t).Sign(p)})
		}, sigverify.ErrUntrusted},
		{"a tampered payload", func(t *testing.T, repo, digest string) {
			p := signtest.Payload(digest)
			sig := trusted.Sign(p)
			p = []byte(strings.Replace(string(p), "example.test", "evil.test", 1))
			signtest.PushCosign(t, host, repo, digest, signtest.Sig{Payload: p, Signature: sig})
		}, sigverify.ErrUntrusted},
		{"a trusted signature of another manifest", func(t *testing.T, repo, digest string) {
			p := signtest.Payload("sha256:" + strings.Repeat("0", 64))
			signtest.PushCosign(t, host, repo, digest, signtest.Sig{Payload: p, Signature: trusted.Sign(p)})
		}, sigverify.ErrOtherArtifact},
		{"a payload that is not simple signing", func(t *testing.T, repo, digest string) {
			p := []byte(`{"critical":{"image":{"docker-manifest-digest":"` + digest + `"},"type":"something else"}}`)
			signtest.PushCosign(t, host, repo, digest, signtest.Sig{Payload: p, Signature: trusted.Sign(p)})
		}, sigverify.ErrUntrusted},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := "tools/" + strings.ReplaceAll(c.name, " ", "-")
			cl, digest := published(t, host, repo, c.name)
			c.sign(t, repo, digest)
			_, err := pullAndVerify(t, cl, host, repo, v)
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *sigverify.Error
			if !errors.Is(err, c.want) || !errors.As(err, &se) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			t.Logf("%v", err)
		})
	}
}

// TestNothingTrusted: a Verifier with no keys refuses a signed module.
func TestNothingTrusted(t *testing.T) {
	host := newRegistry(t, nil)
	k := signtest.NewKey(t)
	c, digest := published(t, host, "tools/x", "")
	p := signtest.Payload(digest)
	signtest.PushCosign(t, host, "tools/x", digest, signtest.Sig{Payload: p, Signature: k.Sign(p)})
	if _, err := pullAndVerify(t, c, host, "tools/x", &sigverify.Verifier{}); !errors.Is(err, sigverify.ErrUntrusted) {
		t.Fatalf("the zero Verifier: %v", err)
	}
}

// TestBundleReferrer: a sigstore bundle attached to the manifest as a
// referrer (cosign's new bundle format) is pulled and verified.
func TestBundleReferrer(t *testing.T) {
	host := newRegistry(t, nil)
	ctx := context.Background()
	c, digest := published(t, host, "tools/b", "")
	repo, _ := remote.NewRepository(host + "/tools/b")
	repo.PlainHTTP = true
	desc, rc, err := repo.Manifests().FetchReference(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	rc.Close()
	kp := signtest.NewBundleKey(t)
	signtest.PushBundleReferrer(t, host, "tools/b", desc, signtest.BundleWith(t, kp, raw))

	p, err := pullAndVerify(t, c, host, "tools/b", verifier(t, signtest.PublicPEM(t, kp)))
	if err != nil || p.Signatures != 1 {
		t.Fatalf("a bundle by a trusted key: %v (%d signatures, %q)", err, p.Signatures, p.SignatureError)
	}
	if _, err := pullAndVerify(t, c, host, "tools/b", verifier(t, signtest.NewKey(t).PublicPEM)); !errors.Is(err, sigverify.ErrUntrusted) {
		t.Fatalf("a bundle by another key: %v", err)
	}

	// An in-toto statement of the digest in a DSSE envelope, as cosign 3
	// signs an image.
	v := verifier(t, signtest.PublicPEM(t, kp))
	if err := v.VerifyManifest(digest, []oci.Signature{{Bundle: signtest.StatementBundleWith(t, kp, digest)}}); err != nil {
		t.Fatalf("a statement bundle: %v", err)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	if err := v.VerifyManifest(digest, []oci.Signature{{Bundle: signtest.StatementBundleWith(t, kp, other)}}); !errors.Is(err, sigverify.ErrOtherArtifact) {
		t.Fatalf("a statement bundle of another digest: %v", err)
	}
	if err := v.VerifyManifest(digest, []oci.Signature{{Bundle: signtest.StatementBundleWith(t, signtest.NewBundleKey(t), other)}}); !errors.Is(err, sigverify.ErrUntrusted) {
		t.Fatalf("a statement bundle of another digest by another key: %v", err)
	}
}

// TestVerifyBlob: a module file with a sigstore bundle beside it.
func TestVerifyBlob(t *testing.T) {
	b, pub := signtest.Bundle(t, module)
	v := verifier(t, pub)
	if err := v.VerifyBlob(module, b); err != nil {
		t.Fatalf("a bundle by a trusted key: %v", err)
	}
	tampered := append(append([]byte{}, module...), 0)
	if err := v.VerifyBlob(tampered, b); !errors.Is(err, sigverify.ErrOtherArtifact) {
		t.Fatalf("a changed module: %v", err)
	}
	if err := verifier(t, signtest.NewKey(t).PublicPEM).VerifyBlob(module, b); !errors.Is(err, sigverify.ErrUntrusted) {
		t.Fatalf("another key: %v", err)
	}
	// Another file and another key: not trusted (sigstore-go looks at the
	// artifact first; no trusted signer made this bundle).
	if err := verifier(t, signtest.NewKey(t).PublicPEM).VerifyBlob(tampered, b); !errors.Is(err, sigverify.ErrUntrusted) {
		t.Fatalf("another file, another key: %v", err)
	}
	if err := v.VerifyBlob(module, []byte(`{"mediaType":"nonsense"}`)); !errors.Is(err, sigverify.ErrUntrusted) {
		t.Fatalf("not a bundle: %v", err)
	}
	if err := v.VerifyBlob(module, nil); !errors.Is(err, sigverify.ErrUnsigned) {
		t.Fatalf("no bundle: %v", err)
	}
}

// TestSignatureBounds: a registry's signature artifacts are bounded; an
// oversized one is not kept (the module is: a tool that requires a
// signature then finds none).
func TestSignatureBounds(t *testing.T) {
	host := newRegistry(t, nil)
	k := signtest.NewKey(t)
	v := verifier(t, k.PublicPEM)

	c, digest := published(t, host, "tools/big-payload", "")
	huge := append(signtest.Payload(digest), strings.Repeat(" ", oci.MaxSignatureBytes)...)
	signtest.PushCosign(t, host, "tools/big-payload", digest, signtest.Sig{Payload: huge, Signature: k.Sign(huge)})
	p, err := pullAndVerify(t, c, host, "tools/big-payload", v)
	if !errors.Is(err, sigverify.ErrUnsigned) || !strings.Contains(p.SignatureError, "over the size limit") {
		t.Fatalf("an oversized payload: %v (pull: %q)", err, p.SignatureError)
	}

	c, digest = published(t, host, "tools/many", "")
	var sigs []signtest.Sig
	for range 2 * oci.MaxSignatures {
		p := signtest.Payload(digest)
		sigs = append(sigs, signtest.Sig{Payload: p, Signature: signtest.NewKey(t).Sign(p)})
	}
	signtest.PushCosign(t, host, "tools/many", digest, sigs...)
	p, err = pullAndVerify(t, c, host, "tools/many", v)
	if p.Signatures != oci.MaxSignatures || !errors.Is(err, sigverify.ErrUntrusted) {
		t.Fatalf("too many signatures: kept %d, %v", p.Signatures, err)
	}

	// A signature manifest over its bound: the registry lies about nothing
	// but sends 64 KiB+ of it.
	c, digest = published(t, host, "tools/big-manifest", "")
	long := signtest.Sig{Payload: signtest.Payload(digest), Signature: strings.Repeat("A", 4000)}
	var many []signtest.Sig
	for range 20 {
		many = append(many, long)
	}
	signtest.PushCosign(t, host, "tools/big-manifest", digest, many...)
	p, err = pullAndVerify(t, c, host, "tools/big-manifest", v)
	if !errors.Is(err, sigverify.ErrUnsigned) || !strings.Contains(p.SignatureError, "over the size limit") {
		t.Fatalf("an oversized signature manifest: %v (pull: %q)", err, p.SignatureError)
	}
}

// TestEndlessReferrers: a registry that pages its referrers forever is
// read for a few pages only.
func TestEndlessReferrers(t *testing.T) {
	var pages atomic.Int32
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.Contains(r.URL.Path, "/referrers/") {
				h.ServeHTTP(w, r)
				return
			}
			pages.Add(1)
			w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			w.Header().Set("Link", "<"+r.URL.Path+"?n="+strconv.Itoa(int(pages.Load()))+`>; rel="next"`)
			w.Write([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`))
		})
	})
	c, _ := published(t, host, "tools/endless", "")
	p, err := pullAndVerify(t, c, host, "tools/endless", verifier(t, signtest.NewKey(t).PublicPEM))
	if !errors.Is(err, sigverify.ErrUnsigned) || !strings.Contains(p.SignatureError, "pages of referrers") || pages.Load() > 8 {
		t.Fatalf("endless referrers: %v, pull %q after %d pages", err, p.SignatureError, pages.Load())
	}
}

// TestSign: oci.Client.Sign publishes what VerifyManifest accepts, for
// each kind of key; LoadSigningKey reads cosign's key file.
func TestSign(t *testing.T) {
	host := newRegistry(t, nil)
	ctx := context.Background()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	for name, k := range map[string]crypto.Signer{"ecdsa": ec, "ed25519": ed, "rsa": rs} {
		t.Run(name, func(t *testing.T) {
			c, digest := published(t, host, "tools/signed-"+name, name)
			p, err := c.Pull(ctx, host+"/tools/signed-"+name+":1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Sign(ctx, p.Pinned, k); err != nil {
				t.Fatal(err)
			}
			der, _ := x509.MarshalPKIXPublicKey(k.Public())
			pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
			if _, err := pullAndVerify(t, c, host, "tools/signed-"+name, verifier(t, pub)); err != nil {
				t.Fatalf("signed by Sign with %s (%s): %v", name, digest, err)
			}
		})
	}
	if _, err := (&oci.Client{}).Sign(ctx, host+"/tools/x:1", ec); !errors.Is(err, oci.ErrReference) {
		t.Errorf("signing a tag: %v", err)
	}

	priv, pub := signtest.CosignKeyPair(t, "s3cret")
	k, err := sigverify.LoadSigningKey(priv, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := published(t, host, "tools/cosign-key", "")
	p, _ := c.Pull(ctx, host+"/tools/cosign-key:1")
	if _, err := c.Sign(ctx, p.Pinned, k); err != nil {
		t.Fatal(err)
	}
	if _, err := pullAndVerify(t, c, host, "tools/cosign-key", verifier(t, pub)); err != nil {
		t.Fatalf("cosign's key pair: %v", err)
	}
	if _, err := sigverify.LoadSigningKey(priv, "wrong"); !errors.Is(err, sigverify.ErrKey) {
		t.Errorf("a wrong password: %v", err)
	}
	if _, err := sigverify.LoadSigningKey(pub, ""); !errors.Is(err, sigverify.ErrKey) {
		t.Errorf("the public key as a private one: %v", err)
	}
}

func TestKeys(t *testing.T) {
	for _, c := range []struct{ name, pem string }{
		{"not PEM", "hello"},
		{"a private key", "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"},
		{"garbage in a PUBLIC KEY block", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"},
	} {
		if _, err := sigverify.New(sigverify.Options{Keys: [][]byte{[]byte(c.pem)}}); !errors.Is(err, sigverify.ErrKey) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, err := sigverify.New(sigverify.Options{TrustedRoot: []byte("{")}); !errors.Is(err, sigverify.ErrKey) {
		t.Errorf("a bad trusted root: %v", err)
	}
}

// TestKeyless: a keyless bundle (a certificate from the trusted root's
// Fulcio CA, logged in its Rekor) is accepted from a configured identity,
// offline; any other identity, another instance's root, or no trusted
// root is refused.
func TestKeyless(t *testing.T) {
	const (
		issuer = "https://token.actions.example"
		id     = "https://github.com/acme/tools/.github/workflows/release.yml@refs/tags/v1"
	)
	ks := signtest.NewKeyless(t)
	b := ks.Bundle(t, id, issuer, module)
	newV := func(root []byte, ids ...sigverify.Identity) *sigverify.Verifier {
		v, err := sigverify.New(sigverify.Options{TrustedRoot: root, Identities: ids})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := newV(ks.TrustedRoot(t), sigverify.Identity{Issuer: issuer, Subject: id}).VerifyBlob(module, b); err != nil {
		t.Fatalf("a keyless bundle by an accepted identity: %v", err)
	}
	digest := "sha256:" + hex.EncodeToString(sha256Sum(module))
	if err := newV(ks.TrustedRoot(t), sigverify.Identity{Issuer: issuer, Subject: id}).VerifyManifest(digest, []oci.Signature{{Bundle: b}}); err != nil {
		t.Fatalf("the same as a manifest's referrer: %v", err)
	}
	for name, c := range map[string]struct {
		v    *sigverify.Verifier
		want string
	}{
		"another identity":      {newV(ks.TrustedRoot(t), sigverify.Identity{Issuer: issuer, Subject: id + "x"}), "keyless bundle"},
		"another issuer":        {newV(ks.TrustedRoot(t), sigverify.Identity{Issuer: issuer + "x", Subject: id}), "keyless bundle"},
		"another trusted root":  {newV(signtest.NewKeyless(t).TrustedRoot(t), sigverify.Identity{Issuer: issuer, Subject: id}), "keyless bundle"},
		"no identity":           {newV(ks.TrustedRoot(t)), "no identity is configured"},
		"keys, no trusted root": {verifier(t, signtest.NewKey(t).PublicPEM), "no trusted root is configured"},
	} {
		err := c.v.VerifyBlob(module, b)
		if !errors.Is(err, sigverify.ErrUntrusted) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	tampered := append(append([]byte{}, module...), 1)
	if err := newV(ks.TrustedRoot(t), sigverify.Identity{Issuer: issuer, Subject: id}).VerifyBlob(tampered, b); err == nil {
		t.Errorf("a keyless bundle of another file verified")
	}
}

func sha256Sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }
