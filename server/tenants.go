package server

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/wasmtools"
)

// Tenants.
//
// A tenant is a party with its own tokens, untrusted by every other
// tenant. Each has its own registry: the operator's tools (those of
// Options.Registry when New is called) plus the tenant's uploads, so a
// lookup, a listing, a call or a run of one tenant never meets another
// tenant's tool, and a name is resolved in the caller's registry only.
// Its runs, their sessions (its own session.Files) and their approvals
// (its own table of runs in progress) are its own likewise: an object of
// another tenant is looked up where it does not exist, and answers what a
// missing one answers. Modules are stored once by content for every
// tenant; no answer depends on another tenant's modules (an upload's
// "unchanged" compares with the caller's own tool of that name, quotas
// count the caller's tools).
//
// Without Options.Tenants a server has one tenant, DefaultTenant, whose
// registry is Options.Registry itself, whose ceiling is Options.Uploads,
// and which has no quota of its own: the server of before tenants.

// DefaultTenant is the name of the one tenant of a server without
// Options.Tenants, and of the tools a data directory written by such a
// server holds.
const DefaultTenant = "default"

// Tenant is one tenant of a Server (Options.Tenants): its name, its
// bearer tokens, its quotas and the grant ceiling of its uploads. It is
// plain data.
type Tenant struct {
	// Name identifies the tenant in the data directory and the logs:
	// lower-case letters, digits, '_' and '-', starting with a letter or
	// digit, at most 64 bytes. "default" is the tenant whose tools a
	// server without tenants stored.
	Name string
	// Tokens are the tenant's bearer tokens (each at least
	// MinTokenLength bytes; a token belongs to one tenant). With
	// Options.AuthenticateTenant they must be empty.
	Tokens []string
	// Uploads is the grant ceiling of the tenant's uploaded tools,
	// intersected with what each manifest declares. The zero Grant
	// grants nothing. Its SHA256 is not used.
	Uploads wasmtools.Grant
	// MaxModules bounds the tools the tenant stores (429
	// quota_exceeded). Zero: only the server's MaxTools.
	MaxModules int
	// MaxStorage bounds the bytes of the tenant's stored modules (429
	// quota_exceeded). Zero: only the server's MaxStoreBytes.
	MaxStorage int64
	// MaxConcurrentCalls bounds the tenant's calls and runs in progress
	// at once (429 quota_exceeded, Retry-After). Zero: MaxCallsPerClient.
	MaxConcurrentCalls int
	// CallsPerMinute bounds the calls and runs the tenant starts per
	// minute, a token bucket with bursts of that many (429
	// quota_exceeded, Retry-After). Zero: no bound.
	CallsPerMinute int
}

var tenantNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

func validTenantName(name string) bool { return tenantNameRE.MatchString(name) }

// tenant is a Tenant as the Server holds it.
type tenant struct {
	name       string
	reg        *registry.Registry
	grant      wasmtools.Grant
	maxModules int
	maxStorage int64
	calls      *quota       // its calls and runs in progress; nil: no bound of its own
	rate       *rateLimiter // its calls and runs per minute; nil: no bound
	perMinute  int
	compiles   *quota // its uploads in progress; nil: no bound of its own
	// Its share of what the server's clients share, within which each of
	// its clients keeps its own (nil: none, the single tenant of a server
	// without Options.Tenants): the bytes of request bodies held in
	// memory, and uploads started per minute (all its tokens together).
	bodyBytes  *quota
	uploadRate *rateLimiter
	sessions   *session.Files
	usage      usageCounters // what it used since New (usage.go)
	shared     SharedStore   // its records in cluster mode; nil: the data directory

	liveMu sync.Mutex
	live   map[string]*liveRun // runs in progress, by session id (approvals.go)

	// Guarded by Server.mu.
	idx     index
	uploads map[string]*uploaded
	broken  map[string]error // stored tools that failed to restore
}

func newTenant(name string, reg *registry.Registry, grant wasmtools.Grant) *tenant {
	grant.AllowedHosts = slices.Clone(grant.AllowedHosts)
	grant.Mounts = slices.Clone(grant.Mounts)
	grant.SHA256 = ""
	return &tenant{
		name: name, reg: reg, grant: grant,
		live:    map[string]*liveRun{},
		idx:     index{Version: 1, Tools: map[string]indexEntry{}},
		uploads: map[string]*uploaded{},
		broken:  map[string]error{},
	}
}

// newTenants builds the tenants of opts: each with a registry holding the
// operator's tools, its quotas and its sessions folder.
func newTenants(opts Options, lim Limits, dataDir string) (map[string]*tenant, error) {
	out := map[string]*tenant{}
	for _, t := range opts.Tenants {
		if !validTenantName(t.Name) {
			return nil, fmt.Errorf("server.Options.Tenants: tenant name %q must match %s", t.Name, tenantNameRE)
		}
		if _, dup := out[t.Name]; dup {
			return nil, fmt.Errorf("server.Options.Tenants: tenant %q is listed twice", t.Name)
		}
		if t.MaxModules < 0 || t.MaxStorage < 0 || t.MaxConcurrentCalls < 0 || t.CallsPerMinute < 0 {
			return nil, fmt.Errorf("server.Options.Tenants: tenant %q: a quota is negative", t.Name)
		}
		var reg *registry.Registry
		if opts.NewRegistry != nil {
			reg = opts.NewRegistry()
		} else {
			reg = registry.New(registry.WithPermissionChecker(opts.Registry.Checker()))
		}
		for _, name := range opts.Registry.List() {
			if tool, ok := opts.Registry.Get(name); ok {
				if err := reg.Register(tool); err != nil {
					return nil, fmt.Errorf("tenant %q: %w", t.Name, err)
				}
			}
		}
		tn := newTenant(t.Name, reg, t.Uploads)
		tn.maxModules, tn.maxStorage = t.MaxModules, t.MaxStorage
		calls := orDefault(t.MaxConcurrentCalls, lim.MaxCallsPerClient)
		tn.calls = newQuota(int64(calls), int64(calls))
		tn.compiles = newQuota(int64(uploadShare(opts, lim)), int64(uploadShare(opts, lim)))
		bodies := max(lim.MaxBodyMemory/2, lim.MaxUpload) // as one client's: the others keep the rest
		tn.bodyBytes = newQuota(bodies, bodies)
		tn.uploadRate = newRateLimiter(lim.UploadsPerMinute)
		if t.CallsPerMinute > 0 {
			tn.rate, tn.perMinute = newRateLimiter(t.CallsPerMinute), t.CallsPerMinute
		}
		if dataDir != "" {
			dir := TenantSessionsDir(dataDir, t.Name)
			if t.Name == DefaultTenant && opts.Sessions != nil {
				tn.sessions = opts.Sessions
			} else {
				s, err := session.OpenFiles(dir)
				if err != nil {
					return nil, fmt.Errorf("tenant %q: %w", t.Name, err)
				}
				tn.sessions = s
			}
		}
		out[t.Name] = tn
	}
	return out, nil
}

// TenantSessionsDir is the folder of the data directory dataDir that
// holds tenant's run sessions, with their call records (`agrun audit
// --tenant` reads it): dataDir/sessions for DefaultTenant (where a
// server without tenants keeps them), dataDir/tenants/NAME/sessions for
// every other.
func TenantSessionsDir(dataDir, tenant string) string {
	if tenant == DefaultTenant {
		return filepath.Join(dataDir, "sessions")
	}
	return filepath.Join(dataDir, "tenants", tenant, "sessions")
}

// uploadShare is the uploads one tenant may have in progress at once:
// half of the server's, as one client's, and at most half of the
// modules the runtime compiles at once (each upload is compiled within
// its slot), so that one tenant's uploads never hold every compile and
// another tenant's upload does not wait behind them.
func uploadShare(opts Options, lim Limits) int {
	n := lim.MaxConcurrentUploads
	if opts.Runtime != nil {
		n = min(n, opts.Runtime.MaxCompiles())
	}
	return max(1, n/2)
}

// tenantCtx is the context key of the tenant the handler found when it
// authenticated the request.
type tenantCtx struct{}

// tenantOf is the tenant of an authenticated request (the default tenant
// of a server without tokens).
func (s *Server) tenantOf(r *http.Request) *tenant {
	if tn, ok := r.Context().Value(tenantCtx{}).(*tenant); ok {
		return tn
	}
	return s.def
}

// sortedTenants is every tenant, by name.
func (s *Server) sortedTenants() []*tenant {
	names := make([]string, 0, len(s.tenants))
	for n := range s.tenants {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]*tenant, len(names))
	for i, n := range names {
		out[i] = s.tenants[n]
	}
	return out
}

// takeRate spends one of tn's calls per minute, or answers 429
// quota_exceeded with the wait.
func (tn *tenant) takeRate(w http.ResponseWriter) error {
	if tn.rate == nil {
		return nil
	}
	if ok, wait := tn.rate.take(""); !ok {
		retryAfter(w, wait)
		return errorf(http.StatusTooManyRequests, KindQuotaExceeded, "this tenant's calls_per_minute (%d) is spent; try again", tn.perMinute)
	}
	return nil
}

// takeCall takes one of tn's slots of calls and runs in progress, or
// answers 429 quota_exceeded (Retry-After: 1).
func (tn *tenant) takeCall(w http.ResponseWriter) (release func(), err error) {
	if tn.calls == nil {
		return func() {}, nil
	}
	if ok, _ := tn.calls.take("", 1); !ok {
		retryAfter(w, time.Second)
		return nil, errorf(http.StatusTooManyRequests, KindQuotaExceeded, "this tenant has %d calls and runs in progress, its max_concurrent_calls; try again", tn.calls.total)
	}
	var once sync.Once
	return func() { once.Do(func() { tn.calls.give("", 1) }) }, nil
}

// takeUploadRate spends one of tn's uploads per minute (all its tokens
// together), or answers 429 rate_limited with the wait.
func (tn *tenant) takeUploadRate(w http.ResponseWriter, perMinute int) error {
	if tn.uploadRate == nil {
		return nil
	}
	if ok, wait := tn.uploadRate.take(""); !ok {
		retryAfter(w, wait)
		return errorf(http.StatusTooManyRequests, KindRateLimited, "at most %d uploads per minute for this tenant, all its tokens together", perMinute)
	}
	return nil
}

// takeUpload takes one of tn's slots of uploads in progress (uploadShare),
// or answers 429 busy (Retry-After: 1): one tenant's uploads never take
// every upload or compile slot.
func (tn *tenant) takeUpload(w http.ResponseWriter) (release func(), err error) {
	if tn.compiles == nil {
		return func() {}, nil
	}
	if ok, _ := tn.compiles.take("", 1); !ok {
		retryAfter(w, time.Second)
		return nil, errorf(http.StatusTooManyRequests, KindBusy, "this tenant has %d uploads in progress, its share of the server's; try again", tn.compiles.total)
	}
	var once sync.Once
	return func() { once.Do(func() { tn.compiles.give("", 1) }) }, nil
}

// checkQuota refuses an upload of size bytes called name that would take
// tn over its max_modules or max_storage. Server.mu must be held.
func (tn *tenant) checkQuota(name string, size int64) error {
	if _, stored := tn.idx.Tools[name]; !stored && tn.maxModules > 0 && len(tn.idx.Tools) >= tn.maxModules {
		return errorf(http.StatusTooManyRequests, KindQuotaExceeded, "this tenant stores %d tools, its max_modules; delete one first", tn.maxModules)
	}
	if tn.maxStorage <= 0 {
		return nil
	}
	var total int64
	for n, e := range tn.idx.Tools {
		if n != name {
			total += e.Size
		}
	}
	if total+size > tn.maxStorage {
		return errorf(http.StatusTooManyRequests, KindQuotaExceeded, "this tenant's modules would take %d bytes, over its max_storage of %d; delete a tool first", total+size, tn.maxStorage)
	}
	return nil
}
