//go:build !unix

package runtime

import "github.com/tetratelabs/wazero/experimental"

// memAllocator backs each guest memory with a Go slice and refuses growth
// past the call's memory limit (see mem_unix.go for the mapped version).
type memAllocator struct {
	limit    uint64
	image    *memImage
	onExceed func()
}

func (a *memAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	m := &sliceMemory{limit: a.limit, onExceed: a.onExceed}
	if a.image != nil {
		m.init = a.image.data
	}
	return m
}
