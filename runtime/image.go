package runtime

import "github.com/agcore/agrun/internal/wasmbin"

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

// memImage is what a fresh memory holds before the guest runs: runs of
// bytes at their offsets, zero everywhere else, up to size bytes. A data
// image is one run; a snapshot (snapshot.go) has one run per stretch of
// non-zero pages.
type memImage struct {
	runs []imageRun
	size uint64 // the end of the last run, or more (a snapshot's memory size)
}

type imageRun struct {
	off  uint64
	data []byte
}

// apply writes the image into buf, which must be zero and at least
// im.size bytes long.
func (im *memImage) apply(buf []byte) {
	for _, r := range im.runs {
		copy(buf[r.off:], r.data)
	}
}

// bytes is how much the image holds (its runs).
func (im *memImage) bytes() int64 {
	var n int64
	for _, r := range im.runs {
		n += int64(len(r.data))
	}
	return n
}

// dataImage wraps a data image (from buildImage) as a memImage.
func dataImage(b []byte) *memImage {
	return &memImage{runs: []imageRun{{0, b}}, size: uint64(len(b))}
}

// buildImage applies the module's data segments in order and returns the
// resulting initial memory contents up to the last byte written, or false
// when the module does not qualify.
func buildImage(m *wasmbin.Module) ([]byte, bool) {
	if m.HasDataCount || m.UsesDataIndex || len(m.Data) == 0 || len(m.Memories) == 0 {
		return nil, false
	}
	minBytes := uint64(m.Memories[0].Min) * 65536
	var end uint64
	for _, s := range m.Data {
		e := uint64(s.Offset) + uint64(len(s.Init))
		if !s.Mergeable || e > minBytes {
			return nil, false
		}
		end = max(end, e)
	}
	img := make([]byte, end)
	for _, s := range m.Data {
		copy(img[s.Offset:], s.Init)
	}
	return img, true
}
