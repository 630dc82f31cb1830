package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agcore/agrun/cmd/agrun/internal/config"
	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/server"
)

// OCI: `agrun pull REF`, `agrun push FILE.wasm REF`, and the tools whose
// [tools.NAME] says `oci = REF` (readModule), loaded from the local module
// store ([oci] dir) by digest, offline.

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
func ociClient(cfg *config.Config) (*oci.Client, error) {
	st, err := oci.OpenStore(ociDir(cfg))
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
	cl, err := ociClient(cfg)
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
	fmt.Fprintf(c.stdout, "write in [tools.NAME]:\n  %s\n", safe(line))
	return nil
}

// push is `agrun push [--json] FILE.wasm REF`.
func (c *cli) push(ctx context.Context, args []string) error {
	fs := newFlags("push")
	asJSON := fs.Bool("json", false, "print JSON: the digests and the line to write")
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
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	cl, err := ociClient(cfg)
	if err != nil {
		return err
	}
	p, err := cl.Push(ctx, wasm, pos[1])
	if err != nil {
		return ociUsage(fs, err)
	}
	line := fmt.Sprintf("oci = %q", p.Pinned)
	if *asJSON {
		writeJSONLine(c.stdout, struct {
			*oci.Pushed
			Line string `json:"line"`
		}{p, line})
		return nil
	}
	fmt.Fprintf(c.stdout, "pushed:  %s\n", safe(pos[1]))
	fmt.Fprintf(c.stdout, "digest:  %s\n", p.Digest)
	fmt.Fprintf(c.stdout, "module:  sha256 %s\n", p.ModuleSHA256)
	fmt.Fprintf(c.stdout, "pull it with `agrun pull %s`, then write in [tools.NAME]:\n  %s\n", safe(p.Pinned), safe(line))
	return nil
}

// readModule reads the module of t: its wasm file, or, with oci, the
// module pulled for that digest from the local store (never the network).
// s names the settings in messages.
func readModule(ctx context.Context, cfg *config.Config, t config.Tool, s settings) ([]byte, error) {
	if t.OCI == "" {
		wasm, err := os.ReadFile(t.Wasm)
		if err != nil && s.wasm != "" {
			return nil, fmt.Errorf("%w (%s)", err, s.wasm)
		}
		return wasm, err
	}
	ref, err := oci.ParseRef(t.OCI)
	if err != nil {
		return nil, err
	}
	dir := ociDir(cfg)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w (no module store at %s yet): run `agrun pull %s`", safe(t.OCI), oci.ErrNotPulled, dir, safe(t.OCI))
	}
	st, err := oci.OpenStore(dir)
	if err != nil {
		return nil, err
	}
	wasm, _, err := st.Module(ctx, ref.Digest)
	if errors.Is(err, oci.ErrNotPulled) {
		return nil, fmt.Errorf("%w: run `agrun pull %s` (the module store is %s)", err, safe(t.OCI), dir)
	}
	return wasm, err
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
	cl, err := ociClient(cfg)
	if err != nil {
		return err
	}
	cl.MaxModuleBytes = opts.MaxUpload
	opts.OCI, opts.AllowedRegistries = cl, cfg.Serve.AllowedRegistries
	return nil
}
