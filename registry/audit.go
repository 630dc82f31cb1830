package registry

import (
	"context"
	"encoding/json"
	"time"
)

// Audit is what one call of a tool did, as the tool's host saw it: for a
// WebAssembly tool the sandbox's record (CPU, memory, bytes, files per
// mount, HTTP requests), for an MCP tool what crosses the connection. It
// is data for operators (`agrun audit`, traces), never shown to the model.
// Strings in it come from the tool and are cleaned and cut by the tool
// that reports it (wasmtools, mcp). The zero value means nothing was
// recorded.
type Audit struct {
	// Source is "wasm" or "mcp".
	Source string `json:"source"`
	// CPU is the CPU time of the thread that ran the guest (WASM, Linux).
	CPU time.Duration `json:"cpu_ns,omitempty"`
	// MemoryPeak is the guest's linear memory when it ended, in bytes.
	MemoryPeak int64 `json:"memory_peak,omitempty"`
	// BytesIn is what the tool read of its arguments (a WASM guest's
	// stdin) or was sent (MCP); BytesOut what it wrote as its result
	// (stdout, past the cap included) or sent back; StderrBytes a WASM
	// guest's stderr.
	BytesIn     int64 `json:"bytes_in"`
	BytesOut    int64 `json:"bytes_out"`
	StderrBytes int64 `json:"stderr_bytes,omitempty"`
	// HostCalls counts a WASM guest's calls of agrun host functions.
	HostCalls int64 `json:"host_calls,omitempty"`
	// Fuel is what a WASM guest's code spent (runtime.Limits.Fuel units).
	Fuel int64 `json:"fuel,omitempty"`
	// Mounts are what a WASM guest did under each mount.
	Mounts []MountAudit `json:"mounts,omitempty"`
	// Requests are a WASM guest's HTTP requests (the first 64; then
	// MoreRequests counts).
	Requests     []RequestAudit `json:"requests,omitempty"`
	MoreRequests int            `json:"more_requests,omitempty"`
}

// MountAudit is what a guest did under one mount: the first paths it
// touched (Paths, then MorePaths counts distinct further ones) and totals.
type MountAudit struct {
	Guest        string      `json:"guest"`
	Host         string      `json:"host,omitempty"` // the host directory, as configured
	Writable     bool        `json:"writable"`
	Paths        []PathAudit `json:"paths,omitempty"`
	MorePaths    int         `json:"more_paths,omitempty"`
	Opened       int64       `json:"opened"`
	ReadBytes    int64       `json:"read_bytes"`
	WrittenBytes int64       `json:"written_bytes"`
	Refused      int64       `json:"refused,omitempty"`
}

// PathAudit is what a guest did to one guest path: Ops among "open",
// "read", "write", "create", "rename_from", "rename_to", "delete",
// "truncate", "list" and "refused".
type PathAudit struct {
	Path         string   `json:"path"`
	Ops          []string `json:"ops"`
	ReadBytes    int64    `json:"read_bytes,omitempty"`
	WrittenBytes int64    `json:"written_bytes,omitempty"`
}

// RequestAudit is one HTTP request a guest made (never headers or
// bodies): Error is the host's refusal or failure code, if any.
type RequestAudit struct {
	Method   string        `json:"method"`
	Host     string        `json:"host"`
	Status   int           `json:"status,omitempty"`
	Error    string        `json:"error,omitempty"`
	Bytes    int64         `json:"bytes,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// An AuditedTool is a Tool that reports what each call did. The Registry
// calls ExecuteAudited instead of Execute and puts the Audit in the
// Invocation; the result and error mean what Execute's do. The Audit may
// be nil (nothing recorded), and is set for failed calls too when the
// tool ran.
type AuditedTool interface {
	Tool
	ExecuteAudited(ctx context.Context, args json.RawMessage) (json.RawMessage, *Audit, error)
}
