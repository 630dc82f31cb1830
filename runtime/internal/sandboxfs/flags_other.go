//go:build !unix

package sandboxfs

import experimentalsys "github.com/tetratelabs/wazero/experimental/sys"

// withSyscallFlags: other systems have no O_DIRECTORY; wazero checks
// IsDir after opening with O_DIRECTORY anyway.
func withSyscallFlags(_ experimentalsys.Oflag, f int) int { return f }
