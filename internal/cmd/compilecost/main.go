//go:build linux

// Command compilecost measures what compiling a module costs once it is
// metered: the sizes and blocks wasmbin.MeasureMeter finds, and the time
// and peak RSS of wazero's compile of the metered module (without
// runtime.Compile's limits, so that what they refuse can be measured
// too). It is how the figures of docs/SECURITY.md ("Compiling") were
// made; run one measurement per process, since the peak RSS is the
// process's:
//
//	go run ./internal/cmd/compilecost call 25000        # one body of 25,000 bytes of call 0
//	go run ./internal/cmd/compilecost call 2000 500     # 500 such bodies of 2,000 bytes
//	go run ./internal/cmd/compilecost -measure ifs 62500 # measure only, compile nothing
//	go run ./internal/cmd/compilecost -instrument call 400 6000 # meter, do not compile
//	go run ./internal/cmd/compilecost testdata/word_count.wasm
//
// Shapes (a body of N bytes of one instruction sequence, repeated):
// call (call 0), grow (memory.grow), loop (empty loops), ifs (if end),
// plain (i32.const 0, drop), fill (memory.fill), callind
// (call_indirect).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

var shapes = map[string]struct{ pre, unit, post []byte }{
	"call":    {nil, []byte{0x10, 0x00}, nil},
	"grow":    {[]byte{0x41, 0}, []byte{0x40, 0}, []byte{0x1a}},
	"loop":    {nil, []byte{0x03, 0x40, 0x0b}, nil},
	"ifs":     {nil, []byte{0x41, 0, 0x04, 0x40, 0x0b}, nil},
	"plain":   {nil, []byte{0x41, 0, 0x1a}, nil},
	"fill":    {nil, []byte{0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 11, 0}, nil},
	"callind": {nil, []byte{0x41, 0, 0x11, 0, 0}, nil},
}

// opt is what runtime.Compile meters with (its default stack bound).
var opt = wasmbin.MeterOptions{ImportModule: "agrun:sandbox", MaxStack: 16 << 20}

func main() {
	measureOnly := flag.Bool("measure", false, "measure the metered code only; do not compile it")
	instrumentOnly := flag.Bool("instrument", false, "meter the module (wasmbin.Instrument) but do not compile it")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: compilecost [-measure] SHAPE BYTES [BODIES] | FILE.wasm...")
		os.Exit(2)
	}
	var mods [][]byte
	var names []string
	if s, ok := shapes[flag.Arg(0)]; ok {
		n, err := strconv.Atoi(flag.Arg(1))
		if err != nil {
			fail(err)
		}
		bodies := 1
		if flag.NArg() > 2 {
			if bodies, err = strconv.Atoi(flag.Arg(2)); err != nil {
				fail(err)
			}
		}
		mods, names = [][]byte{shape(s.pre, s.unit, s.post, n, bodies)}, []string{fmt.Sprintf("%s %d x%d", flag.Arg(0), n, bodies)}
	} else {
		for _, f := range flag.Args() {
			b, err := os.ReadFile(f)
			if err != nil {
				fail(err)
			}
			mods, names = append(mods, b), append(names, f)
		}
	}
	for i, wasm := range mods {
		m, err := wasmbin.Parse(wasm)
		if err != nil {
			fail(err)
		}
		start := time.Now()
		ms, err := wasmbin.MeasureMeter(m, opt, wasmbin.MeterLimits{})
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s: module %d bytes; metered code %d bytes, largest body %d (function %d, %d as written), blocks %d (at most %d in a function), block cost %d, compile cost %d; measured in %v\n",
			names[i], len(wasm), ms.Code, ms.MaxBody, ms.MaxFunc, ms.MaxFuncBody, ms.Blocks, ms.MaxBlocks, ms.BlockCost, ms.CompileCost, time.Since(start).Round(time.Microsecond))
		if *measureOnly {
			continue
		}
		start = time.Now()
		metered, err := wasmbin.Instrument(wasm, opt)
		if err != nil {
			fail(err)
		}
		if *instrumentOnly {
			fmt.Printf("  Instrument: %v; peak RSS %s\n", time.Since(start).Round(time.Millisecond), peakRSS())
			continue
		}
		ctx := context.Background()
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
		start = time.Now()
		_, err = rt.CompileModule(ctx, metered)
		fmt.Printf("  wazero compile: %v, err %v; peak RSS %s\n", time.Since(start).Round(time.Millisecond), err, peakRSS())
		rt.Close(ctx)
	}
}

// shape is a module of bodies functions (func() ()), each n bytes of unit
// repeated between pre and post, with a table and a memory.
func shape(pre, unit, post []byte, n, bodies int) []byte {
	body := append([]byte{0}, pre...)
	body = append(body, bytes.Repeat(unit, n/len(unit))...)
	body = append(append(body, post...), 0x0b)
	out := []byte(wasmbin.Header)
	sec := func(id byte, p []byte) {
		out = append(out, id)
		out = wasmbin.AppendU32(out, uint32(len(p)))
		out = append(out, p...)
	}
	sec(wasmbin.SecType, []byte{1, 0x60, 0, 0})
	sec(wasmbin.SecFunction, append(wasmbin.AppendU32(nil, uint32(bodies)), bytes.Repeat([]byte{0}, bodies)...))
	sec(wasmbin.SecTable, []byte{1, wasmbin.ValFuncref, 1, 1, 1})
	sec(wasmbin.SecMemory, []byte{1, 0, 1})
	sec(wasmbin.SecExport, []byte{2, 6, 'm', 'e', 'm', 'o', 'r', 'y', wasmbin.KindMemory, 0, 6, '_', 's', 't', 'a', 'r', 't', wasmbin.KindFunc, 0})
	code := wasmbin.AppendU32(nil, uint32(bodies))
	for range bodies {
		code = wasmbin.AppendU32(code, uint32(len(body)))
		code = append(code, body...)
	}
	sec(wasmbin.SecCode, code)
	return out
}

func peakRSS() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compilecost:", err)
	os.Exit(1)
}
