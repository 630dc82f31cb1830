// Command fsops is a test guest for package sandboxfs. It reads one JSON
// command per line on stdin, performs it with ordinary os/syscall calls (as a
// real tool would) and answers one JSON line on stdout, so a test can change
// the host between steps.
//
//	{"op":"read","path":"/data/a"} -> {"ok":true,"data":"..."}
//	{"op":"unlink","path":"/data/a"} -> {"ok":false,"errno":"EROFS"}
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"
)

type cmd struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	To   string `json:"to"`   // rename/link/symlink destination; symlink target is Path
	Data string `json:"data"` // write payload
	N    int64  `json:"n"`    // sizes, counts, offsets
}

type reply struct {
	OK    bool     `json:"ok"`
	Errno string   `json:"errno,omitempty"`
	Err   string   `json:"err,omitempty"`
	Data  string   `json:"data,omitempty"`
	Names []string `json:"names,omitempty"`
	N     int64    `json:"n,omitempty"`
}

var held []*os.File // files opened by "openmany", never closed

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c cmd
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			out.Encode(reply{Err: "bad command: " + err.Error()})
			continue
		}
		if c.Op == "exit" {
			os.Exit(int(c.N))
		}
		out.Encode(do(c))
	}
}

func do(c cmd) reply {
	var r reply
	var err error
	switch c.Op {
	case "read":
		var b []byte
		b, err = os.ReadFile(c.Path)
		r.Data = string(b)
	case "write": // create or truncate
		err = os.WriteFile(c.Path, []byte(c.Data), 0o644)
	case "writebig": // write N bytes, report how many went through
		var f *os.File
		if f, err = os.Create(c.Path); err == nil {
			buf := make([]byte, 4096)
			for r.N < c.N && err == nil {
				var n int
				n, err = f.Write(buf[:min(int64(len(buf)), c.N-r.N)])
				r.N += int64(n)
			}
			f.Close()
		}
	case "append":
		var f *os.File
		if f, err = os.OpenFile(c.Path, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			_, err = f.WriteString(c.Data)
			f.Close()
		}
	case "openrw": // open an existing file for writing, without truncating
		var f *os.File
		if f, err = os.OpenFile(c.Path, os.O_RDWR, 0); err == nil {
			f.Close()
		}
	case "opentrunc":
		var f *os.File
		if f, err = os.OpenFile(c.Path, os.O_WRONLY|os.O_TRUNC, 0); err == nil {
			f.Close()
		}
	case "create_excl":
		var f *os.File
		if f, err = os.OpenFile(c.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			f.Close()
		}
	case "writeopen": // open O_WRONLY then write: the fd-level write path
		var f *os.File
		if f, err = os.OpenFile(c.Path, os.O_WRONLY, 0); err == nil {
			_, err = f.WriteString(c.Data)
			f.Close()
		}
	case "pwrite":
		var f *os.File
		if f, err = os.OpenFile(c.Path, os.O_RDWR, 0); err == nil {
			_, err = f.WriteAt([]byte(c.Data), c.N)
			f.Close()
		}
	case "seekread": // read from offset N via seek, plus the size via fstat
		var f *os.File
		if f, err = os.Open(c.Path); err == nil {
			var b []byte
			if _, err = f.Seek(c.N, io.SeekStart); err == nil {
				b, err = io.ReadAll(f)
			}
			var fi os.FileInfo
			if err == nil {
				fi, err = f.Stat()
			}
			if err == nil {
				r.Data, r.N = string(b), fi.Size()
			}
			f.Close()
		}
	case "readdir_twice": // list, rewind the same handle, list again
		var f *os.File
		if f, err = os.Open(c.Path); err == nil {
			var a, b []string
			if a, err = f.Readdirnames(-1); err == nil {
				if _, err = f.Seek(0, io.SeekStart); err == nil {
					b, err = f.Readdirnames(-1)
				}
			}
			r.N = int64(len(a))
			r.Names = b
			sort.Strings(r.Names)
			f.Close()
		}
	case "mkdir":
		err = syscall.Mkdir(c.Path, 0o755)
	case "rmdir":
		err = syscall.Rmdir(c.Path)
	case "unlink":
		err = syscall.Unlink(c.Path)
	case "rename":
		err = syscall.Rename(c.Path, c.To)
	case "symlink":
		err = os.Symlink(c.Path, c.To)
	case "link":
		err = os.Link(c.Path, c.To)
	case "readlink":
		r.Data, err = os.Readlink(c.Path)
	case "truncate": // path-based
		err = os.Truncate(c.Path, c.N)
	case "ftruncate":
		var f *os.File
		if f, err = os.OpenFile(c.Path, os.O_RDWR, 0); err == nil {
			err = f.Truncate(c.N)
			f.Close()
		}
	case "ftruncate_ro": // ftruncate on a descriptor opened read-only
		var f *os.File
		if f, err = os.Open(c.Path); err == nil {
			err = f.Truncate(c.N)
			f.Close()
		}
	case "utimes":
		t := time.Unix(c.N, 0)
		err = os.Chtimes(c.Path, t, t)
	case "futimes": // on an open descriptor
		var f *os.File
		if f, err = os.Open(c.Path); err == nil {
			var ts = []syscall.Timespec{syscall.NsecToTimespec(c.N * 1e9), syscall.NsecToTimespec(c.N * 1e9)}
			err = futimens(f, ts)
			f.Close()
		}
	case "chmod":
		err = os.Chmod(c.Path, os.FileMode(c.N))
	case "stat":
		var fi os.FileInfo
		if fi, err = os.Stat(c.Path); err == nil {
			r.Data = fmt.Sprintf("%s size=%d", fi.Mode(), fi.Size())
			r.N = fi.ModTime().Unix()
		}
	case "lstat":
		var fi os.FileInfo
		if fi, err = os.Lstat(c.Path); err == nil {
			r.Data = fmt.Sprintf("%s size=%d", fi.Mode(), fi.Size())
		}
	case "readdir":
		var es []os.DirEntry
		es, err = os.ReadDir(c.Path)
		for _, e := range es {
			r.Names = append(r.Names, e.Name())
		}
		sort.Strings(r.Names)
	case "readdir_root": // via os.OpenRoot in the guest: *at calls relative to a dir fd
		var root *os.Root
		if root, err = os.OpenRoot(c.Path); err == nil {
			var b []byte
			b, err = root.ReadFile(c.To)
			r.Data = string(b)
			root.Close()
		}
	case "hold": // open a file and keep it; later steps read it by "heldread"
		var f *os.File
		if f, err = os.Open(c.Path); err == nil {
			held = append(held, f)
			r.N = int64(len(held) - 1)
		}
	case "heldread": // read held file N from the start
		if c.N < 0 || c.N >= int64(len(held)) {
			err = errors.New("no such held file")
			break
		}
		var b []byte
		b, err = io.ReadAll(io.NewSectionReader(held[c.N], 0, 1<<20))
		r.Data = string(b)
	case "openmany": // open Path up to N times without closing
		for r.N < c.N {
			var f *os.File
			if f, err = os.Open(c.Path); err != nil {
				break
			}
			held = append(held, f)
			r.N++
		}
	default:
		err = errors.New("unknown op " + c.Op)
	}
	if err != nil {
		r.Errno, r.Err = errnoName(err), err.Error()
		return r
	}
	r.OK = true
	return r
}

func errnoName(err error) string {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return ""
	}
	for name, e := range map[string]syscall.Errno{
		"EACCES": syscall.EACCES, "EAGAIN": syscall.EAGAIN, "EBADF": syscall.EBADF,
		"EEXIST": syscall.EEXIST, "EINVAL": syscall.EINVAL, "EIO": syscall.EIO,
		"EISDIR": syscall.EISDIR, "ELOOP": syscall.ELOOP, "ENOENT": syscall.ENOENT,
		"ENOSYS": syscall.ENOSYS, "ENOTDIR": syscall.ENOTDIR, "ENOTEMPTY": syscall.ENOTEMPTY,
		"ENOTSUP": syscall.ENOTSUP, "EPERM": syscall.EPERM, "EROFS": syscall.EROFS,
		"EMFILE": syscall.EMFILE, "ENOSPC": syscall.ENOSPC, "ENOTCAPABLE": syscall.ENOTCAPABLE,
	} {
		if en == e {
			return name
		}
	}
	return strings.ToUpper(fmt.Sprintf("errno%d", uintptr(en)))
}
