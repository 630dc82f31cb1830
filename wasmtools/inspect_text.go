package wasmtools

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/runtime"
)

// ReadModuleFile reads the .wasm file at path, refusing one larger than
// the sandbox's module limit (runtime.DefaultMaxModuleBytes) before it
// reads it.
func ReadModuleFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > runtime.DefaultMaxModuleBytes {
		return nil, fmt.Errorf("%s: %d bytes, larger than the %d-byte module limit", path, fi.Size(), runtime.DefaultMaxModuleBytes)
	}
	return os.ReadFile(path)
}

// WriteText writes info for a person, as `agrun inspect` prints it:
// file (the name given), size, hash, the manifest (or why it was
// refused, or that there is none), memories, tables, imports and
// exports with their signatures, and the custom sections. Names from
// the module are escaped (textsafe.Escape): a module is untrusted input.
func (info Info) WriteText(w io.Writer, file string) error {
	safe := textsafe.Escape
	fmt.Fprintf(w, "file:     %s\n", safe(file))
	fmt.Fprintf(w, "size:     %d bytes\n", info.Size)
	fmt.Fprintf(w, "sha256:   %s\n", info.SHA256)
	switch {
	case info.Manifest != nil:
		b, _ := json.MarshalIndent(info.Manifest, "          ", "  ")
		fmt.Fprintf(w, "manifest: %s\n", safe(string(b)))
	case info.ManifestError != nil:
		fmt.Fprintf(w, "manifest: invalid: %s\n", safe(info.ManifestError.Error()))
	default:
		fmt.Fprintf(w, "manifest: none (add one with agrun pack, or give one in agrun.toml)\n")
	}
	for _, m := range info.Memories {
		fmt.Fprintf(w, "memory:   %s\n", m.Bounds.text("pages"))
	}
	for _, t := range info.Tables {
		grows := ""
		if t.Grows {
			grows = ", grown by the code (table.grow/table.fill)"
		}
		fmt.Fprintf(w, "table:    %s %s%s\n", t.ElemType, t.Bounds.text("elements"), grows)
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

// text is "min 1, max 2 pages", or "min 1 pages, no max".
func (l Bounds) text(unit string) string {
	if l.Max == nil {
		return fmt.Sprintf("min %d %s, no max", l.Min, unit)
	}
	return fmt.Sprintf("min %d, max %d %s", l.Min, *l.Max, unit)
}
