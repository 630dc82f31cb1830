package runtime

// sliceMemory is a guest memory in a Go slice, grown by copying; used
// where a mapping is unavailable. init, if set, is applied by the first
// allocation (the memory image: the module's data or a snapshot), which
// gets room for all of it even where the image reaches beyond the initial
// size (a snapshot of a memory that grew), so that growing there keeps it.
type sliceMemory struct {
	mem      []byte
	init     *memImage
	limit    uint64
	onExceed func()
	held     func() uint64 // see memAllocator.held
}

// overLimit says whether a memory of size bytes, with what the guest
// holds elsewhere (held), passes limit.
func overLimit(size, limit uint64, held func() uint64) bool {
	return size > limit || held != nil && size+held() > limit
}

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if overLimit(size, m.limit, m.held) {
		m.onExceed()
		return nil
	}
	if size <= uint64(cap(m.mem)) {
		m.mem = m.mem[:size]
		return m.mem
	}
	room := max(size, 2*uint64(cap(m.mem)))
	if m.init != nil {
		room = max(room, m.init.size)
	}
	n := make([]byte, size, min(room, m.limit))
	copy(n, m.mem)
	if m.init != nil {
		m.init.apply(n[:cap(n)])
		m.init = nil
	}
	m.mem = n
	return m.mem
}

func (m *sliceMemory) Free() { m.mem = nil }
