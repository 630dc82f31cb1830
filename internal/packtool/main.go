// Command packtool embeds a manifest into a WebAssembly module, as
// `agrun pack` does; scripts/build-examples.sh uses it to pack the example
// tools with the same code the CLI uses (wasmtools.Pack).
//
//	go run ./internal/packtool -m manifest.toml in.wasm -o out.wasm
//
// The manifest is TOML or JSON, by its extension. The output is written to
// a temporary file and renamed, so a failed run leaves no partial file.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/agcore/agrun/wasmtools"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("packtool", flag.ContinueOnError)
	fs.SetOutput(stderr)
	manifest := fs.String("m", "", "manifest file (.toml or .json)")
	out := fs.String("o", "", "output .wasm file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: packtool -m MANIFEST IN.wasm -o OUT.wasm")
		fs.PrintDefaults()
	}
	// Flags may come before and after the one positional argument.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 || *manifest == "" || *out == "" {
		fs.Usage()
		return 2
	}
	if err := pack(*manifest, pos[0], *out); err != nil {
		fmt.Fprintln(stderr, "packtool:", err)
		return 1
	}
	return 0
}

func pack(manifestPath, in, out string) error {
	m, err := wasmtools.ReadManifestFile(manifestPath)
	if err != nil {
		return err
	}
	wasm, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	packed, err := wasmtools.Pack(wasm, m)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".packtool-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(packed)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), out)
}
