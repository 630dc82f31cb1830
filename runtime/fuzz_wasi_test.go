package runtime

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// wasiFuzzPages is the guest memory of FuzzWASI's modules: two pages, so
// that "the memory size" is an argument distinct from a page.
const wasiFuzzPages = 2

// wasiFuzzMaxAlloc bounds what one FuzzWASI call may allocate on the Go
// heap: a small multiple of the guest's 1 MiB limit (the guest's own
// memory is not on the Go heap).
const wasiFuzzMaxAlloc = 32 << 20

// wasiExtremes are the argument values FuzzWASI picks from when an
// argument's selector bit is set: the edges of every integer a WASI
// function decodes (counts, lengths, pointers, fds, flags, timestamps),
// around the guest memory's size, and the sizes whose multiples by a
// WASI record size (8, 16, 24, 32, 48, 64) wrap around 2^32.
var wasiExtremes = []uint64{
	0, 1, 2, 3, 4, 5, 8, 9, 24, 48, 64, 255, 256, 0xffff, 0x10000,
	wasiFuzzPages*65536 - 48, wasiFuzzPages*65536 - 1, wasiFuzzPages * 65536, wasiFuzzPages*65536 + 1,
	1 << 24, 1 << 26, 1 << 27, 1 << 28, 1 << 29, 1 << 30, 0x05555556, 0x0aaaaaab,
	1<<31 - 1, 1 << 31, 1<<32 - 1, 1<<32 - 48,
	1<<63 - 1, 1 << 63, 1<<64 - 1, 1 << 32, 1<<62 + 1,
}

// wasiNames is every function the WASI host module exports, sorted.
func wasiNames(r *Runtime) []string {
	names := make([]string, 0, len(r.wasiSigs))
	for n := range r.wasiSigs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// wasiCallModule assembles a command whose _start calls the WASI function
// name (signature sig) once with args (one per parameter, truncated to
// i32 where the parameter is one) and drops the result; data is placed
// at address 0 of its wasiFuzzPages-page memory.
func wasiCallModule(name string, sig wasmbin.FuncType, args []uint64, data []byte) []byte {
	vec := func(items ...[]byte) []byte {
		b := wasmbin.AppendU32(nil, uint32(len(items)))
		for _, it := range items {
			b = append(b, it...)
		}
		return b
	}
	str := func(s string) []byte { return append(wasmbin.AppendU32(nil, uint32(len(s))), s...) }
	section := func(id byte, body []byte) []byte {
		return append(append([]byte{id}, wasmbin.AppendU32(nil, uint32(len(body)))...), body...)
	}
	funcType := func(params, results []byte) []byte {
		b := append([]byte{0x60}, wasmbin.AppendU32(nil, uint32(len(params)))...)
		b = append(b, params...)
		b = append(b, wasmbin.AppendU32(nil, uint32(len(results)))...)
		return append(b, results...)
	}

	var body []byte
	body = append(body, 0) // no locals
	for i, p := range sig.Params {
		if p == api.ValueTypeI64 {
			body = append(body, 0x42) // i64.const
			body = appendS64(body, int64(args[i]))
		} else {
			body = append(body, 0x41) // i32.const
			body = wasmbin.AppendS32(body, int32(uint32(args[i])))
		}
	}
	body = append(body, 0x10, 0) // call 0
	for range sig.Results {
		body = append(body, 0x1a) // drop
	}
	body = append(body, 0x0b)

	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(1, vec(funcType(sig.Params, sig.Results), funcType(nil, nil)))...)
	m = append(m, section(2, vec(append(append(str(wasi_snapshot_preview1.ModuleName), str(name)...), 0x00, 0)))...)
	m = append(m, section(3, vec([]byte{1}))...)
	m = append(m, section(5, vec([]byte{0x00, wasiFuzzPages}))...)
	m = append(m, section(7, vec(append(str("memory"), 0x02, 0), append(str("_start"), 0x00, 1)))...)
	m = append(m, section(10, vec(append(wasmbin.AppendU32(nil, uint32(len(body))), body...)))...)
	if len(data) > 0 {
		seg := []byte{0x00, 0x41, 0x00, 0x0b} // memory 0, offset i32.const 0
		seg = append(seg, wasmbin.AppendU32(nil, uint32(len(data)))...)
		m = append(m, section(11, vec(append(seg, data...)))...)
	}
	return m
}

// appendS64 appends v in signed LEB128.
func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// hostTextMarkers are what a host's Go panic or stack trace looks like;
// none may appear in a call's error.
var hostTextMarkers = []string{"goroutine ", ".go:", "panic", "recovered by wazero", "runtime error", "/root/", "pkg/mod"}

// FuzzWASI calls one wasi_snapshot_preview1 function, chosen by the
// fuzzer, with fuzzer-chosen arguments (bit i of sel replaces argument i
// by wasiExtremes[arg % len]) and memory contents, from _start, under Run
// with a small memory, output and write limit, a short timeout and a
// writable mount (fd 3, holding a file and a directory). Whatever the
// guest passes: no host panic escapes Run, a failure wraps one of the
// runtime's sentinels, and its text carries nothing of the host's Go
// panic (no stack, no source paths); no wazero panic is reached at all
// (agrun's checks refuse every known one before it; a refusal by the
// guard's recover fails the target); and the call allocates little on
// the host. It is how wazero 1.12's
// guest-triggered panics were found (see wasi.go and docs/SECURITY.md).
// Seeds: testdata/fuzz/FuzzWASI (the two upstream bugs among them).
func FuzzWASI(f *testing.F) {
	r := newRuntime(f, Config{DisableCache: true, Logger: slog.New(slog.DiscardHandler)})
	names := wasiNames(r)
	index := func(name string) uint8 { return uint8(slices.Index(names, name)) }
	const all = 0x1ff
	for _, name := range names {
		f.Add(index(name), uint16(0), []byte(nil), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
		f.Add(index(name), uint16(all), []byte(nil), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1))
		f.Add(index(name), uint16(0), []byte("/data/file\x00dir"), uint64(3), uint64(16), uint64(4), uint64(0), uint64(64), uint64(1<<40), uint64(128), uint64(1), uint64(0))
	}
	// The two wazero 1.12 bugs.
	f.Add(index("poll_oneoff"), uint16(0), []byte(nil), uint64(0), uint64(0), uint64(1<<28), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(index("fd_filestat_set_times"), uint16(0), []byte(nil), uint64(1), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))

	dir := f.TempDir()
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "file"), []byte("hello"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "dir"), 0o755))
	mounts := []Mount{{HostPath: dir, GuestPath: "/data", Writable: true, AllowDelete: true}}
	limits := Limits{Timeout: 300 * time.Millisecond, MemoryBytes: 1 << 20, MaxStdout: 4 << 10, MaxStderr: 4 << 10, MaxWriteBytes: 64 << 10}
	sentinels := []error{ErrTimeout, ErrMemoryLimit, ErrOutputLimit, ErrTrap, ErrNotGranted}

	f.Fuzz(func(t *testing.T, fn uint8, sel uint16, data []byte, a0, a1, a2, a3, a4, a5, a6, a7, a8 uint64) {
		name := names[int(fn)%len(names)]
		args := []uint64{a0, a1, a2, a3, a4, a5, a6, a7, a8}
		for i := range args {
			if sel&(1<<i) != 0 {
				args[i] = wasiExtremes[args[i]%uint64(len(wasiExtremes))]
			}
		}
		if len(data) > 4096 {
			data = data[:4096]
		}
		wasm := wasiCallModule(name, r.wasiSigs[name], args, data)
		m, err := r.Compile(context.Background(), wasm)
		if err != nil {
			t.Fatalf("%s: the generated module does not compile: %v", name, err)
		}
		defer m.Close(context.Background())
		var out *Output
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s%v: a host panic escaped Run: %v", name, args, p)
				}
			}()
			out, err = r.Run(context.Background(), m, Input{Stdin: []byte(`{"x":1}`), Mounts: mounts, Limits: limits})
		}()
		goruntime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > wasiFuzzMaxAlloc {
			t.Fatalf("%s%v: the call allocated %d MiB on the host", name, args, grew>>20)
		}
		if out == nil {
			t.Fatalf("%s%v: Run returned no Output (err %v)", name, args, err)
		}
		if err == nil {
			return
		}
		if !slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) }) {
			t.Fatalf("%s%v: error wraps no runtime sentinel: %v", name, args, err)
		}
		text := err.Error()
		if refusal := (*hostRefusal)(nil); errors.As(err, &refusal) && refusal.reason == "" {
			// The guard caught a panic no check stops: add one (wasi.go).
			t.Fatalf("%s%v: wazero panicked: %v", name, args, err)
		}
		for _, marker := range hostTextMarkers {
			if strings.Contains(text, marker) {
				t.Fatalf("%s%v: error carries host text %q:\n%.3000s", name, args, marker, text)
			}
		}
	})
}
