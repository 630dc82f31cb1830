package main

import (
	"fmt"

	"github.com/agcore/agrun/internal/atomicfile"
	"github.com/agcore/agrun/wasmtools"
)

// readWasm reads a module given on the command line (inspect, pack,
// push), up to the sandbox's module limit.
var readWasm = wasmtools.ReadModuleFile

// inspect is `agrun inspect [--json] FILE.wasm`.
func (c *cli) inspect(args []string) error {
	fs := newFlags("inspect")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageOf(fs, "needs one FILE.wasm")
	}
	wasm, err := readWasm(pos[0])
	if err != nil {
		return err
	}
	info, err := wasmtools.Inspect(wasm)
	if err != nil {
		return err
	}
	if *asJSON {
		v := struct {
			wasmtools.Info
			ManifestError string `json:"manifest_error,omitempty"`
		}{Info: info}
		if info.ManifestError != nil {
			v.ManifestError = info.ManifestError.Error()
		}
		writeJSONLine(c.stdout, v)
		return nil
	}
	return info.WriteText(c.stdout, pos[0])
}

// pack is `agrun pack -m MANIFEST IN.wasm -o OUT.wasm`: it embeds the
// manifest (TOML or JSON, by extension) after checking it strictly.
func (c *cli) pack(args []string) error {
	fs := newFlags("pack")
	manifest := fs.String("m", "", "manifest file (.toml or .json)")
	out := fs.String("o", "", "output .wasm")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *manifest == "" || *out == "" {
		return usageOf(fs, "needs -m MANIFEST, one IN.wasm and -o OUT.wasm")
	}
	m, err := wasmtools.ReadManifestFile(*manifest)
	if err != nil {
		return &configError{err}
	}
	wasm, err := readWasm(pos[0])
	if err != nil {
		return err
	}
	packed, err := wasmtools.Pack(wasm, m)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(*out, packed, 0o644); err != nil {
		return err
	}
	info, _ := wasmtools.Inspect(packed)
	fmt.Fprintf(c.stderr, "agrun: packed %s as %s (%d bytes, sha256 %s)\n", safe(m.Name), safe(*out), len(packed), info.SHA256)
	return nil
}
