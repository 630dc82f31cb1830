//go:build unix

package sandboxfs

import (
	"syscall"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// withSyscallFlags adds the open flags the os package has no name for.
func withSyscallFlags(flag experimentalsys.Oflag, f int) int {
	if flag&experimentalsys.O_DIRECTORY != 0 {
		f |= syscall.O_DIRECTORY
	}
	if flag&experimentalsys.O_DSYNC != 0 {
		f |= syscall.O_DSYNC
	}
	return f
}
