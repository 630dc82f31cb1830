// Command echo is a bare WASI program written without the guest SDK, as a
// third party might: it reads the call's JSON arguments from stdin and
// writes them back unchanged. Tests load it with LoadWithManifest.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil || !json.Valid(in) {
		fmt.Fprintln(os.Stderr, "echo: stdin is not JSON")
		os.Exit(1)
	}
	os.Stdout.Write(in)
}
