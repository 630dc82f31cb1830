package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/agcore/agrun/internal/atomicfile"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// maxWasmFile bounds the modules inspect and pack read.
const maxWasmFile = runtime.DefaultMaxModuleBytes

func readWasm(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxWasmFile {
		return nil, fmt.Errorf("%s: %d bytes, larger than the %d-byte module limit", path, fi.Size(), maxWasmFile)
	}
	return os.ReadFile(path)
}

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
	w := c.stdout
	fmt.Fprintf(w, "file:     %s\n", safe(pos[0]))
	fmt.Fprintf(w, "size:     %d bytes\n", info.Size)
	fmt.Fprintf(w, "sha256:   %s\n", info.SHA256)
	switch {
	case info.Manifest != nil:
		m := info.Manifest
		b, _ := json.MarshalIndent(m, "          ", "  ")
		fmt.Fprintf(w, "manifest: %s\n", safe(string(b)))
	case info.ManifestError != nil:
		fmt.Fprintf(w, "manifest: invalid: %s\n", safe(info.ManifestError.Error()))
	default:
		fmt.Fprintf(w, "manifest: none (add one with agrun pack, or give one in agrun.toml)\n")
	}
	for _, m := range info.Memories {
		fmt.Fprintf(w, "memory:   %s\n", limits(m.Bounds, "pages"))
	}
	for _, t := range info.Tables {
		grows := ""
		if t.Grows {
			grows = ", grown by the code (table.grow/table.fill)"
		}
		fmt.Fprintf(w, "table:    %s %s%s\n", t.ElemType, limits(t.Bounds, "elements"), grows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "imports:  %d\n", len(info.Imports))
	for _, im := range info.Imports {
		fmt.Fprintf(tw, "  %s.%s\t%s\t%s\n", safe(im.Module), safe(im.Name), im.Kind, im.Signature)
	}
	fmt.Fprintf(tw, "exports:  %d\n", len(info.Exports))
	for _, ex := range info.Exports {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", safe(ex.Name), ex.Kind, ex.Signature)
	}
	if len(info.CustomSections) > 0 {
		fmt.Fprintf(tw, "custom sections: %s\n", safe(strings.Join(info.CustomSections, ", ")))
	}
	return tw.Flush()
}

func limits(l wasmtools.Bounds, unit string) string {
	if l.Max == nil {
		return fmt.Sprintf("min %d %s, no max", l.Min, unit)
	}
	return fmt.Sprintf("min %d, max %d %s", l.Min, *l.Max, unit)
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
