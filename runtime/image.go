package runtime

// Memory images.
//
// A Go wasip1 module carries about 1.5 MB of initial data in tens of
// thousands of data segments, and wazero copies them into every fresh
// instance's memory one by one. Instead, Compile applies the data segments
// once into the module's memory image, strips the data section from the
// module handed to wazero, and the memory allocator (mem_unix.go) copies
// the image into each new instance's memory in one go, usually into pages
// that are already mapped and zeroed, so that a call takes no page faults.
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
