// Command hostile is a test guest that misbehaves on request. It uses no
// guest SDK: it talks to the host through raw WASI and agrun imports, as an
// attacker would. The call's arguments select the behaviour:
//
//	{"op":"emit","stdout":"...","stdout_b64":"...","stderr":"...","stderr_b64":"...","exit":3}
//	{"op":"spin","log":"token"}       log the token (so a test knows it runs), then loop forever
//	{"op":"alloc"}                    allocate until the memory limit ends the call
//	{"op":"flood"}                    write to stdout forever
//	{"op":"http","url":"http://..."}  call agrun.http_request, then exit 0 as if all were well
//	{"op":"read","path":"/data/x"}    os.ReadFile
//	{"op":"write","path":"/data/x","data":"..."}
//	{"op":"remove","path":"/data/x"}
//	{"op":"list","path":"/"}
//	{"op":"rawread","fd":3,"path":"../secret","follow":true}  path_open relative to a preopen, then fd_read
//	{"op":"probe","paths":["/etc/passwd","/data/x"]}           read each path and list "/"
//	{"op":"env"}                      argv and environment as names, one per line in data
//
// File and network operations answer {"ok":bool,"data":...,"err":...} and
// exit 0, so a test sees exactly what the guest saw.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
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
	Exit      int      `json:"exit"`
	Log       string   `json:"log"`
	URL       string   `json:"url"`
	Path      string   `json:"path"`
	Paths     []string `json:"paths"`
	Data      string   `json:"data"`
	FD        int32    `json:"fd"`
	Follow    bool     `json:"follow"`
}

type reply struct {
	OK    bool              `json:"ok"`
	Data  string            `json:"data,omitempty"`
	Err   string            `json:"err,omitempty"`
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
		if a.StdoutB64 != "" {
			b, _ := base64.StdEncoding.DecodeString(a.StdoutB64)
			os.Stdout.Write(b)
		}
		os.Stdout.WriteString(a.Stdout)
		if a.StderrB64 != "" {
			b, _ := base64.StdEncoding.DecodeString(a.StderrB64)
			os.Stderr.Write(b)
		}
		os.Stderr.WriteString(a.Stderr)
		os.Exit(a.Exit)
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
	case "flood":
		line := []byte(strings.Repeat("x", 1023) + "\n")
		for {
			os.Stdout.Write(line)
		}
	case "http":
		answer(fetch(a.URL))
	case "read":
		answer(read(a.Path))
	case "write":
		answer(result(os.WriteFile(a.Path, []byte(a.Data), 0o644)))
	case "remove":
		answer(result(os.Remove(a.Path)))
	case "list":
		answer(list(a.Path))
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

func answer(r *reply) {
	json.NewEncoder(os.Stdout).Encode(r)
}

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

// fetch calls agrun.http_request directly and reports what came back.
func fetch(url string) *reply {
	req, _ := json.Marshal(map[string]string{"method": "GET", "url": url})
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
	return &reply{OK: true, Data: fmt.Sprintf("%d %s", resp.Status, resp.Body)}
}

// rawRead opens path relative to the directory fd with path_open, without
// the lexical clean-up Go's os package does, and reads the file.
func rawRead(dirfd int32, path string, follow bool) *reply {
	if path == "" {
		return &reply{Err: "empty path"}
	}
	var flags uint32
	if follow {
		flags = 1 // LOOKUP_SYMLINK_FOLLOW
	}
	const rightRead = 1 << 1 // FD_READ
	p := []byte(path)
	var fd int32
	if e := pathOpen(dirfd, flags, unsafe.Pointer(&p[0]), uint32(len(p)), 0, rightRead, rightRead, 0, unsafe.Pointer(&fd)); e != 0 {
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
