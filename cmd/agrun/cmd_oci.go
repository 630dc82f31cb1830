package main

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/oci/sigverify"
	"github.com/agcore/agrun/server"
)

// OCI: `agrun pull REF`, `agrun push FILE.wasm REF`, and the tools whose
// [tools.NAME] says `oci = REF` (readModule), loaded from the local module
// store ([oci] dir) by digest, offline.

// ociStores memoizes ociStore per configuration: every oci tool of one
// env loads from one store (one S3 client).
var ociStores sync.Map // *config.Config -> func() (storeAt, error)

// storeAt is a module store and where it is, for messages.
type storeAt struct {
	st    *oci.Store
	where string
}

// ociStore is the module store `agrun pull` writes and oci tools load
// from, and where it is (for messages): the [oci] dir; with [cluster],
// the cluster's shared module store ([cluster] module_store), so that
// every worker finds, by digest and offline, what was pulled once
// (docs/SCALING.md). The folder of an [oci] dir is created.
func ociStore(ctx context.Context, cfg *config.Config) (*oci.Store, string, error) {
	f, _ := ociStores.LoadOrStore(cfg, sync.OnceValues(func() (storeAt, error) {
		if cfg.Cluster.Enabled() {
			objs, err := clusterObjects(context.WithoutCancel(ctx), cfg)
			if err != nil {
				return storeAt{}, err
			}
			where := cfg.Cluster.ModuleStore
			if where == "" {
				where = "the cluster's default module store"
			}
			return storeAt{&oci.Store{Objects: objs}, where + " ([cluster] module_store)"}, nil
		}
		st, err := oci.OpenStore(ociDir(cfg))
		return storeAt{st, ociDir(cfg)}, err
	}))
	s, err := f.(func() (storeAt, error))()
	return s.st, s.where, err
}

// ociDir is the local module store's folder of cfg.
func ociDir(cfg *config.Config) string {
	if cfg.OCI.Dir != "" {
		return cfg.OCI.Dir
	}
	return oci.DefaultDir()
}

// ociClient is an OCI client with cfg's store and [registries]: the
// credentials from the variables they name (an unset one is a
// configuration error).
func ociClient(ctx context.Context, cfg *config.Config) (*oci.Client, error) {
	st, _, err := ociStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c := &oci.Client{Store: st, Registries: map[string]oci.Registry{}}
	for host, r := range cfg.Registries {
		reg := oci.Registry{Insecure: r.Insecure}
		if r.UsernameEnv != "" {
			reg.Username, reg.Password = os.Getenv(r.UsernameEnv), os.Getenv(r.PasswordEnv)
			if reg.Username == "" || reg.Password == "" {
				return nil, &configError{fmt.Errorf("[registries.%q] username_env / password_env: $%s or $%s is not set", host, r.UsernameEnv, r.PasswordEnv)}
			}
		}
		c.Registries[host] = reg
	}
	return c, nil
}

// ociUsage makes a bad reference a usage error of fs.
func ociUsage(fs interface{ Name() string }, err error) error {
	if errors.Is(err, oci.ErrReference) {
		return &usageError{msg: fs.Name() + ": " + err.Error()}
	}
	return err
}

// pull is `agrun pull [--json] REF`.
func (c *cli) pull(ctx context.Context, args []string) error {
	fs := newFlags("pull")
	asJSON := fs.Bool("json", false, "print JSON: the digests and the line to write")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageOf(fs, "needs one REF (HOST/REPO:TAG or HOST/REPO@sha256:DIGEST)")
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	cl, err := ociClient(ctx, cfg)
	if err != nil {
		return err
	}
	p, err := cl.Pull(ctx, pos[0])
	if err != nil {
		return ociUsage(fs, err)
	}
	line := fmt.Sprintf("oci = %q", p.Pinned)
	if *asJSON {
		writeJSONLine(c.stdout, struct {
			*oci.Pulled
			Line string `json:"line"`
		}{p, line})
		return nil
	}
	fmt.Fprintf(c.stdout, "pulled:  %s\n", safe(p.Ref))
	fmt.Fprintf(c.stdout, "digest:  %s\n", p.Digest)
	fmt.Fprintf(c.stdout, "module:  %d bytes, sha256 %s (%s)\n", p.Size, p.ModuleSHA256, safe(p.MediaType))
	if p.Signatures == 0 {
		fmt.Fprintf(c.stdout, "signed:  no signature published (a tool that requires one is refused)\n")
	} else {
		fmt.Fprintf(c.stdout, "signed:  %d signature%s kept (checked against [trust] keys when the tool loads)\n", p.Signatures, map[bool]string{true: "", false: "s"}[p.Signatures == 1])
	}
	fmt.Fprintf(c.stdout, "write in [tools.NAME]:\n  %s\n", safe(line))
	if cfg.Cluster.Enabled() {
		_, where, _ := ociStore(ctx, cfg)
		fmt.Fprintf(c.stdout, "stored in %s: every worker loads it from there\n", safe(where))
	}
	if p.SignatureError != "" {
		fmt.Fprintf(c.stderr, "agrun: warning: the module's signatures could not all be read: %s\n", safe(p.SignatureError))
	}
	return nil
}

// push is `agrun push [--json] [--sign KEY] FILE.wasm REF`.
func (c *cli) push(ctx context.Context, args []string) error {
	fs := newFlags("push")
	asJSON := fs.Bool("json", false, "print JSON: the digests and the line to write")
	keyFile := fs.String("sign", "", "sign the pushed digest with the cosign private key file `KEY` (cosign.key; password: $COSIGN_PASSWORD)")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageOf(fs, "needs FILE.wasm and REF (HOST/REPO:TAG)")
	}
	wasm, err := readWasm(pos[0])
	if err != nil {
		return err
	}
	var signer crypto.Signer
	if *keyFile != "" {
		pem, err := readBounded(*keyFile, 1<<20)
		if err != nil {
			return &configError{fmt.Errorf("--sign: %w", err)}
		}
		if signer, err = sigverify.LoadSigningKey(pem, os.Getenv("COSIGN_PASSWORD")); err != nil {
			return &configError{fmt.Errorf("--sign %s: %w", safe(*keyFile), err)}
		}
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	cl, err := ociClient(ctx, cfg)
	if err != nil {
		return err
	}
	p, err := cl.Push(ctx, wasm, pos[1])
	if err != nil {
		return ociUsage(fs, err)
	}
	var sigTag string
	if signer != nil {
		if sigTag, err = cl.Sign(ctx, p.Pinned, signer); err != nil {
			return err
		}
	}
	line := fmt.Sprintf("oci = %q", p.Pinned)
	if *asJSON {
		writeJSONLine(c.stdout, struct {
			*oci.Pushed
			SignatureTag string `json:"signature_tag,omitempty"`
			Line         string `json:"line"`
		}{p, sigTag, line})
		return nil
	}
	fmt.Fprintf(c.stdout, "pushed:  %s\n", safe(pos[1]))
	fmt.Fprintf(c.stdout, "digest:  %s\n", p.Digest)
	fmt.Fprintf(c.stdout, "module:  sha256 %s\n", p.ModuleSHA256)
	if sigTag != "" {
		fmt.Fprintf(c.stdout, "signed:  %s (%s)\n", safe(sigTag), safe(*keyFile))
	}
	fmt.Fprintf(c.stdout, "pull it with `agrun pull %s`, then write in [tools.NAME]:\n  %s\n", safe(p.Pinned), safe(line))
	return nil
}

// readModule reads the module of t: its wasm file, or, with oci, the
// module pulled for that digest from the local store (never the network);
// then, if t requires a signature or names one, checks it (checkSignature).
// s names the settings in messages.
func readModule(ctx context.Context, cfg *config.Config, t config.Tool, s settings) ([]byte, error) {
	wasm, st, digest, err := readModuleBytes(ctx, cfg, t, s)
	if err != nil {
		return nil, err
	}
	if err := checkSignature(ctx, cfg, t, wasm, st, digest); err != nil {
		return nil, err
	}
	return wasm, nil
}

// checkSignature verifies t's module, offline, with [trust]'s keys and
// trusted root (oci/sigverify) when t requires a signature
// (require_signature, its own or [trust]'s) or names a bundle
// (signature): an oci tool by the signatures `agrun pull` kept for its
// digest in st, a wasm file by its bundle. A refusal names
// require_signature and the reason.
func checkSignature(ctx context.Context, cfg *config.Config, t config.Tool, wasm []byte, st *oci.Store, digest string) error {
	if !cfg.SignatureRequired(t) && t.Signature == "" {
		return nil
	}
	why := "require_signature"
	if !cfg.SignatureRequired(t) {
		why = "its signature bundle"
	}
	refused := func(err error) error { return fmt.Errorf("refused by %s: %w", why, err) }
	ids := make([]sigverify.Identity, len(cfg.Trust.Identities))
	for i, id := range cfg.Trust.Identities {
		ids[i] = sigverify.Identity{Issuer: id.Issuer, Subject: id.Subject}
	}
	v, err := sigverify.New(sigverify.Options{Keys: cfg.Trust.KeyPEMs, TrustedRoot: cfg.Trust.TrustedRootJSON, Identities: ids})
	if err != nil {
		return &configError{fmt.Errorf("[trust]: %w", err)}
	}
	switch {
	case st != nil:
		sigs, err := st.Signatures(ctx, digest)
		if err != nil {
			return err
		}
		if err := v.VerifyManifest(digest, sigs); err != nil {
			if errors.Is(err, sigverify.ErrUnsigned) {
				return refused(fmt.Errorf("%w (if it was signed since, run `agrun pull %s` again)", err, safe(t.OCI)))
			}
			return refused(err)
		}
	case t.Signature == "":
		return refused(&sigverify.Error{Err: sigverify.ErrUnsigned, Detail: `a wasm file is verified by its sigstore bundle: add signature = "FILE.sigstore.json" to its [tools] entry (or load it from a registry with oci =)`})
	default:
		b, err := readBounded(t.Signature, 1<<20)
		if err != nil {
			return refused(fmt.Errorf("reading its bundle: %w", err))
		}
		if err := v.VerifyBlob(wasm, b); err != nil {
			return refused(err)
		}
	}
	return nil
}

// readBounded reads the file at p, at most max bytes.
func readBounded(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is over %d bytes", p, max)
	}
	return b, err
}

// readModuleBytes reads t's module; for an oci tool it also returns the
// store and the digest it came from.
func readModuleBytes(ctx context.Context, cfg *config.Config, t config.Tool, s settings) ([]byte, *oci.Store, string, error) {
	if t.OCI == "" {
		wasm, err := os.ReadFile(t.Wasm)
		if err != nil && s.wasm != "" {
			return nil, nil, "", fmt.Errorf("%w (%s)", err, s.wasm)
		}
		return wasm, nil, "", err
	}
	ref, err := oci.ParseRef(t.OCI)
	if err != nil {
		return nil, nil, "", err
	}
	dir := ociDir(cfg)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) && !cfg.Cluster.Enabled() {
		return nil, nil, "", fmt.Errorf("%s: %w (no module store at %s yet): run `agrun pull %s`", safe(t.OCI), oci.ErrNotPulled, dir, safe(t.OCI))
	}
	st, dir, err := ociStore(ctx, cfg)
	if err != nil {
		return nil, nil, "", err
	}
	wasm, _, err := st.Module(ctx, ref.Digest)
	if errors.Is(err, oci.ErrNotPulled) {
		return nil, nil, "", fmt.Errorf("%w: run `agrun pull %s` (the module store is %s)", err, safe(t.OCI), dir)
	}
	return wasm, st, ref.Digest, err
}

// toolSource is where [tools.NAME] t comes from, as `agrun tools` shows it.
func toolSource(t config.Tool) string {
	if t.OCI != "" {
		return "oci:" + t.OCI
	}
	return "wasm:" + t.Wasm
}

// serveOCI lets `agrun serve` take uploads by reference from [serve]
// allowed_registries (none: it takes none), pulled into the [oci] store
// under the upload size limit.
func serveOCI(cfg *config.Config, opts *server.Options) error {
	if len(cfg.Serve.AllowedRegistries) == 0 {
		return nil
	}
	cl, err := ociClient(context.Background(), cfg)
	if err != nil {
		return err
	}
	cl.MaxModuleBytes = opts.MaxUpload
	cl.PublicRedirects = true // a client names the reference: no redirect to the server's own network
	opts.OCI, opts.AllowedRegistries = cl, cfg.Serve.AllowedRegistries
	return nil
}
