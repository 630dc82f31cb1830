package runtime

import (
	"fmt"
	"io"
	"path"
	"sync/atomic"

	"github.com/agcore/agrun/runtime/internal/sandboxfs"
	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// mountFS opens the mounts' file systems, served by runtime/internal/sandboxfs
// (never wazero's directory mounts, which follow symlinks out of the
// mount), in order. The closers release the mounts' directory
// descriptors; call them after the instance is closed. The writable mounts
// share one budget of maxWrite bytes. Each mount records what the guest
// does in its Recorder (the call's Audit).
func mountFS(mounts []Mount, maxWrite int64) ([]experimentalsys.FS, []io.Closer, []*sandboxfs.Recorder, error) {
	if len(mounts) == 0 {
		return nil, nil, nil, nil
	}
	var closers []io.Closer
	fail := func(err error) ([]experimentalsys.FS, []io.Closer, []*sandboxfs.Recorder, error) {
		closeAll(closers)
		return nil, nil, nil, err
	}
	var recs []*sandboxfs.Recorder
	seen := map[string]bool{}
	written := new(atomic.Int64) // shared by the call's mounts
	var fss []experimentalsys.FS
	for _, m := range mounts {
		if m.Guest == "" || m.Guest[0] != '/' || path.Clean(m.Guest) != m.Guest {
			return fail(fmt.Errorf("mount %q: the guest path must be absolute and clean", m.Guest))
		}
		if seen[m.Guest] {
			return fail(fmt.Errorf("mount %q: guest path mounted twice", m.Guest))
		}
		seen[m.Guest] = true
		if m.AllowDelete && !m.Writable {
			return fail(fmt.Errorf("mount %q: AllowDelete needs Writable", m.Guest))
		}
		rec := &sandboxfs.Recorder{}
		fs, err := sandboxfs.New(m.Host, sandboxfs.Options{
			Writable: m.Writable, AllowDelete: m.AllowDelete,
			MaxWriteBytes: maxWrite, WriteCounter: written, Recorder: rec,
		})
		if err != nil {
			return fail(fmt.Errorf("mount %q: %w", m.Guest, err))
		}
		if c, ok := fs.(io.Closer); ok {
			closers = append(closers, c)
		}
		fss = append(fss, fs)
		recs = append(recs, rec)
	}
	return fss, closers, recs, nil
}

// fsConfig mounts each file system at its guest path (paths[i] for
// fss[i]); nil if there are none.
func fsConfig[F experimentalsys.FS](paths []string, fss []F) wazero.FSConfig {
	if len(fss) == 0 {
		return nil
	}
	cfg := wazero.NewFSConfig()
	for i, fs := range fss {
		cfg = cfg.(sysfs.FSConfig).WithSysFSMount(fs, paths[i])
	}
	return cfg
}

// guestPaths lists the mounts' guest paths, in order.
func guestPaths(mounts []Mount) []string {
	out := make([]string, len(mounts))
	for i, m := range mounts {
		out[i] = m.Guest
	}
	return out
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		c.Close()
	}
}
