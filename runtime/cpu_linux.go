//go:build linux

package runtime

import (
	goruntime "runtime"
	"syscall"
	"time"
)

// threadCPU measures the CPU time of the calling goroutine's thread; the
// goroutine stays on that thread until stop.
type threadCPU struct{ start time.Duration }

// rusageThread is RUSAGE_THREAD (Linux): the calling thread only.
const rusageThread = 1

func threadTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(rusageThread, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startThreadCPU() threadCPU {
	goruntime.LockOSThread()
	return threadCPU{start: threadTime()}
}

func (t threadCPU) stop() time.Duration {
	d := threadTime() - t.start
	goruntime.UnlockOSThread()
	return max(d, 0)
}
