package wasmtools

import (
	"fmt"

	"github.com/agcore/agrun/internal/wasmbin"
)

// Pack returns a copy of wasm with m embedded as its agrun.manifest custom
// section. Every existing agrun.manifest section is removed and the new one
// is appended at the end of the module; every other byte is kept as it was,
// in order. The manifest is validated first (see Manifest.Validate) and
// written normalized (as ParseManifest would return it), so Inspect on the
// result reports m. Errors: an invalid manifest (*ManifestError) or a
// malformed module (wrapping ErrMalformed). Pack is deterministic: packing
// the same module and manifest gives the same bytes, and Pack(Pack(w, a), b)
// equals Pack(w, b).
func Pack(wasm []byte, m Manifest) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	m = m.normalized()
	body, err := m.MarshalJSON()
	if err != nil {
		return nil, &ManifestError{Err: fmt.Errorf("encoding: %w", err)}
	}
	if len(body) > MaxManifestBytes {
		return nil, manifestErr("", "%d bytes encoded, at most %d", len(body), MaxManifestBytes)
	}
	secs, err := readSections(wasm)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(wasm)+len(body)+len(manifestName)+16)
	out = append(out, wasmbin.Header...)
	for _, s := range secs {
		if s.ID == wasmbin.SecCustom && s.Name == manifestName {
			continue
		}
		out = append(out, wasm[s.Start:s.End]...)
	}
	return wasmbin.AppendCustomSection(out, manifestName, body), nil
}
