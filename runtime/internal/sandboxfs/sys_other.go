//go:build !linux

package sandboxfs

import (
	"os"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// futimens is not implemented off Linux; wazero then falls back to the
// path-based FS.Utimens.
func futimens(*os.File, int64, int64) experimentalsys.Errno {
	return experimentalsys.ENOSYS
}
