package wasmtools

import (
	"errors"
	"fmt"

	"github.com/agcore/agrun/internal/wasmbin"
)

// The binary format is read by internal/wasmbin, the parser the runtime
// uses: Inspect with its lenient mode (any well-formed module, not only
// what the runtime would run), Pack with its outer-structure reader.

// ErrMalformed is wrapped by Pack and Inspect for bytes that are not a
// well-formed WebAssembly module.
var ErrMalformed = errors.New("malformed module")

// manifestName is the custom section holding the manifest.
const manifestName = "agrun.manifest"

// malformed turns a *wasmbin.Error into an error wrapping ErrMalformed,
// "wasmtools: malformed module: at byte N: reason". Other errors are
// returned unchanged.
func malformed(err error) error {
	var e *wasmbin.Error
	if errors.As(err, &e) {
		return fmt.Errorf("%w: at byte %d: %s", ErrMalformed, e.Offset, e.Reason)
	}
	return err
}

// readSections is wasmbin.ReadSections with errors wrapping ErrMalformed.
func readSections(b []byte) ([]wasmbin.Section, error) {
	secs, err := wasmbin.ReadSections(b)
	return secs, malformed(err)
}

// manifestSection returns the body of the module's agrun.manifest custom
// section, or nil if there is none. A malformed module, or one with more
// than one manifest section, is an error.
func manifestSection(wasm []byte) ([]byte, error) {
	secs, err := readSections(wasm)
	if err != nil {
		return nil, err
	}
	return findManifest(secs)
}

// findManifest is manifestSection on sections already read. An empty body
// is returned as a non-nil empty slice, which ParseManifest refuses.
func findManifest(secs []wasmbin.Section) ([]byte, error) {
	var body []byte
	found := false
	for _, s := range secs {
		if s.ID != wasmbin.SecCustom || s.Name != manifestName {
			continue
		}
		if found {
			return nil, &ManifestError{Err: fmt.Errorf("the module has more than one %s section", manifestName)}
		}
		found = true
		body = s.Body
		if body == nil {
			body = []byte{}
		}
	}
	return body, nil
}
