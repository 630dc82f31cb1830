// Command probe is a test guest: argv[1] selects a behaviour, so one
// compiled module serves most sandbox tests.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

//go:wasmimport agrun log
func agrunLog(level, ptr, n uint32)

//go:wasmimport agrun http_request
func httpRequest(ptr, n uint32) int32

//go:wasmimport agrun http_response
func httpResponse(ptr, n uint32) int32

var sink int

//go:noinline
func spin() {
	for {
		sink++
	}
}

//go:noinline
func recurse(n int) int {
	var pad [64]byte
	pad[n%64] = byte(n)
	return recurse(n+1) + int(pad[3])
}

func ptrLen(b []byte) (uint32, uint32) {
	if len(b) == 0 {
		return 0, 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b))
}

// fetch sends one request and prints the response JSON (or the code).
func fetch(req string) {
	p, n := ptrLen([]byte(req))
	got := httpRequest(p, n)
	if got < 0 {
		fmt.Printf("request code %d\n", got)
		return
	}
	// A too small buffer first: -3 and the response stays pending.
	small := make([]byte, 1)
	sp, _ := ptrLen(small)
	if got > 1 {
		if c := httpResponse(sp, 1); c != -3 {
			fmt.Printf("small buffer gave %d\n", c)
		}
	}
	buf := make([]byte, got)
	bp, bn := ptrLen(buf)
	w := httpResponse(bp, bn)
	if w != got {
		fmt.Printf("response code %d\n", w)
		return
	}
	os.Stdout.Write(buf)
	fmt.Println()
}

func main() {
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "calls": // how many calls this instance served (0 for a command)
		fmt.Println(calls)
	case "mathrand": // math/rand/v2's global generator, and a map's order
		m := map[int]bool{}
		for i := range 16 {
			m[i] = true
		}
		order := ""
		for k := range m {
			order += fmt.Sprint(k, ",")
		}
		fmt.Println(mrand.Int64(), order)
	case "echo": // stdin to stdout
		io.Copy(os.Stdout, os.Stdin)
	case "env": // what the guest can see of its surroundings
		var r [16]byte
		rand.Read(r[:])
		_, err := os.ReadDir("/")
		entries, _ := os.ReadDir("/")
		info := map[string]any{
			"args":    os.Args,
			"env":     os.Environ(),
			"random":  hex.EncodeToString(r[:]),
			"now":     time.Now().Unix(),
			"rootErr": fmt.Sprint(err),
			"root":    len(entries),
		}
		json.NewEncoder(os.Stdout).Encode(info)
	case "sleep":
		d, _ := time.ParseDuration(os.Args[2])
		t := time.Now()
		time.Sleep(d)
		fmt.Println(time.Since(t) >= d)
	case "exit":
		fmt.Fprintln(os.Stderr, "failing on purpose")
		os.Exit(3)
	case "spin":
		for {
			sink++
		}
	case "spincallee":
		spin()
	case "alloc": // allocate forever, keeping everything
		var keep [][]byte
		for {
			keep = append(keep, bytes.Repeat([]byte{1}, 1<<20))
		}
	case "recurse":
		recurse(0)
	case "floodout":
		line := []byte(strings.Repeat("x", 1023) + "\n")
		for {
			os.Stdout.Write(line)
		}
	case "flooderr":
		for {
			fmt.Fprintln(os.Stderr, strings.Repeat("e", 100))
		}
	case "log":
		for i, msg := range os.Args[2:] {
			p, n := ptrLen([]byte(msg))
			agrunLog(uint32(i), p, n)
		}
		// Out-of-range pointers must be ignored, not trap.
		agrunLog(1, 0xffff_fff0, 100)
		fmt.Println("logged")
	case "http": // argv[2] is the request JSON
		for _, req := range os.Args[2:] {
			fetch(req)
		}
	case "httpfault": // pointer checks of the host functions
		fmt.Println(httpRequest(0xffff_fff0, 100), httpResponse(0, 10), httpRequest(0, 2<<20), httpResponse(0xffff_fff0, 64))
	case "nogrant": // call http_request, then pretend all is well
		fetch(`{"method":"GET","url":"http://example.com/"}`)
		fmt.Println("ignored the refusal")
	case "read":
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
	case "write": // write path data [path data ...], in order
		for i := 2; i+1 < len(os.Args); i += 2 {
			if err := os.WriteFile(os.Args[i], []byte(os.Args[i+1]), 0o644); err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			fmt.Println("written")
		}
	case "audit": // a fixed script of file operations (audit tests), then the requests in argv[2:]
		in, _ := io.ReadAll(os.Stdin)
		b, err := os.ReadFile("/ro/in.txt")
		fmt.Println(len(in), len(b), err)
		fmt.Println(os.WriteFile("/data/out.txt", []byte("hello"), 0o644))
		fmt.Println(os.Rename("/data/out.txt", "/data/moved.txt"))
		fmt.Println(os.Mkdir("/data/sub", 0o755))
		ents, err := os.ReadDir("/data")
		fmt.Println(len(ents), err)
		fmt.Println(os.Remove("/data/moved.txt"))
		fmt.Println(os.WriteFile("/ro/x", []byte("no"), 0o644) != nil)
		for _, req := range os.Args[2:] {
			fetch(req)
		}
	case "creates": // create argv[2] files in /data
		n, _ := strconv.Atoi(os.Args[2])
		for i := range n {
			f, err := os.Create(fmt.Sprintf("/data/f%d", i))
			if err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			f.Close()
		}
		fmt.Println("created", n)
	case "remove":
		if err := os.Remove(os.Args[2]); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("removed")
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", mode)
		os.Exit(64)
	}
}

// calls counts the calls this instance has served: always 1 when every
// call gets a fresh instance.
var calls int

// agrunCall makes the probe a reactor when it is built with
// -buildmode=c-shared (the runtime's reactor tests build it both ways):
// each call runs main, as _start would. "calls" prints how many calls
// this instance served, then runs the mode in argv[2:].
//
//go:wasmexport agrun_call
func agrunCall() {
	calls++
	main()
}
