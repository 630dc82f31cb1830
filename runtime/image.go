package runtime

import "os"

// Memory images.
//
// A Go wasip1 module carries about 1.5 MB of initial data in tens of
// thousands of data segments, and wazero copies them into every fresh
// instance's memory. Where the platform allows it (see image_linux.go), the
// sandbox instead applies the data segments once, at Compile, into a
// sealed in-memory file (the module's memory image), strips the data
// section from the module handed to wazero, and maps the image
// copy-on-write at the start of each instance's memory: an instance pays
// only for the pages it touches, and writes go to private copies, so no
// state is shared between instances.
//
// This is exact when the data segments are all active on memory 0 with
// constant offsets and all lie within the initial memory (so applying them
// cannot fail, and applying them in order into the image yields the same
// bytes as wazero would), and nothing refers to segments by index (no data
// count section, memory.init or data.drop). Instantiation order does not
// matter: nothing can observe memory between its creation and the end of
// data initialisation.

// buildImage applies the module's data segments in order and returns the
// resulting initial memory contents up to the last byte written, or false
// when the module does not qualify.
func buildImage(m *wasmModule) ([]byte, bool) {
	if m.hasDataCount || m.usesDataIndex || len(m.data) == 0 || len(m.memories) == 0 {
		return nil, false
	}
	minBytes := uint64(m.memories[0].min) * 65536
	var end uint64
	for _, s := range m.data {
		e := uint64(s.offset) + uint64(len(s.init))
		if !s.mergeable || e > minBytes {
			return nil, false
		}
		end = max(end, e)
	}
	img := make([]byte, end)
	for _, s := range m.data {
		copy(img[s.offset:], s.init)
	}
	return img, true
}

// stripData returns the module without its data section.
func stripData(b []byte, m *wasmModule) []byte {
	out := make([]byte, 0, len(b))
	prev := 0
	for _, s := range m.sections {
		if s.id == secData {
			out = append(out, b[prev:s.start]...)
			prev = s.end
		}
	}
	return append(out, b[prev:]...)
}

// pageAlign rounds n up to the host's page size.
func pageAlign(n int) int {
	ps := os.Getpagesize()
	return (n + ps - 1) / ps * ps
}
