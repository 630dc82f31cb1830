//go:build unix

package runtime

import (
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// memAllocator backs each guest memory with an anonymous mapping of the
// call's memory limit: growing never copies, untouched pages cost nothing,
// and a growth past the limit fails (memory.grow returns -1) and ends the
// call with ErrMemoryLimit. If the module has a memory image, it is mapped
// copy-on-write over the start of the memory (see image.go). wazero frees
// the mapping when the instance is closed, which Run does only after the
// guest stopped running.
type memAllocator struct {
	limit    uint64
	image    *memImage
	onExceed func()
}

func (a *memAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	reserve := min(max, a.limit)
	fallback := &sliceMemory{limit: a.limit, onExceed: a.onExceed}
	if a.image != nil {
		fallback.init = a.image.data
	}
	if reserve == 0 {
		return fallback
	}
	b, err := syscall.Mmap(-1, 0, int(reserve), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
	if err != nil {
		return fallback
	}
	if a.image != nil {
		if err := a.image.mapInto(b); err != nil {
			copy(b, a.image.data)
		}
	}
	return &mmapMemory{mem: b[:0], limit: a.limit, onExceed: a.onExceed}
}

type mmapMemory struct {
	mem      []byte
	limit    uint64
	onExceed func()
}

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if size > m.limit || size > uint64(cap(m.mem)) {
		m.onExceed()
		return nil
	}
	m.mem = m.mem[:size]
	return m.mem
}

func (m *mmapMemory) Free() {
	if m.mem != nil {
		syscall.Munmap(m.mem[:cap(m.mem)])
		m.mem = nil
	}
}
