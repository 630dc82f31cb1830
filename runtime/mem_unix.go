//go:build unix

package runtime

import (
	"sync"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// Bounds of the pool of reusable memories: a mapping is kept only if the
// guest used at most keepResident bytes of it (larger ones are unmapped
// rather than cleared), and the pool holds at most poolResident bytes of
// touched pages in all.
const (
	keepResident = 16 << 20
	poolResident = 256 << 20
)

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

func (a *memAllocator) Allocate(capacity, maxBytes uint64) experimental.LinearMemory {
	reserve := min(maxBytes, a.limit)
	if uint64(len(a.image)) > reserve { // cannot happen: Run checks the minimum
		return &sliceMemory{limit: a.limit, init: a.image, onExceed: a.onExceed}
	}
	buf, resident := a.pool.get(reserve)
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
	m.resident = max(resident, m.used)
	return m
}

// mmapMemory is a guest memory in a mapping; mem's capacity is the whole
// mapping.
type mmapMemory struct {
	mem      []byte
	used     uint64 // the most bytes the guest could ever reach (or we wrote)
	resident uint64 // the most bytes ever touched in this mapping
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
	m.resident = max(m.resident, size)
	return m.mem
}

func (m *mmapMemory) Free() {
	if m.mem == nil {
		return
	}
	buf := m.mem[:cap(m.mem)]
	m.mem = nil
	if m.resident <= keepResident && m.pool.reserve(m.resident) {
		clear(buf[:m.used])
		m.pool.put(pooledMem{buf, m.resident})
		return
	}
	syscall.Munmap(buf)
}

// memPool keeps zeroed guest memory mappings for reuse. Every mapping in
// it is entirely zero.
type memPool struct {
	mu       sync.Mutex
	free     []pooledMem
	max      int    // mappings, pooled or held
	held     int    // mappings reserved but not yet put
	resident uint64 // touched bytes of the mappings pooled or held
	closed   bool
}

type pooledMem struct {
	buf      []byte
	resident uint64
}

// get returns a zeroed mapping of at least size bytes and how much of it
// was touched before, or nil.
func (p *memPool) get(size uint64) ([]byte, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.free) - 1; i >= 0; i-- {
		if e := p.free[i]; uint64(len(e.buf)) >= size {
			p.free = append(p.free[:i], p.free[i+1:]...)
			p.resident -= e.resident
			return e.buf, e.resident
		}
	}
	return nil, 0
}

// reserve claims room for a mapping with resident touched bytes; false if
// the pool is full or closed. A successful reserve must be followed by put.
func (p *memPool) reserve(resident uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.free)+p.held >= p.max || p.resident+resident > poolResident {
		return false
	}
	p.resident += resident
	p.held++
	return true
}

// put adds a zeroed mapping reserved with reserve.
func (p *memPool) put(e pooledMem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held--
	if p.closed {
		p.resident -= e.resident
		syscall.Munmap(e.buf)
		return
	}
	p.free = append(p.free, e)
}

// drain unmaps every pooled mapping and keeps later ones out.
func (p *memPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, e := range p.free {
		p.resident -= e.resident
		syscall.Munmap(e.buf)
	}
	p.free = nil
}
