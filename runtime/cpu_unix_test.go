//go:build unix

package runtime

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time used by this process and its waited-for
// children, in nanoseconds.
func cpuTime() int64 {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return -1
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return int64(total)
}
