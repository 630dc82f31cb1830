//go:build unix

package runtime

import "testing"

// The pool of reusable memories stays within its bounds and accounts for
// what it holds.
func TestMemPoolBounds(t *testing.T) {
	p := &memPool{max: 2}
	buf := func() []byte { return make([]byte, 1<<20) } // stands in for a mapping
	for i := 0; i < 2; i++ {
		if !p.reserve(1 << 20) {
			t.Fatalf("reserve %d refused with room", i+1)
		}
	}
	if p.reserve(1) {
		t.Fatal("reserve beyond max mappings")
	}
	p.free = append(p.free, pooledMem{buf(), 1 << 20, nil}) // as put does, without munmap
	p.held--
	if e := p.get(2<<20, nil); e.buf != nil || e.resident != 0 {
		t.Fatal("get returned a mapping smaller than asked")
	}
	if e := p.get(1<<20, nil); e.buf == nil || e.resident != 1<<20 {
		t.Fatal("get did not return the pooled mapping")
	}
	p.held--
	if p.resident != 1<<20 {
		t.Errorf("resident = %d, want the one still held", p.resident)
	}
	q := &memPool{max: 100}
	if q.reserve(poolResident + 1) {
		t.Error("reserve beyond the resident budget")
	}
}

// A memory grown, written past its start size, shrunk back without the
// allocator's own zeroing (resetForReuse does not rely on wazero's), reused,
// grown less the next time and then freed to the pool hands a mapping of
// zeros beyond the image to an instance of another image, however far it
// grows.
func TestResetForReuseShrunkThenPooled(t *testing.T) {
	const page = 65536
	p := &memPool{max: 4}
	defer p.drain()
	imA := dataImage([]byte("image A"))
	imA.size = 2 * page
	a := &memAllocator{pool: p, limit: 16 * page, image: imA, onExceed: func() {}}
	m := a.allocate(16 * page).(*mmapMemory)
	m.Reallocate(2 * page)
	b := m.Reallocate(6 * page) // call 1 grows to 6 pages
	for i := 2 * page; i < 6*page; i += 4096 {
		b[i+7] = 0xaa
	}
	// A shrink that does not zero.
	if !m.resetForReuse(2*page, func() bool { return m.Reallocate(2*page) != nil }) {
		t.Fatal("not reset")
	}
	b = m.Reallocate(3 * page) // call 2 grows less
	for i := 2 * page; i < 3*page; i++ {
		if b[i] != 0 {
			t.Fatalf("call 2 sees %#x at %d", b[i], i)
		}
	}
	b[2*page+1] = 0xbb
	m.Free()
	imB := dataImage([]byte("B"))
	bAlloc := &memAllocator{pool: p, limit: 16 * page, image: imB, onExceed: func() {}}
	n := bAlloc.allocate(16 * page).(*mmapMemory)
	if n.resident < 6*page {
		t.Errorf("resident %d: the pooled mapping's touched pages were forgotten", n.resident)
	}
	c := n.Reallocate(16 * page)
	if c[0] != 'B' {
		t.Fatal("image B not applied")
	}
	for i := 1; i < len(c); i++ {
		if c[i] != 0 {
			t.Fatalf("another image's instance sees %#x at %d", c[i], i)
		}
	}
	n.Free()
}

// A memory the guest grew past what the pool keeps is not reset for
// reuse, and not shrunk first either: a shrink zeroes what it drops, and
// a guest that grew its memory to its limit without touching it must not
// make the host write all of it.
func TestResetForReuseBoundsShrink(t *testing.T) {
	const page = 65536
	p := &memPool{max: 2}
	defer p.drain()
	im := dataImage([]byte("image"))
	im.size = 2 * page
	a := &memAllocator{pool: p, limit: 2*keepResident + 2*page, image: im, onExceed: func() {}}
	m := a.allocate(a.limit).(*mmapMemory)
	m.Reallocate(2 * page)
	m.Reallocate(2*page + 2*keepResident) // grown, never touched
	shrunk := false
	if m.resetForReuse(2*page, func() bool { shrunk = true; return true }) {
		t.Error("a memory grown past the pool's bound was reset for reuse")
	}
	if shrunk {
		t.Error("shrunk before its bounds were checked")
	}
	m.Free()

	// Within the bounds, a failed shrink means no reuse.
	m = a.allocate(a.limit).(*mmapMemory)
	m.Reallocate(2 * page)
	m.Reallocate(3 * page)
	if m.resetForReuse(2*page, func() bool { return false }) {
		t.Error("reset for reuse though the shrink failed")
	}
	m.Free()
}
