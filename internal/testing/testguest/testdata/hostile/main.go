// Command hostile is the attacker guest shared by the wasmtools tests and
// the hostile-input suite (built with testguest.Hostile). It uses no guest
// SDK: it talks to the host through os/syscall calls and raw agrun
// imports, as an attacker would. The call's arguments select the attack:
//
//	{"op":"emit","stdout":"...","stdout_b64":"...","stderr":"...","stderr_b64":"...","exit":3}  write, exit
//	{"op":"spin","log":"token"}       log the token if any (so a test knows it runs), then loop forever
//	{"op":"alloc"}                    allocate until the memory limit ends the call
//	{"op":"big","n":N}                {"ok":true,"data":"xxx..."} with N bytes of data
//	{"op":"sleep","n":N}              sleep N milliseconds (a slow call), then {"ok":true,"n":N}
//	{"op":"flood"} / {"op":"errflood"} write to stdout / stderr forever
//	{"op":"logflood","n":N}          N messages of 64 KiB (with escapes) through agrun.log
//	{"op":"http","url":"..."}         GET through agrun.http_request
//	{"op":"httpraw","data":"..."}     hand agrun.http_request this request JSON as is
//	{"op":"http_many","url":"...","n":100} n requests, report how many got an answer
//	{"op":"readn","path":"...","n":N}  read N times, report successes and the first content
//	{"op":"read"|"write"|"append"|"remove"|"mkdir"|"list","path":"...","data":"..."}
//	{"op":"rename"|"link"|"symlink","path":"...","to":"..."}  symlink: path is the target
//	{"op":"writebig","path":"...","n":N}  write N bytes, report how many went through
//	{"op":"openmany","path":"dir","n":N}  create and keep open N files, report how many
//	{"op":"rawread","fd":3,"path":"../x","follow":true}  path_open without Go's clean-up
//	{"op":"probe","paths":[...]}      read each path and list "/"
//	{"op":"env"}                      argv and environment, in names
//
// Every op that returns answers {"ok":bool,"data":...,"err":...,"n":...} on
// stdout and exits 0, so a test sees exactly what the guest saw.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

//go:wasmimport agrun log
func agrunLog(level int32, ptr unsafe.Pointer, n uint32)

//go:wasmimport agrun http_request
func httpRequest(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport agrun http_response
func httpResponse(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasi_snapshot_preview1 path_open
func pathOpen(fd int32, dirflags uint32, path unsafe.Pointer, pathLen uint32, oflags uint32, rightsBase, rightsInheriting uint64, fdflags uint32, newFD unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 fd_read
func fdRead(fd int32, iovs unsafe.Pointer, iovsLen uint32, nread unsafe.Pointer) uint32

type args struct {
	Op        string   `json:"op"`
	Stdout    string   `json:"stdout"`
	StdoutB64 string   `json:"stdout_b64"`
	Stderr    string   `json:"stderr"`
	StderrB64 string   `json:"stderr_b64"`
	Log       string   `json:"log"`
	Exit      int      `json:"exit"`
	URL       string   `json:"url"`
	Path      string   `json:"path"`
	To        string   `json:"to"`
	Paths     []string `json:"paths"`
	Data      string   `json:"data"`
	N         int64    `json:"n"`
	FD        int32    `json:"fd"`
	Follow    bool     `json:"follow"`
}

type reply struct {
	OK    bool              `json:"ok"`
	Data  string            `json:"data,omitempty"`
	Err   string            `json:"err,omitempty"`
	N     int64             `json:"n,omitempty"`
	Names []string          `json:"names,omitempty"`
	Each  map[string]*reply `json:"each,omitempty"`
}

var sink int

func main() {
	var a args
	if err := json.NewDecoder(os.Stdin).Decode(&a); err != nil {
		fmt.Fprintln(os.Stderr, "hostile: bad arguments:", err)
		os.Exit(64)
	}
	switch a.Op {
	case "emit":
		b, _ := base64.StdEncoding.DecodeString(a.StdoutB64)
		os.Stdout.Write(b)
		os.Stdout.WriteString(a.Stdout)
		b, _ = base64.StdEncoding.DecodeString(a.StderrB64)
		os.Stderr.Write(b)
		os.Stderr.WriteString(a.Stderr)
		os.Exit(a.Exit)
	case "sleep": // n milliseconds (WASI poll_oneoff on a clock), then {"ok":true}
		time.Sleep(time.Duration(a.N) * time.Millisecond)
		json.NewEncoder(os.Stdout).Encode(reply{OK: true, N: a.N})
		return
	case "big": // {"ok":true,"data":"xxx..."} with n bytes of data
		json.NewEncoder(os.Stdout).Encode(reply{OK: true, Data: strings.Repeat("x", int(a.N))})
		return
	case "spin":
		if a.Log != "" {
			b := []byte(a.Log)
			agrunLog(1, unsafe.Pointer(&b[0]), uint32(len(b)))
		}
		for {
			sink++
		}
	case "alloc":
		var keep [][]byte
		for {
			keep = append(keep, make([]byte, 1<<20)) // growing memory is what counts
		}
	case "logflood": // n messages of 64 KiB through agrun.log, then {"ok":true}
		msg := []byte(strings.Repeat("\x1b[2Jlog ", 64<<10/9))
		for i := int64(0); i < a.N; i++ {
			agrunLog(int32(i%5), unsafe.Pointer(&msg[0]), uint32(len(msg)))
		}
		answer(&reply{OK: true})
	case "flood", "errflood":
		w := os.Stdout
		if a.Op == "errflood" {
			w = os.Stderr
		}
		line := []byte(strings.Repeat("x", 1023) + "\n")
		for {
			if _, err := w.Write(line); err != nil {
				os.Exit(3)
			}
		}
	case "http":
		req, _ := json.Marshal(map[string]string{"method": "GET", "url": a.URL})
		answer(fetch(req))
	case "httpraw":
		answer(fetch([]byte(a.Data)))
	case "http_many":
		req, _ := json.Marshal(map[string]string{"method": "GET", "url": a.URL})
		r := &reply{OK: true}
		for i := int64(0); i < a.N; i++ {
			if f := fetch(req); f.OK {
				r.N++
			} else {
				r.Err = f.Err
			}
		}
		answer(r)
	case "read":
		answer(read(a.Path))
	case "readn": // read path n times; report the first content seen
		r := &reply{}
		for i := int64(0); i < a.N; i++ {
			if b, err := os.ReadFile(a.Path); err == nil {
				r.N++
				if r.Data == "" {
					r.Data = string(b)
				}
			}
		}
		r.OK = true
		answer(r)
	case "write":
		answer(result(os.WriteFile(a.Path, []byte(a.Data), 0o644)))
	case "append":
		f, err := os.OpenFile(a.Path, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.WriteString(a.Data)
			f.Close()
		}
		answer(result(err))
	case "remove":
		answer(result(os.Remove(a.Path)))
	case "mkdir":
		answer(result(os.Mkdir(a.Path, 0o755)))
	case "list":
		answer(list(a.Path))
	case "rename":
		answer(result(os.Rename(a.Path, a.To)))
	case "link":
		answer(result(os.Link(a.Path, a.To)))
	case "symlink":
		answer(result(os.Symlink(a.Path, a.To)))
	case "writebig":
		r := &reply{}
		f, err := os.Create(a.Path)
		if err == nil {
			buf := make([]byte, 64<<10)
			for r.N < a.N && err == nil {
				var n int
				n, err = f.Write(buf[:min(int64(len(buf)), a.N-r.N)])
				r.N += int64(n)
			}
			f.Close()
		}
		r.OK = err == nil
		if err != nil {
			r.Err = err.Error()
		}
		answer(r)
	case "openmany":
		r := &reply{}
		var held []*os.File
		for i := int64(0); i < a.N; i++ {
			f, err := os.Create(path.Join(a.Path, fmt.Sprintf("f%05d", i)))
			if err != nil {
				r.Err = err.Error()
				break
			}
			held = append(held, f)
		}
		r.N = int64(len(held))
		r.OK = r.Err == ""
		answer(r)
	case "rawread":
		answer(rawRead(a.FD, a.Path, a.Follow))
	case "env":
		answer(&reply{OK: true, Names: append(append([]string{}, os.Args...), os.Environ()...)})
	case "probe":
		r := &reply{OK: true, Each: map[string]*reply{}}
		for _, p := range a.Paths {
			r.Each[p] = read(p)
		}
		r.Each["ls /"] = list("/")
		answer(r)
	default:
		fmt.Fprintf(os.Stderr, "hostile: unknown op %q\n", a.Op)
		os.Exit(64)
	}
}

func answer(r *reply) { json.NewEncoder(os.Stdout).Encode(r) }

func result(err error) *reply {
	if err != nil {
		return &reply{Err: err.Error()}
	}
	return &reply{OK: true}
}

func read(p string) *reply {
	b, err := os.ReadFile(p)
	if err != nil {
		return &reply{Err: err.Error()}
	}
	return &reply{OK: true, Data: string(b)}
}

func list(p string) *reply {
	ents, err := os.ReadDir(p)
	if err != nil {
		return &reply{Err: err.Error()}
	}
	r := &reply{OK: true, Names: []string{}}
	for _, e := range ents {
		r.Names = append(r.Names, e.Name())
	}
	sort.Strings(r.Names)
	return r
}

// fetch hands req to agrun.http_request and reports what came back.
func fetch(req []byte) *reply {
	if len(req) == 0 {
		req = []byte{' '}
	}
	n := httpRequest(unsafe.Pointer(&req[0]), uint32(len(req)))
	if n < 0 {
		return &reply{Err: fmt.Sprintf("http_request returned %d", n)}
	}
	buf := make([]byte, n)
	if w := httpResponse(unsafe.Pointer(&buf[0]), uint32(n)); w != n {
		return &reply{Err: fmt.Sprintf("http_response returned %d", w)}
	}
	var resp struct {
		Status int             `json:"status"`
		Body   []byte          `json:"body"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(buf, &resp); err != nil {
		return &reply{Err: "bad response: " + err.Error()}
	}
	if resp.Error != nil {
		return &reply{Err: string(resp.Error)}
	}
	return &reply{OK: true, N: int64(len(resp.Body)), Data: fmt.Sprintf("%d %s", resp.Status, resp.Body)}
}

// rawRead opens path relative to the directory fd with path_open, without
// the lexical clean-up Go's os package does, and reads the file.
func rawRead(dirfd int32, p string, follow bool) *reply {
	if p == "" {
		return &reply{Err: "empty path"}
	}
	var flags uint32
	if follow {
		flags = 1 // LOOKUP_SYMLINK_FOLLOW
	}
	const rightRead = 1 << 1 // FD_READ
	b := []byte(p)
	var fd int32
	if e := pathOpen(dirfd, flags, unsafe.Pointer(&b[0]), uint32(len(b)), 0, rightRead, rightRead, 0, unsafe.Pointer(&fd)); e != 0 {
		return &reply{Err: fmt.Sprintf("path_open: %v", syscall.Errno(e))}
	}
	buf := make([]byte, 4096)
	iov := [2]uint32{uint32(uintptr(unsafe.Pointer(&buf[0]))), uint32(len(buf))}
	var n uint32
	if e := fdRead(fd, unsafe.Pointer(&iov[0]), 1, unsafe.Pointer(&n)); e != 0 {
		return &reply{Err: fmt.Sprintf("fd_read: %v", syscall.Errno(e))}
	}
	return &reply{OK: true, Data: string(buf[:n])}
}

// agrunCall makes the attacker a reactor when it is built with
// -buildmode=c-shared (HostileReactor): each call runs main, so the same
// attacks run against instances started from a snapshot.
//
//go:wasmexport agrun_call
func agrunCall() { main() }
