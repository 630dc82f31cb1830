package sandboxfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"

	"github.com/agcore/agrun/internal/testing/leak"
)

// TestReadOnlyRefusesEveryWrite runs every kind of change a guest can ask
// for against a read-only mount: each fails with EROFS and the mount itself
// is untouched, while reads keep working.
func TestReadOnlyRefusesEveryWrite(t *testing.T) {
	tr := newTree(t)
	tr.outsideUnchanged(t)
	mountBefore := leak.Tree(t, tr.mount, "")
	g := startGuest(t, newFS(t, tr.mount, Options{}))

	writes := []cmd{
		{Op: "write", Path: "/data/new.txt", Data: "x"},            // O_CREAT
		{Op: "write", Path: "/data/hello.txt", Data: "x"},          // O_CREAT|O_TRUNC on an existing file
		{Op: "create_excl", Path: "/data/new.txt"},                 // O_CREAT|O_EXCL
		{Op: "opentrunc", Path: "/data/hello.txt"},                 // O_TRUNC
		{Op: "openrw", Path: "/data/hello.txt"},                    // O_RDWR
		{Op: "writeopen", Path: "/data/hello.txt", Data: "x"},      // O_WRONLY
		{Op: "append", Path: "/data/hello.txt", Data: "x"},         // O_APPEND
		{Op: "pwrite", Path: "/data/hello.txt", Data: "x", N: 100}, // pwrite
		{Op: "writebig", Path: "/data/big", N: 10},
		{Op: "mkdir", Path: "/data/newdir"},
		{Op: "rmdir", Path: "/data/emptydir"},
		{Op: "unlink", Path: "/data/hello.txt"},
		{Op: "unlink", Path: "/data/rel_link"},
		{Op: "rename", Path: "/data/hello.txt", To: "/data/renamed.txt"},
		{Op: "rename", Path: "/data/emptydir", To: "/data/renamed"},
		{Op: "symlink", Path: "hello.txt", To: "/data/newlink"},
		{Op: "link", Path: "/data/hello.txt", To: "/data/newhard"},
		{Op: "truncate", Path: "/data/hello.txt", N: 0},
		{Op: "truncate", Path: "/data/hello.txt", N: 1 << 20},
		{Op: "ftruncate", Path: "/data/hello.txt", N: 0},
		{Op: "ftruncate_ro", Path: "/data/hello.txt", N: 0},
		{Op: "utimes", Path: "/data/hello.txt", N: 1000},
		{Op: "utimes", Path: "/data/emptydir", N: 1000},
		{Op: "futimes", Path: "/data/hello.txt", N: 1000},
	}
	for _, c := range writes {
		g.mustFail(c, "EROFS")
	}
	// chmod: WASI preview 1 has no call for it; Go's wasip1 os.Chmod only
	// stats the path and reports success. The mode must not change (checked
	// by the mount hash below); TestReadOnlyFSLevel checks FS.Chmod.
	g.mustOK(cmd{Op: "chmod", Path: "/data/hello.txt", N: 0o777})

	if r := g.mustOK(cmd{Op: "read", Path: "/data/hello.txt"}); r.Data != "hello" {
		t.Errorf("read %q", r.Data)
	}
	if r := g.mustOK(cmd{Op: "readdir", Path: "/data/sub"}); strings.Join(r.Names, ",") != "deep_link,deeper,file.txt,up_in" {
		t.Errorf("readdir = %v", r.Names)
	}
	g.mustOK(cmd{Op: "stat", Path: "/data/sub/file.txt"})
	g.mustOK(cmd{Op: "readlink", Path: "/data/in_link"})
	g.stop()

	if after := leak.Tree(t, tr.mount, ""); after != mountBefore {
		t.Errorf("read-only mount changed:\nbefore:\n%s\nafter:\n%s", mountBefore, after)
	}
}

// TestReadOnlyFSLevel covers what a guest cannot reach through WASI
// preview 1 (chmod) and the File methods behind the path calls, directly.
func TestReadOnlyFSLevel(t *testing.T) {
	tr := newTree(t)
	fsys := newFS(t, tr.mount, Options{})
	if errno := fsys.Chmod("hello.txt", 0o777); errno != experimentalsys.EROFS {
		t.Errorf("Chmod = %v, want EROFS", errno)
	}
	if errno := fsys.Utimens("hello.txt", 1, 1); errno != experimentalsys.EROFS {
		t.Errorf("Utimens = %v, want EROFS", errno)
	}
	f, errno := fsys.OpenFile("hello.txt", experimentalsys.O_RDONLY, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	defer f.Close()
	for name, errno := range map[string]experimentalsys.Errno{
		"Truncate": f.Truncate(0),
		"Utimens":  f.Utimens(1, 1),
		"Write":    second(f.Write([]byte("x"))),
		"Pwrite":   second(f.Pwrite([]byte("x"), 0)),
	} {
		if errno != experimentalsys.EROFS {
			t.Errorf("File.%s = %v, want EROFS", name, errno)
		}
	}
	for _, flag := range []experimentalsys.Oflag{
		experimentalsys.O_WRONLY, experimentalsys.O_RDWR, experimentalsys.O_CREAT,
		experimentalsys.O_TRUNC, experimentalsys.O_RDONLY | experimentalsys.O_CREAT | experimentalsys.O_EXCL,
	} {
		if _, errno := fsys.OpenFile("hello.txt", flag, 0o644); errno != experimentalsys.EROFS {
			t.Errorf("OpenFile(flag %#x) = %v, want EROFS", flag, errno)
		}
	}
}

func second[T any](_ T, e experimentalsys.Errno) experimentalsys.Errno { return e }

// TestDeleteNeedsAllowDelete: a writable mount creates, writes and renames,
// but deletes (unlink, rmdir, rename over an existing entry) only with
// AllowDelete.
func TestDeleteNeedsAllowDelete(t *testing.T) {
	for _, allow := range []bool{false, true} {
		name := "without AllowDelete"
		if allow {
			name = "with AllowDelete"
		}
		t.Run(name, func(t *testing.T) {
			tr := newTree(t)
			tr.outsideUnchanged(t)
			g := startGuest(t, newFS(t, tr.mount, Options{Writable: true, AllowDelete: allow}))

			// Allowed either way.
			g.mustOK(cmd{Op: "write", Path: "/data/new.txt", Data: "new"})
			g.mustOK(cmd{Op: "append", Path: "/data/new.txt", Data: "+more"})
			g.mustOK(cmd{Op: "pwrite", Path: "/data/new.txt", Data: "N", N: 0})
			g.mustOK(cmd{Op: "mkdir", Path: "/data/newdir"})
			g.mustOK(cmd{Op: "rename", Path: "/data/new.txt", To: "/data/newdir/moved.txt"})
			g.mustOK(cmd{Op: "rename", Path: "/data/newdir/moved.txt", To: "/data/newdir/moved.txt"}) // onto itself
			if r := g.mustOK(cmd{Op: "read", Path: "/data/newdir/moved.txt"}); r.Data != "New+more" {
				t.Errorf("moved file = %q", r.Data)
			}
			g.mustOK(cmd{Op: "truncate", Path: "/data/newdir/moved.txt", N: 3})
			g.mustOK(cmd{Op: "ftruncate", Path: "/data/newdir/moved.txt", N: 2})
			g.mustOK(cmd{Op: "opentrunc", Path: "/data/other.txt"})
			g.mustOK(cmd{Op: "utimes", Path: "/data/hello.txt", N: 1_000_000})
			if r := g.mustOK(cmd{Op: "stat", Path: "/data/hello.txt"}); r.N != 1_000_000 {
				t.Errorf("mtime after utimes = %d", r.N)
			}
			g.mustOK(cmd{Op: "futimes", Path: "/data/hello.txt", N: 2_000_000})
			if r := g.mustOK(cmd{Op: "stat", Path: "/data/hello.txt"}); r.N != 2_000_000 {
				t.Errorf("mtime after futimes = %d", r.N)
			}
			g.mustFail(cmd{Op: "ftruncate_ro", Path: "/data/hello.txt", N: 0}, "")
			g.mustFail(cmd{Op: "create_excl", Path: "/data/hello.txt"}, "EEXIST")
			if got, _ := os.ReadFile(filepath.Join(tr.mount, "newdir/moved.txt")); string(got) != "Ne" {
				t.Errorf("host sees %q", got)
			}

			deletes := []cmd{
				{Op: "unlink", Path: "/data/hello.txt"},
				{Op: "unlink", Path: "/data/rel_link"},
				{Op: "rmdir", Path: "/data/emptydir"},
				{Op: "rename", Path: "/data/victim/victim.txt", To: "/data/other.txt"}, // replaces other.txt
			}
			for _, c := range deletes {
				if allow {
					g.mustOK(c)
				} else {
					g.mustFail(c, "EPERM")
				}
			}
			// Errors that do not depend on the policy.
			if allow {
				g.mustFail(cmd{Op: "rmdir", Path: "/data/sub"}, "ENOTEMPTY")
				g.mustFail(cmd{Op: "unlink", Path: "/data/sub"}, "EISDIR")
				g.mustFail(cmd{Op: "rmdir", Path: "/data/victim/../hello.txt"}, "")
			}
			g.stop()

			_, err := os.Lstat(filepath.Join(tr.mount, "hello.txt"))
			if gone := errors.Is(err, fs.ErrNotExist); gone != allow {
				t.Errorf("hello.txt deleted = %v, want %v", gone, allow)
			}
			if got, _ := os.ReadFile(filepath.Join(tr.mount, "other.txt")); allow != (string(got) == "victim") {
				t.Errorf("other.txt = %q after rename over it", got)
			}
		})
	}
}

// TestSymlinkAndLinkRulesFSLevel checks the link rules on the FS directly,
// including what a guest cannot phrase (a link of a symlink through a path
// that is not one).
func TestSymlinkAndLinkRulesFSLevel(t *testing.T) {
	tr := newTree(t)
	tr.outsideUnchanged(t)
	fsys := newFS(t, tr.mount, Options{Writable: true, AllowDelete: true})
	for _, target := range []string{"", "/etc/passwd", "..", "../x", "a/../../x", "a/..", "a\x00b"} {
		if errno := fsys.Symlink(target, "l"); errno != experimentalsys.EPERM {
			t.Errorf("Symlink(%q) = %v, want EPERM", target, errno)
		}
	}
	for _, target := range []string{"hello.txt", "sub/file.txt", "./x", "a/b/c"} {
		if errno := fsys.Symlink(target, "ok-"+strings.ReplaceAll(target, "/", "_")); errno != 0 {
			t.Errorf("Symlink(%q) = %v", target, errno)
		}
	}
	if errno := fsys.Link("in_link", "hl"); errno != experimentalsys.EPERM {
		t.Errorf("Link of a symlink = %v, want EPERM", errno)
	}
	if errno := fsys.Link("sub", "hl"); errno == 0 {
		t.Error("Link of a directory succeeded")
	}
	if errno := fsys.Rename("rel_link", "sub/rel_link"); errno != experimentalsys.EPERM {
		t.Errorf("Rename of an escaping symlink = %v, want EPERM", errno)
	}
	if errno := fsys.Rename("in_link", "sub/in_link"); errno != 0 {
		t.Errorf("Rename of a downward symlink = %v", errno)
	}
	// Chmod keeps permission bits only.
	if errno := fsys.Chmod("hello.txt", 0o777|fs.ModeSetuid|fs.ModeSticky); errno != 0 {
		t.Fatal(errno)
	}
	fi, err := os.Stat(filepath.Join(tr.mount, "hello.txt"))
	must(t, err)
	if fi.Mode() != 0o777 {
		t.Errorf("mode after chmod = %v", fi.Mode())
	}
	if errno := fsys.Chmod("rel_link", 0o777); errno != experimentalsys.EPERM {
		t.Errorf("Chmod through escaping link = %v, want EPERM", errno)
	}
	// Absolute and dot-dot paths given straight to the FS.
	for _, p := range []string{"../outside/secret.txt", "sub/../../outside/secret.txt"} {
		if _, errno := fsys.OpenFile(p, experimentalsys.O_RDONLY, 0); errno != experimentalsys.EPERM {
			t.Errorf("OpenFile(%q) = %v, want EPERM", p, errno)
		}
	}
	if f, errno := fsys.OpenFile("/hello.txt", experimentalsys.O_RDONLY, 0); errno != 0 {
		t.Errorf("OpenFile(/hello.txt) = %v (a leading slash means the mount root)", errno)
	} else {
		f.Close()
	}
	if errno := fsys.Rmdir("."); errno == 0 {
		t.Error("Rmdir of the mount root succeeded")
	}
}

// TestNew checks New's errors.
func TestNew(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(filepath.Join(dir, "missing"), Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing dir: %v, want fs.ErrNotExist", err)
	}
	file := filepath.Join(dir, "f")
	must(t, os.WriteFile(file, nil, 0o644))
	if _, err := New(file, Options{}); !errors.Is(err, ErrNotDir) {
		t.Errorf("file: %v, want ErrNotDir", err)
	}
	fsys, err := New(dir, Options{})
	must(t, err)
	c := fsys.(interface{ Close() error })
	must(t, c.Close())
	must(t, c.Close())
	if _, errno := fsys.Stat("f"); errno != experimentalsys.EBADF {
		t.Errorf("Stat after Close = %v, want EBADF", errno)
	}
}

// TestGuestOrdinaryCalls checks that what a tool usually does works:
// seek, fstat, listing a directory larger than one batch, and listing it
// again after rewinding the same handle.
func TestGuestOrdinaryCalls(t *testing.T) {
	tr := newTree(t)
	tr.outsideUnchanged(t)
	big := filepath.Join(tr.mount, "big")
	must(t, os.Mkdir(big, 0o755))
	const n = 1500
	for i := 0; i < n; i++ {
		must(t, os.WriteFile(filepath.Join(big, fmt.Sprintf("f%04d", i)), nil, 0o644))
	}
	g := startGuest(t, newFS(t, tr.mount, Options{}))
	if r := g.mustOK(cmd{Op: "seekread", Path: "/data/hello.txt", N: 2}); r.Data != "llo" || r.N != 5 {
		t.Errorf("seekread = %q size %d", r.Data, r.N)
	}
	r := g.mustOK(cmd{Op: "readdir", Path: "/data/big"})
	if len(r.Names) != n || r.Names[0] != "f0000" || r.Names[n-1] != fmt.Sprintf("f%04d", n-1) {
		t.Errorf("readdir listed %d names", len(r.Names))
	}
	if r := g.mustOK(cmd{Op: "readdir_twice", Path: "/data/big"}); r.N != n || len(r.Names) != n {
		t.Errorf("readdir_twice: %d then %d names", r.N, len(r.Names))
	}
	if r := g.mustOK(cmd{Op: "readdir", Path: "/data"}); !strings.Contains(strings.Join(r.Names, ","), "abs_link,absdir_link,big,d,") {
		t.Errorf("root listing = %v", r.Names)
	}
}

// TestUtimensOmit: UTIME_OMIT leaves a time as it was, by path and by
// descriptor.
func TestUtimensOmit(t *testing.T) {
	tr := newTree(t)
	fsys := newFS(t, tr.mount, Options{Writable: true})
	const a, m = int64(1_000_000_000_000_000_000), int64(2_000_000_000_000_000_000)
	if errno := fsys.Utimens("hello.txt", a, m); errno != 0 {
		t.Fatal(errno)
	}
	if errno := fsys.Utimens("hello.txt", experimentalsys.UTIME_OMIT, m+1); errno != 0 {
		t.Fatal(errno)
	}
	st, _ := fsys.Stat("hello.txt")
	if st.Atim != a || st.Mtim != m+1 {
		t.Errorf("path: atim %d mtim %d", st.Atim, st.Mtim)
	}
	f, errno := fsys.OpenFile("hello.txt", experimentalsys.O_RDONLY, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	defer f.Close()
	if errno := f.Utimens(a+2, experimentalsys.UTIME_OMIT); errno != 0 {
		t.Fatal(errno)
	}
	st, _ = f.Stat()
	if st.Atim != a+2 || st.Mtim != m+1 {
		t.Errorf("descriptor: atim %d mtim %d", st.Atim, st.Mtim)
	}
	if errno := fsys.Utimens("missing", experimentalsys.UTIME_OMIT, experimentalsys.UTIME_OMIT); errno != experimentalsys.ENOENT {
		t.Errorf("Utimens(missing, omit, omit) = %v", errno)
	}
}
