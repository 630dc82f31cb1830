package oci_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/runtime"
)

// module is a small but real WebAssembly module: the header and an empty
// custom section, so that it is more than the magic.
var module = []byte("\x00asm\x01\x00\x00\x00\x00\x05\x04note")

// newRegistry starts go-containerregistry's registry in process on a
// loopback port, its handler wrapped by wrap (nil: none), and returns its
// host:port.
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

func newClient(t *testing.T) (*oci.Client, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := oci.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &oci.Client{Store: st}, dir
}

// blob is one layer to push by hand.
type blob struct {
	mediaType string
	data      []byte
}

// pushManifest pushes layers and a manifest of them by hand (oras-go, no
// agrun code), tagged tag, and returns the manifest's descriptor.
func pushManifest(t *testing.T, host, repo, tag string, layers ...blob) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	r := remoteRepo(t, host, repo)
	var descs []ocispec.Descriptor
	for _, l := range layers {
		d := content.NewDescriptorFromBytes(l.mediaType, l.data)
		if err := r.Push(ctx, d, bytes.NewReader(l.data)); err != nil {
			t.Fatal(err)
		}
		descs = append(descs, d)
	}
	desc, err := oras.PackManifest(ctx, r, oras.PackManifestVersion1_1, "application/vnd.example.test", oras.PackManifestOptions{Layers: descs})
	if err != nil {
		t.Fatal(err)
	}
	if tag != "" {
		if err := r.Tag(ctx, desc, tag); err != nil {
			t.Fatal(err)
		}
	}
	return desc
}

func remoteRepo(t *testing.T, host, repo string) *remote.Repository {
	t.Helper()
	r, err := remote.NewRepository(host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	r.PlainHTTP = true
	return r
}

// storedModules lists the modules in a store folder.
func storedModules(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "sha256", "*.wasm"))
	return m
}

func TestPushPullRoundTrip(t *testing.T) {
	host := newRegistry(t, nil)
	c, dir := newClient(t)
	ctx := context.Background()
	ref := host + "/tools/word_count:1.0"
	pushed, err := c.Push(ctx, module, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pushed.Digest, "sha256:") || pushed.Pinned != ref+"@"+pushed.Digest {
		t.Fatalf("pushed %+v", pushed)
	}
	// What Push published is agrun's artifact: the artifactType, one layer
	// of agrun's media type.
	_, rc, err := remoteRepo(t, host, "tools/word_count").FetchReference(ctx, "1.0")
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	json.NewDecoder(rc).Decode(&m)
	rc.Close()
	if m.ArtifactType != oci.ArtifactType || len(m.Layers) != 1 || m.Layers[0].MediaType != oci.MediaTypeTool {
		t.Fatalf("manifest %+v", m)
	}

	p, err := c.Pull(ctx, ref) // a tag: resolved once, the digest said
	if err != nil {
		t.Fatal(err)
	}
	if p.Digest != pushed.Digest || p.Pinned != pushed.Pinned || p.Size != len(module) || p.MediaType != oci.MediaTypeTool {
		t.Fatalf("pulled %+v, pushed %+v", p, pushed)
	}
	wasm, rec, err := c.Store.Module(ctx, p.Digest)
	if err != nil || !bytes.Equal(wasm, module) || rec.ModuleSHA256 != p.ModuleSHA256 || rec.Ref != p.Pinned {
		t.Fatalf("Module = %q, %+v, %v", wasm, rec, err)
	}
	if got := storedModules(t, dir); len(got) != 1 || filepath.Base(got[0]) != p.ModuleSHA256+".wasm" {
		t.Fatalf("store holds %v", got)
	}
	// The pinned reference pulls the same; a digest never pulled is not in
	// the store.
	if p2, err := c.Pull(ctx, p.Pinned); err != nil || p2.Digest != p.Digest {
		t.Fatalf("pull pinned: %+v, %v", p2, err)
	}
	if _, _, err := c.Store.Module(ctx, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, oci.ErrNotPulled) {
		t.Fatalf("unknown digest: %v, want ErrNotPulled", err)
	}
	// A pinned digest the registry does not have fails (it is not
	// resolved to something else).
	if _, err := c.Pull(ctx, host+"/tools/word_count:1.0@sha256:"+strings.Repeat("1", 64)); err == nil {
		t.Fatal("pull of an unknown digest succeeded")
	}
}

func TestPushRefusals(t *testing.T) {
	host := newRegistry(t, nil)
	c, _ := newClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		wasm []byte
		ref  string
		want error
	}{
		{"not wasm", []byte("#!/bin/sh"), host + "/x/y:1", oci.ErrMediaType},
		{"no tag", module, host + "/x/y@sha256:" + strings.Repeat("a", 64), oci.ErrReference},
		{"no host", module, "y:1", oci.ErrReference},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Push(ctx, tc.wasm, tc.ref)
			var oe *oci.Error
			if !errors.Is(err, tc.want) || !errors.As(err, &oe) || oe.Op != "push" {
				t.Fatalf("Push: %v, want %v", err, tc.want)
			}
		})
	}
}

// tarGz is a tar (gzipped if gz) of the files, in order.
func tarGz(t *testing.T, gz bool, files ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for i := 0; i < len(files); i += 2 {
		name := files[i].(string)
		var data io.Reader
		var size int64
		switch v := files[i+1].(type) {
		case []byte:
			data, size = bytes.NewReader(v), int64(len(v))
		case int64: // that many zeros
			data, size = io.LimitReader(zeros{}, v), v
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, data); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestPullPluginImage(t *testing.T) {
	host := newRegistry(t, nil)
	c, _ := newClient(t)
	ctx := context.Background()
	for i, l := range []blob{
		{"application/vnd.oci.image.layer.v1.tar+gzip", tarGz(t, true, "plugin.wasm", module)},
		{"application/vnd.docker.image.rootfs.diff.tar.gzip", tarGz(t, true, "README", []byte("hi"), "./plugin.wasm", module)},
		{"application/vnd.oci.image.layer.v1.tar", tarGz(t, false, "/plugin.wasm", module)},
		{oci.MediaTypeWasmLayer, module},
		{oci.MediaTypeWasm, module},
	} {
		t.Run(l.mediaType, func(t *testing.T) {
			tag := "v" + string(rune('0'+i))
			desc := pushManifest(t, host, "plugins/fetch", tag, l)
			p, err := c.Pull(ctx, host+"/plugins/fetch:"+tag)
			if err != nil {
				t.Fatal(err)
			}
			wasm, _, err := c.Store.Module(ctx, p.Digest)
			if err != nil || !bytes.Equal(wasm, module) || p.Digest != desc.Digest.String() {
				t.Fatalf("pulled %+v: %q, %v", p, wasm, err)
			}
		})
	}
}

// TestPullIndex: an image index (as docker buildx pushes a plug-in image,
// with an attestation beside it) is followed to its one image.
func TestPullIndex(t *testing.T) {
	host := newRegistry(t, nil)
	c, _ := newClient(t)
	ctx := context.Background()
	img := pushManifest(t, host, "plugins/fetch", "", blob{"application/vnd.oci.image.layer.v1.tar+gzip", tarGz(t, true, "plugin.wasm", module)})
	att := pushManifest(t, host, "plugins/fetch", "", blob{"application/vnd.in-toto+json", []byte("{}")})
	att.Annotations = map[string]string{"vnd.docker.reference.type": "attestation-manifest"}
	att.Platform = &ocispec.Platform{OS: "unknown", Architecture: "unknown"}
	pushIndex := func(tag string, ms ...ocispec.Descriptor) {
		b, _ := json.Marshal(ocispec.Index{Versioned: specsVersioned(), MediaType: ocispec.MediaTypeImageIndex, Manifests: ms})
		d := content.NewDescriptorFromBytes(ocispec.MediaTypeImageIndex, b)
		if err := remoteRepo(t, host, "plugins/fetch").PushReference(ctx, d, bytes.NewReader(b), tag); err != nil {
			t.Fatal(err)
		}
	}
	pushIndex("latest", img, att)
	p, err := c.Pull(ctx, host+"/plugins/fetch:latest")
	if err != nil {
		t.Fatal(err)
	}
	if wasm, _, err := c.Store.Module(ctx, p.Digest); err != nil || !bytes.Equal(wasm, module) {
		t.Fatalf("%q, %v", wasm, err)
	}
	pushIndex("two", img, img)
	if _, err := c.Pull(ctx, host+"/plugins/fetch:two"); !errors.Is(err, oci.ErrIndex) {
		t.Fatalf("an index of two images: %v, want ErrIndex", err)
	}
}

func TestPullRefusals(t *testing.T) {
	var tamper atomic.Value // string: a blob digest whose download gets one byte changed
	tamper.Store("")
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if d := tamper.Load().(string); d != "" && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+d) {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				b := rec.Body.Bytes()
				b[len(b)-1] ^= 1
				for k, v := range rec.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(rec.Code)
				w.Write(b)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	big := append(bytes.Clone(module), make([]byte, 4096)...)
	tampered := content.NewDescriptorFromBytes(oci.MediaTypeTool, append(bytes.Clone(module), 'x'))
	for _, tc := range []struct {
		name   string
		layers []blob
		max    int64
		want   error
		says   string
	}{
		{"wrong media type", []blob{{"application/octet-stream", module}}, 0, oci.ErrMediaType, `layer "application/octet-stream"`},
		{"two layers", []blob{{oci.MediaTypeTool, module}, {oci.MediaTypeTool, module}}, 0, oci.ErrLayers, "2 layers"},
		{"oversized layer", []blob{{oci.MediaTypeTool, big}}, 1024, oci.ErrTooLarge, "the module limit 1024"},
		{"tampered blob", []blob{{oci.MediaTypeTool, append(bytes.Clone(module), 'x')}}, 0, oci.ErrDigest, "hashes to"},
		{"tar without plugin.wasm", []blob{{"application/vnd.oci.image.layer.v1.tar+gzip", tarGz(t, true, "other.wasm", module)}}, 0, oci.ErrNoPlugin, "plugin.wasm"},
		{"not gzip", []blob{{"application/vnd.oci.image.layer.v1.tar+gzip", module}}, 0, oci.ErrMediaType, "not gzip"},
		// A gzip bomb: plugin.wasm says 64 MiB of zeros (a 64 KiB layer).
		{"gzip bomb", []blob{{"application/vnd.oci.image.layer.v1.tar+gzip", tarGz(t, true, "plugin.wasm", int64(64<<20))}}, 1 << 20, oci.ErrTooLarge, "plugin.wasm is 67108864 bytes"},
		// A bomb before plugin.wasm: the decompressed stream is bounded.
		{"gzip bomb before plugin.wasm", []blob{{"application/vnd.oci.image.layer.v1.tar+gzip", tarGz(t, true, "pad", int64(64<<20), "plugin.wasm", module)}}, 1 << 20, oci.ErrTooLarge, "unpacks to more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, dir := newClient(t)
			c.MaxModuleBytes = tc.max
			tag := strings.ReplaceAll(tc.name, " ", "-")
			tag = strings.ReplaceAll(tag, ".", "-")
			pushManifest(t, host, "bad/tool", tag, tc.layers...)
			tamper.Store("")
			if tc.name == "tampered blob" {
				tamper.Store(tampered.Digest.String())
			}
			_, err := c.Pull(ctx, host+"/bad/tool:"+tag)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Pull: %v, want %v saying %q", err, tc.want, tc.says)
			}
			if got := storedModules(t, dir); len(got) != 0 {
				t.Fatalf("a refused pull stored %v", got)
			}
		})
	}
	t.Run("manifest over the bound", func(t *testing.T) {
		c, _ := newClient(t)
		r := remoteRepo(t, host, "bad/tool")
		l := content.NewDescriptorFromBytes(oci.MediaTypeTool, module)
		if err := r.Push(ctx, l, bytes.NewReader(module)); err != nil {
			t.Fatal(err)
		}
		desc, err := oras.PackManifest(ctx, r, oras.PackManifestVersion1_1, "application/vnd.example.test", oras.PackManifestOptions{
			Layers: []ocispec.Descriptor{l}, ManifestAnnotations: map[string]string{"pad": strings.Repeat("x", oci.MaxManifestBytes)},
		})
		if err != nil {
			t.Fatal(err)
		}
		r.Tag(ctx, desc, "huge")
		if _, err := c.Pull(ctx, host+"/bad/tool:huge"); err == nil || !strings.Contains(err.Error(), "1048576") {
			t.Fatalf("Pull of a %d-byte manifest: %v, want it refused", desc.Size, err)
		}
	})
}

// TestPlainHTTP: plain HTTP only to loopback or an insecure registry; a
// registry that is neither is spoken to in HTTPS, so an HTTP-only one is
// refused.
func TestPlainHTTP(t *testing.T) {
	c := &oci.Client{Registries: map[string]oci.Registry{"lab.internal:5000": {Insecure: true}, "secure.example": {}}}
	for host, want := range map[string]bool{
		"127.0.0.1:5000":       true,
		"127.9.9.9":            true,
		"localhost:5000":       true,
		"LOCALHOST":            true,
		"[::1]:5000":           true,
		"lab.internal:5000":    true,
		"lab.internal:5001":    false, // insecure is per HOST:PORT
		"lab.internal":         false,
		"registry.example.com": false,
		"secure.example":       false,
		"10.0.0.1:5000":        false,
		"127.0.0.1.nip.io":     false, // a name is not resolved
		"localhost.evil.com":   false,
	} {
		if got := c.PlainHTTP(host); got != want {
			t.Errorf("PlainHTTP(%q) = %v, want %v", host, got, want)
		}
	}
	// A registry that speaks only HTTP, not loopback to the client (its
	// name is not an IP literal): the pull goes out in HTTPS and fails.
	host := newRegistry(t, nil)
	_, port, _ := strings.Cut(host, ":")
	cl, _ := newClient(t)
	cl.Transport = &http.Transport{DialContext: (&dialer{to: host}).DialContext}
	if _, err := cl.Pull(context.Background(), "registry.test:"+port+"/x/y:1"); err == nil || !strings.Contains(err.Error(), "HTTP response to HTTPS client") {
		t.Fatalf("a plain-HTTP registry that is neither loopback nor insecure: %v, want an HTTPS failure", err)
	}
	cl.Registries = map[string]oci.Registry{"registry.test:" + port: {Insecure: true}}
	pushManifest(t, host, "x/y", "1", blob{oci.MediaTypeTool, module})
	if _, err := cl.Pull(context.Background(), "registry.test:"+port+"/x/y:1"); err != nil {
		t.Fatalf("marked insecure: %v", err)
	}
}

// TestRedirects: a redirect may not leave HTTPS, nor reach a plain-HTTP
// host that is not allowed, and chains are bounded.
func TestRedirects(t *testing.T) {
	ctx := context.Background()
	target := newRegistry(t, nil)
	pushManifest(t, target, "x/y", "1", blob{oci.MediaTypeTool, module})
	var hops atomic.Int64
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hops.Add(1)
		http.Redirect(w, r, r.URL.Path+"?again", http.StatusTemporaryRedirect)
	}))
	defer loop.Close()
	u, _ := url.Parse(loop.URL)
	c, _ := newClient(t)
	if _, err := c.Pull(ctx, u.Host+"/x/y:1"); !errors.Is(err, oci.ErrRedirects) || hops.Load() > oci.MaxRedirects+1 {
		t.Fatalf("a redirect loop: %v after %d hops", err, hops.Load())
	}
	// Loopback redirecting to a plain-HTTP host that is not: refused.
	away := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://registry.test"+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer away.Close()
	u, _ = url.Parse(away.URL)
	if _, err := c.Pull(ctx, u.Host+"/x/y:1"); !errors.Is(err, oci.ErrInsecure) {
		t.Fatalf("a redirect to plain HTTP elsewhere: %v, want ErrInsecure", err)
	}
}

// TestCredentials: a registry that wants basic auth gets the configured
// credentials, else the Docker config file's.
func TestCredentials(t *testing.T) {
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no config file: no credentials
	c, _ := newClient(t)
	if _, err := c.Push(ctx, module, host+"/x/y:1"); err == nil {
		t.Fatal("push without credentials succeeded")
	}
	c.Registries = map[string]oci.Registry{host: {Username: "alice", Password: "s3cret"}}
	if _, err := c.Push(ctx, module, host+"/x/y:1"); err != nil {
		t.Fatalf("push with [registries] credentials: %v", err)
	}
	dc := t.TempDir()
	cfg := `{"auths":{"` + host + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("alice:s3cret")) + `"}}}`
	os.WriteFile(filepath.Join(dc, "config.json"), []byte(cfg), 0o600)
	t.Setenv("DOCKER_CONFIG", dc)
	c2, _ := newClient(t)
	if _, err := c2.Pull(ctx, host+"/x/y:1"); err != nil {
		t.Fatalf("pull with the Docker config's credentials: %v", err)
	}
}

func TestParseRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for in, want := range map[string]oci.Ref{
		"ghcr.io/acme/wc:1.0":               {Registry: "ghcr.io", Repository: "acme/wc", Tag: "1.0"},
		"localhost:5000/wc@" + d:            {Registry: "localhost:5000", Repository: "wc", Digest: d},
		"localhost:5000/a/b/wc:latest@" + d: {Registry: "localhost:5000", Repository: "a/b/wc", Tag: "latest", Digest: d},
	} {
		got, err := oci.ParseRef(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseRef(%q) = %+v (%q), %v; want %+v", in, got, got.String(), err, want)
		}
	}
	for _, in := range []string{"wc:1", "ghcr.io/acme/wc", "ghcr.io/Acme/wc:1", "ghcr.io/acme/wc@sha256:abc", "ghcr.io/acme/wc@md5:" + strings.Repeat("a", 32), "ghcr.io/acme/wc:bad tag"} {
		if _, err := oci.ParseRef(in); !errors.Is(err, oci.ErrReference) {
			t.Errorf("ParseRef(%q): %v, want ErrReference", in, err)
		}
	}
}

// TestDefaultLimitIsTheSandboxs: with no MaxModuleBytes a layer is bounded
// by the sandbox's own module limit.
func TestDefaultLimitIsTheSandboxs(t *testing.T) {
	host := newRegistry(t, nil)
	c, _ := newClient(t)
	big := make([]byte, runtime.DefaultMaxModuleBytes+1)
	copy(big, module)
	if _, err := c.Push(context.Background(), big, host+"/x/y:1"); !errors.Is(err, oci.ErrTooLarge) {
		t.Fatalf("Push of a module over runtime.DefaultMaxModuleBytes: %v", err)
	}
}

func specsVersioned() specs.Versioned { return specs.Versioned{SchemaVersion: 2} }

// dialer sends every connection to one address, as a DNS name that
// resolves there would.
type dialer struct{ to string }

func (d *dialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, d.to)
}

// TestPublicRedirects: with PublicRedirects (agrun serve's), a registry
// that redirects to another host at a loopback address (here: the
// registry holding the module, on another port) is refused with
// ErrPrivateAddress, and that host is never reached; without it the pull
// follows the redirect. The named registry itself may be on loopback.
func TestPublicRedirects(t *testing.T) {
	ctx := context.Background()
	target := newRegistry(t, nil)
	pushManifest(t, target, "x/y", "1", blob{oci.MediaTypeTool, module})
	var reached atomic.Int64
	hop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		http.Redirect(w, r, "http://"+target+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer hop.Close()
	u, _ := url.Parse(hop.URL)
	c, _ := newClient(t)
	c.PublicRedirects = true
	ref := "localhost:" + u.Port() + "/x/y:1"
	if _, err := c.Pull(ctx, ref); !errors.Is(err, oci.ErrPrivateAddress) {
		t.Fatalf("a redirect to a loopback host: %v, want ErrPrivateAddress", err)
	}
	if reached.Load() == 0 {
		t.Fatal("the named registry was not reached: the check refused too much")
	}
	c.PublicRedirects = false
	if _, err := c.Pull(ctx, ref); err != nil {
		t.Fatalf("without PublicRedirects: %v", err)
	}
}

// TestSlowRegistry: a registry that never sends its answer's headers, or
// sends a manifest a byte at a time, cannot hold a pull: ResponseTimeout
// and Timeout end it with ErrTimeout.
func TestSlowRegistry(t *testing.T) {
	mute := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		<-r.Context().Done()
	}))
	defer mute.Close()
	drip := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("0", 64))
		w.Header().Set("Content-Length", "100000")
		if r.Method == http.MethodHead {
			return
		}
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte(" ")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
		}
	}))
	defer drip.Close()
	for _, srv := range []*httptest.Server{mute, drip} {
		u, _ := url.Parse(srv.URL)
		c, _ := newClient(t)
		c.ResponseTimeout, c.Timeout = 300*time.Millisecond, 2*time.Second
		start := time.Now()
		_, err := c.Pull(context.Background(), "localhost:"+u.Port()+"/x/y:1")
		if !errors.Is(err, oci.ErrTimeout) {
			t.Errorf("%s: %v, want ErrTimeout", srv.URL, err)
		}
		if d := time.Since(start); d > time.Minute {
			t.Errorf("%s: the pull took %s", srv.URL, d)
		}
	}
}
