// Package oci fetches WebAssembly tools from OCI registries into a local,
// content-addressed module store, and publishes them (issue 26, design.md
// "Extism plug-ins and OCI").
//
//	st, err := oci.OpenStore(dir)
//	c := &oci.Client{Store: st}
//	p, err := c.Pull(ctx, "ghcr.io/acme/word_count:1.0")
//	fmt.Printf("oci = %q\n", p.Pinned) // ghcr.io/acme/word_count:1.0@sha256:...
//	wasm, rec, err := st.Module(ctx, p.Digest) // later, offline
//
// A tag is resolved once: Pull returns the manifest's digest, and what a
// configuration names is that digest (a Pinned reference), which
// Store.Module finds without the network.
//
// # What is accepted
//
// A manifest (OCI image manifest or Docker schema 2) of at most
// MaxManifestBytes with exactly one layer, either a WebAssembly module
// (MediaTypeWasm, MediaTypeWasmLayer as the CNCF Wasm OCI artifact layout
// publishes it, or agrun's own MediaTypeTool) or a hyper-mcp plug-in
// image: a gzip (or plain) tar layer holding plugin.wasm, unpacked under
// the module size limit with the decompressed stream bounded too. An
// image index is followed when it lists exactly one image (attestations
// aside). Everything read from a registry is bounded and checked against
// its digest while it streams; nothing is stored before it matches.
// Every refusal is an *Error wrapping one of the Err* sentinels.
//
// # Signatures
//
// Pull also fetches what the registry publishes as the manifest's
// signatures — cosign's sha256-<hex>.sig tag (CosignTag) and sigstore
// bundles among the manifest's referrers — bounded (MaxSignatureManifestBytes,
// MaxSignatureBytes, MaxSignatures) and checked against their digests,
// and keeps them raw beside the module (Store.Signatures). It decides
// nothing about them: package oci/sigverify verifies them offline, so
// that this package links no sigstore code. Client.Sign publishes a
// cosign key-pair signature of a pinned reference (stdlib crypto).
//
// # Registries
//
// HTTPS, except to a loopback registry (localhost, 127.0.0.0/8, ::1) or
// one marked Registry.Insecure, which are spoken to in plain HTTP
// (Client.PlainHTTP); a redirect may not leave HTTPS, nor go to plain
// HTTP anywhere else, and at most MaxRedirects are followed. Credentials
// come from Client.Registries, else the Docker config file
// ($DOCKER_CONFIG/config.json or ~/.docker/config.json, its credential
// helpers included).
//
// A Client is safe for concurrent use once configured; its fields must not
// change while it is in use.
package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/agcore/agrun/internal/netguard"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/runtime"
)

// Media types of the layers Pull accepts, and of what Push publishes.
const (
	// MediaTypeWasm is a bare module layer (application/wasm).
	MediaTypeWasm = "application/wasm"
	// MediaTypeWasmLayer is the CNCF Wasm OCI artifact layout's layer.
	MediaTypeWasmLayer = "application/vnd.wasm.content.layer.v1+wasm"
	// MediaTypeTool is agrun's own layer: what Push publishes.
	MediaTypeTool = "application/vnd.agrun.tool.v1+wasm"
	// ArtifactType is the artifactType of the manifests Push publishes
	// (an OCI 1.1 manifest with the empty config).
	ArtifactType = "application/vnd.agrun.tool.v1"

	mediaTypeTarGzip       = "application/vnd.oci.image.layer.v1.tar+gzip"
	mediaTypeTar           = "application/vnd.oci.image.layer.v1.tar"
	mediaTypeDockerTarGzip = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	mediaTypeDockerV2      = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerList    = "application/vnd.docker.distribution.manifest.list.v2+json"
)

// Defaults of Client.Timeout and Client.ResponseTimeout.
const (
	DefaultTimeout         = 10 * time.Minute
	DefaultResponseTimeout = 30 * time.Second
)

// timeoutError is err, or the timeout it comes from as an ErrTimeout: the
// whole operation's (Client.Timeout) or an answer's headers'.
func timeoutError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrTimeout) {
		return cause
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// withTimeout is ctx bounded by c's Timeout.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	d := c.Timeout
	if d <= 0 {
		d = DefaultTimeout
	}
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("%w: the registry took longer than %s", ErrTimeout, d))
}

// MaxManifestBytes bounds a manifest or an image index read from a
// registry (a tool's manifest is under 2 KiB; the distribution spec lets
// registries refuse manifests over 4 MiB).
const MaxManifestBytes = 1 << 20

// MaxRedirects bounds the redirects followed for one request (registries
// redirect blob downloads to a CDN: one or two).
const MaxRedirects = 5

// tarSlack is what a tar stream may hold besides plugin.wasm (headers,
// padding, small files), decompressed.
const tarSlack = 1 << 20

// Sentinel errors, wrapped in an *Error: match them with errors.Is.
var (
	// ErrReference: not HOST/REPO:TAG or HOST/REPO@sha256:DIGEST.
	ErrReference = errors.New("not a valid OCI reference")
	// ErrMediaType: a manifest or a layer of a media type agrun does not run.
	ErrMediaType = errors.New("unsupported media type")
	// ErrLayers: a manifest with more than one layer (or none).
	ErrLayers = errors.New("not a single-layer artifact")
	// ErrIndex: an image index that does not list exactly one image.
	ErrIndex = errors.New("an image index with no single image to choose")
	// ErrTooLarge: a manifest over MaxManifestBytes, a layer or a module
	// over the module limit, or a tar layer that unpacks to more.
	ErrTooLarge = errors.New("over the size limit")
	// ErrDigest: content that does not hash to its digest (or size).
	ErrDigest = errors.New("content does not match its digest")
	// ErrNoPlugin: an image layer without a plugin.wasm file.
	ErrNoPlugin = errors.New("no plugin.wasm in the image layer")
	// ErrInsecure: plain HTTP to a registry that is neither loopback nor
	// marked insecure, or a redirect that leaves HTTPS.
	ErrInsecure = errors.New("plain HTTP refused")
	// ErrRedirects: a request redirected more than MaxRedirects times.
	ErrRedirects = errors.New("too many redirects")
	// ErrTimeout: the registry did not answer (or finish answering) in
	// time (Client.Timeout, Client.ResponseTimeout).
	ErrTimeout = errors.New("the registry is too slow")
	// ErrPrivateAddress: with PublicRedirects, a redirect (or any
	// connection) to a host other than the registry at a non-public
	// address.
	ErrPrivateAddress = errors.New("a connection to a non-public address")
	// ErrNotPulled: a digest the local store does not hold.
	ErrNotPulled = errors.New("not in the local module store")
)

// Error is a failed Pull, Push or Store lookup: the operation, the
// reference and the cause (one of the sentinels, or the registry's or the
// network's error).
type Error struct {
	Op  string // "pull", "push", "load"
	Ref string
	Err error
}

// Error implements error: "pull HOST/REPO:TAG: <cause>", cleaned of
// unsafe text (the cause may quote a registry's answer).
func (e *Error) Error() string {
	return textsafe.Clean(e.Op+" "+e.Ref+": "+e.Err.Error(), 2000)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func clean(s string) string { return textsafe.Clean(s, 200) }

// Registry is what a configuration says about one registry host.
type Registry struct {
	// Insecure allows plain HTTP to this registry (a loopback one needs no
	// mark).
	Insecure bool
	// Username and Password, if either is set, are the credentials sent to
	// this registry; else the Docker config file's are used.
	Username, Password string
}

// Client pulls and pushes. The zero value talks HTTPS (plain HTTP to
// loopback) with the Docker config's credentials; Pull needs Store.
type Client struct {
	// Store is where Pull writes what it fetched.
	Store *Store
	// Registries holds settings by registry host as a reference writes it
	// ("HOST" or "HOST:PORT").
	Registries map[string]Registry
	// MaxModuleBytes bounds a layer and the module unpacked from it; zero:
	// runtime.DefaultMaxModuleBytes, the sandbox's own limit.
	MaxModuleBytes int64
	// Transport sends the requests; nil: http.DefaultTransport.
	Transport http.RoundTripper
	// PublicRedirects keeps every connection to a host other than the
	// registry a reference names on a public address (internal/netguard:
	// no loopback, private, link-local — the cloud metadata address — or
	// other non-public range), so that a registry's redirect, to its blob
	// storage say, cannot point the client at the machine it runs on or
	// its network. agrun serve sets it: its clients name the references.
	// The registry itself may be at any address the operator allowed.
	// With a Transport that is not an *http.Transport it has no effect.
	PublicRedirects bool
	// Timeout bounds one Pull, Push or Sign as a whole, so that a registry
	// that answers a byte at a time cannot hold the caller; zero:
	// DefaultTimeout. ResponseTimeout bounds the wait for each answer's
	// headers; zero: DefaultResponseTimeout. Both apply when Transport is
	// nil or an *http.Transport (the response timeout) and always (the
	// whole).
	Timeout, ResponseTimeout time.Duration

	dockerOnce  sync.Once
	dockerStore credentials.Store
	dockerErr   error
}

func (c *Client) maxModule() int64 {
	if c.MaxModuleBytes > 0 {
		return c.MaxModuleBytes
	}
	return runtime.DefaultMaxModuleBytes
}

// PlainHTTP reports whether the registry at host ("HOST" or "HOST:PORT")
// is spoken to in plain HTTP: a loopback host (localhost or a loopback IP
// literal; names are not resolved, so DNS cannot turn a name into
// "loopback") or one whose Registries entry is Insecure. Every other
// registry is HTTPS only.
func (c *Client) PlainHTTP(host string) bool {
	if r, ok := c.Registries[host]; ok && r.Insecure {
		return true
	}
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// checkRedirect bounds a redirect chain and keeps it on HTTPS (or on plain
// HTTP only to hosts PlainHTTP allows).
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= MaxRedirects {
		return fmt.Errorf("%w: more than %d", ErrRedirects, MaxRedirects)
	}
	if req.URL.Scheme != "https" && (via[0].URL.Scheme == "https" || !c.PlainHTTP(req.URL.Host)) {
		return fmt.Errorf("%w: a redirect to %s", ErrInsecure, clean(req.URL.Redacted()))
	}
	return nil
}

func (c *Client) repository(r Ref) (*remote.Repository, error) {
	repo, err := remote.NewRepository(r.Registry + "/" + r.Repository)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrReference, err)
	}
	tr := c.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	if ht, ok := tr.(*http.Transport); ok {
		if c.PublicRedirects {
			ht = guardedTransport(ht, r.Registry)
		} else {
			ht = ht.Clone()
		}
		ht.ResponseHeaderTimeout = c.ResponseTimeout
		if ht.ResponseHeaderTimeout <= 0 {
			ht.ResponseHeaderTimeout = DefaultResponseTimeout
		}
		tr = ht
	}
	tr = &capTransport{base: tr, meta: MaxManifestBytes, blob: c.maxModule() + tarSlack}
	repo.PlainHTTP = c.PlainHTTP(r.Registry)
	repo.MaxMetadataBytes = MaxManifestBytes
	repo.ReferrerListMaxPages = maxReferrerPages
	repo.Client = &auth.Client{
		Client:     &http.Client{Transport: tr, CheckRedirect: c.checkRedirect},
		Cache:      auth.NewCache(),
		Credential: c.credential,
		Header:     http.Header{"User-Agent": {"agrun"}},
	}
	return repo, nil
}

// capTransport bounds every answer's body before oras-go reads it: a
// manifest, tag list or referrers answer (anything but a blob) at meta
// bytes, a blob at blob bytes. Past the bound a read fails with
// ErrTooLarge, whatever the answer's headers said (an endless body with
// no Content-Length included).
type capTransport struct {
	base       http.RoundTripper
	meta, blob int64
}

func (c *capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	max, what := c.meta, "an answer of the registry"
	first := req // a redirect's target (a CDN's presigned URL) is classed by the request it answers
	for first.Response != nil && first.Response.Request != nil {
		first = first.Response.Request
	}
	if strings.Contains(first.URL.Path, "/blobs/") {
		max, what = c.blob, "a blob"
	}
	resp.Body = &cappedBody{rc: resp.Body, left: max, max: max, what: what}
	return resp, nil
}

// cappedBody fails a read past max bytes.
type cappedBody struct {
	rc        io.ReadCloser
	left, max int64
	what      string
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body that ends here from one that goes on.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, b.what, b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// guardedTransport is base dialling registry (host or host:port, as the
// reference writes it) as base does, and every other host only at a
// public address (PublicRedirects).
func guardedTransport(base *http.Transport, registry string) *http.Transport {
	tr := base.Clone()
	tr.Proxy = nil // a proxy would dial on the client's behalf, past the check
	plain := tr.DialContext
	if plain == nil {
		plain = (&net.Dialer{}).DialContext
	}
	guard := &netguard.Dialer{Dialer: net.Dialer{Timeout: 30 * time.Second}}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if sameHost(addr, registry) {
			return plain(ctx, network, addr)
		}
		conn, err := guard.DialContext(ctx, network, addr)
		var ge *netguard.Error
		if errors.As(err, &ge) {
			return nil, fmt.Errorf("%w: %s (a redirect from %s): %s", ErrPrivateAddress, clean(addr), clean(registry), clean(ge.Error()))
		}
		return conn, err
	}
	return tr
}

// sameHost reports whether the dialled addr (host:port) is the registry
// a reference names ("HOST" means port 443 or 80).
func sameHost(addr, registry string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	rh, rp, err := net.SplitHostPort(registry)
	if err != nil {
		rh, rp = registry, ""
	}
	rh = strings.TrimSuffix(strings.TrimPrefix(rh, "["), "]")
	if !strings.EqualFold(host, rh) {
		return false
	}
	return rp == port || rp == "" && (port == "443" || port == "80")
}

// credential is the Registries entry's, else the Docker config file's.
func (c *Client) credential(ctx context.Context, hostport string) (auth.Credential, error) {
	for host, r := range c.Registries {
		if (host == hostport || hostport == "registry-1.docker.io" && host == "docker.io") && (r.Username != "" || r.Password != "") {
			return auth.Credential{Username: r.Username, Password: r.Password}, nil
		}
	}
	c.dockerOnce.Do(func() {
		c.dockerStore, c.dockerErr = credentials.NewStoreFromDocker(credentials.StoreOptions{})
	})
	if c.dockerErr != nil {
		return auth.EmptyCredential, fmt.Errorf("reading the Docker config file: %w", c.dockerErr)
	}
	return credentials.Credential(c.dockerStore)(ctx, hostport)
}

// Pulled is what Pull fetched and stored.
type Pulled struct {
	// Ref is the reference as given.
	Ref string `json:"ref"`
	// Pinned is Ref with the manifest's digest: what to write in a
	// configuration.
	Pinned string `json:"pinned"`
	// Digest is the manifest's digest ("sha256:..."), the key of the store.
	Digest string `json:"digest"`
	// ModuleSHA256 is the lowercase hex SHA-256 of the module (what
	// `agrun inspect` prints and a sha256 pin names).
	ModuleSHA256 string `json:"module_sha256"`
	// Size is the module's size in bytes.
	Size int `json:"size"`
	// MediaType is the media type of the layer it came from.
	MediaType string `json:"media_type"`
	// Signatures counts the signatures the registry publishes for the
	// manifest (cosign's sha256-<hex>.sig tag, sigstore bundles among its
	// referrers), kept in the store for oci/sigverify; none is not an
	// error.
	Signatures int `json:"signatures"`
	// SignatureError says why the signatures could not all be read (the
	// module was pulled all the same; a tool that requires a signature
	// will say it has none); "" if they could.
	SignatureError string `json:"signature_error,omitempty"`
}

// Pull resolves ref (a tag once; a digest is checked), fetches its
// manifest and its one layer, unpacks the module and stores it in
// c.Store under the manifest's digest. Every failure is an *Error; ctx
// bounds the whole transfer.
func (c *Client) Pull(ctx context.Context, ref string) (*Pulled, error) {
	return c.PullTo(ctx, ref, c.Store)
}

// PullTo is Pull into st instead of c.Store: a program that pulls for
// someone else (agrun serve, for an upload by reference) pulls into a
// scratch store and keeps only what it accepts, so that a refused upload
// leaves nothing on disk.
func (c *Client) PullTo(ctx context.Context, ref string, st *Store) (*Pulled, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	p, err := c.pull(ctx, ref, st)
	if err != nil {
		err = timeoutError(ctx, err)
		return nil, &Error{Op: "pull", Ref: clean(ref), Err: err}
	}
	return p, nil
}

func (c *Client) pull(ctx context.Context, ref string, st *Store) (*Pulled, error) {
	if st == nil {
		return nil, errors.New("no store to pull into (oci.Client.Store is nil)")
	}
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	repo, err := c.repository(r)
	if err != nil {
		return nil, err
	}
	desc, body, err := repo.Manifests().FetchReference(ctx, r.reference())
	if err != nil {
		return nil, err
	}
	raw, err := readVerified(body, desc, MaxManifestBytes, "the manifest")
	if err != nil {
		return nil, err
	}
	top := desc.Digest.String()
	if r.Digest != "" && top != r.Digest {
		return nil, fmt.Errorf("%w: the registry sent manifest %s for %s", ErrDigest, top, r.Digest)
	}
	manifest, err := c.manifest(ctx, repo, desc, raw)
	if err != nil {
		return nil, err
	}
	if len(manifest.Layers) != 1 {
		return nil, fmt.Errorf("%w: the manifest has %d layers; agrun runs an artifact of one wasm layer (or a plug-in image of one tar layer)", ErrLayers, len(manifest.Layers))
	}
	layer := manifest.Layers[0]
	unpack, ok := unpackers[layer.MediaType]
	if !ok {
		return nil, fmt.Errorf("%w: layer %q (want %s, %s, %s, or a plug-in image's tar+gzip layer)", ErrMediaType, clean(layer.MediaType), MediaTypeTool, MediaTypeWasmLayer, MediaTypeWasm)
	}
	max := c.maxModule()
	if layer.Size < 0 || layer.Size > max {
		return nil, fmt.Errorf("%w: the layer is %d bytes, the module limit %d", ErrTooLarge, layer.Size, max)
	}
	blob, err := repo.Blobs().Fetch(ctx, layer)
	if err != nil {
		return nil, err
	}
	defer blob.Close()
	wasm, err := unpack(blob, layer, max)
	if err != nil {
		return nil, err
	}
	pinned := r
	pinned.Digest = top
	rec := Record{Ref: pinned.String(), Digest: top, MediaType: layer.MediaType}
	if rec.ModuleSHA256, err = st.put(ctx, rec, wasm); err != nil {
		return nil, err
	}
	p := &Pulled{Ref: ref, Pinned: rec.Ref, Digest: top, ModuleSHA256: rec.ModuleSHA256, Size: len(wasm), MediaType: layer.MediaType}
	sigs, err := c.fetchSignatures(ctx, repo, desc)
	if err != nil {
		p.SignatureError = clean(err.Error())
	}
	if err := st.putSignatures(ctx, top, sigs); err != nil {
		return nil, err
	}
	p.Signatures = len(sigs)
	return p, nil
}

// manifest decodes raw (of desc) as an image manifest, following an image
// index to its one image.
func (c *Client) manifest(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, raw []byte) (ocispec.Manifest, error) {
	mt := mediaTypeOf(desc, raw)
	switch mt {
	case ocispec.MediaTypeImageManifest, mediaTypeDockerV2:
	case ocispec.MediaTypeImageIndex, mediaTypeDockerList:
		var idx ocispec.Index
		if err := json.Unmarshal(raw, &idx); err != nil {
			return ocispec.Manifest{}, fmt.Errorf("%w: the image index is not JSON: %v", ErrMediaType, err)
		}
		child, err := pickImage(idx)
		if err != nil {
			return ocispec.Manifest{}, err
		}
		if child.Size > MaxManifestBytes {
			return ocispec.Manifest{}, fmt.Errorf("%w: the image's manifest is %d bytes, the limit %d", ErrTooLarge, child.Size, MaxManifestBytes)
		}
		rc, err := repo.Manifests().Fetch(ctx, child)
		if err != nil {
			return ocispec.Manifest{}, err
		}
		if raw, err = readVerified(rc, child, MaxManifestBytes, "the image's manifest"); err != nil {
			return ocispec.Manifest{}, err
		}
		if mt = mediaTypeOf(child, raw); mt != ocispec.MediaTypeImageManifest && mt != mediaTypeDockerV2 {
			return ocispec.Manifest{}, fmt.Errorf("%w: the index's image is %q, not an image manifest", ErrMediaType, clean(mt))
		}
	default:
		return ocispec.Manifest{}, fmt.Errorf("%w: manifest %q (want an OCI image manifest)", ErrMediaType, clean(mt))
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return ocispec.Manifest{}, fmt.Errorf("%w: the manifest is not JSON: %v", ErrMediaType, err)
	}
	return m, nil
}

// mediaTypeOf is the manifest's mediaType field, else the Content-Type the
// registry sent.
func mediaTypeOf(desc ocispec.Descriptor, raw []byte) string {
	var v struct {
		MediaType string `json:"mediaType"`
	}
	if json.Unmarshal(raw, &v) == nil && v.MediaType != "" {
		return v.MediaType
	}
	return desc.MediaType
}

// pickImage chooses the one image of an index, leaving attestations out
// (buildx adds them beside the image).
func pickImage(idx ocispec.Index) (ocispec.Descriptor, error) {
	var images []ocispec.Descriptor
	for _, d := range idx.Manifests {
		if d.Annotations["vnd.docker.reference.type"] == "attestation-manifest" {
			continue
		}
		if p := d.Platform; p != nil && p.OS == "unknown" && p.Architecture == "unknown" {
			continue
		}
		images = append(images, d)
	}
	if len(images) != 1 {
		return ocispec.Descriptor{}, fmt.Errorf("%w: it lists %d images; pull one of them by its digest", ErrIndex, len(images))
	}
	return images[0], nil
}

// readVerified reads what desc describes from rc, at most max bytes,
// hashing as it reads, and closes rc.
func readVerified(rc io.ReadCloser, desc ocispec.Descriptor, max int64, what string) ([]byte, error) {
	defer rc.Close()
	if desc.Size > max {
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit %d", ErrTooLarge, what, desc.Size, max)
	}
	h := sha256.New()
	limit := max
	if desc.Size > 0 {
		limit = desc.Size // a body longer than announced is read one byte past it, no more
	}
	b, err := io.ReadAll(io.TeeReader(io.LimitReader(rc, limit+1), h))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, what, max)
	}
	return b, verify(h.Sum(nil), int64(len(b)), desc, what)
}

// verify checks a hash and a size against desc.
func verify(sum []byte, n int64, desc ocispec.Descriptor, what string) error {
	if desc.Digest.Algorithm() != "sha256" {
		return fmt.Errorf("%w: %s has digest %q; agrun checks sha256 digests only", ErrDigest, what, clean(desc.Digest.String()))
	}
	if got := "sha256:" + hex.EncodeToString(sum); got != desc.Digest.String() {
		return fmt.Errorf("%w: %s hashes to %s, not %s", ErrDigest, what, got, desc.Digest)
	}
	if desc.Size >= 0 && n != desc.Size {
		return fmt.Errorf("%w: %s is %d bytes, not the %d its descriptor says", ErrDigest, what, n, desc.Size)
	}
	return nil
}

// Pushed is what Push published.
type Pushed struct {
	// Pinned is the reference with the manifest's digest: what to write in
	// a configuration.
	Pinned string `json:"pinned"`
	// Digest is the manifest's digest.
	Digest string `json:"digest"`
	// ModuleSHA256 is the module's lowercase hex SHA-256.
	ModuleSHA256 string `json:"module_sha256"`
}

// Push publishes wasm at ref (HOST/REPO:TAG) as an OCI 1.1 artifact:
// ArtifactType, the empty config, one MediaTypeTool layer. Every failure
// is an *Error.
func (c *Client) Push(ctx context.Context, wasm []byte, ref string) (*Pushed, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	p, err := c.push(ctx, wasm, ref)
	if err != nil {
		err = timeoutError(ctx, err)
		return nil, &Error{Op: "push", Ref: clean(ref), Err: err}
	}
	return p, nil
}

func (c *Client) push(ctx context.Context, wasm []byte, ref string) (*Pushed, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if r.Digest != "" || r.Tag == "" {
		return nil, fmt.Errorf("%w: push to a tag (HOST/REPO:TAG); the digest is the registry's answer", ErrReference)
	}
	if max := c.maxModule(); int64(len(wasm)) > max {
		return nil, fmt.Errorf("%w: the module is %d bytes, the limit %d", ErrTooLarge, len(wasm), max)
	}
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return nil, fmt.Errorf("%w: not a WebAssembly module (no \\0asm header)", ErrMediaType)
	}
	repo, err := c.repository(r)
	if err != nil {
		return nil, err
	}
	layer := content.NewDescriptorFromBytes(MediaTypeTool, wasm)
	if err := repo.Push(ctx, layer, bytes.NewReader(wasm)); err != nil {
		return nil, err
	}
	desc, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ArtifactType, oras.PackManifestOptions{Layers: []ocispec.Descriptor{layer}})
	if err != nil {
		return nil, err
	}
	if err := repo.Tag(ctx, desc, r.Tag); err != nil {
		return nil, err
	}
	r.Digest = desc.Digest.String()
	sum := sha256.Sum256(wasm)
	return &Pushed{Pinned: r.String(), Digest: r.Digest, ModuleSHA256: hex.EncodeToString(sum[:])}, nil
}
