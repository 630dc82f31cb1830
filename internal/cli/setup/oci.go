package setup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/oci/sigverify"
	"github.com/agcore/agrun/server"
)

// The tools whose [tools.NAME] says `oci = REF` (ReadModule) are loaded
// from the local module store ([oci] dir) by digest, offline; `agrun
// pull` and `agrun push` (cmd/agrun) fill it through OCIClient.

// ociStores memoizes OCIStore per configuration: every oci tool of one
// env loads from one store (one S3 client).
var ociStores sync.Map // *config.Config -> func() (storeAt, error)

// storeAt is a module store and where it is, for messages.
type storeAt struct {
	st    *oci.Store
	where string
}

// OCIStore is the module store `agrun pull` writes and oci tools load
// from, and where it is (for messages): the [oci] dir; with [cluster],
// the cluster's shared module store ([cluster] module_store), so that
// every worker finds, by digest and offline, what was pulled once
// (docs/SCALING.md). The folder of an [oci] dir is created.
func OCIStore(ctx context.Context, cfg *config.Config) (*oci.Store, string, error) {
	f, _ := ociStores.LoadOrStore(cfg, sync.OnceValues(func() (storeAt, error) {
		if cfg.Cluster.Enabled() {
			objs, err := ClusterObjects(context.WithoutCancel(ctx), cfg)
			if err != nil {
				return storeAt{}, err
			}
			where := cfg.Cluster.ModuleStore
			if where == "" {
				where = "the cluster's default module store"
			}
			return storeAt{&oci.Store{Objects: objs}, where + " ([cluster] module_store)"}, nil
		}
		st, err := oci.OpenStore(OCIDir(cfg))
		return storeAt{st, OCIDir(cfg)}, err
	}))
	s, err := f.(func() (storeAt, error))()
	return s.st, s.where, err
}

// OCIDir is the local module store's folder of cfg.
func OCIDir(cfg *config.Config) string {
	if cfg.OCI.Dir != "" {
		return cfg.OCI.Dir
	}
	return oci.DefaultDir()
}

// OCIClient is an OCI client with cfg's store and [registries]: the
// credentials from the variables they name (an unset one is a
// configuration error).
func OCIClient(ctx context.Context, cfg *config.Config) (*oci.Client, error) {
	st, _, err := OCIStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c := &oci.Client{Store: st, Registries: map[string]oci.Registry{}}
	for host, r := range cfg.Registries {
		reg := oci.Registry{Insecure: r.Insecure}
		if r.UsernameEnv != "" {
			reg.Username, reg.Password = os.Getenv(r.UsernameEnv), os.Getenv(r.PasswordEnv)
			if reg.Username == "" || reg.Password == "" {
				return nil, &ConfigError{fmt.Errorf("[registries.%q] username_env / password_env: $%s or $%s is not set", host, r.UsernameEnv, r.PasswordEnv)}
			}
		}
		c.Registries[host] = reg
	}
	return c, nil
}

// ReadModule reads the module of t: its wasm file, or, with oci, the
// module pulled for that digest from the local store (never the network);
// then, if t requires a signature or names one, checks it (checkSignature).
// s names the settings in messages.
func ReadModule(ctx context.Context, cfg *config.Config, t config.Tool, s Settings) ([]byte, error) {
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
		return &ConfigError{fmt.Errorf("[trust]: %w", err)}
	}
	switch {
	case st != nil:
		sigs, err := st.Signatures(ctx, digest)
		if err != nil {
			return err
		}
		if err := v.VerifyManifest(digest, sigs); err != nil {
			if errors.Is(err, sigverify.ErrUnsigned) {
				return refused(fmt.Errorf("%w (if it was signed since, run `agrun pull %s` again)", err, textsafe.Escape(t.OCI)))
			}
			return refused(err)
		}
	case t.Signature == "":
		return refused(&sigverify.Error{Err: sigverify.ErrUnsigned, Detail: `a wasm file is verified by its sigstore bundle: add signature = "FILE.sigstore.json" to its [tools] entry (or load it from a registry with oci =)`})
	default:
		b, err := ReadBounded(t.Signature, 1<<20)
		if err != nil {
			return refused(fmt.Errorf("reading its bundle: %w", err))
		}
		if err := v.VerifyBlob(wasm, b); err != nil {
			return refused(err)
		}
	}
	return nil
}

// ReadBounded reads the file at p, at most max bytes.
func ReadBounded(p string, max int64) ([]byte, error) {
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
func readModuleBytes(ctx context.Context, cfg *config.Config, t config.Tool, s Settings) ([]byte, *oci.Store, string, error) {
	if t.OCI == "" {
		wasm, err := os.ReadFile(t.Wasm)
		if err != nil && s.Wasm != "" {
			return nil, nil, "", fmt.Errorf("%w (%s)", err, s.Wasm)
		}
		return wasm, nil, "", err
	}
	ref, err := oci.ParseRef(t.OCI)
	if err != nil {
		return nil, nil, "", err
	}
	dir := OCIDir(cfg)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) && !cfg.Cluster.Enabled() {
		return nil, nil, "", fmt.Errorf("%s: %w (no module store at %s yet): run `agrun pull %s`", textsafe.Escape(t.OCI), oci.ErrNotPulled, dir, textsafe.Escape(t.OCI))
	}
	st, dir, err := OCIStore(ctx, cfg)
	if err != nil {
		return nil, nil, "", err
	}
	wasm, _, err := st.Module(ctx, ref.Digest)
	if errors.Is(err, oci.ErrNotPulled) {
		return nil, nil, "", fmt.Errorf("%w: run `agrun pull %s` (the module store is %s)", err, textsafe.Escape(t.OCI), dir)
	}
	return wasm, st, ref.Digest, err
}

// ToolSource is where [tools.NAME] t comes from, as `agrun tools` shows it.
func ToolSource(t config.Tool) string {
	if t.OCI != "" {
		return "oci:" + t.OCI
	}
	return "wasm:" + t.Wasm
}

// ServeOCI lets `agrun serve` take uploads by reference from [serve]
// allowed_registries (none: it takes none), pulled into the [oci] store
// under the upload size limit.
func ServeOCI(cfg *config.Config, opts *server.Options) error {
	if len(cfg.Serve.AllowedRegistries) == 0 {
		return nil
	}
	cl, err := OCIClient(context.Background(), cfg)
	if err != nil {
		return err
	}
	cl.MaxModuleBytes = opts.MaxUpload
	cl.PublicRedirects = true // a client names the reference: no redirect to the server's own network
	opts.OCI, opts.AllowedRegistries = cl, cfg.Serve.AllowedRegistries
	return nil
}
