package runtime

import (
	"fmt"
	"io"
	"path"
	"sync/atomic"

	"github.com/agcore/agrun/internal/sandboxfs"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// mountConfig builds the guest's file system from the mounts, served by
// internal/sandboxfs (never wazero's directory mounts, which follow
// symlinks out of the mount). The closers release the mounts' directory
// descriptors; call them after the instance is closed. The writable mounts
// share one budget of maxWrite bytes.
func mountConfig(mounts []Mount, maxWrite int64) (wazero.FSConfig, []io.Closer, error) {
	if len(mounts) == 0 {
		return nil, nil, nil
	}
	var closers []io.Closer
	fail := func(err error) (wazero.FSConfig, []io.Closer, error) {
		closeAll(closers)
		return nil, nil, err
	}
	seen := map[string]bool{}
	written := new(atomic.Int64) // shared by the call's mounts
	cfg := wazero.NewFSConfig()
	for _, m := range mounts {
		if m.GuestPath == "" || m.GuestPath[0] != '/' || path.Clean(m.GuestPath) != m.GuestPath {
			return fail(fmt.Errorf("runtime: mount %q: the guest path must be absolute and clean", m.GuestPath))
		}
		if seen[m.GuestPath] {
			return fail(fmt.Errorf("runtime: mount %q: guest path mounted twice", m.GuestPath))
		}
		seen[m.GuestPath] = true
		if m.AllowDelete && !m.Writable {
			return fail(fmt.Errorf("runtime: mount %q: AllowDelete needs Writable", m.GuestPath))
		}
		fs, err := sandboxfs.New(m.HostPath, sandboxfs.Options{
			Writable: m.Writable, AllowDelete: m.AllowDelete,
			MaxWriteBytes: maxWrite, WriteCounter: written,
		})
		if err != nil {
			return fail(fmt.Errorf("runtime: mount %q: %w", m.GuestPath, err))
		}
		if c, ok := fs.(io.Closer); ok {
			closers = append(closers, c)
		}
		cfg = cfg.(sysfs.FSConfig).WithSysFSMount(fs, m.GuestPath)
	}
	return cfg, closers, nil
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		c.Close()
	}
}
