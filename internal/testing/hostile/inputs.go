//go:build unix

package hostile

import (
	"encoding/binary"
)

// WithSection appends a custom section name=data to wasm, bypassing Pack's
// checks: an attacker writes the bytes it likes.
func WithSection(wasm []byte, name string, data []byte) []byte {
	body := binary.AppendUvarint(nil, uint64(len(name)))
	body = append(append(body, name...), data...)
	out := append(append([]byte{}, wasm...), 0)
	out = binary.AppendUvarint(out, uint64(len(body)))
	return append(out, body...)
}
