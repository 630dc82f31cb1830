package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/testing/leak"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// fsCase is one file-system attack: the guest's op must fail (or, with
// okAllowed, may succeed as long as nothing leaks), and the secret must
// never reach it.
type fsCase struct {
	name string
	args map[string]any
}

// TestFilesEscapes drives the attacker through wasmtools and the registry
// with the most powerful grant (a read-write-delete mount declared
// filesystem+write+delete) through every way out of the mount we know.
// Each must fail inside the guest, the secret must not reach it, and the
// outside must not change. The same escapes at the FS level, with errnos,
// are in runtime/internal/sandboxfs/escape_test.go.
func TestFilesEscapes(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	f.Hostile(t, "fs", wasmtools.Grant{Mounts: f.MountRW()}, "filesystem", "read", "write", "delete")
	outsideSecret := filepath.Join(f.Outside, "secret.txt")

	op := func(op, path string, kv ...any) map[string]any {
		m := map[string]any{"op": op, "path": path}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, c := range []fsCase{
		{"dotdot read", op("read", "/data/../outside/secret.txt")},
		{"dotdot write", op("write", "/data/../outside/new.txt", "data", "x")},
		{"absolute symlink read", op("read", "/data/abs_link")},
		{"relative symlink read", op("read", "/data/rel_link")},
		{"dir symlink read", op("read", "/data/dir_link/secret.txt")},
		{"nested relative symlink read", op("read", "/data/sub/deep_link")},
		{"list through dir symlink", op("list", "/data/dir_link")},
		{"overwrite through symlink", op("write", "/data/abs_link", "data", "pwned")},
		{"append through symlink", op("append", "/data/rel_link", "data", "pwned")},
		{"create through dangling symlink", op("write", "/data/dangling_out", "data", "x")},
		{"write into dir symlink", op("write", "/data/dir_link/new.txt", "data", "x")},
		{"mkdir through dir symlink", op("mkdir", "/data/dir_link/newdir")},
		{"remove through dir symlink", op("remove", "/data/dir_link/secret.txt")},
		{"rename outward through symlink", op("rename", "/data/hello.txt", "to", "/data/dir_link/stolen.txt")},
		{"rename inward through symlink", op("rename", "/data/dir_link/secret.txt", "to", "/data/stolen.txt")},
		{"rename outward by dotdot", op("rename", "/data/hello.txt", "to", "/data/../stolen.txt")},
		{"hard link of an outside file", op("link", "/data/dir_link/secret.txt", "to", "/data/hl")},
		{"hard link into outside", op("link", "/data/hello.txt", "to", "/data/dir_link/hl")},
		{"guest-made absolute symlink", op("symlink", outsideSecret, "to", "/data/mine")},
		{"guest-made escaping relative symlink", op("symlink", "../outside/secret.txt", "to", "/data/mine2")},
		{"guest-made symlink with inner dotdot", op("symlink", "sub/../../outside", "to", "/data/mine3")},
		{"raw path_open dotdot", op("rawread", "../outside/secret.txt", "fd", 3, "follow", true)},
		{"raw path_open absolute", op("rawread", outsideSecret, "fd", 3, "follow", true)},
		{"raw path_open through symlink", op("rawread", "abs_link", "fd", 3, "follow", true)},
		{"raw path_open on stdio fd", op("rawread", "etc/passwd", "fd", 1, "follow", true)},
		{"raw path_open on an unopened fd", op("rawread", "secret.txt", "fd", 9, "follow", true)},
		{"host files", op("read", "/etc/passwd")},
		{"proc", op("read", "/proc/self/environ")},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			got := hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, c.args)))
			f.After(t, before, got, "")
			if got.Err != nil {
				return
			}
			r := hostile.DecodeReply(t, got.Out)
			if r.OK {
				t.Errorf("the escape worked: %+v", r)
			}
			if strings.Contains(string(got.Out), hostile.Secret) {
				t.Errorf("outside content reached the guest: %s", got.Out)
			}
		})
	}

	// Guest-made symlinks that exist after the attempts must not lead out.
	t.Run("guest symlinks stay inside", func(t *testing.T) {
		before := f.Snapshot(t)
		var last hostile.Outcome
		for _, p := range []string{"/data/mine", "/data/mine2", "/data/mine3/secret.txt"} {
			last = hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, op("read", p))))
			if last.Err == nil && strings.Contains(string(last.Out), hostile.Secret) {
				t.Errorf("%s: read the secret: %s", p, last.Out)
			}
		}
		f.After(t, before, last, "")
	})

	t.Run("only the mount is visible", func(t *testing.T) {
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, map[string]any{"op": "probe", "paths": []string{"/etc/passwd", "/outside/secret.txt", "/data/hello.txt"}})))
		f.After(t, before, got, "")
		r := hostile.DecodeReply(t, got.Out)
		// Listing "/" may fail (there is no root preopen) or show the mount.
		if ls := r.Each["ls /"]; ls == nil || ls.OK && strings.Join(ls.Names, ",") != "data" {
			t.Errorf("ls / = %+v; want only data, or an error", ls)
		}
		if h := r.Each["/data/hello.txt"]; h == nil || h.Data != "hello" {
			t.Errorf("the mount itself does not work: %+v", h)
		}
		if strings.Contains(string(got.Out), hostile.Secret) {
			t.Errorf("secret reached the guest: %s", got.Out)
		}
	})

	t.Run("directory swapped for a symlink during the run", func(t *testing.T) {
		before := f.Snapshot(t)
		swapDir := filepath.Join(f.Mount, "swap")
		hostile.Must(t, os.MkdirAll(swapDir, 0o755))
		hostile.Must(t, os.WriteFile(filepath.Join(swapDir, "secret.txt"), []byte("inside"), 0o644))
		parked := filepath.Join(f.Mount, "swap.parked")
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // swap swap/ <-> a symlink to outside/, as fast as we can
			defer wg.Done()
			for !stop.Load() {
				os.Rename(swapDir, parked)
				os.Symlink(f.Outside, swapDir)
				time.Sleep(50 * time.Microsecond)
				os.Remove(swapDir)
				os.Rename(parked, swapDir)
			}
		}()
		var last hostile.Outcome
		for range 20 {
			last = hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, op("readn", "/data/swap/secret.txt", "n", 200))))
			if last.Err == nil && strings.Contains(string(last.Out), hostile.Secret) {
				t.Errorf("read outside content through the swapped directory: %s", last.Out)
				break
			}
			w := hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, op("write", "/data/swap/secret.txt", "data", "overwritten"))))
			if w.Err != nil {
				t.Errorf("write: %v", w.Err)
			}
		}
		stop.Store(true)
		wg.Wait()
		f.After(t, before, last, "")
		if b, _ := os.ReadFile(filepath.Join(f.Outside, "secret.txt")); string(b) != hostile.Secret {
			t.Errorf("outside secret is now %q", b)
		}
	})
}

// TestFilesPlantedHardLink: a hard link to an outside file, planted in a
// writable mount by someone on the host (the guest itself cannot make one:
// TestFilesEscapes), is the same inode; sandboxfs refuses to change a
// regular file with more than one link, so the outside file stays intact.
func TestFilesPlantedHardLink(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	f.Hostile(t, "fs", wasmtools.Grant{Mounts: f.MountRW()}, "filesystem", "read", "write")
	victim := filepath.Join(f.Outside, "victim.txt")
	hostile.Must(t, os.WriteFile(victim, []byte(hostile.Secret), 0o644))
	if err := os.Link(victim, filepath.Join(f.Mount, "hard")); err != nil {
		t.Fatalf("cannot hard link here: %v", err)
	}
	before := f.Snapshot(t)
	got := hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, map[string]any{"op": "write", "path": "/data/hard", "data": "overwritten"})))
	hostile.CheckKind(t, got.Err, "")
	f.StillWorks(t)
	hostile.CheckLeaks(t, before)
	if r := hostile.DecodeReply(t, got.Out); r.OK {
		t.Errorf("the write through the planted hard link worked: %s", got.Out)
	}
	if b, _ := os.ReadFile(victim); string(b) != hostile.Secret {
		t.Errorf("a hard link planted in a writable mount let the guest write the outside file it shares an inode with (now %q)", b)
	}
}

// TestFilesReadOnly: a read-only mount refuses every change, whichever way
// the read-only-ness came about (the mount, or an undeclared "write").
func TestFilesReadOnly(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	f.Hostile(t, "ro_mount", wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: f.Mount, Guest: "/data"}}}, "filesystem", "read", "write", "delete")
	f.Hostile(t, "ro_declared", wasmtools.Grant{Mounts: f.MountRW()}, "filesystem", "read")
	f.Hostile(t, "no_fs_declared", wasmtools.Grant{Mounts: f.MountRW()})
	f.Hostile(t, "no_fs_granted", wasmtools.Grant{}, "filesystem", "read", "write")
	mountHash := leak.Tree(t, f.Mount, "")
	for _, tool := range []string{"ro_mount", "ro_declared", "no_fs_declared", "no_fs_granted"} {
		for _, a := range []map[string]any{
			{"op": "write", "path": "/data/new.txt", "data": "x"},
			{"op": "write", "path": "/data/hello.txt", "data": "x"},
			{"op": "append", "path": "/data/hello.txt", "data": "x"},
			{"op": "remove", "path": "/data/hello.txt"},
			{"op": "mkdir", "path": "/data/d"},
			{"op": "rename", "path": "/data/hello.txt", "to": "/data/h2"},
			{"op": "link", "path": "/data/hello.txt", "to": "/data/h3"},
			{"op": "symlink", "path": "hello.txt", "to": "/data/h4"},
			{"op": "writebig", "path": "/data/big", "n": 1 << 20},
		} {
			t.Run(tool+"/"+a["op"].(string)+" "+a["path"].(string), func(t *testing.T) {
				before := f.Snapshot(t)
				got := hostile.Inv(f.Reg.Invoke(context.Background(), tool, hostile.ArgsJSON(t, a)))
				f.After(t, before, got, "")
				if got.Err == nil && hostile.DecodeReply(t, got.Out).OK {
					t.Errorf("the change worked: %s", got.Out)
				}
				if h := leak.Tree(t, f.Mount, ""); h != mountHash {
					t.Errorf("the read-only mount changed:\n%s", hostile.TreeListing(t, f.Mount))
				}
			})
		}
	}
	t.Run("no_fs_declared sees nothing", func(t *testing.T) {
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "no_fs_declared", hostile.ArgsJSON(t, map[string]any{"op": "probe", "paths": []string{"/data/hello.txt"}})))
		f.After(t, before, got, "")
		if strings.Contains(string(got.Out), "hello\"") {
			t.Errorf("a tool that did not declare filesystem read the mount: %s", got.Out)
		}
	})
}

// TestFilesResources: thousands of files, and filling the disk.
func TestFilesResources(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	f.Hostile(t, "fs", wasmtools.Grant{Mounts: f.MountRW(), Limits: runtime.Limits{Timeout: 20 * time.Second}}, "filesystem", "read", "write", "delete")

	t.Run("thousands of open files", func(t *testing.T) {
		hostile.Must(t, os.MkdirAll(filepath.Join(f.Mount, "many"), 0o755))
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, map[string]any{"op": "openmany", "path": "/data/many", "n": 5000})))
		f.After(t, before, got, "")
		r := hostile.DecodeReply(t, got.Out)
		t.Logf("guest held %d files open, then: %s", r.N, r.Err)
		if r.OK || r.N > 1024 {
			t.Errorf("guest held %d files open; want the cap (1024) to stop it", r.N)
		}
	})

	f.Hostile(t, "fs_short", wasmtools.Grant{Mounts: f.MountRW()}, "filesystem", "read", "write")

	t.Run("a FIFO planted in the mount", func(t *testing.T) {
		hostile.Must(t, syscall.Mkfifo(filepath.Join(f.Mount, "fifo"), 0o644))
		defer os.Remove(filepath.Join(f.Mount, "fifo"))
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "fs_short", hostile.ArgsJSON(t, map[string]any{"op": "read", "path": "/data/fifo"})))
		// Refused (sandboxfs opens no special files), or at worst ended by
		// the deadline: never a host thread blocked on the FIFO for good.
		if got.Err != nil {
			f.After(t, before, got, registry.Timeout)
		} else {
			f.After(t, before, got, "")
			if hostile.DecodeReply(t, got.Out).OK {
				t.Errorf("read a FIFO: %s", got.Out)
			}
		}
	})

	t.Run("a 1 GiB sparse file", func(t *testing.T) {
		p := filepath.Join(f.Mount, "sparse")
		fh, err := os.Create(p)
		hostile.Must(t, err)
		hostile.Must(t, fh.Truncate(1<<30))
		fh.Close()
		defer os.Remove(p)
		before := f.Snapshot(t)
		f.After(t, before, hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, map[string]any{"op": "read", "path": "/data/sparse"}))), registry.MemoryLimit)
	})

	t.Run("filling the disk", func(t *testing.T) {
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "fs", hostile.ArgsJSON(t, map[string]any{"op": "writebig", "path": "/data/big", "n": 512 << 20})))
		fi, statErr := os.Stat(filepath.Join(f.Mount, "big"))
		os.Remove(filepath.Join(f.Mount, "big"))
		f.After(t, before, got, "")
		r := hostile.DecodeReply(t, got.Out)
		if r.OK || r.N > runtime.DefaultMaxWriteBytes {
			t.Errorf("the guest wrote %d MiB to the mount (ok=%v); want runtime.Limits.MaxWriteBytes (64 MiB) to stop it", r.N>>20, r.OK)
		}
		if statErr == nil && fi.Size() > runtime.DefaultMaxWriteBytes {
			t.Errorf("the file on the host is %d MiB, over the 64 MiB write budget", fi.Size()>>20)
		}
		t.Logf("guest wrote %d MiB, then: %s", r.N>>20, r.Err)
	})
}
