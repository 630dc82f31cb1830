//go:build unix

package runtime

import (
	"bytes"
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
// ErrMemoryLimit. The memory image (image.go: the module's data, or a
// snapshot) is copied in.
//
// Mappings are reused: when an instance is closed, the part of its memory
// the guest could reach is reset to the image it started from (pages that
// differ are rewritten, see resetTo) and the mapping goes back to the
// Runtime's pool, recording that image. The next instance with the same
// image starts on it as it is: no copy, no page faults, no mmap/munmap;
// one with another image clears it and copies its own in. Either way an
// instance starts on exactly its image and zeros: nothing survives from
// one call to the next. wazero frees a memory only after its guest stopped
// running.
type memAllocator struct {
	pool     *memPool
	limit    uint64
	image    *memImage // nil: none
	onExceed func()
	// held, if set, is what the guest holds outside its memory (an
	// Extism plug-in's arena, extism.go), counted in the same limit.
	held func() uint64
	// made is the memory Allocate returned last.
	made experimental.LinearMemory
}

func (a *memAllocator) Allocate(capacity, maxBytes uint64) experimental.LinearMemory {
	a.made = a.allocate(maxBytes)
	return a.made
}

func (a *memAllocator) allocate(maxBytes uint64) experimental.LinearMemory {
	reserve := min(maxBytes, a.limit)
	if a.image != nil && a.image.size > reserve { // cannot happen: Run checks the sizes
		return &sliceMemory{limit: a.limit, init: a.image, onExceed: a.onExceed, held: a.held}
	}
	e := a.pool.get(reserve, a.image)
	if e.buf == nil && reserve > 0 {
		b, err := syscall.Mmap(-1, 0, int(reserve), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
		if err == nil {
			e = pooledMem{buf: b}
		}
	}
	if e.buf == nil {
		return &sliceMemory{limit: a.limit, init: a.image, onExceed: a.onExceed, held: a.held}
	}
	if e.image != a.image {
		if e.image != nil {
			clear(e.buf[:e.image.size])
		}
		if a.image != nil {
			a.image.apply(e.buf)
		}
	}
	m := &mmapMemory{mem: e.buf[:0], image: a.image, limit: a.limit, pool: a.pool, onExceed: a.onExceed, held: a.held}
	if a.image != nil {
		m.used = a.image.size
	}
	m.resident = max(e.resident, m.used)
	return m
}

// mmapMemory is a guest memory in a mapping; mem's capacity is the whole
// mapping.
type mmapMemory struct {
	mem      []byte
	image    *memImage // what the memory started as (nil: zeros)
	used     uint64    // the most bytes the guest could ever reach (or we wrote)
	resident uint64    // the most bytes ever touched in this mapping
	limit    uint64
	pool     *memPool
	onExceed func()
	held     func() uint64 // see memAllocator.held
}

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if overLimit(size, m.limit, m.held) || size > uint64(cap(m.mem)) {
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
		resetTo(buf[:m.used], m.image)
		m.pool.put(pooledMem{buf, m.resident, m.image})
		return
	}
	syscall.Munmap(buf)
}

// resetForReuse makes the memory exactly its image again, for another
// call of the same instance (reuse.go), and says whether it did: not if
// more of it was ever touched than the pool keeps (Free unmaps such a
// memory rather than reset it), if it was freed, or if it is not size
// bytes long (the size its instance started with) once shrink has run
// (reuse.go shrinkTo: a memory the guest grew is shrunk back). shrink
// runs only within those bounds: a shrink zeroes what it drops, which
// must not mean writing the hundreds of MiB a guest grew and never
// touched. It compares and rewrites the same pages as Free's reset, up to
// the most the guest reached: the bytes past size are zeros again when
// the memory grows next (wazero's Shrink zeroes them too; this does not
// rely on it).
func (m *mmapMemory) resetForReuse(size uint64, shrink func() bool) bool {
	if m.mem == nil || m.resident > keepResident || (m.image != nil && m.image.size != size) {
		return false
	}
	if !shrink() || uint64(len(m.mem)) != size || m.used < size {
		return false
	}
	resetTo(m.mem[:m.used], m.image)
	m.used = size
	return true
}

// resetTo makes buf hold exactly image (zeros where it has no run; the
// whole image must lie within buf), rewriting only the pages that differ:
// a call changes a small part of a large memory, and reading is cheaper
// than writing (which also keeps untouched pages out of the cache).
func resetTo(buf []byte, image *memImage) {
	var zero [resetPage]byte
	at := 0
	restore := func(end int, want []byte) { // buf[at:end] should be want (nil: zeros)
		for at < end {
			n := min(resetPage, end-at)
			w := zero[:n]
			if want != nil {
				w = want[:n]
				want = want[n:]
			}
			if !bytes.Equal(buf[at:at+n], w) {
				copy(buf[at:at+n], w)
			}
			at += n
		}
	}
	if image != nil {
		for _, r := range image.runs {
			restore(int(r.off), nil)
			restore(int(r.off)+len(r.data), r.data)
		}
	}
	restore(len(buf), nil)
}

// resetPage is the unit resetTo compares.
const resetPage = 4096

// memPool keeps guest memory mappings for reuse. Every mapping in it holds
// exactly its recorded image, and zeros beyond it.
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
	resident uint64    // how much of it was ever touched
	image    *memImage // what it holds (nil: zeros)
}

// get returns a mapping of at least size bytes, preferring one that holds
// image, or a zero pooledMem.
func (p *memPool) get(size uint64, image *memImage) pooledMem {
	p.mu.Lock()
	defer p.mu.Unlock()
	pick := -1
	for i := len(p.free) - 1; i >= 0; i-- {
		if e := p.free[i]; uint64(len(e.buf)) >= size {
			if pick < 0 || e.image == image {
				pick = i
			}
			if e.image == image {
				break
			}
		}
	}
	if pick < 0 {
		return pooledMem{}
	}
	e := p.free[pick]
	p.free = append(p.free[:pick], p.free[pick+1:]...)
	p.resident -= e.resident
	return e
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

// put adds a mapping reserved with reserve, holding e.image.
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
