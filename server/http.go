package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/termsafe"
	"github.com/agcore/agrun/registry"
)

// Kind is the kind of a failure the API answers: the registry's Kind (one
// vocabulary across the registry, the loop and the server, each string
// declared once: internal/testing/archtest), with the API's own kinds added here,
// beside the registry's (not_found, invalid_arguments, permission_denied,
// timeout, ...) that a call can end with and the loop's that a run can
// end with. Kinds are stable strings: added, never renamed or removed.
type Kind = registry.Kind

// The API's own kinds.
const (
	KindBadRequest       Kind = "bad_request"            // the request is malformed
	KindUnauthorized     Kind = "unauthorized"           // missing or wrong bearer token
	KindForbidden        Kind = "forbidden"              // an operator tool cannot be changed through the API
	KindBodyTooLarge     Kind = "body_too_large"         // over max_upload or max_body
	KindUnsupportedMedia Kind = "unsupported_media_type" // a body not sent as application/json (calls, runs) or application/wasm (uploads)
	KindBadHost          Kind = "bad_host"               // the Host is not one the server answers for (DNS rebinding)
	KindCrossOrigin      Kind = "cross_origin"           // a request from a web page of another origin
	KindBodyTimeout      Kind = "body_timeout"           // the body did not arrive within body_timeout
	KindBusy             Kind = "busy"                   // max_concurrent_calls (or uploads, or this client's share) reached
	KindRateLimited      Kind = "rate_limited"           // uploads_per_minute reached for this token
	KindMalformedModule  Kind = "malformed_module"       // the bytes are not a WebAssembly module
	KindModuleRefused         = registry.ModuleRefused   // the sandbox refuses the module
	KindNoManifest       Kind = "no_manifest"            // the module has no agrun.manifest section
	KindInvalidManifest  Kind = "invalid_manifest"       // the manifest is invalid
	KindInvalidName      Kind = "invalid_name"           // a name reserved for MCP tools ("__")
	KindExists           Kind = "exists"                 // the name is taken; add ?replace=true
	KindTooManyTools     Kind = "too_many_tools"         // the store holds the maximum of tools
	KindSessionLocked    Kind = "session_locked"         // the session is in use by another run
	KindInvalidSession   Kind = "invalid_session"        // the stored session cannot be continued
	KindUnavailable      Kind = "unavailable"            // runs are not configured, or the server is closing
	KindInternal         Kind = "internal"               // the server failed (disk, ...)
	KindMethodNotAllowed Kind = "method_not_allowed"     // a method the endpoint does not answer (Allow says which)
	KindConflict         Kind = "conflict"               // the call was already decided
	KindNotSupported     Kind = "not_supported"          // what cluster mode does not do: runs on a shared store without Options.Runs (501; docs/SCALING.md)
	KindQuotaExceeded    Kind = "quota_exceeded"         // a tenant's quota (max_modules, max_storage, max_concurrent_calls, calls_per_minute)
)

// ErrorInfo is the error part of every failed answer.
type ErrorInfo struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Result is the body of a call's answer, the same shape as `agrun call
// --json`: {"ok":true,"result":...} or {"ok":false,"error":{"kind","message"}}.
// Every other failed request has the same {"ok":false,"error":...} body.
type Result struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ErrorInfo      `json:"error,omitempty"`
	// Audit is what the call did as its host saw it, only when asked for
	// (`agrun call --json --audit`, POST /v1/tools/{name}/call?audit=true)
	// and the tool ran and reported one.
	Audit *registry.Audit `json:"audit,omitempty"`
}

// CallResult returns the Result of a call that gave out and err.
func CallResult(out json.RawMessage, err error) Result {
	if err == nil {
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		return Result{OK: true, Result: out}
	}
	return Result{Error: ErrorOf(err)}
}

// ErrorOf gives err its stable kind and message: a *registry.Error its
// Kind and its cause's message, an *apiError its kind, anything else
// registry.KindOf.
func ErrorOf(err error) *ErrorInfo {
	var ae *apiError
	var re *registry.Error
	switch {
	case errors.As(err, &ae):
		return &ErrorInfo{Kind: string(ae.kind), Message: ae.msg}
	case errors.As(err, &re):
		return &ErrorInfo{Kind: string(re.Kind), Message: re.Message()}
	}
	return &ErrorInfo{Kind: string(registry.KindOf(err)), Message: err.Error()}
}

// apiError is a failed request: an HTTP status, a kind and a message.
type apiError struct {
	status int
	kind   Kind
	msg    string
}

func (e *apiError) Error() string { return string(e.kind) + ": " + e.msg }

func errorf(status int, kind Kind, format string, args ...any) *apiError {
	return &apiError{status: status, kind: kind, msg: fmt.Sprintf(format, args...)}
}

// callStatus is the HTTP status of a call's answer. A call that ran is 200
// whatever its outcome (the body says ok or not, as for `agrun call
// --json`); a call refused before running is a client error.
func callStatus(err error) int {
	switch registry.KindOf(err) {
	case "":
		return http.StatusOK
	case registry.NotFound:
		return http.StatusNotFound
	case registry.InvalidArguments:
		return http.StatusBadRequest
	case registry.PermissionDenied:
		return http.StatusForbidden
	case registry.ModuleRefused: // the tool's module failed to load: same status as a refused upload
		return http.StatusUnprocessableEntity
	}
	return http.StatusOK
}

// writeJSON answers v. The connection's write deadline is set WriteTimeout
// ahead first: the time a handler spent working (compiling, calling) does
// not count, the time the client takes to read the answer does.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(Result{Error: &ErrorInfo{Kind: string(KindInternal), Message: err.Error()}})
	}
	b = termsafe.JSON(b) // answers are read with curl on terminals
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers err: an *apiError with its status, anything else as
// a 500.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = errorf(http.StatusInternalServerError, KindInternal, "%v", err)
	}
	switch ae.status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="agrun"`)
	}
	s.writeJSON(w, ae.status, Result{Error: &ErrorInfo{Kind: string(ae.kind), Message: ae.msg}})
}

// retryAfter sets Retry-After to d rounded up to whole seconds (at least 1).
func retryAfter(w http.ResponseWriter, d time.Duration) {
	secs := int((d + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(max(1, secs)))
}

// routes builds the handler: panics recovered, /healthz open, everything
// else behind the Host and Origin checks and the bearer token, unknown
// paths and methods answered in JSON.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("POST /v1/tools", s.upload)
	mux.HandleFunc("GET /v1/tools", s.listTools)
	mux.HandleFunc("GET /v1/tools/{name}", s.getTool)
	mux.HandleFunc("DELETE /v1/tools/{name}", s.deleteTool)
	mux.HandleFunc("POST /v1/tools/{name}/call", s.callTool)
	run, runState, decide, getSession := s.run, s.runState, s.decideApproval, s.getSession
	switch {
	case s.runs != nil:
		run, runState, decide, getSession = s.clusterRun, s.clusterRunState, s.clusterDecide, s.clusterSession
	case s.shared != nil:
		run, runState, decide, getSession = s.notSupported, s.notSupported, s.notSupported, s.notSupported
	}
	mux.HandleFunc("POST /v1/runs", run)
	mux.HandleFunc("GET /v1/runs/{id}", runState)
	mux.HandleFunc("POST /v1/runs/{id}/approvals", decide)
	mux.HandleFunc("GET /v1/sessions/{id}", getSession)
	mux.HandleFunc("GET /v1/usage", s.getUsage)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", p)
				s.writeError(w, errorf(http.StatusInternalServerError, KindInternal, "internal error"))
			}
		}()
		if r.URL.Path != "/healthz" {
			// Web pages first: a foreign Host or Origin learns nothing,
			// not even whether a token is needed.
			if err := s.checkSite(r); err != nil {
				w.Header().Set("Connection", "close")
				s.writeError(w, err)
				return
			}
			key, tn, ok, why := s.auth.check(r)
			if ok && !s.auth.open() {
				// Checked once per request: clientKey and tenantOf read
				// them back (an app's Authenticate may be costly).
				// Without tokens the client is its address (clientKey).
				ctx := context.WithValue(r.Context(), clientKeyCtx{}, key)
				r = r.WithContext(context.WithValue(ctx, tenantCtx{}, tn))
			}
			if !ok {
				// The body of an unauthenticated request is never read;
				// the connection is closed after the answer.
				w.Header().Set("Connection", "close")
				if why == "" {
					why = "missing or wrong bearer token (Authorization: Bearer <token>)"
				}
				s.writeError(w, errorf(http.StatusUnauthorized, KindUnauthorized, "%s", why))
				return
			}
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			// The mux's own 404 or 405: answer it in JSON.
			mux.ServeHTTP(&jsonStatusWriter{ResponseWriter: w, s: s}, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// jsonStatusWriter turns the mux's plain-text 404 and 405 answers into
// JSON errors (keeping headers such as Allow).
type jsonStatusWriter struct {
	http.ResponseWriter
	s    *Server
	done bool
}

func (j *jsonStatusWriter) WriteHeader(code int) {
	if j.done {
		return
	}
	j.done = true
	j.Header().Del("Content-Length")
	kind, msg := Kind(registry.NotFound), "no such endpoint"
	if code == http.StatusMethodNotAllowed {
		kind, msg = KindMethodNotAllowed, "method not allowed (allowed: "+j.Header().Get("Allow")+")"
	}
	j.s.writeJSON(j.ResponseWriter, code, Result{Error: &ErrorInfo{Kind: string(kind), Message: msg}})
}

func (j *jsonStatusWriter) Write(b []byte) (int, error) {
	if !j.done {
		j.WriteHeader(http.StatusOK)
	}
	return len(b), nil
}

// healthz answers {"ok":true,...} without authentication: it reveals no
// tool and runs nothing.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// mediaType returns the media type of the Content-Type header, lower case.
func mediaType(r *http.Request) string {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(ct))
}
