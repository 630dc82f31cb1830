package runtime

import (
	"errors"

	"github.com/tetratelabs/wazero"
)

// mountConfig builds the guest's file system from the mounts.
func mountConfig(mounts []Mount) (wazero.FSConfig, error) {
	if len(mounts) == 0 {
		return nil, nil
	}
	return nil, errors.New("runtime: mounts are not supported yet")
}
