package sandboxfs

import (
	"os"
	"syscall"
	"unsafe"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// utimeOmit is Linux's UTIME_OMIT for a timespec's nanoseconds.
const utimeOmit = (1 << 30) - 2

// futimens sets the times of the open file itself, with utimensat on the
// descriptor and a NULL path (as wazero does), so the file cannot be
// swapped underneath. UTIME_OMIT leaves a time unchanged.
func futimens(f *os.File, atim, mtim int64) experimentalsys.Errno {
	if atim == experimentalsys.UTIME_OMIT && mtim == experimentalsys.UTIME_OMIT {
		return 0
	}
	ts := [2]syscall.Timespec{toTimespec(atim), toTimespec(mtim)}
	rc, err := f.SyscallConn()
	if err != nil {
		return toErrno(err)
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	}); err != nil {
		return toErrno(err)
	}
	if errno != 0 {
		return toErrno(errno)
	}
	return 0
}

func toTimespec(n int64) syscall.Timespec {
	if n == experimentalsys.UTIME_OMIT {
		return syscall.Timespec{Nsec: utimeOmit}
	}
	return syscall.NsecToTimespec(n)
}
