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

// wasiCall is one call of a WASI function: its name and its arguments,
// one per parameter (truncated to i32 where the parameter is one).
type wasiCall struct {
	name string
	args []uint64
}

// wasiCallModule assembles a command whose _start makes calls in order,
// dropping each result; data is placed at address 0 of its
// wasiFuzzPages-page memory. sigs are the WASI functions' signatures.
func wasiCallModule(sigs map[string]wasmbin.FuncType, data []byte, calls ...wasiCall) []byte {
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

	// Function i (type i) is the import of calls[i]; the last type and
	// function are _start's.
	var types, imports [][]byte
	body := []byte{0} // no locals
	for i, c := range calls {
		sig := sigs[c.name]
		types = append(types, funcType(sig.Params, sig.Results))
		imports = append(imports, append(append(str(wasi_snapshot_preview1.ModuleName), str(c.name)...), append([]byte{0x00}, wasmbin.AppendU32(nil, uint32(i))...)...))
		for j, p := range sig.Params {
			if p == api.ValueTypeI64 {
				body = append(body, 0x42) // i64.const
				body = appendS64(body, int64(c.args[j]))
			} else {
				body = append(body, 0x41) // i32.const
				body = wasmbin.AppendS32(body, int32(uint32(c.args[j])))
			}
		}
		body = append(body, 0x10) // call i
		body = wasmbin.AppendU32(body, uint32(i))
		for range sig.Results {
			body = append(body, 0x1a) // drop
		}
	}
	body = append(body, 0x0b)
	start := wasmbin.AppendU32(nil, uint32(len(calls)))

	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(1, vec(append(types, funcType(nil, nil))...))...)
	m = append(m, section(2, vec(imports...))...)
	m = append(m, section(3, vec(start))...)
	m = append(m, section(5, vec([]byte{0x00, wasiFuzzPages}))...)
	m = append(m, section(7, vec(append(str("memory"), 0x02, 0), append(append(str("_start"), 0x00), start...)))...)
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

// wasiFuzzer is what FuzzWASI and FuzzWASISequence share: a Runtime,
// the WASI functions' names, and a writable mount (fd 3, holding a file
// and a directory).
type wasiFuzzer struct {
	r      *Runtime
	names  []string
	mounts []Mount
}

func newWASIFuzzer(f *testing.F) *wasiFuzzer {
	r := newRuntime(f, Config{DisableCache: true, Logger: slog.New(slog.DiscardHandler)})
	dir := f.TempDir()
	for _, err := range []error{os.WriteFile(filepath.Join(dir, "file"), []byte("hello"), 0o644), os.Mkdir(filepath.Join(dir, "dir"), 0o755)} {
		if err != nil {
			f.Fatal(err)
		}
	}
	return &wasiFuzzer{r: r, names: wasiNames(r), mounts: []Mount{{Host: dir, Guest: "/data", Writable: true, AllowDelete: true}}}
}

// index is the fuzz input that selects the function name.
func (z *wasiFuzzer) index(name string) uint8 { return uint8(slices.Index(z.names, name)) }

// call is the wasiCall that fuzz inputs fn, sel and args stand for: bit i
// of sel replaces argument i by wasiExtremes[arg % len].
func (z *wasiFuzzer) call(fn uint8, sel uint16, args ...uint64) wasiCall {
	c := wasiCall{name: z.names[int(fn)%len(z.names)], args: args}
	for i := range c.args {
		if sel&(1<<i) != 0 {
			c.args[i] = wasiExtremes[c.args[i]%uint64(len(wasiExtremes))]
		}
	}
	return c
}

var wasiFuzzLimits = Limits{Timeout: 300 * time.Millisecond, MemoryBytes: 1 << 20, MaxStdout: 4 << 10, MaxStderr: 4 << 10, MaxWriteBytes: 64 << 10}

// run runs a module making calls, under wasiFuzzLimits and the mount, and
// checks what FuzzWASI promises.
func (z *wasiFuzzer) run(t *testing.T, data []byte, calls ...wasiCall) {
	if len(data) > 4096 {
		data = data[:4096]
	}
	m, err := z.r.Compile(context.Background(), wasiCallModule(z.r.wasiSigs, data, calls...))
	if err != nil {
		t.Fatalf("%v: the generated module does not compile: %v", calls, err)
	}
	defer m.Close(context.Background())
	var out *Output
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("%v: a host panic escaped Run: %v", calls, p)
			}
		}()
		out, err = z.r.Run(context.Background(), m, Input{Stdin: []byte(`{"x":1}`), Mounts: z.mounts, Limits: wasiFuzzLimits})
	}()
	goruntime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > wasiFuzzMaxAlloc {
		t.Fatalf("%v: the call allocated %d MiB on the host", calls, grew>>20)
	}
	if out == nil {
		t.Fatalf("%v: Run returned no Output (err %v)", calls, err)
	}
	if err == nil {
		return
	}
	sentinels := []error{ErrTimeout, ErrMemoryLimit, ErrOutputLimit, ErrTrap, ErrNotGranted}
	if !slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) }) {
		t.Fatalf("%v: error wraps no runtime sentinel: %v", calls, err)
	}
	if refusal := (*hostRefusal)(nil); errors.As(err, &refusal) && refusal.reason == "" {
		// The guard caught a panic no check stops: add one (wasi.go).
		t.Fatalf("%v: wazero panicked: %v", calls, err)
	}
	text := err.Error()
	for _, marker := range hostTextMarkers {
		if strings.Contains(text, marker) {
			t.Fatalf("%v: error carries host text %q:\n%.3000s", calls, marker, text)
		}
	}
}

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
// the host. It is how wazero 1.12's guest-triggered panics were found
// (see wasi.go and docs/SECURITY.md). Seeds: testdata/fuzz/FuzzWASI (the
// two upstream bugs among them).
func FuzzWASI(f *testing.F) {
	z := newWASIFuzzer(f)
	const all = 0x1ff
	for _, name := range z.names {
		f.Add(z.index(name), uint16(0), []byte(nil), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
		f.Add(z.index(name), uint16(all), []byte(nil), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1), uint64(1))
		f.Add(z.index(name), uint16(0), []byte("/data/file\x00dir"), uint64(3), uint64(16), uint64(4), uint64(0), uint64(64), uint64(1<<40), uint64(128), uint64(1), uint64(0))
	}
	// The two wazero 1.12 bugs.
	f.Add(z.index("poll_oneoff"), uint16(0), []byte(nil), uint64(0), uint64(0), uint64(1<<28), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(z.index("fd_filestat_set_times"), uint16(0), []byte(nil), uint64(1), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, fn uint8, sel uint16, data []byte, a0, a1, a2, a3, a4, a5, a6, a7, a8 uint64) {
		z.run(t, data, z.call(fn, sel, a0, a1, a2, a3, a4, a5, a6, a7, a8))
	})
}

// FuzzWASISequence is FuzzWASI with two calls in a row (the second's
// inputs are fn2, sel2 and b0..b8), for what one call leaves to the next:
// an fd opened, renumbered or closed, a file written. It is how
// fd_renumber's unbounded table growth is reached (path_open, then
// fd_renumber to 2^27: a seed). Seeds: testdata/fuzz/FuzzWASISequence.
func FuzzWASISequence(f *testing.F) {
	z := newWASIFuzzer(f)
	// path_open(3, 0, "file", 0, rights 2, ...) writes fd 4 at 0; then
	// fd_renumber(4, 2^27): the table-growth case (wasi.go maxGuestFD).
	f.Add(z.index("path_open"), z.index("fd_renumber"), uint16(0), uint16(0), []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00file"),
		uint64(3), uint64(0), uint64(16), uint64(4), uint64(0), uint64(2), uint64(0), uint64(0), uint64(0),
		uint64(4), uint64(1<<27), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	for _, first := range []string{"path_open", "fd_close", "fd_renumber"} {
		for _, then := range z.names {
			f.Add(z.index(first), z.index(then), uint16(0), uint16(0), []byte("/data/file\x00dir"),
				uint64(3), uint64(0), uint64(11), uint64(3), uint64(0), uint64(2), uint64(0), uint64(0), uint64(0),
				uint64(4), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
		}
	}
	f.Fuzz(func(t *testing.T, fn1, fn2 uint8, sel1, sel2 uint16, data []byte,
		a0, a1, a2, a3, a4, a5, a6, a7, a8, b0, b1, b2, b3, b4, b5, b6, b7, b8 uint64) {
		z.run(t, data, z.call(fn1, sel1, a0, a1, a2, a3, a4, a5, a6, a7, a8), z.call(fn2, sel2, b0, b1, b2, b3, b4, b5, b6, b7, b8))
	})
}
