// Package runtime runs untrusted WebAssembly modules (WASI preview 1
// commands) in a sandbox built on wazero: a module cannot escape it, hang
// it or exhaust the host.
//
//	rt, err := runtime.New(ctx, runtime.Config{})   // zero values are safe defaults
//	if err != nil { ... }
//	defer rt.Close(ctx)
//	mod, err := rt.Compile(ctx, wasmBytes)          // validated, compiled once per content
//	if err != nil { ... }                           // errors.Is(err, runtime.ErrCompile)
//	out, err := rt.Run(ctx, mod, runtime.Input{
//		Args:   []string{"word_count"},
//		Stdin:  []byte(`{"text":"a b c"}`),
//		Limits: runtime.Limits{Timeout: 5 * time.Second},
//	})
//	// err: nil (see out.ExitCode), or wraps ErrTimeout, ErrMemoryLimit, ...
//
// The package knows nothing of tools or registries; package wasmtools
// builds tools on it.
//
// # What a guest gets
//
// Every call runs in a fresh instance: nothing survives from one call to
// the next. The guest sees its stdin, stdout and stderr, the arguments the
// caller passed (and nothing else in argv), no environment variables, real
// clocks and cryptographic random bytes. It sees files only through the
// call's [Mount]s, served by runtime/internal/sandboxfs on os.Root (never wazero's
// directory mounts, which follow symlinks out of the mount), read-only
// unless marked writable, with deletion a separate grant. It reaches the
// network only through the agrun.http_request host function, and only with
// a [NetworkGrant]: allowed hosts, addresses checked at dial time, bounded
// responses (see guest-sdk/ABI.md for the wire contract). Without a grant
// http_request answers "not_granted" and the call fails with
// [ErrNotGranted]. agrun.log writes to the Config's slog.Logger.
//
// A module that imports extism:host/env is an Extism plug-in, run with
// [Input].Plugin (see [Plugin]): its input, output, config, vars, log and
// http_request are Extism's host functions, over a kernel agrun keeps per
// call in Go, under the same limits and the same NetworkGrant.
//
// # Limits
//
// [Limits] bound each call: wall time (the guest is stopped wherever it is,
// inside host functions too), linear memory (growth past the limit ends the
// call), stdout and stderr (the call ends as soon as a cap is crossed),
// stdin, and the bytes written through the call's writable mounts (writes
// beyond fail with EIO in the guest). [Config.MaxInstances] bounds the instances alive at once; further
// calls wait, honouring their context. Compile refuses modules that could
// hurt the host before any code runs: oversized or malformed modules,
// imports other than WASI and the agrun ABI with exactly their signatures,
// an initial memory over the limit, tables that could grow without bound
// (wazero's memory limit does not cover tables), and code built to make
// wazero's compiler work out of proportion to its size (deeply nested
// blocks, many locals times many blocks) or that metering would amplify
// past what one compile may cost (measured before anything is built:
// [Config.MaxMeteredCodeBytes]); [Config.MaxCompiles] bounds the
// compiles running at once. A module is parsed by a strictly bounded
// reader (internal/wasmbin) before wazero sees it.
//
// # Errors
//
// A guest that exits with a non-zero code is not an error: Run returns its
// Output with the ExitCode. Every other way a call can end is an error
// wrapping one sentinel ([ErrTimeout], [ErrMemoryLimit], [ErrOutputLimit],
// [ErrInputLimit], [ErrTrap], [ErrNotGranted], [ErrClosed]) and the cause;
// compilation failures wrap [ErrCompile] (and a [ValidationError] when the
// sandbox's checks refused the module). A Go guest's own out-of-memory
// exit (code 2, "out of memory" on stderr) is reported as ErrMemoryLimit.
//
// # Speed
//
// Compiled code is cached in memory per content hash and on disk
// ([Config.CacheDir]) across processes. A fresh instance does not apply
// the module's data segments one by one: they are applied once, at
// Compile, into a memory image copied into each instance's (pooled,
// pre-faulted) memory; where that is not exact they are merged into as few
// as possible. A reactor tool (exports _initialize and agrun_call, e.g. a
// Go tool built with -buildmode=c-shared) runs _initialize once: each call
// starts from a snapshot of the instance taken right after it, and the
// next instance is prepared while a call runs (the guest's view is in
// guest-sdk/ABI.md §1.1). docs/PERFORMANCE.md has the figures.
//
// # Concurrency
//
// A Runtime and its Modules are safe for concurrent use. Close the Runtime
// to end the calls in flight and release compiled code.
package runtime
