//go:build unix

package runtime

import (
	"sync"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// keepResident is the most memory a finished instance may have used for
// its mapping to be kept for the next one: larger ones are unmapped rather
// than cleared, so an idle Runtime holds at most MaxInstances*keepResident.
const keepResident = 16 << 20

// memAllocator backs each guest memory with an anonymous mapping as large
// as the call's memory limit: growing never copies and a growth past the
// limit fails (memory.grow returns -1) and ends the call with
// ErrMemoryLimit. The module's memory image (image.go) is copied in.
//
// Mappings are reused: when an instance is closed, the part of its memory
// the guest could reach is zeroed and the mapping goes back to the
// Runtime's pool, so the next instance starts on pages that are already
// mapped (no page faults, no mmap/munmap) and all zero, exactly like fresh
// memory: nothing survives from one call to the next. wazero frees a
// memory only after its guest stopped running.
type memAllocator struct {
	pool     *memPool
	limit    uint64
	image    []byte
	onExceed func()
}

func (a *memAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	reserve := min(max, a.limit)
	if uint64(len(a.image)) > reserve { // cannot happen: Run checks the minimum
		return &sliceMemory{limit: a.limit, init: a.image, onExceed: a.onExceed}
	}
	buf := a.pool.get(reserve)
	if buf == nil && reserve > 0 {
		b, err := syscall.Mmap(-1, 0, int(reserve), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
		if err == nil {
			buf = b
		}
	}
	if buf == nil {
		return &sliceMemory{limit: a.limit, init: a.image, onExceed: a.onExceed}
	}
	m := &mmapMemory{mem: buf[:0], limit: a.limit, pool: a.pool, onExceed: a.onExceed}
	copy(buf, a.image)
	m.used = uint64(len(a.image))
	return m
}

// mmapMemory is a guest memory in a mapping; mem's capacity is the whole
// mapping.
type mmapMemory struct {
	mem      []byte
	used     uint64 // the most bytes the guest could ever reach (or we wrote)
	limit    uint64
	pool     *memPool
	onExceed func()
}

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if size > m.limit || size > uint64(cap(m.mem)) {
		m.onExceed()
		return nil
	}
	m.mem = m.mem[:size]
	m.used = max(m.used, size)
	return m.mem
}

func (m *mmapMemory) Free() {
	if m.mem == nil {
		return
	}
	buf := m.mem[:cap(m.mem)]
	m.mem = nil
	if m.used <= keepResident {
		clear(buf[:m.used])
		if m.pool.put(buf) {
			return
		}
	}
	syscall.Munmap(buf)
}

// memPool keeps zeroed guest memory mappings for reuse. Every mapping in
// it is entirely zero.
type memPool struct {
	mu     sync.Mutex
	free   [][]byte
	max    int
	closed bool
}

// get returns a zeroed mapping of at least reserve bytes, or nil.
func (p *memPool) get(reserve uint64) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.free) - 1; i >= 0; i-- {
		if b := p.free[i]; uint64(len(b)) >= reserve {
			p.free = append(p.free[:i], p.free[i+1:]...)
			return b
		}
	}
	return nil
}

// put keeps a zeroed mapping; false if the pool is full or closed.
func (p *memPool) put(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.free) >= p.max {
		return false
	}
	p.free = append(p.free, b)
	return true
}

// drain unmaps every pooled mapping and keeps later ones out.
func (p *memPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, b := range p.free {
		syscall.Munmap(b)
	}
	p.free = nil
}
