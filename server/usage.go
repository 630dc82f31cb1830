package server

import (
	"net/http"
	"sync"
	"time"

	"github.com/agcore/agrun/registry"
)

// Usage is what one tenant has used of a Server: GET /v1/usage answers
// the caller's own, Server.Usage any tenant's (for the operator).
//
// Calls, runs, CPU and fuel are counted in memory from Since, when the
// Server was made (New): a restart starts them again at zero, and in
// cluster mode each replica counts what it served. Modules and
// StorageBytes are what the tenant stores now (the index, which survives
// restarts). docs/API.md "GET /v1/usage" says why the counters are not
// persistent: the lasting record is the sessions' call records (`agrun
// audit --tenant`) and the metrics, which carry agrun.tenant.
type Usage struct {
	// Tenant is the tenant's name.
	Tenant string `json:"tenant"`
	// Since is when the counters below started.
	Since time.Time `json:"since"`
	// Calls are the tool calls the tenant made that reached a tool or
	// the registry's checks: its direct calls (POST
	// /v1/tools/{name}/call) and those of its runs' models, of the
	// operator's tools too. A request refused before it ran (429, 413,
	// ...) is no call.
	Calls int64 `json:"calls"`
	// FailedCalls are the Calls that ended with an error kind.
	FailedCalls int64 `json:"failed_calls"`
	// Runs are the runs (POST /v1/runs) the tenant started.
	Runs int64 `json:"runs"`
	// CPUSeconds is the CPU time the sandbox measured for the Calls of
	// WebAssembly tools (other tools report none).
	CPUSeconds float64 `json:"cpu_seconds"`
	// Fuel is the fuel those calls spent: WebAssembly instructions as
	// the sandbox's meter counts them (runtime.Limits.Fuel).
	Fuel int64 `json:"fuel"`
	// Modules is how many tools the tenant stores now.
	Modules int `json:"modules"`
	// StorageBytes is the size of their modules.
	StorageBytes int64 `json:"storage_bytes"`
	// Quotas are the tenant's own limits (0: none of its own).
	Quotas UsageQuotas `json:"quotas"`
}

// UsageQuotas are a tenant's own quotas as Usage shows them: Tenant's,
// with MaxConcurrentCalls the share it gets when its own is unset
// (MaxCallsPerClient). Zero: none of its own (the tenant of a server
// without Options.Tenants has none).
type UsageQuotas struct {
	MaxModules         int   `json:"max_modules"`
	MaxStorage         int64 `json:"max_storage"`
	MaxConcurrentCalls int   `json:"max_concurrent_calls"`
	CallsPerMinute     int   `json:"calls_per_minute"`
}

// usageCounters are a tenant's counters of Usage. They are safe for
// concurrent use.
type usageCounters struct {
	mu                  sync.Mutex
	calls, failed, runs int64
	cpu                 time.Duration
	fuel                int64
}

// call counts one tool call, failed or not, that reported audit.
func (u *usageCounters) call(failed bool, audit *registry.Audit) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	if failed {
		u.failed++
	}
	if audit != nil {
		u.cpu += max(audit.CPU, 0)
		u.fuel += max(audit.Fuel, 0)
	}
}

// run counts one run started.
func (u *usageCounters) run() {
	u.mu.Lock()
	u.runs++
	u.mu.Unlock()
}

// Usage returns what tenant has used (see Usage). The error is a
// not_found *registry.Error when the Server has no such tenant. It is
// safe for concurrent use.
func (s *Server) Usage(tenant string) (Usage, error) {
	tn := s.tenants[tenant]
	if tn == nil {
		return Usage{}, registry.NewError(registry.NotFound, tenant, nil)
	}
	return s.usageOf(tn), nil
}

// usageOf is tn's Usage. In cluster mode its storage is that of the
// local copy of the shared records (getUsage refreshes it first).
func (s *Server) usageOf(tn *tenant) Usage {
	u := Usage{Tenant: tn.name, Since: s.started, Quotas: UsageQuotas{
		MaxModules: tn.maxModules, MaxStorage: tn.maxStorage, CallsPerMinute: tn.perMinute,
	}}
	if tn.calls != nil {
		u.Quotas.MaxConcurrentCalls = int(tn.calls.total)
	}
	tn.usage.mu.Lock()
	u.Calls, u.FailedCalls, u.Runs = tn.usage.calls, tn.usage.failed, tn.usage.runs
	u.CPUSeconds, u.Fuel = tn.usage.cpu.Seconds(), tn.usage.fuel
	tn.usage.mu.Unlock()
	s.mu.Lock()
	for _, e := range tn.idx.Tools {
		u.Modules++
		u.StorageBytes += e.Size
	}
	s.mu.Unlock()
	return u
}

// getUsage is GET /v1/usage: the calling tenant's Usage, never another's
// (there is no parameter to name one).
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) {
	tn := s.tenantOf(r)
	if s.shared != nil {
		ctx, cancel := s.sharedContext(r)
		defer cancel()
		if err := s.refreshIndex(ctx, tn); err != nil {
			s.writeError(w, err)
			return
		}
	}
	s.writeJSON(w, http.StatusOK, s.usageOf(tn))
}
