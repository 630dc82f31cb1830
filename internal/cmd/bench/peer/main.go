//go:build linux

// Command peer runs agrun's closest peer, Extism's Go SDK (also on
// wazero), for internal/cmd/bench, which builds it, starts it and prints
// what it measured beside agrun's rows. It is a module of its own so that
// Extism never enters agrun's go.mod; it requires the wazero agrun uses,
// so both run on the same wazero version.
//
// Why a separate process rather than a nested module that imports agrun
// and runs the whole comparison: the bench's comparisons take their
// honesty from round-robin interleaving (one call of each variant in
// turn, so a machine whose load changes slows them alike). Serving single
// calls on request keeps the Extism variants inside the bench's own
// rounds, in turn with agrun, raw wazero and the native process, instead
// of in a second comparison with its own load history. Each call is timed
// here, around exactly the Extism calls, so the pipe's round trip is not
// counted; and each embedding has its own Go heap and collector, as it
// would in a real application, so neither pays for collecting the
// other's garbage. The bench's own module stays as it is: no replace, no
// go.work.
//
// Usage:
//
//	peer serve -plugin word_count.wasm -cache DIR
//	    reads one JSON request per line on stdin, {"variant": V, "args":
//	    {...}, "want": "..."}, makes one call of variant V and answers
//	    {"wall_ns": N, "cpu_ns": N} (or {"error": "..."}) on stdout.
//	    Variants: "fresh" (a new plug-in instance for the call, closed
//	    after it: isolation-equivalent), "reused" (one instance for every
//	    call, Extism's usual use), "reused-no-timeout" (the same without
//	    the timeout, so without wazero's termination checks).
//	peer once -plugin word_count.wasm -cache DIR -args JSON
//	    the first call in a new process: compile (or load from the cache
//	    DIR), instantiate, call word_count once, print its output.
//
// Every variant has the limits both agrun and Extism support: memory 64
// MiB (Manifest.Memory.MaxPages, wazero's memory limit) and a 10 s
// timeout (Manifest.Timeout, which turns on wazero's
// WithCloseOnContextDone), except "reused-no-timeout". WASI is on (a Go
// wasip1 plug-in needs it) with Extism's default module configuration.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
)

// The limits, as in agrun's defaults for the comparison.
const (
	timeout  = 10 * time.Second
	maxPages = 64 << 20 >> 16 // 64 MiB in 64 KiB pages
	export   = "word_count"
)

// settle is the pause after each call, as internal/cmd/bench's: work the
// call leaves behind (the collector) happens in it and counts in the
// call's CPU time, not in its wall time.
const settle = 3 * time.Millisecond

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: peer serve|once -plugin FILE -cache DIR [-args JSON]")
	}
	fs := flag.NewFlagSet("peer "+args[0], flag.ContinueOnError)
	plugin := fs.String("plugin", "", "the word_count plug-in (.wasm)")
	cacheDir := fs.String("cache", "", "wazero compilation cache directory")
	callArgs := fs.String("args", "", "once: the call's input")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *plugin == "" || *cacheDir == "" {
		return errors.New("-plugin and -cache are required")
	}
	cache, err := wazero.NewCompilationCacheWithDir(*cacheDir)
	if err != nil {
		return err
	}
	defer cache.Close(ctx)
	switch args[0] {
	case "once":
		c, err := compile(ctx, *plugin, cache, true)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		p, err := c.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			return err
		}
		defer p.Close(ctx)
		out, err := call(ctx, p, []byte(*callArgs))
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	case "serve":
		return serve(ctx, *plugin, cache, stdin, stdout)
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// compile reads the plug-in and compiles it (and Extism's kernel) with
// the limits, the timeout only if withTimeout.
func compile(ctx context.Context, path string, cache wazero.CompilationCache, withTimeout bool) (*extism.CompiledPlugin, error) {
	m := extism.Manifest{
		Wasm:   []extism.Wasm{extism.WasmFile{Path: path}},
		Memory: &extism.ManifestMemory{MaxPages: maxPages},
	}
	if withTimeout {
		m.Timeout = uint64(timeout.Milliseconds())
	}
	return extism.NewCompiledPlugin(ctx, m, extism.PluginConfig{
		EnableWasi:    true,
		RuntimeConfig: wazero.NewRuntimeConfig().WithCompilationCache(cache),
	}, nil)
}

// call calls word_count and checks it succeeded.
func call(ctx context.Context, p *extism.Plugin, args []byte) ([]byte, error) {
	rc, out, err := p.CallWithContext(ctx, export, args)
	if err != nil {
		return nil, err
	}
	if rc != 0 {
		return nil, fmt.Errorf("word_count returned %d", rc)
	}
	return out, nil
}

type request struct {
	Variant string          `json:"variant"`
	Args    json.RawMessage `json:"args"`
	Want    string          `json:"want"`
}

type reply struct {
	Wall  int64  `json:"wall_ns,omitempty"`
	CPU   int64  `json:"cpu_ns,omitempty"`
	Error string `json:"error,omitempty"`
}

// serve answers requests until stdin ends.
func serve(ctx context.Context, path string, cache wazero.CompilationCache, stdin io.Reader, stdout io.Writer) error {
	limited, err := compile(ctx, path, cache, true)
	if err != nil {
		return err
	}
	defer limited.Close(ctx)
	noTimeout, err := compile(ctx, path, cache, false)
	if err != nil {
		return err
	}
	defer noTimeout.Close(ctx)
	reused := map[string]*extism.Plugin{}
	for name, c := range map[string]*extism.CompiledPlugin{"reused": limited, "reused-no-timeout": noTimeout} {
		p, err := c.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			return err
		}
		defer p.Close(ctx)
		reused[name] = p
	}
	variants := map[string]func(args []byte) ([]byte, error){
		"fresh": func(args []byte) ([]byte, error) {
			p, err := limited.Instance(ctx, extism.PluginInstanceConfig{})
			if err != nil {
				return nil, err
			}
			defer p.Close(ctx)
			return call(ctx, p, args)
		},
	}
	for name, p := range reused {
		variants[name] = func(args []byte) ([]byte, error) { return call(ctx, p, args) }
	}

	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	enc := json.NewEncoder(stdout)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("bad request: %w", err)
		}
		var rep reply
		if v, ok := variants[req.Variant]; !ok {
			rep.Error = fmt.Sprintf("unknown variant %q", req.Variant)
		} else {
			start, cpu := time.Now(), cpuTime()
			out, err := v(req.Args)
			rep.Wall = int64(time.Since(start))
			time.Sleep(settle)
			rep.CPU = int64(cpuTime() - cpu)
			switch {
			case err != nil:
				rep.Error = err.Error()
			case !strings.Contains(string(out), req.Want):
				rep.Error = fmt.Sprintf("unexpected result %q", out)
			}
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return sc.Err()
}

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
