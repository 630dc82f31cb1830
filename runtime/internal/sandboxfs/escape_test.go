package sandboxfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// TestGuestCannotEscape drives a real guest with the most powerful mount
// (writable, delete allowed) through every way out we know of, and checks
// that each is refused, no outside content reaches the guest, and nothing
// outside the mount changes.
func TestGuestCannotEscape(t *testing.T) {
	tr := newTree(t)
	tr.outsideUnchanged(t)
	g := startGuest(t, newFS(t, tr.mount, Options{Writable: true, AllowDelete: true}))

	escapes := []struct {
		name  string
		c     cmd
		errno string // "" = any failure
	}{
		// ".." never reaches the FS: the guest's libc and wazero clean it
		// against the mount point. Still, it must not work.
		{"dotdot read", cmd{Op: "read", Path: "/data/../outside/secret.txt"}, ""},
		{"dotdot write", cmd{Op: "write", Path: "/data/../outside/new.txt", Data: "x"}, ""},
		{"absolute symlink", cmd{Op: "read", Path: "/data/abs_link"}, "EPERM"},
		{"relative symlink", cmd{Op: "read", Path: "/data/rel_link"}, "EPERM"},
		{"relative dir symlink", cmd{Op: "read", Path: "/data/dir_link/secret.txt"}, "EPERM"},
		{"absolute dir symlink", cmd{Op: "read", Path: "/data/absdir_link/secret.txt"}, "EPERM"},
		{"nested relative symlink", cmd{Op: "read", Path: "/data/sub/deep_link"}, "EPERM"},
		{"readdir through symlink", cmd{Op: "readdir", Path: "/data/dir_link"}, "EPERM"},
		{"stat through symlink", cmd{Op: "stat", Path: "/data/rel_link"}, "EPERM"},
		{"guest root through symlink", cmd{Op: "readdir_root", Path: "/data/dir_link", To: "secret.txt"}, ""},
		{"write through dir symlink", cmd{Op: "write", Path: "/data/dir_link/new.txt", Data: "x"}, "EPERM"},
		{"create through dangling symlink", cmd{Op: "write", Path: "/data/dangling_out", Data: "x"}, "EPERM"},
		{"overwrite through symlink", cmd{Op: "write", Path: "/data/abs_link", Data: "pwned"}, "EPERM"},
		{"truncate through symlink", cmd{Op: "truncate", Path: "/data/rel_link", N: 0}, "EPERM"},
		{"append through symlink", cmd{Op: "append", Path: "/data/rel_link", Data: "x"}, "EPERM"},
		{"utimes through symlink", cmd{Op: "utimes", Path: "/data/rel_link", N: 1000}, "EPERM"},
		{"mkdir through symlink", cmd{Op: "mkdir", Path: "/data/dir_link/newdir"}, "EPERM"},
		{"rmdir through symlink", cmd{Op: "rmdir", Path: "/data/dir_link/emptydir"}, "EPERM"},
		{"unlink through symlink", cmd{Op: "unlink", Path: "/data/dir_link/secret.txt"}, "EPERM"},
		{"rename out through symlink", cmd{Op: "rename", Path: "/data/hello.txt", To: "/data/dir_link/stolen.txt"}, "EPERM"},
		{"rename in through symlink", cmd{Op: "rename", Path: "/data/dir_link/secret.txt", To: "/data/stolen.txt"}, "EPERM"},
		{"rename out by dotdot", cmd{Op: "rename", Path: "/data/hello.txt", To: "/data/../stolen.txt"}, ""},
		{"hard link to outside", cmd{Op: "link", Path: "/data/dir_link/secret.txt", To: "/data/hl"}, "EPERM"},
		{"hard link into outside", cmd{Op: "link", Path: "/data/hello.txt", To: "/data/dir_link/hl"}, "EPERM"},
		{"hard link of escaping symlink", cmd{Op: "link", Path: "/data/sub/deep_link", To: "/data/hl"}, "EPERM"},
		{"create absolute symlink", cmd{Op: "symlink", Path: filepath.Join(tr.outside, "secret.txt"), To: "/data/mine"}, "EPERM"},
		{"create escaping symlink", cmd{Op: "symlink", Path: "../outside/secret.txt", To: "/data/mine"}, "EPERM"},
		{"create symlink with inner dotdot", cmd{Op: "symlink", Path: "sub/../../outside", To: "/data/mine"}, "EPERM"},
		{"create symlink inside a symlinked dir", cmd{Op: "symlink", Path: "x", To: "/data/dir_link/mine"}, "EPERM"},
		{"rename escaping symlink deeper", cmd{Op: "rename", Path: "/data/sub/up_in", To: "/data/sub/deeper/up_in"}, "EPERM"},
	}
	for _, e := range escapes {
		t.Run(e.name, func(t *testing.T) {
			g.t = t
			r := g.mustFail(e.c, e.errno)
			if strings.Contains(r.Data, secret) {
				t.Errorf("outside content reached the guest: %q", r.Data)
			}
		})
	}
	g.t = t

	// What stays inside works: links whose target is inside, lstat and
	// readlink of escaping links (they only show the link itself), and
	// symlinks the guest makes that only go down.
	if r := g.mustOK(cmd{Op: "read", Path: "/data/in_link"}); r.Data != "hello" {
		t.Errorf("in_link read %q", r.Data)
	}
	if r := g.mustOK(cmd{Op: "read", Path: "/data/sub/up_in"}); r.Data != "hello" {
		t.Errorf("sub/up_in read %q", r.Data)
	}
	if r := g.mustOK(cmd{Op: "lstat", Path: "/data/rel_link"}); !strings.HasPrefix(r.Data, "L") {
		t.Errorf("lstat of a symlink = %q", r.Data)
	}
	if r := g.mustOK(cmd{Op: "readlink", Path: "/data/rel_link"}); r.Data != "../outside/secret.txt" {
		t.Errorf("readlink = %q", r.Data)
	}
	g.mustOK(cmd{Op: "symlink", Path: "sub/file.txt", To: "/data/down"})
	if r := g.mustOK(cmd{Op: "read", Path: "/data/down"}); r.Data != "sub" {
		t.Errorf("guest symlink read %q", r.Data)
	}
	// Moving a downward link elsewhere keeps it inside (it dangles here).
	g.mustOK(cmd{Op: "rename", Path: "/data/down", To: "/data/sub/deeper/down"})
	g.mustFail(cmd{Op: "read", Path: "/data/sub/deeper/down"}, "ENOENT")
	g.mustOK(cmd{Op: "link", Path: "/data/hello.txt", To: "/data/hello2.txt"})
	if r := g.mustOK(cmd{Op: "read", Path: "/data/hello2.txt"}); r.Data != "hello" {
		t.Errorf("hard link read %q", r.Data)
	}
	g.stop()

	// The guest's symlinks on the host only go down.
	for _, p := range []string{"sub/deeper/down"} {
		target, err := os.Readlink(filepath.Join(tr.mount, p))
		if err != nil || strings.Contains(target, "..") || filepath.IsAbs(target) {
			t.Errorf("guest-made link %s -> %q (%v)", p, target, err)
		}
	}
}

// TestSwapDirForSymlinkBetweenSteps replaces a directory the guest is using
// with a symlink out of the mount between two guest steps, the classic
// check-then-use escape. The guest must not see or change outside files.
func TestSwapDirForSymlinkBetweenSteps(t *testing.T) {
	for _, kind := range []string{"absolute", "relative"} {
		t.Run(kind, func(t *testing.T) {
			tr := newTree(t)
			tr.outsideUnchanged(t)
			g := startGuest(t, newFS(t, tr.mount, Options{Writable: true, AllowDelete: true}))

			if r := g.mustOK(cmd{Op: "read", Path: "/data/d/secret.txt"}); r.Data != "INSIDE" {
				t.Fatalf("before swap read %q", r.Data)
			}
			held := g.mustOK(cmd{Op: "hold", Path: "/data/d/secret.txt"})

			d := filepath.Join(tr.mount, "d")
			must(t, os.Rename(d, d+".orig"))
			target := tr.outside
			if kind == "relative" {
				target = "../outside"
			}
			must(t, os.Symlink(target, d))

			for _, c := range []cmd{
				{Op: "read", Path: "/data/d/secret.txt"},
				{Op: "readdir", Path: "/data/d"},
				{Op: "write", Path: "/data/d/new.txt", Data: "x"},
				{Op: "write", Path: "/data/d/secret.txt", Data: "pwned"},
				{Op: "unlink", Path: "/data/d/secret.txt"},
				{Op: "mkdir", Path: "/data/d/newdir"},
				{Op: "rename", Path: "/data/hello.txt", To: "/data/d/hello.txt"},
				{Op: "readdir_root", Path: "/data/d", To: "secret.txt"},
			} {
				if r := g.mustFail(c, ""); strings.Contains(r.Data, secret) {
					t.Errorf("%+v leaked %q", c, r.Data)
				}
			}
			// A file opened before the swap is still the inside file.
			if r := g.mustOK(cmd{Op: "heldread", N: held.N}); r.Data != "INSIDE" {
				t.Errorf("held file read %q", r.Data)
			}

			// Swap back: the guest works again.
			must(t, os.Remove(d))
			must(t, os.Rename(d+".orig", d))
			if r := g.mustOK(cmd{Op: "read", Path: "/data/d/secret.txt"}); r.Data != "INSIDE" {
				t.Errorf("after swap back read %q", r.Data)
			}
		})
	}
}

// TestWazeroDirMountLeaks is the control for the tests above: the same guest
// and fixture through wazero's own read-only directory mount do read the
// outside file, which is why this package exists. If wazero ever fixes
// this, the test tells us.
func TestWazeroDirMountLeaks(t *testing.T) {
	tr := newTree(t)
	g := startGuestFS(t, wazero.NewFSConfig().WithReadOnlyDirMount(tr.mount, "/data"))
	if r := g.mustOK(cmd{Op: "read", Path: "/data/rel_link"}); r.Data != secret {
		t.Errorf("wazero's mount read %q through rel_link", r.Data)
	}
	if r := g.mustOK(cmd{Op: "read", Path: "/data/absdir_link/secret.txt"}); r.Data != secret {
		t.Errorf("wazero's mount read %q through absdir_link", r.Data)
	}
}

// TestPreexistingHardLinkIsAFile: a hard link the host already has inside
// the mount to a file outside is the same file. No path-based check can
// tell the names apart, so the guest reads it; but a regular file with more
// than one link is never changed: opening it for writing or with O_TRUNC,
// truncating it, and changing its times or mode fail with EPERM.
func TestPreexistingHardLinkIsAFile(t *testing.T) {
	tr := newTree(t)
	if err := os.Link(filepath.Join(tr.outside, "secret.txt"), filepath.Join(tr.mount, "hard")); err != nil {
		t.Fatalf("host cannot hard link here: %v", err)
	}
	tr.outsideUnchanged(t)
	fsys := newFS(t, tr.mount, Options{Writable: true, AllowDelete: true})
	g := startGuest(t, fsys)
	if r := g.mustOK(cmd{Op: "read", Path: "/data/hard"}); r.Data != secret {
		t.Errorf("read %q", r.Data)
	}
	for _, c := range []cmd{
		{Op: "write", Path: "/data/hard", Data: "overwritten"},
		{Op: "append", Path: "/data/hard", Data: "more"},
		{Op: "openrw", Path: "/data/hard"},
		{Op: "opentrunc", Path: "/data/hard"},
		{Op: "writeopen", Path: "/data/hard", Data: "x"},
		{Op: "pwrite", Path: "/data/hard", Data: "x", N: 3},
		{Op: "truncate", Path: "/data/hard", N: 1},
		{Op: "ftruncate_ro", Path: "/data/hard", N: 1},
		{Op: "utimes", Path: "/data/hard", N: 1_000_000},
		{Op: "futimes", Path: "/data/hard", N: 1_000_000},
	} {
		g.mustFail(c, "")
	}
	g.mustFail(cmd{Op: "write", Path: "/data/hard", Data: "overwritten"}, "EPERM")
	g.mustFail(cmd{Op: "utimes", Path: "/data/hard", N: 1_000_000}, "EPERM")
	g.mustFail(cmd{Op: "futimes", Path: "/data/hard", N: 1_000_000}, "EPERM")
	if errno := fsys.Chmod("hard", 0o600); errno != experimentalsys.EPERM {
		t.Errorf("chmod of the shared file: %v, want EPERM", errno)
	}
	if errno := fsys.Utimens("hard", 0, 0); errno != experimentalsys.EPERM {
		t.Errorf("utimens of the shared file: %v, want EPERM", errno)
	}
	if _, errno := fsys.OpenFile("hard", experimentalsys.O_RDONLY|experimentalsys.O_TRUNC, 0); errno != experimentalsys.EPERM {
		t.Errorf("O_RDONLY|O_TRUNC of the shared file: %v, want EPERM", errno)
	}
	// Renaming or unlinking the name inside the mount leaves the outside
	// file alone, and is allowed.
	g.mustOK(cmd{Op: "rename", Path: "/data/hard", To: "/data/hard2"})
	g.mustOK(cmd{Op: "unlink", Path: "/data/hard2"})
	g.stop()
	if b, _ := os.ReadFile(filepath.Join(tr.outside, "secret.txt")); string(b) != secret {
		t.Errorf("the outside file now holds %q", b)
	}
}

// TestGuestHardLinksAreShared: a file the guest itself hard-links counts as
// shared too (sandboxfs cannot tell who made the link): it cannot be
// written through either name until one is removed. Ordinary files and
// O_TRUNC keep working.
func TestGuestHardLinksAreShared(t *testing.T) {
	tr := newTree(t)
	tr.outsideUnchanged(t)
	g := startGuest(t, newFS(t, tr.mount, Options{Writable: true, AllowDelete: true}))
	g.mustOK(cmd{Op: "write", Path: "/data/own", Data: "first version"})
	g.mustOK(cmd{Op: "opentrunc", Path: "/data/own"})
	if r := g.mustOK(cmd{Op: "read", Path: "/data/own"}); r.Data != "" {
		t.Errorf("after O_TRUNC the file holds %q", r.Data)
	}
	g.mustOK(cmd{Op: "write", Path: "/data/own", Data: "second"})
	g.mustOK(cmd{Op: "link", Path: "/data/own", To: "/data/twin"})
	g.mustFail(cmd{Op: "write", Path: "/data/own", Data: "x"}, "EPERM")
	g.mustFail(cmd{Op: "writeopen", Path: "/data/twin", Data: "x"}, "EPERM")
	if r := g.mustOK(cmd{Op: "read", Path: "/data/twin"}); r.Data != "second" {
		t.Errorf("twin holds %q", r.Data)
	}
	g.mustOK(cmd{Op: "unlink", Path: "/data/twin"})
	g.mustOK(cmd{Op: "write", Path: "/data/own", Data: "third"})
	if r := g.mustOK(cmd{Op: "read", Path: "/data/own"}); r.Data != "third" {
		t.Errorf("own holds %q", r.Data)
	}
}
