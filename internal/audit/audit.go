// Package audit is what one tool call did, as its host saw it: the one
// set of audit types that the sandbox fills (runtime.Audit), the
// registry carries (registry.Audit, Invocation.Audit), session files
// store (call records), `agrun audit` and the HTTP API report, and
// audit/lpriv turns into a least-privilege grant. runtime and registry
// name these types through aliases (runtime.Audit, registry.Audit: what
// an embedder uses); this package imports nothing but the standard
// library, a ground-floor leaf of internal/ like textsafe (design.md's
// graph gives runtime and registry no other project arrow;
// internal/testing/archtest TestLeafPackages).
//
// A Call never holds the call's arguments, result, headers or file
// contents. Its strings (paths, hosts, methods) are the guest's words:
// the sandbox cuts them, wasmtools cleans them (internal/textsafe) before
// they leave the tool.
//
// The name Call says what one value is: the audit of one call. The JSON
// names are those session files have always stored, so old files read.
package audit

import "time"

// Call is what one call's tool did.
type Call struct {
	// Source is "wasm" or "mcp" (set by the tool, not the sandbox).
	Source string `json:"source"`
	// CPU is the CPU time of the thread that ran the guest, instantiation
	// included (WASM, Linux; zero elsewhere). Host functions (an HTTP
	// request) count while they compute, not while they wait.
	CPU time.Duration `json:"cpu_ns,omitempty"`
	// MemoryPeak is the guest's linear memory when it ended (a memory
	// only grows), in bytes.
	MemoryPeak int64 `json:"memory_peak,omitempty"`
	// BytesIn is what the tool read of its arguments (a WASM guest's
	// stdin) or was sent (MCP); BytesOut what it wrote as its result
	// (stdout, past the cap included) or sent back; StderrBytes a WASM
	// guest's stderr, past the cap included.
	BytesIn     int64 `json:"bytes_in"`
	BytesOut    int64 `json:"bytes_out"`
	StderrBytes int64 `json:"stderr_bytes,omitempty"`
	// HostCalls counts a WASM guest's calls of agrun host functions (log,
	// http_request, http_response).
	HostCalls int64 `json:"host_calls,omitempty"`
	// Fuel is what a WASM guest's code spent (runtime.Limits.Fuel units).
	Fuel int64 `json:"fuel,omitempty"`
	// Mounts are what a WASM guest did under each mount, in the call's
	// mount order.
	Mounts []Mount `json:"mounts,omitempty"`
	// Requests are a WASM guest's HTTP requests, in order, the first
	// runtime.MaxAuditRequests of them; MoreRequests counts the rest.
	Requests     []Request `json:"requests,omitempty"`
	MoreRequests int       `json:"more_requests,omitempty"`
}

// Mount is what a guest did under one mount.
type Mount struct {
	Guest string `json:"guest"`
	// Host is the host directory, as configured (set by the tool).
	Host     string `json:"host,omitempty"`
	Writable bool   `json:"writable"`
	// Paths are the first distinct paths touched (guest paths, under
	// Guest), in the order first touched; MorePaths counts further
	// distinct paths (exactly up to 4096, then a lower bound).
	Paths     []Path `json:"paths,omitempty"`
	MorePaths int    `json:"more_paths,omitempty"`
	// Totals over every path.
	Opened       int64 `json:"opened"`
	ReadBytes    int64 `json:"read_bytes"`
	WrittenBytes int64 `json:"written_bytes"`
	// Refused counts operations the mount's mode refused (a write on a
	// read-only mount, a delete without delete rights).
	Refused int64 `json:"refused,omitempty"`
}

// Path is what a guest did to one path: Ops among "open", "read",
// "write", "create", "rename_from", "rename_to", "delete", "truncate",
// "list" and "refused".
type Path struct {
	Path         string   `json:"path"`
	Ops          []string `json:"ops"`
	ReadBytes    int64    `json:"read_bytes,omitempty"`
	WrittenBytes int64    `json:"written_bytes,omitempty"`
}

// Request is one HTTP request of a guest: never its headers or bodies.
type Request struct {
	Method string `json:"method"`
	// Host is the URL's host (and port, if given); empty if the request
	// could not be parsed.
	Host string `json:"host"`
	// Status is the response's status code; 0 if there was no response.
	Status int `json:"status,omitempty"`
	// Error is the host's code when it refused or failed the request
	// ("not_granted", "forbidden", "bad_request", "too_many_requests",
	// "too_large", "network", "timeout").
	Error string `json:"error,omitempty"`
	// Bytes is the response body's size.
	Bytes    int64         `json:"bytes,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}
