//go:build unix

package runtime

import (
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// memAllocator backs each guest memory with an anonymous mapping of the
// call's memory limit: growing never copies, untouched pages cost nothing,
// and a growth past the limit fails (memory.grow returns -1) and ends the
// call with ErrMemoryLimit. wazero frees the mapping when the instance is
// closed, which Run does only after the guest stopped running.
type memAllocator struct {
	limit    uint64
	onExceed func()
}

func (a *memAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	reserve := min(max, a.limit)
	if reserve == 0 {
		return &sliceMemory{limit: a.limit, onExceed: a.onExceed}
	}
	b, err := syscall.Mmap(-1, 0, int(reserve), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
	if err != nil {
		return &sliceMemory{limit: a.limit, onExceed: a.onExceed}
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
