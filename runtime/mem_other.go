//go:build !unix

package runtime

import "github.com/tetratelabs/wazero/experimental"

// memAllocator backs each guest memory with a Go slice and refuses growth
// past the call's memory limit (see mem_unix.go for the mapped version).
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

func (a *memAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	a.made = &sliceMemory{limit: a.limit, init: a.image, onExceed: a.onExceed, held: a.held}
	return a.made
}

// memPool is unused where memories are Go slices.
type memPool struct{ max int }

func (*memPool) drain() {}
