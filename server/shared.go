package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// SharedStore is where the replicas of a cluster (agrun serve with
// [cluster], docs/API.md "Cluster mode") keep the uploaded tools they
// share: modules content-addressed by SHA-256, and one record per tool
// name naming its module. With Options.SharedStore set, a Server keeps no
// state of its own: it writes uploads there, reads the name's record at
// every call, and compiles each module it runs once (per name and
// module). cmd/agrun implements it over cluster.ModuleStore and
// cluster.ToolIndex; the server does not know the cluster package.
//
// Implementations must be safe for concurrent use by many goroutines and
// processes, and make a replaced record visible to every reader at once
// (an object store's whole-object writes do).
type SharedStore interface {
	// PutModule stores wasm under its SHA-256 (lowercase hex), which it
	// returns.
	PutModule(ctx context.Context, wasm []byte) (sha256 string, err error)
	// Module returns the module stored under sha256, checked against it.
	Module(ctx context.Context, sha256 string) ([]byte, error)
	// PutTool records name -> t, replacing the record there (last writer
	// wins).
	PutTool(ctx context.Context, name string, t StoredTool) error
	// Tool returns name's record: ErrNoStoredTool if there is none.
	Tool(ctx context.Context, name string) (StoredTool, error)
	// Tools returns every record by name; with damaged records, the
	// others and an error.
	Tools(ctx context.Context) (map[string]StoredTool, error)
	// DeleteTool removes name's record (ErrNoStoredTool if none); the
	// module may stay.
	DeleteTool(ctx context.Context, name string) error
}

// TenantSharedStore is a SharedStore that keeps the records of each
// tenant (Options.Tenants) apart: ForTenant(name) is a SharedStore of
// name's records only, so that two tenants may each have a tool "x" and
// neither lists, reads, replaces or deletes the other's. Modules may be
// shared by content (a digest says nothing of who uploaded it).
// ForTenant(DefaultTenant) must be the receiver's own records, those a
// server without tenants keeps. A server with Tenants in cluster mode
// needs one (New refuses a plain SharedStore).
type TenantSharedStore interface {
	SharedStore
	// ForTenant returns the store of tenant name's records (name is a
	// valid tenant name).
	ForTenant(name string) SharedStore
}

// StoredTool is a SharedStore's record of one uploaded tool.
type StoredTool struct {
	SHA256   string    // the module's SHA-256, lowercase hex
	Size     int64     // the module's size in bytes
	Uploaded time.Time // when it was stored under the name
}

// ErrNoStoredTool is returned (wrapped) by a SharedStore for a name it
// has no record of.
var ErrNoStoredTool = errors.New("no such tool in the shared store")

func (e StoredTool) entry() indexEntry {
	return indexEntry(e)
}

// sharedError is the answer to a failure of the shared store itself.
func sharedError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return errorf(http.StatusServiceUnavailable, KindUnavailable, "the shared tool store did not answer in time")
	}
	return errorf(http.StatusBadGateway, KindInternal, "the shared tool store: %v", err)
}

// sharedContext bounds a request's work with the shared store (and the
// loads it brings) by CallTimeout, as a call is: a store that hangs
// does not hold a request for ever.
func (s *Server) sharedContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.limits.CallTimeout)
}

// nameKey is name as a key of what the Server keeps for every tenant
// (brokenSHA): tenants' names are their own.
func (tn *tenant) nameKey(name string) string { return tn.name + "\x00" + name }

// operatorTool reports whether name is a tool of the operator's in tn's
// registry (in the registry and not an upload). s.mu must be held.
func (s *Server) operatorTool(tn *tenant, name string) bool {
	t, ok := tn.reg.Get(name)
	if !ok {
		return false
	}
	u := tn.uploads[name]
	return u == nil || registry.Tool(u) != t
}

// syncTool brings the uploaded tool called name in line with its record
// in the shared store: loaded (compiled once) and registered if there is
// one, gone if not. A name of the operator's tools is left alone.
func (s *Server) syncTool(ctx context.Context, tn *tenant, name string) error {
	s.mu.Lock()
	op := s.operatorTool(tn, name)
	s.mu.Unlock()
	if op || !registry.ValidName(name) {
		return nil
	}
	e, err := tn.shared.Tool(ctx, name)
	if errors.Is(err, ErrNoStoredTool) {
		s.dropLocal(tn, name)
		return nil
	}
	if err != nil {
		return sharedError(err)
	}
	if err := s.ensure(ctx, tn, name, e.entry()); err != nil {
		return sharedError(err)
	}
	return nil
}

// syncAll brings every uploaded tool in line with the shared store, a few
// at a time (GET /v1/tools).
func (s *Server) syncAll(ctx context.Context, tn *tenant) error {
	recs, err := tn.shared.Tools(ctx)
	if err != nil {
		return sharedError(err)
	}
	s.mu.Lock()
	var gone []string
	for name := range tn.uploads {
		if _, ok := recs[name]; !ok {
			gone = append(gone, name)
		}
	}
	for name := range tn.broken {
		if _, ok := recs[name]; !ok {
			gone = append(gone, name)
		}
	}
	s.mu.Unlock()
	for _, name := range gone {
		s.dropLocal(tn, name)
	}
	sem := make(chan struct{}, max(1, goruntime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for name, e := range recs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = s.ensure(ctx, tn, name, e.entry()) // a failure is listed as the tool's error
		})
	}
	wg.Wait()
	return nil
}

// refreshIndex replaces the local copy of the records (tn.idx: what
// checkName counts) with the shared store's.
func (s *Server) refreshIndex(ctx context.Context, tn *tenant) error {
	recs, err := tn.shared.Tools(ctx)
	if err != nil {
		return sharedError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tn.idx = index{Version: 1, Tools: make(map[string]indexEntry, len(recs))}
	for name, e := range recs {
		tn.idx.Tools[name] = e.entry()
	}
	return nil
}

// refreshShared reads the records before an upload of the module sha
// called name (refreshIndex), and loads the tool if its record already
// names that module, so that the upload is answered unchanged; a module
// missing from the store is stored again by the upload.
//
// With several tenants, every tenant's records are read: the server's
// bounds (MaxTools, MaxStoreBytes) count them all, and the tenant's
// quotas its own, as they are in the shared store now.
func (s *Server) refreshShared(r *http.Request, tn *tenant, name, sha string) error {
	ctx, cancel := s.sharedContext(r)
	defer cancel()
	for _, other := range s.sortedTenants() {
		if err := s.refreshIndex(ctx, other); err != nil {
			return err
		}
	}
	s.mu.Lock()
	e, ok := tn.idx.Tools[name]
	s.mu.Unlock()
	if ok && e.SHA256 == sha {
		_ = s.ensure(ctx, tn, name, e)
	}
	return nil
}

// dropLocal forgets the uploaded tool called name on this replica (its
// record is gone): unregistered, closed after its calls in flight.
func (s *Server) dropLocal(tn *tenant, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := tn.uploads[name]; u != nil {
		if cur, ok := tn.reg.Get(name); ok && cur == registry.Tool(u) {
			tn.reg.Unregister(name)
		}
		delete(tn.uploads, name)
		u.retire()
	}
	delete(tn.idx.Tools, name)
	delete(tn.broken, name)
	delete(s.brokenSHA, tn.nameKey(name))
}

// ensure makes the tool registered as name the module of e, loading it
// unless this replica already runs that module under that name. A module
// that does not load is kept as broken (listed with its error, a call
// is not_found with it), as a stored tool that fails to restore is; the
// module this replica ran under the name before is dropped either way
// (its record names another). The error returned is a failure to fetch
// the module (the store's, retried at the next request).
func (s *Server) ensure(ctx context.Context, tn *tenant, name string, e indexEntry) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	tn.idx.Tools[name] = e
	if u := tn.uploads[name]; u != nil && u.entry.SHA256 == e.SHA256 {
		s.mu.Unlock()
		return nil
	}
	if s.operatorTool(tn, name) {
		// The operator's tool keeps the name here (a replica with
		// another agrun.toml stored it); as when a stored tool fails to
		// restore on one machine.
		tn.broken[name] = fmt.Errorf("a tool configured by the operator is now called %q", name)
		s.mu.Unlock()
		return nil
	}
	if berr, ok := s.brokenSHA[tn.nameKey(name)]; ok && berr == e.SHA256 {
		s.mu.Unlock()
		return nil // already tried: the same module fails the same way
	}
	s.mu.Unlock()
	// One load per name and module at a time; the others wait for it.
	key := tn.name + "\x00" + name + "\x00" + e.SHA256
	s.loadMu.Lock()
	ld, busy := s.loading[key]
	if !busy {
		ld = &load{done: make(chan struct{})}
		s.loading[key] = ld
	}
	s.loadMu.Unlock()
	if busy {
		select {
		case <-ld.done:
			return ld.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ld.err = s.install(ctx, tn, name, e)
	s.loadMu.Lock()
	delete(s.loading, key)
	s.loadMu.Unlock()
	close(ld.done)
	return ld.err
}

// load is a load in progress (ensure): err is set before done is closed.
type load struct {
	done chan struct{}
	err  error
}

// install loads the module of e and registers it as name (ensure).
func (s *Server) install(ctx context.Context, tn *tenant, name string, e indexEntry) error {
	u, err, lasting := s.loadShared(ctx, tn, name, e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		if u != nil {
			_ = u.Tool.Close(context.Background())
		}
		return nil
	}
	if err == nil {
		old := tn.uploads[name]
		if old != nil {
			_, err = tn.reg.Replace(u)
		} else {
			err = tn.reg.Register(u)
		}
		if err != nil {
			_ = u.Tool.Close(context.Background())
			lasting = true
		} else {
			tn.uploads[name] = u
			delete(tn.broken, name)
			delete(s.brokenSHA, tn.nameKey(name))
			if old != nil {
				old.retire()
			}
			return nil
		}
	}
	if old := tn.uploads[name]; old != nil {
		if cur, ok := tn.reg.Get(name); ok && cur == registry.Tool(old) {
			tn.reg.Unregister(name)
		}
		delete(tn.uploads, name)
		old.retire()
	}
	tn.broken[name] = err
	if !lasting {
		return err
	}
	s.brokenSHA[tn.nameKey(name)] = e.SHA256
	s.log.Warn("shared tool not loaded", "tool", name, "sha256", e.SHA256, "error", err)
	return nil
}

// loadShared fetches the module of e (checked against its digest) and
// compiles it with the uploads' grant. lasting reports a failure that
// the same module will meet again (the sandbox refuses it, its name is
// wrong): that module is not tried again on this replica, while a
// failure to fetch it is retried at the next request.
func (s *Server) loadShared(ctx context.Context, tn *tenant, name string, e indexEntry) (_ *uploaded, _ error, lasting bool) {
	wasm, err := tn.shared.Module(ctx, e.SHA256)
	if err != nil {
		return nil, fmt.Errorf("fetching its module: %w", err), false
	}
	t, err := wasmtools.Load(runtime.WithOneCompileSlot(ctx), s.rt, wasm, tn.grant)
	if err != nil {
		return nil, err, ctx.Err() == nil
	}
	if t.Name() != name {
		t.Close(ctx)
		return nil, fmt.Errorf("the stored module is named %q, not %q", t.Name(), name), true
	}
	return newUploaded(t, e), nil, false
}

// commitShared stores u's module and then its record in the shared store
// (a reader never finds a record without its module), then registers it
// here. Conflicts are checked against the records as read at the start
// of the upload: two replicas uploading one name at the same moment both
// succeed, the last record written wins.
func (s *Server) commitShared(ctx context.Context, tn *tenant, u *uploaded, wasm []byte, replace bool) (replaced bool, err error) {
	name := u.Name()
	s.mu.Lock()
	if err := s.checkName(tn, name, u.entry.SHA256, u.entry.Size, replace); err != nil {
		s.mu.Unlock()
		return false, err
	}
	_, hadPrev := tn.idx.Tools[name]
	s.mu.Unlock()
	if _, err := tn.shared.PutModule(ctx, wasm); err != nil {
		return false, sharedError(err)
	}
	rec := StoredTool{SHA256: u.entry.SHA256, Size: u.entry.Size, Uploaded: u.entry.Uploaded}
	if err := tn.shared.PutTool(ctx, name, rec); err != nil {
		return false, sharedError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, errorf(http.StatusServiceUnavailable, KindUnavailable, "the server is closing")
	}
	old := tn.uploads[name]
	if old != nil {
		_, err = tn.reg.Replace(u)
	} else {
		err = tn.reg.Register(u)
	}
	if err != nil {
		// The record is written; this replica cannot serve it (another
		// one may). Say so as the local path does.
		tn.broken[name] = err
		s.brokenSHA[tn.nameKey(name)] = u.entry.SHA256
		if errors.Is(err, registry.ErrDuplicate) {
			return false, errorf(http.StatusForbidden, KindForbidden, "%q is a tool configured by the operator; it cannot be replaced through the API", name)
		}
		return false, errorf(http.StatusUnprocessableEntity, KindInvalidManifest, "%v", err)
	}
	tn.idx.Tools[name] = u.entry
	tn.uploads[name] = u
	delete(tn.broken, name)
	delete(s.brokenSHA, tn.nameKey(name))
	if old != nil {
		old.retire()
	}
	return hadPrev, nil
}

// removeShared is DELETE /v1/tools/{name} in cluster mode: the record goes
// (the module stays in the store), and this replica's copy with it; the
// others find the record gone at their next call.
func (s *Server) removeShared(ctx context.Context, tn *tenant, name string) error {
	if !registry.ValidName(name) {
		return errorf(http.StatusNotFound, Kind(registry.NotFound), "no tool named %q", textsafe.Clean(name, 80))
	}
	err := tn.shared.DeleteTool(ctx, name)
	if errors.Is(err, ErrNoStoredTool) {
		s.mu.Lock()
		op := s.operatorTool(tn, name)
		s.mu.Unlock()
		s.dropLocal(tn, name)
		if op {
			return errorf(http.StatusForbidden, KindForbidden, "%q is a tool configured by the operator; it cannot be deleted through the API", name)
		}
		return errorf(http.StatusNotFound, Kind(registry.NotFound), "no tool named %q", textsafe.Clean(name, 80))
	}
	if err != nil {
		return sharedError(err)
	}
	s.dropLocal(tn, name)
	return nil
}

// notSupported answers the run endpoints in cluster mode without
// Options.Runs.
func (s *Server) notSupported(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, errorf(http.StatusNotImplemented, KindNotSupported, "runs are not served by this server in cluster mode: start them with `agrun run` on the cluster (docs/SCALING.md)"))
}
