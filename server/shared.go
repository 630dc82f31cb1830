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

// operatorTool reports whether name is a tool of the operator's (in the
// registry and not an upload). s.mu must be held.
func (s *Server) operatorTool(name string) bool {
	t, ok := s.def.reg.Get(name)
	if !ok {
		return false
	}
	u := s.def.uploads[name]
	return u == nil || registry.Tool(u) != t
}

// syncTool brings the uploaded tool called name in line with its record
// in the shared store: loaded (compiled once) and registered if there is
// one, gone if not. A name of the operator's tools is left alone.
func (s *Server) syncTool(ctx context.Context, name string) error {
	s.mu.Lock()
	op := s.operatorTool(name)
	s.mu.Unlock()
	if op || !registry.ValidName(name) {
		return nil
	}
	e, err := s.shared.Tool(ctx, name)
	if errors.Is(err, ErrNoStoredTool) {
		s.dropLocal(name)
		return nil
	}
	if err != nil {
		return sharedError(err)
	}
	if err := s.ensure(ctx, name, e.entry()); err != nil {
		return sharedError(err)
	}
	return nil
}

// syncAll brings every uploaded tool in line with the shared store, a few
// at a time (GET /v1/tools).
func (s *Server) syncAll(ctx context.Context) error {
	recs, err := s.shared.Tools(ctx)
	if err != nil {
		return sharedError(err)
	}
	s.mu.Lock()
	var gone []string
	for name := range s.def.uploads {
		if _, ok := recs[name]; !ok {
			gone = append(gone, name)
		}
	}
	for name := range s.def.broken {
		if _, ok := recs[name]; !ok {
			gone = append(gone, name)
		}
	}
	s.mu.Unlock()
	for _, name := range gone {
		s.dropLocal(name)
	}
	sem := make(chan struct{}, max(1, goruntime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for name, e := range recs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = s.ensure(ctx, name, e.entry()) // a failure is listed as the tool's error
		})
	}
	wg.Wait()
	return nil
}

// refreshIndex replaces the local copy of the records (s.def.idx: what
// checkName counts) with the shared store's.
func (s *Server) refreshIndex(ctx context.Context) error {
	recs, err := s.shared.Tools(ctx)
	if err != nil {
		return sharedError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.def.idx = index{Version: 1, Tools: make(map[string]indexEntry, len(recs))}
	for name, e := range recs {
		s.def.idx.Tools[name] = e.entry()
	}
	return nil
}

// refreshShared reads the records before an upload of the module sha
// called name (refreshIndex), and loads the tool if its record already
// names that module, so that the upload is answered unchanged; a module
// missing from the store is stored again by the upload.
func (s *Server) refreshShared(r *http.Request, name, sha string) error {
	ctx, cancel := s.sharedContext(r)
	defer cancel()
	if err := s.refreshIndex(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	e, ok := s.def.idx.Tools[name]
	s.mu.Unlock()
	if ok && e.SHA256 == sha {
		_ = s.ensure(ctx, name, e)
	}
	return nil
}

// dropLocal forgets the uploaded tool called name on this replica (its
// record is gone): unregistered, closed after its calls in flight.
func (s *Server) dropLocal(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.def.uploads[name]; u != nil {
		if cur, ok := s.def.reg.Get(name); ok && cur == registry.Tool(u) {
			s.def.reg.Unregister(name)
		}
		delete(s.def.uploads, name)
		u.retire()
	}
	delete(s.def.idx.Tools, name)
	delete(s.def.broken, name)
	delete(s.brokenSHA, name)
}

// ensure makes the tool registered as name the module of e, loading it
// unless this replica already runs that module under that name. A module
// that does not load is kept as broken (listed with its error, a call
// is not_found with it), as a stored tool that fails to restore is; the
// module this replica ran under the name before is dropped either way
// (its record names another). The error returned is a failure to fetch
// the module (the store's, retried at the next request).
func (s *Server) ensure(ctx context.Context, name string, e indexEntry) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.def.idx.Tools[name] = e
	if u := s.def.uploads[name]; u != nil && u.entry.SHA256 == e.SHA256 {
		s.mu.Unlock()
		return nil
	}
	if s.operatorTool(name) {
		// The operator's tool keeps the name here (a replica with
		// another agrun.toml stored it); as when a stored tool fails to
		// restore on one machine.
		s.def.broken[name] = fmt.Errorf("a tool configured by the operator is now called %q", name)
		s.mu.Unlock()
		return nil
	}
	if berr, ok := s.brokenSHA[name]; ok && berr == e.SHA256 {
		s.mu.Unlock()
		return nil // already tried: the same module fails the same way
	}
	s.mu.Unlock()
	// One load per name and module at a time; the others wait for it.
	key := name + "\x00" + e.SHA256
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
	ld.err = s.install(ctx, name, e)
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
func (s *Server) install(ctx context.Context, name string, e indexEntry) error {
	u, err, lasting := s.loadShared(ctx, name, e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		if u != nil {
			_ = u.Tool.Close(context.Background())
		}
		return nil
	}
	if err == nil {
		old := s.def.uploads[name]
		if old != nil {
			_, err = s.def.reg.Replace(u)
		} else {
			err = s.def.reg.Register(u)
		}
		if err != nil {
			_ = u.Tool.Close(context.Background())
			lasting = true
		} else {
			s.def.uploads[name] = u
			delete(s.def.broken, name)
			delete(s.brokenSHA, name)
			if old != nil {
				old.retire()
			}
			return nil
		}
	}
	if old := s.def.uploads[name]; old != nil {
		if cur, ok := s.def.reg.Get(name); ok && cur == registry.Tool(old) {
			s.def.reg.Unregister(name)
		}
		delete(s.def.uploads, name)
		old.retire()
	}
	s.def.broken[name] = err
	if !lasting {
		return err
	}
	s.brokenSHA[name] = e.SHA256
	s.log.Warn("shared tool not loaded", "tool", name, "sha256", e.SHA256, "error", err)
	return nil
}

// loadShared fetches the module of e (checked against its digest) and
// compiles it with the uploads' grant. lasting reports a failure that
// the same module will meet again (the sandbox refuses it, its name is
// wrong): that module is not tried again on this replica, while a
// failure to fetch it is retried at the next request.
func (s *Server) loadShared(ctx context.Context, name string, e indexEntry) (_ *uploaded, _ error, lasting bool) {
	wasm, err := s.shared.Module(ctx, e.SHA256)
	if err != nil {
		return nil, fmt.Errorf("fetching its module: %w", err), false
	}
	t, err := wasmtools.Load(ctx, s.rt, wasm, s.def.grant)
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
func (s *Server) commitShared(ctx context.Context, u *uploaded, wasm []byte, replace bool) (replaced bool, err error) {
	name := u.Name()
	s.mu.Lock()
	if err := s.checkName(s.def, name, u.entry.SHA256, u.entry.Size, replace); err != nil {
		s.mu.Unlock()
		return false, err
	}
	_, hadPrev := s.def.idx.Tools[name]
	s.mu.Unlock()
	if _, err := s.shared.PutModule(ctx, wasm); err != nil {
		return false, sharedError(err)
	}
	rec := StoredTool{SHA256: u.entry.SHA256, Size: u.entry.Size, Uploaded: u.entry.Uploaded}
	if err := s.shared.PutTool(ctx, name, rec); err != nil {
		return false, sharedError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, errorf(http.StatusServiceUnavailable, KindUnavailable, "the server is closing")
	}
	old := s.def.uploads[name]
	if old != nil {
		_, err = s.def.reg.Replace(u)
	} else {
		err = s.def.reg.Register(u)
	}
	if err != nil {
		// The record is written; this replica cannot serve it (another
		// one may). Say so as the local path does.
		s.def.broken[name] = err
		s.brokenSHA[name] = u.entry.SHA256
		if errors.Is(err, registry.ErrDuplicate) {
			return false, errorf(http.StatusForbidden, KindForbidden, "%q is a tool configured by the operator; it cannot be replaced through the API", name)
		}
		return false, errorf(http.StatusUnprocessableEntity, KindInvalidManifest, "%v", err)
	}
	s.def.idx.Tools[name] = u.entry
	s.def.uploads[name] = u
	delete(s.def.broken, name)
	delete(s.brokenSHA, name)
	if old != nil {
		old.retire()
	}
	return hadPrev, nil
}

// removeShared is DELETE /v1/tools/{name} in cluster mode: the record goes
// (the module stays in the store), and this replica's copy with it; the
// others find the record gone at their next call.
func (s *Server) removeShared(ctx context.Context, name string) error {
	if !registry.ValidName(name) {
		return errorf(http.StatusNotFound, Kind(registry.NotFound), "no tool named %q", textsafe.Clean(name, 80))
	}
	err := s.shared.DeleteTool(ctx, name)
	if errors.Is(err, ErrNoStoredTool) {
		s.mu.Lock()
		op := s.operatorTool(name)
		s.mu.Unlock()
		s.dropLocal(name)
		if op {
			return errorf(http.StatusForbidden, KindForbidden, "%q is a tool configured by the operator; it cannot be deleted through the API", name)
		}
		return errorf(http.StatusNotFound, Kind(registry.NotFound), "no tool named %q", textsafe.Clean(name, 80))
	}
	if err != nil {
		return sharedError(err)
	}
	s.dropLocal(name)
	return nil
}

// notSupported answers the run endpoints in cluster mode.
func (s *Server) notSupported(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, errorf(http.StatusNotImplemented, KindNotSupported, "runs are not served in cluster mode yet: start them with `agrun run` on the cluster (docs/SCALING.md)"))
}
