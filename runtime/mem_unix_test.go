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
