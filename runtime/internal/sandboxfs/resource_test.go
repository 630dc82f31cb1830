package sandboxfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// TestOpenFileCapOption: the cap is configurable and freed slots are reused.
func TestOpenFileCapOption(t *testing.T) {
	tr := newTree(t)
	fsys := newFS(t, tr.mount, Options{MaxOpenFiles: 3})
	var fs []experimentalsys.File
	for i := 0; i < 3; i++ {
		f, errno := fsys.OpenFile("hello.txt", experimentalsys.O_RDONLY, 0)
		if errno != 0 {
			t.Fatalf("open %d: %v", i, errno)
		}
		fs = append(fs, f)
	}
	if _, errno := fsys.OpenFile("hello.txt", experimentalsys.O_RDONLY, 0); errno != experimentalsys.EAGAIN {
		t.Fatalf("open beyond cap = %v, want EAGAIN", errno)
	}
	fs[0].Close()
	fs[0].Close() // idempotent: must not free a second slot
	f, errno := fsys.OpenFile("hello.txt", experimentalsys.O_RDONLY, 0)
	if errno != 0 {
		t.Fatalf("open after close = %v", errno)
	}
	if _, errno := fsys.OpenFile("hello.txt", experimentalsys.O_RDONLY, 0); errno != experimentalsys.EAGAIN {
		t.Fatalf("double close freed a slot: %v", errno)
	}
	// Failed opens do not leak slots.
	f.Close()
	for i := 0; i < 10; i++ {
		if _, errno := fsys.OpenFile("missing", experimentalsys.O_RDONLY, 0); errno != experimentalsys.ENOENT {
			t.Fatalf("open missing = %v", errno)
		}
	}
	if _, errno := fsys.OpenFile("hello.txt", experimentalsys.O_RDONLY, 0); errno != 0 {
		t.Fatalf("failed opens leaked slots: %v", errno)
	}
}

// TestMaxWriteBytes: writes stop with EIO once the budget is spent, a write
// that crosses it is cut short, and truncate growth counts too.
func TestMaxWriteBytes(t *testing.T) {
	tr := newTree(t)
	tr.outsideUnchanged(t)
	const budget = 10_000
	g := startGuest(t, newFS(t, tr.mount, Options{Writable: true, MaxWriteBytes: budget}))
	r := g.mustFail(cmd{Op: "writebig", Path: "/data/big", N: 50_000}, "EIO")
	if r.N != budget {
		t.Errorf("wrote %d bytes, want exactly the budget %d", r.N, budget)
	}
	g.mustFail(cmd{Op: "append", Path: "/data/hello.txt", Data: "x"}, "EIO")
	g.mustFail(cmd{Op: "ftruncate", Path: "/data/hello.txt", N: 1 << 30}, "EIO")
	g.mustOK(cmd{Op: "ftruncate", Path: "/data/hello.txt", N: 1}) // shrinking is free
	g.stop()
	fi, err := os.Stat(filepath.Join(tr.mount, "big"))
	must(t, err)
	if fi.Size() != budget {
		t.Errorf("big is %d bytes on the host", fi.Size())
	}
}

// TestSharedWriteCounter: FSes given one WriteCounter share one budget.
func TestSharedWriteCounter(t *testing.T) {
	tr := newTree(t)
	must(t, os.Mkdir(filepath.Join(tr.mount, "b"), 0o755))
	const budget = 1000
	var counter atomic.Int64
	a := newFS(t, tr.mount, Options{Writable: true, MaxWriteBytes: budget, WriteCounter: &counter})
	b := newFS(t, filepath.Join(tr.mount, "b"), Options{Writable: true, MaxWriteBytes: budget, WriteCounter: &counter})
	write := func(fsys experimentalsys.FS, name string, n int) (int, experimentalsys.Errno) {
		f, errno := fsys.OpenFile(name, experimentalsys.O_WRONLY|experimentalsys.O_CREAT, 0o644)
		if errno != 0 {
			t.Fatalf("open %s: %v", name, errno)
		}
		defer f.Close()
		return f.Write(make([]byte, n))
	}
	if n, errno := write(a, "one", 600); n != 600 || errno != 0 {
		t.Fatalf("first mount: wrote %d, %v", n, errno)
	}
	if n, _ := write(b, "two", 600); n != 400 {
		t.Errorf("second mount: wrote %d; want the 400 bytes left", n)
	}
	if n, errno := write(a, "three", 1); n != 0 || errno != errNoSpace {
		t.Errorf("after the shared budget: wrote %d, %v; want EIO", n, errno)
	}
	if got := counter.Load(); got != budget {
		t.Errorf("counter = %d, want %d", got, budget)
	}
}

// TestConcurrentSwapRace hammers the FS from several goroutines while
// another keeps swapping a directory inside the mount for a symlink out of
// it (run with -race). No operation may ever reach the outside.
func TestConcurrentSwapRace(t *testing.T) {
	tr := newTree(t)
	tr.outsideUnchanged(t)
	fsys := newFS(t, tr.mount, Options{Writable: true, AllowDelete: true})
	d := filepath.Join(tr.mount, "d")
	must(t, os.Symlink(tr.outside, d+".link"))

	stop := make(chan struct{})
	var swapper sync.WaitGroup
	swapper.Add(1)
	swaps := 0
	go func() {
		defer swapper.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// d is a real directory, then briefly the symlink out.
			for _, mv := range [][2]string{{d, d + ".dir"}, {d + ".link", d}, {d, d + ".link"}, {d + ".dir", d}} {
				if err := os.Rename(mv[0], mv[1]); err != nil {
					t.Error(err)
					return
				}
			}
			swaps++
		}
	}()

	const workers, rounds = 4, 3000
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 64)
			for i := 0; i < rounds; i++ {
				if f, errno := fsys.OpenFile("d/secret.txt", experimentalsys.O_RDWR, 0); errno == 0 {
					n, _ := f.Read(buf)
					f.Close()
					if strings.Contains(string(buf[:n]), secret) {
						errs <- "read the outside secret"
						return
					}
				}
				name := fmt.Sprintf("d/new-%d-%d", w, i)
				if f, errno := fsys.OpenFile(name, experimentalsys.O_WRONLY|experimentalsys.O_CREAT, 0o644); errno == 0 {
					f.Write([]byte("x"))
					f.Close()
					fsys.Unlink(name)
				}
				if errno := fsys.Mkdir(name, 0o755); errno == 0 {
					fsys.Rmdir(name)
				}
				fsys.Utimens("d/secret.txt", 1, 1)
				fsys.Rename("d/secret.txt", "d/secret.txt")
				if f, errno := fsys.OpenFile("d", experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0); errno == 0 {
					ds, _ := f.Readdir(100)
					f.Close()
					for _, e := range ds {
						if e.Name == "dir" || e.Name == "emptydir" {
							errs <- "listed the outside directory"
							return
						}
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	swapper.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d swaps during %d operations per worker", swaps, rounds)
}
