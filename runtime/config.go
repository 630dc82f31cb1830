package runtime

import (
	"log/slog"
	"time"
)

// Package defaults. A zero field in [Config] or [Limits] means the default.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultMemoryBytes    = 64 << 20
	DefaultMaxStdout      = 1 << 20
	DefaultMaxStderr      = 64 << 10
	DefaultMaxStdin       = 1 << 20
	DefaultMaxWriteBytes  = 64 << 20
	DefaultMaxModuleBytes = 64 << 20
	// DefaultMaxMeteredCodeBytes is the default of Config.MaxMeteredCodeBytes.
	DefaultMaxMeteredCodeBytes = 32 << 20
	DefaultMaxTableElements    = 100_000
)

// maxMemoryBytes is the most a wasm32 memory can hold (65536 pages).
const maxMemoryBytes = 1 << 32

// Config configures a [Runtime]. The zero value is ready to use and safe.
type Config struct {
	// CacheDir is the directory of the on-disk compilation cache, shared by
	// every process that uses it. If empty, it is os.UserCacheDir()+"/agrun";
	// if that cannot be determined, no disk cache is used.
	CacheDir string
	// DisableCache turns the on-disk compilation cache off: every process
	// compiles modules again. Modules are still compiled once per process.
	DisableCache bool
	// DisablePrepare turns off the work around calls of a snapshotted
	// reactor tool that is done apart from the call (see Run): preparing
	// the next instance while a call runs, closing a call's instance after
	// Run returned, and reusing the instance of a call that ended clean
	// (no error, exit code 0, no mounts, no WASI call beyond stdio, clocks
	// and random; reuse.go), reset to the snapshot, for the next call.
	// Each call then makes and closes its own instance on its caller's
	// goroutine. The background work shortens a call when a CPU is idle
	// and reuse saves instantiating (docs/PERFORMANCE.md has the figures);
	// the background work is skipped when every CPU already runs a call.
	// It keeps instances ready (their memory) per tool in use: at most
	// GOMAXPROCS per tool and MaxInstances in all.
	DisablePrepare bool
	// Limits are the defaults for every call; a zero field means the package
	// default (see [Limits]).
	Limits Limits
	// MaxInstances bounds the guest instances running at once. Run calls
	// beyond it wait for a slot, or for their context to end. Instances
	// prepared ahead of their call (see DisablePrepare), which have not run
	// yet, are bounded separately by the same number. If zero,
	// 2*GOMAXPROCS.
	MaxInstances int
	// MaxModuleBytes refuses larger modules at Compile. If zero, 64 MiB.
	MaxModuleBytes int64
	// MaxMeteredCodeBytes refuses, at Compile, a module whose code
	// would be larger once metered (measured before anything is built:
	// metering grows a body up to about 24 times). Compiling keeps about
	// 20 bytes per byte of metered code (docs/SECURITY.md, "Compiling"),
	// so it bounds the memory of one compile. If zero, 32 MiB.
	MaxMeteredCodeBytes int64
	// MaxCompiles bounds the modules being compiled at once (checked,
	// metered and compiled by wazero: each up to the memory bound in
	// docs/SECURITY.md); Compile calls beyond it wait for a slot, or for
	// their context to end. A module already compiled, or being compiled
	// by another call, takes no slot. If zero, GOMAXPROCS, at most 4.
	MaxCompiles int
	// MaxTableElements is the largest table a module may declare as its
	// maximum (or, for a table without a maximum or with a larger one, as its
	// minimum, and then the code must contain no table.grow or table.fill).
	// If zero, 100,000.
	MaxTableElements uint32
	// MaxStackBytes bounds a call's guest call stack, estimated from the
	// frames of the functions it is in (parameters, locals and the deepest
	// operand stack of each, plus a fixed part; an upper bound of what
	// wazero keeps). A call going deeper ends with ErrTrap. The stack is
	// host memory outside Limits.MemoryBytes. If zero, 16 MiB; at most
	// 1 GiB. It is compiled into the module's code.
	MaxStackBytes int64
	// Logger receives what guests write with the agrun.log host function.
	// If nil, slog.Default().
	Logger *slog.Logger
}

// Limits bound one call. A zero field means the Runtime's default, whose
// zero fields mean the package defaults: 10 s, 64 MiB, 1 MiB, 64 KiB,
// 1 MiB and 64 MiB.
type Limits struct {
	// Timeout ends the call with ErrTimeout wherever the guest is, host
	// functions included.
	Timeout time.Duration
	// MemoryBytes caps the guest's linear memory (rounded down to whole
	// 64 KiB pages, at most 4 GiB). Growing past it ends the call with
	// ErrMemoryLimit.
	MemoryBytes int64
	// MaxStdout and MaxStderr cap what the guest writes; crossing a cap
	// ends the call with ErrOutputLimit at once.
	MaxStdout, MaxStderr int64
	// MaxStdin refuses larger inputs with ErrInputLimit before anything runs.
	MaxStdin int64
	// Fuel, if positive, is the call's deterministic CPU budget: the
	// guest is charged one unit per WebAssembly instruction it runs (in
	// stretches of straight-line code, paid before they run; bulk memory
	// and table instructions one more unit per 16 bytes or per element).
	// A call that needs more ends with ErrFuelExhausted (which wraps
	// ErrTimeout). The same call on the same input spends the same fuel,
	// whatever the machine's load. Zero means no fuel limit (Timeout
	// still applies).
	Fuel int64
	// MaxWriteBytes caps the bytes one call writes through its mounts, in
	// total across all of its writable mounts (data written, plus growth by
	// truncate; not freed by deleting or shrinking). Writes beyond it fail
	// in the guest with EIO (WASI preview 1 has no ENOSPC through wazero);
	// the call itself goes on.
	MaxWriteBytes int64
}

// withDefaults returns l with each zero field taken from d.
func (l Limits) withDefaults(d Limits) Limits {
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.MemoryBytes > maxMemoryBytes {
		l.MemoryBytes = maxMemoryBytes
	}
	if l.MaxStdout <= 0 {
		l.MaxStdout = d.MaxStdout
	}
	if l.MaxStderr <= 0 {
		l.MaxStderr = d.MaxStderr
	}
	if l.MaxStdin <= 0 {
		l.MaxStdin = d.MaxStdin
	}
	if l.MaxWriteBytes <= 0 {
		l.MaxWriteBytes = d.MaxWriteBytes
	}
	if l.Fuel <= 0 {
		l.Fuel = d.Fuel
	}
	return l
}

// Or returns l with each zero field taken from d, then from the package's
// defaults (DefaultTimeout, DefaultMemoryBytes, ...): the limits a call
// given l runs with on a runtime configured with d, as Runtime.Effective
// computes them, for a program that describes a grant without a Runtime.
func (l Limits) Or(d Limits) Limits { return l.withDefaults(d.withDefaults(packageLimits)) }

var packageLimits = Limits{
	Timeout:       DefaultTimeout,
	MemoryBytes:   DefaultMemoryBytes,
	MaxStdout:     DefaultMaxStdout,
	MaxStderr:     DefaultMaxStderr,
	MaxStdin:      DefaultMaxStdin,
	MaxWriteBytes: DefaultMaxWriteBytes,
}

// Input is what one call gives the guest.
type Input struct {
	// Stdin is the guest's whole standard input (at most MaxStdin bytes).
	Stdin []byte
	// Args is the guest's argv, exactly (argv[0] included). Nil means none.
	Args []string
	// Mounts are the host directories the guest sees. None by default.
	// Run fails (before the guest starts) if a host directory is missing
	// or a guest path is not absolute and clean, or is mounted twice.
	Mounts []Mount
	// Network grants agrun.http_request. Nil links a stub that answers
	// not_granted and makes the call fail with ErrNotGranted.
	Network *NetworkGrant
	// Limits for this call; a zero field means the Runtime's default.
	Limits Limits
	// Plugin, for a module that imports extism:host/env, makes the call an
	// Extism plug-in call (see [Plugin]): Stdin is the plug-in's input
	// (its WASI stdin is empty), its output is Output.Plugin. Run
	// refuses a plug-in without it, and it for any other module.
	Plugin *Plugin
	// Name labels the call in the Logger's records (attribute "name",
	// beside "module", the module's short hash): the guest's agrun.log
	// messages and, at debug level, the end of the stderr of a call that
	// failed. Empty: the hash only.
	Name string
}

// Mount makes a host directory visible to the guest.
type Mount struct {
	// Host is the host directory; it must exist.
	Host string
	// Guest is where the guest sees it: an absolute, clean path.
	Guest string
	// Writable lets the guest create, write, truncate, rename and link
	// inside the mount. Without it the mount is read-only.
	Writable bool
	// AllowDelete lets the guest unlink files, remove directories and
	// rename over existing entries. It needs Writable: Run refuses a mount
	// with AllowDelete alone.
	AllowDelete bool
}

// NetworkGrant lets the guest make HTTP requests through
// agrun.http_request.
type NetworkGrant struct {
	// AllowedHosts are the host names (compared case-insensitively) the
	// guest may reach. "host" allows every port of that host; "host:port"
	// only that port. IP literals are written the same way ("[::1]:8080").
	AllowedHosts []string
	// AllowPrivate lets allowed hosts resolve to loopback, private,
	// link-local, unique-local and other non-public addresses. Off by
	// default: such addresses are refused at dial time.
	AllowPrivate bool
	// MaxResponseBytes caps each response body. If zero, 4 MiB.
	MaxResponseBytes int64
	// MaxRequests caps the requests of one call. If zero, 16.
	MaxRequests int
}

// Effective returns the limits a call given l runs with on r: each zero
// field of l is r's default (Config.Limits, itself defaulted). It is
// what a description of a call's grant shows.
func (r *Runtime) Effective(l Limits) Limits { return l.withDefaults(r.cfg.Limits) }

// MaxCompiles returns how many modules r compiles at once
// (Config.MaxCompiles, its default applied), so that a caller can share
// them out (agrun serve: at most half to one tenant's uploads).
func (r *Runtime) MaxCompiles() int { return r.cfg.MaxCompiles }
