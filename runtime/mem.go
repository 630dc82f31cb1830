package runtime

// sliceMemory is a guest memory in a Go slice, grown by copying; used
// where a mapping is unavailable. init, if set, is copied in by the first
// allocation (the module's memory image).
type sliceMemory struct {
	mem      []byte
	init     []byte
	limit    uint64
	onExceed func()
}

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if size > m.limit {
		m.onExceed()
		return nil
	}
	if size <= uint64(cap(m.mem)) {
		m.mem = m.mem[:size]
		return m.mem
	}
	n := make([]byte, size, min(max(size, 2*uint64(cap(m.mem))), m.limit))
	copy(n, m.mem)
	if m.init != nil {
		copy(n, m.init)
		m.init = nil
	}
	m.mem = n
	return m.mem
}

func (m *sliceMemory) Free() { m.mem = nil }
