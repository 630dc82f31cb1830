package main

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"os"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/oci/sigverify"
)

// OCI: `agrun pull REF`, `agrun push FILE.wasm REF`, and the tools whose
// [tools.NAME] says `oci = REF` (readModule), loaded from the local module
// store ([oci] dir) by digest, offline.

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
	cl, err := setup.OCIClient(ctx, cfg)
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
		_, where, _ := setup.OCIStore(ctx, cfg)
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
		pem, err := setup.ReadBounded(*keyFile, 1<<20)
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
	cl, err := setup.OCIClient(ctx, cfg)
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
