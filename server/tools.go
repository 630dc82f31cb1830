package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/telemetry"
	"github.com/agcore/agrun/wasmtools"
	"go.opentelemetry.io/otel/propagation"
)

// Sources of a tool in ToolInfo.
const (
	SourceUpload = "upload" // uploaded through the API
	SourceConfig = "config" // configured by the operator (agrun.toml)
)

// ToolInfo describes a tool in the API's answers.
type ToolInfo struct {
	Name        string `json:"name"`
	Source      string `json:"source"`
	Description string `json:"description,omitempty"`
	Version     string `json:"version,omitempty"`
	// SHA256 and Size describe the module of a WASM tool.
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// Uploaded is when an uploaded tool was stored.
	Uploaded *time.Time `json:"uploaded,omitempty"`
	// Declared are the permissions the tool declares.
	Declared []string `json:"declared"`
	// Granted are the declared permissions the sandbox actually gives a
	// WASM tool (for an upload: what [serve.uploads] grants); null for
	// tools that are not WASM modules.
	Granted []string `json:"granted"`
	// AllowedHosts are the hosts a tool granted "network" may reach.
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	// Runnable reports whether the permission policy lets the tool run;
	// Denied says why not.
	Runnable bool   `json:"runnable"`
	Denied   string `json:"denied,omitempty"`
	// Notes explain each declared permission that is not granted.
	Notes []string `json:"notes,omitempty"`
	// Error is why a stored tool could not be restored (it cannot be called).
	Error string `json:"error,omitempty"`
	// Parameters is the JSON Schema of the arguments (GET /v1/tools/{name}
	// and the upload answer only).
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// Replaced is set in an upload's answer when it replaced a tool.
	Replaced bool `json:"replaced,omitempty"`
	// Unchanged is set in an upload's answer when the same module was
	// already stored under that name (nothing was done).
	Unchanged bool `json:"unchanged,omitempty"`
}

// upload is POST /v1/tools[?replace=true]: the body is a .wasm module, or
// {"oci": REF} naming one in an allowed registry.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	tn := s.tenantOf(r)
	if err := tn.takeUploadRate(w, s.limits.UploadsPerMinute); err != nil {
		s.writeError(w, err)
		return
	}
	if ok, wait := s.rate.take(s.clientKey(r)); !ok {
		retryAfter(w, wait)
		s.writeError(w, errorf(http.StatusTooManyRequests, KindRateLimited, "at most %d uploads per minute per token", s.limits.UploadsPerMinute))
		return
	}
	info, err := s.doUpload(w, r, tn)
	if err != nil {
		s.writeError(w, err)
		return
	}
	status := http.StatusCreated
	if info.Unchanged {
		status = http.StatusOK
	} else {
		w.Header().Set("Location", s.basePath+"/v1/tools/"+info.Name)
	}
	s.writeJSON(w, status, info)
}

func (s *Server) doUpload(w http.ResponseWriter, r *http.Request, tn *tenant) (*ToolInfo, error) {
	media := []string{"application/wasm", "application/octet-stream"}
	if s.oci != nil {
		media = append(media, "application/json") // {"oci": REF} (oci.go)
	}
	if err := requireMedia(r, media...); err != nil {
		return nil, err
	}
	replace := false
	if v := r.URL.Query().Get("replace"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, KindBadRequest, "replace=%q: want true or false", v)
		}
		replace = b
	}
	b, err := s.readBody(w, r, s.limits.MaxUpload)
	if err != nil {
		return nil, err
	}
	defer b.release()
	own, err := tn.takeUpload(w)
	if err != nil {
		return nil, err
	}
	defer own()
	release, err := s.slot(w, r, s.uploadsC, "uploads")
	if err != nil {
		return nil, err
	}
	defer release()
	wasm := b.data
	if mediaType(r) == "application/json" { // {"oci": REF} (oci.go)
		if wasm, err = s.ociModule(r.Context(), wasm); err != nil {
			return nil, err
		}
	}
	in, err := wasmtools.Inspect(wasm)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, KindMalformedModule, "%v", err)
	}
	switch {
	case in.ManifestError != nil:
		return nil, errorf(http.StatusUnprocessableEntity, KindInvalidManifest, "%v", in.ManifestError)
	case in.Manifest == nil:
		return nil, errorf(http.StatusUnprocessableEntity, KindNoManifest, "%v"+noManifestAdvice, wasmtools.ErrNoManifest)
	}
	name := in.Manifest.Name
	if strings.Contains(name, "__") {
		return nil, errorf(http.StatusUnprocessableEntity, KindInvalidName, "tool name %q: names containing \"__\" are reserved for MCP tools", name)
	}
	sha := hashOf(wasm)
	if s.shared != nil {
		// Cluster mode: the conflicts and limits are those of the
		// records as they are now, whoever wrote them.
		if err := s.refreshShared(r, tn, name, sha); err != nil {
			return nil, err
		}
	}
	// Answer name conflicts before compiling.
	s.mu.Lock()
	err = s.checkName(tn, name, sha, int64(len(wasm)), replace)
	var same *uploaded
	if e, ok := tn.idx.Tools[name]; ok && e.SHA256 == sha {
		same = tn.uploads[name] // the caller's own tool: never another tenant's
	}
	s.mu.Unlock()
	if same != nil {
		info := s.describe(tn, name, same, SourceUpload, true)
		info.Unchanged = true
		return info, nil
	}
	if err != nil {
		return nil, err
	}
	t, err := wasmtools.Load(runtime.WithOneCompileSlot(r.Context()), s.rt, wasm, tn.grant)
	if err != nil {
		return nil, loadError(err)
	}
	u := newUploaded(t, indexEntry{SHA256: sha, Size: int64(len(wasm)), Uploaded: time.Now().UTC().Truncate(time.Second)})
	var replaced bool
	if s.shared != nil {
		sctx, cancel := s.sharedContext(r) // the compilation above is not counted
		replaced, err = s.commitShared(sctx, tn, u, wasm, replace)
		cancel()
	} else {
		replaced, err = s.commit(tn, u, wasm, replace)
	}
	if err != nil {
		_ = t.Close(context.Background())
		return nil, err
	}
	info := s.describe(tn, name, u, SourceUpload, true)
	info.Replaced = replaced
	return info, nil
}

// loadError maps a wasmtools.Load failure to its answer.
func loadError(err error) error {
	switch {
	case errors.Is(err, wasmtools.ErrNoManifest):
		return errorf(http.StatusUnprocessableEntity, KindNoManifest, "%v"+noManifestAdvice, err)
	case errors.Is(err, wasmtools.ErrInvalidManifest), errors.Is(err, registry.ErrInvalidSchema):
		return errorf(http.StatusUnprocessableEntity, KindInvalidManifest, "%v", err)
	case errors.Is(err, runtime.ErrCompile):
		return errorf(http.StatusUnprocessableEntity, KindModuleRefused, "%v", err)
	case errors.Is(err, runtime.ErrClosed):
		return errorf(http.StatusServiceUnavailable, KindUnavailable, "the server is closing")
	}
	return errorf(http.StatusUnprocessableEntity, KindModuleRefused, "%v", err)
}

// checkName refuses tn's upload of size bytes called name: an operator
// tool's name, a stored name of tn's without replace, one tool too many or
// too many bytes for tn's quotas (tenants.go) or for the server. s.mu
// must be held.
func (s *Server) checkName(tn *tenant, name, sha string, size int64, replace bool) error {
	if s.closed {
		return errorf(http.StatusServiceUnavailable, KindUnavailable, "the server is closing")
	}
	e, stored := tn.idx.Tools[name]
	if !stored {
		if _, ok := tn.reg.Get(name); ok {
			return errorf(http.StatusForbidden, KindForbidden, "%q is a tool configured by the operator; it cannot be replaced through the API", name)
		}
	} else if !replace && e.SHA256 != sha {
		return errorf(http.StatusConflict, KindExists, "a tool called %q exists (sha256 %s); upload with ?replace=true to replace it", name, e.SHA256)
	}
	if err := tn.checkQuota(name, size); err != nil {
		return err
	}
	// The server's bounds count every tool stored, the tools of tenants
	// no longer configured too (they stay on disk).
	var total int64
	count := 0
	for tenant, other := range s.storedIndexes(tn, tn.idx) {
		for n, t := range other.Tools {
			if tenant != tn.name || n != name {
				total += t.Size
				count++
			}
		}
	}
	if !stored && count >= s.limits.MaxTools {
		return errorf(http.StatusInsufficientStorage, KindTooManyTools, "the server stores at most %d uploaded tools; delete one first", s.limits.MaxTools)
	}
	if total+size > s.limits.MaxStoreBytes {
		return errorf(http.StatusInsufficientStorage, KindTooManyTools, "the uploaded modules would take %d bytes; the server stores at most %d; delete a tool first", total+size, s.limits.MaxStoreBytes)
	}
	return nil
}

// commit stores u's module, records it in the index, then registers it,
// atomically replacing a tool of the same name (whose calls in flight
// finish on it). The index is written before the registry changes: a tool
// is never served that a restart would lose.
func (s *Server) commit(tn *tenant, u *uploaded, wasm []byte, replace bool) (replaced bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := u.Name()
	if err := s.checkName(tn, name, u.entry.SHA256, u.entry.Size, replace); err != nil {
		return false, err
	}
	prev, hadPrev := tn.idx.Tools[name]
	if err := s.st.putModule(u.entry.SHA256, wasm); err != nil {
		return false, errorf(http.StatusInternalServerError, KindInternal, "%v", err)
	}
	cur := s.storedIndexes(tn, tn.idx)
	next := tn.idx.clone()
	next.Tools[name] = u.entry
	all := s.storedIndexes(tn, next)
	if err := s.st.writeIndex(all); err != nil {
		if !cur.refs(u.entry.SHA256) {
			s.st.removeModule(u.entry.SHA256)
		}
		return false, errorf(http.StatusInternalServerError, KindInternal, "%v", err)
	}
	old := tn.uploads[name]
	if old != nil {
		_, err = tn.reg.Replace(u)
	} else {
		err = tn.reg.Register(u)
	}
	if err != nil {
		// Roll the index back; the registry did not change.
		if werr := s.st.writeIndex(cur); werr != nil {
			s.log.Error("rolling the index back failed", "error", werr)
		}
		if !cur.refs(u.entry.SHA256) {
			s.st.removeModule(u.entry.SHA256)
		}
		if errors.Is(err, registry.ErrDuplicate) {
			return false, errorf(http.StatusForbidden, KindForbidden, "%q is a tool configured by the operator; it cannot be replaced through the API", name)
		}
		return false, errorf(http.StatusUnprocessableEntity, KindInvalidManifest, "%v", err)
	}
	tn.idx = next
	tn.uploads[name] = u
	delete(tn.broken, name)
	if hadPrev && prev.SHA256 != u.entry.SHA256 && !all.refs(prev.SHA256) {
		s.st.removeModule(prev.SHA256)
	}
	if old != nil {
		old.retire()
	}
	return hadPrev, nil
}

// listTools is GET /v1/tools: every tool, operator's and uploaded, and the
// stored tools that failed to restore, sorted by name.
func (s *Server) listTools(w http.ResponseWriter, r *http.Request) {
	tn := s.tenantOf(r)
	if s.shared != nil {
		ctx, cancel := s.sharedContext(r)
		defer cancel()
		if err := s.syncAll(ctx, tn); err != nil {
			s.writeError(w, err)
			return
		}
	}
	names := tn.reg.List()
	s.mu.Lock()
	for name := range tn.broken {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	s.mu.Unlock()
	slices.Sort(names)
	out := make([]*ToolInfo, 0, len(names))
	for _, name := range names {
		if info := s.info(tn, name, false); info != nil {
			out = append(out, info)
		}
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

// getTool is GET /v1/tools/{name}.
func (s *Server) getTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	tn := s.tenantOf(r)
	if s.shared != nil {
		ctx, cancel := s.sharedContext(r)
		defer cancel()
		if err := s.syncTool(ctx, tn, name); err != nil {
			s.writeError(w, err)
			return
		}
	}
	info := s.info(tn, name, true)
	if info == nil {
		s.writeError(w, errorf(http.StatusNotFound, Kind(registry.NotFound), "no tool named %q", textsafe.Clean(name, 80)))
		return
	}
	s.writeJSON(w, http.StatusOK, info)
}

// deleteTool is DELETE /v1/tools/{name}: uploaded tools only. Calls in
// flight finish on the tool.
func (s *Server) deleteTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var err error
	if s.shared != nil {
		ctx, cancel := s.sharedContext(r)
		err = s.removeShared(ctx, s.tenantOf(r), name)
		cancel()
	} else {
		err = s.remove(s.tenantOf(r), name)
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
	w.WriteHeader(http.StatusNoContent)
}

// remove deletes tn's uploaded tool name; a name tn does not store is
// not found, whoever else stores it.
func (s *Server) remove(tn *tenant, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, stored := tn.idx.Tools[name]
	if !stored {
		if _, ok := tn.reg.Get(name); ok {
			return errorf(http.StatusForbidden, KindForbidden, "%q is a tool configured by the operator; it cannot be deleted through the API", name)
		}
		return errorf(http.StatusNotFound, Kind(registry.NotFound), "no tool named %q", textsafe.Clean(name, 80))
	}
	next := tn.idx.clone()
	delete(next.Tools, name)
	all := s.storedIndexes(tn, next)
	if err := s.st.writeIndex(all); err != nil {
		return errorf(http.StatusInternalServerError, KindInternal, "%v", err)
	}
	tn.idx = next
	if u := tn.uploads[name]; u != nil {
		if cur, ok := tn.reg.Get(name); ok && cur == registry.Tool(u) {
			tn.reg.Unregister(name)
		}
		delete(tn.uploads, name)
		u.retire()
	}
	delete(tn.broken, name)
	if !all.refs(e.SHA256) {
		s.st.removeModule(e.SHA256)
	}
	return nil
}

// callTool is POST /v1/tools/{name}/call: the body is the arguments (a
// JSON object sent as application/json; empty means {}); the answer is a
// Result, with the call's audit when ?audit=true. The body is read before
// a slot is taken.
func (s *Server) callTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	tn := s.tenantOf(r)
	withAudit := false
	if v := r.URL.Query().Get("audit"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.writeError(w, errorf(http.StatusBadRequest, KindBadRequest, "audit=%q: want true or false", textsafe.Clean(v, 40)))
			return
		}
		withAudit = b
	}
	args, done, err := s.admitCall(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	defer done()
	ctx, cancel := context.WithTimeout(s.traceContext(r), s.limits.CallTimeout)
	defer cancel()
	if s.shared != nil {
		// Cluster mode: the name means what its record says now, so a
		// tool uploaded, replaced or deleted through another replica is
		// seen at the next call.
		if err := s.syncTool(ctx, tn, name); err != nil {
			s.writeError(w, err)
			return
		}
	}
	start := time.Now()
	inv := tn.reg.Invoke(ctx, name, args)
	tn.usage.call(inv.Err != nil, inv.Audit)
	s.tel.Call(ctx, start, args, telemetry.Tool{Name: name, Duration: inv.Duration, ErrorKind: errorKind(inv.Err), Output: inv.Output, Audit: inv.Audit, Tenant: tn.name})
	if registry.KindOf(inv.Err) == registry.NotFound {
		s.mu.Lock()
		berr := tn.broken[name]
		s.mu.Unlock()
		if berr != nil {
			inv.Err = registry.NewError(registry.NotFound, name, fmt.Errorf("the stored tool could not be restored: %w", berr))
		}
	}
	res := CallResult(inv.Output, inv.Err)
	if withAudit {
		res.Audit = clientAudit(inv.Audit)
	}
	s.writeJSON(w, callStatus(inv.Err), res)
}

// errorKind is err's registry kind, "" for nil.
func errorKind(err error) string {
	if err == nil {
		return ""
	}
	return string(registry.KindOf(err))
}

// clientAudit is a call's audit as an API client sees it: without the
// mounts' host directories (the operator's file system layout is not the
// client's business; the guest paths say what the tool touched).
func clientAudit(a *registry.Audit) *registry.Audit {
	if a == nil {
		return nil
	}
	c := *a
	c.Mounts = slices.Clone(a.Mounts)
	for i := range c.Mounts {
		c.Mounts[i].Host = ""
	}
	return &c
}

// traceContext is r's context with the W3C trace context (traceparent,
// tracestate, baggage) of its headers when telemetry is on, so that the
// spans of a call or a run are children of the client's.
func (s *Server) traceContext(r *http.Request) context.Context {
	if s.tel == nil {
		return r.Context()
	}
	return telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}

// info describes tn's tool called name, or returns nil if there is none.
func (s *Server) info(tn *tenant, name string, withParams bool) *ToolInfo {
	s.mu.Lock()
	u := tn.uploads[name]
	berr := tn.broken[name]
	entry, stored := tn.idx.Tools[name]
	s.mu.Unlock()
	t, ok := tn.reg.Get(name)
	if !ok {
		if berr == nil {
			return nil
		}
		info := &ToolInfo{Name: name, Source: SourceUpload, SHA256: entry.SHA256, Size: entry.Size, Declared: []string{}, Granted: []string{}, Error: berr.Error()}
		if stored {
			up := entry.Uploaded
			info.Uploaded = &up
		}
		return info
	}
	src := SourceConfig
	if u != nil && registry.Tool(u) == t {
		src = SourceUpload
	}
	return s.describe(tn, name, t, src, withParams)
}

// describe builds the ToolInfo of tool t registered as name in tn's
// registry.
func (s *Server) describe(tn *tenant, name string, t registry.Tool, source string, withParams bool) *ToolInfo {
	info := &ToolInfo{
		Name:        name,
		Source:      source,
		Description: t.Description(),
		Declared:    permission.Strings(t.Permissions()),
		Runnable:    true,
	}
	if info.Declared == nil {
		info.Declared = []string{}
	}
	if u, ok := t.(*uploaded); ok {
		info.Size = u.entry.Size
		up := u.entry.Uploaded
		info.Uploaded = &up
	}
	if wt, ok := t.(interface {
		Capabilities() wasmtools.Capabilities
		Manifest() wasmtools.Manifest
		SHA256() string
	}); ok {
		info.SHA256 = wt.SHA256()
		info.Version = wt.Manifest().Version
		caps := wt.Capabilities()
		info.Granted, info.Notes = granted(t.Permissions(), caps)
		if caps.Network != nil {
			info.AllowedHosts = slices.Clone(caps.Network.AllowedHosts)
		}
	}
	// The checks Invoke makes before running: a tool that cannot run
	// (registry.Unavailable: its module failed to load), then the policy.
	if err := tn.reg.Allowed(name); err != nil {
		info.Runnable = false
		var d *permission.DeniedError
		if errors.As(err, &d) {
			info.Denied = d.Error()
		} else {
			info.Error = registry.AsError(name, err).Message()
		}
	}
	if withParams {
		info.Parameters = t.Parameters()
	}
	return info
}

// granted returns the declared permissions the sandbox gives a WASM tool
// with caps, and a note for each one it does not.
func granted(declared []permission.Permission, caps wasmtools.Capabilities) (out []string, notes []string) {
	out = []string{}
	anyMount := len(caps.Mounts) > 0
	writable, deletable := false, false
	for _, m := range caps.Mounts {
		writable = writable || m.Writable
		deletable = deletable || m.AllowDelete
	}
	for _, p := range declared {
		var ok bool
		var why string
		switch p {
		case permission.Network:
			ok, why = caps.Network != nil, "no host is granted: its network requests fail with permission_denied"
		case permission.Filesystem, permission.Read:
			ok, why = anyMount, "no folder is mounted: it sees no files"
		case permission.Write:
			ok, why = writable, "no writable folder is mounted"
		case permission.Delete:
			ok, why = deletable, "no folder is mounted with deletion allowed"
		case permission.Shell:
			why = "the sandbox cannot start programs"
		default:
			why = "it is checked against the permission policy but gives no capability in the sandbox"
		}
		if ok {
			out = append(out, p.String())
		} else {
			notes = append(notes, fmt.Sprintf("declares %q, not granted: %s", p.String(), why))
		}
	}
	return out, notes
}

// noManifestAdvice follows wasmtools.ErrNoManifest in the answer to an
// upload (the library's error carries no CLI advice).
const noManifestAdvice = " (add one with `agrun pack`, or give a manifest in the config)"

// storedIndexes is what index.json holds: every tenant's tools, tn's
// being ix, and those of the tenants not configured (kept). s.mu must be
// held.
func (s *Server) storedIndexes(tn *tenant, ix index) tenantIndexes {
	all := make(tenantIndexes, len(s.tenants)+len(s.unserved))
	for name, other := range s.unserved {
		all[name] = other
	}
	for name, other := range s.tenants {
		all[name] = other.idx
	}
	all[tn.name] = ix
	return all
}
