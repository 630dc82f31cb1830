package sandboxfs

import (
	"io"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agcore/agrun/internal/testing/leak"
)

// TestOpenFileCap: a guest that opens thousands of files and never closes
// them gets EAGAIN at the cap, and every descriptor is released when its
// module closes.
func TestOpenFileCap(t *testing.T) {
	tr := newTree(t)
	// Warm up whatever the process opens once (the poller, the guest's
	// compiled code) so the count below sees only this FS.
	warm := startGuest(t, newFS(t, tr.mount, Options{}))
	warm.mustOK(cmd{Op: "read", Path: "/data/hello.txt"})
	warm.stop()

	before := leak.OpenFDs(t)
	fsys, err := New(tr.mount, Options{})
	must(t, err)
	g := startGuest(t, fsys)
	r := g.mustFail(cmd{Op: "openmany", Path: "/data/hello.txt", N: 5000}, "EAGAIN")
	// The mount's own directory (wazero opens it lazily) is the one file
	// not counted in r.N.
	if r.N != DefaultMaxOpenFiles-1 {
		t.Errorf("opened %d files before the cap, want %d", r.N, DefaultMaxOpenFiles-1)
	}
	if n := leak.OpenFDs(t); n < before+DefaultMaxOpenFiles {
		t.Errorf("only %d descriptors open while the guest holds %d files", n-before, r.N)
	}
	g.stop() // the guest exits without closing anything

	if n := fsys.(*rootFS).open.Load(); n != 0 {
		t.Errorf("%d files still counted open after the module closed", n)
	}
	must(t, fsys.(io.Closer).Close())
	if after := leak.OpenFDs(t); after != before {
		t.Errorf("descriptors: %d before, %d after the module and FS closed", before, after)
	}
}

// TestSpecialFilesRefused: a FIFO in the mount neither blocks the host (an
// open without a writer would) nor opens.
func TestSpecialFilesRefused(t *testing.T) {
	tr := newTree(t)
	must(t, syscall.Mkfifo(filepath.Join(tr.mount, "fifo"), 0o644))
	g := startGuest(t, newFS(t, tr.mount, Options{Writable: true}))
	g.mustFail(cmd{Op: "read", Path: "/data/fifo"}, "EACCES")
	g.mustFail(cmd{Op: "writeopen", Path: "/data/fifo", Data: "x"}, "") // ENXIO (no reader), EIO to the guest
	g.mustOK(cmd{Op: "stat", Path: "/data/fifo"})
}
