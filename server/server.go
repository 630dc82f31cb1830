// Package server is `agrun serve`: an HTTP API that accepts WebAssembly
// tools uploaded by people the operator does not fully trust, stores them,
// and runs them — alone or in agent runs — with only what the operator
// grants uploads.
//
//	srv, err := server.New(ctx, server.Options{
//		Runtime:  rt,                 // compiles and runs the uploads
//		Registry: reg,                // the operator's tools; uploads join them
//		Addr:     addr,               // the names it answers for, with AllowedHosts
//		DataDir:  dir,                // the uploaded tools; "" is DefaultDataDir()
//		Uploads:  wasmtools.Grant{},  // what uploads get: nothing but compute
//		Tokens:   tokens,             // bearer tokens; none: loopback only
//		Loop:     &loopConfig,        // for POST /v1/runs
//	})
//	if err != nil { ... }
//	defer srv.Close(ctx)
//	ln, _ := net.Listen("tcp", addr)
//	err = srv.Serve(ctx, ln)          // until ctx is cancelled, then a graceful shutdown
//
// # In an app's own server
//
// Handler is an http.Handler an app mounts in its own mux, under a prefix
// and behind its own authentication (ExampleServer_Handler):
//
//	srv, _ := server.New(ctx, server.Options{..., BasePath: "/agrun",
//		Authenticate: func(r *http.Request) (string, error) { return app.User(r) }})
//	mux.Handle("/agrun/", http.StripPrefix("/agrun", srv.Handler()))
//
// The Host and Origin checks stay on (they stop DNS rebinding and web
// pages of other sites): name the app's public hosts in AllowedHosts.
// Connection limits (MaxConnections) apply only to Serve's listener; the
// app's server has its own.
//
// # Safety
//
// Uploaded tools get what [serve.uploads] grants (by default nothing: pure
// compute) whatever their manifest declares; the operator's own tools keep
// their grants and cannot be replaced or deleted through the API. Every
// request but GET /healthz needs a bearer token when tokens are configured;
// without tokens, [CheckListener] refuses anything but loopback. With or
// without tokens, a request must name the server in its Host header (DNS
// rebinding), must not come from a web page of another origin (Origin,
// Sec-Fetch-Site), and sends JSON as application/json: a page in the
// operator's browser cannot drive the server. Request bodies (read whole,
// under their own deadline and a byte budget, before any slot is taken),
// concurrent work (with a share per client), the duration of a call, the
// rate of uploads and the time a client may take to send or read are all
// bounded (see [Limits]).
//
// # Tenants
//
// With [Options].Tenants the server serves parties that do not trust
// each other: each [Tenant] has its tokens, quotas and grant ceiling, and
// its own registry (the operator's tools plus its uploads), sessions and
// runs, so another tenant's tool, run, session or approval answers 404
// exactly as a missing one (docs/API.md "Tenants"):
//
//	srv, err := server.New(ctx, server.Options{Runtime: rt, Registry: reg,
//		Tenants: []server.Tenant{
//			{Name: "acme", Tokens: acme, MaxConcurrentCalls: 4, Uploads: acmeGrant},
//			{Name: "globex", Tokens: globex, CallsPerMinute: 600},
//		}})
//
// Without Tenants there is one, [DefaultTenant], with Tokens and Uploads.
//
// # Storage
//
// Uploaded modules are stored content-addressed under the data directory
// with an index mapping names to hashes; every write is atomic (temporary
// file, fsync, rename, directory fsync), so a crash never leaves half a
// tool, and a new Server on the same directory serves the same tools.
// In cluster mode ([Options].SharedStore) they are stored in a
// [SharedStore] instead, which any number of Servers share: each reads a
// tool's record at every call. With Tenants the store must be a
// [TenantSharedStore], each tenant's records apart from the others'.
//
// docs/API.md describes the HTTP API.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/telemetry"
	"github.com/agcore/agrun/wasmtools"
)

// Defaults for the zero values of Options.
const (
	DefaultMaxUpload          = 16 << 20
	DefaultMaxBody            = 1 << 20
	DefaultMaxConcurrentCalls = 16
	DefaultCallTimeout        = 30 * time.Second
	DefaultReadTimeout        = 60 * time.Second
	DefaultWriteTimeout       = 60 * time.Second
	// DefaultBodyTimeout is the time a client has to send a request body.
	DefaultBodyTimeout      = 10 * time.Second
	DefaultUploadsPerMinute = 10
	// DefaultMaxConcurrentUploads bounds the uploads being received and
	// compiled at once (each holds its module in memory).
	DefaultMaxConcurrentUploads = 4
	// DefaultMaxTools bounds the uploaded tools stored at once.
	DefaultMaxTools = 256
	// DefaultMaxStoreBytes bounds the total size of the uploaded modules
	// stored (and compiled in memory) at once.
	DefaultMaxStoreBytes = 1 << 30
	// DefaultShutdownTimeout is how long Serve lets requests in flight
	// finish after its context is cancelled.
	DefaultShutdownTimeout = 30 * time.Second
	// ReadHeaderTimeout and IdleTimeout of the http.Server.
	ReadHeaderTimeout = 10 * time.Second
	IdleTimeout       = 120 * time.Second
	// keepAliveEvery is how often a run's event stream gets a comment line
	// while nothing else happens.
	keepAliveEvery = 15 * time.Second
	// retireGrace is how long a replaced or deleted tool stays open for
	// calls that had already looked it up when it was replaced.
	retireGrace = 5 * time.Second
)

// Options configure a Server. Runtime and Registry are required.
type Options struct {
	// Runtime compiles and runs uploaded modules. The Server does not close it.
	Runtime *runtime.Runtime
	// Registry holds the operator's tools (already registered); uploaded
	// tools are added to it, so runs see both. Its permission checker
	// applies to every call.
	Registry *registry.Registry
	// Addr is the address the server listens on; its host is a name the
	// server answers for (the Host header), beside loopback. The Server
	// does not listen itself (see Serve).
	Addr string
	// AllowedHosts are more Host names (host or host:port) the server
	// answers for: the public name of a server behind a proxy.
	AllowedHosts []string
	// DataDir holds the uploaded tools (and, without Sessions, the runs'
	// sessions). Empty: DefaultDataDir().
	DataDir string
	// Uploads is what every uploaded tool is granted, whatever its
	// manifest declares (intersected with it, as wasmtools.Load does).
	// The zero Grant grants nothing: pure compute with the runtime's
	// default limits. Its SHA256 is not used (each upload is its own
	// module).
	Uploads wasmtools.Grant
	// MaxUpload bounds an uploaded module's size. Zero: DefaultMaxUpload.
	MaxUpload int64
	// OCI, with AllowedRegistries, takes uploads by reference: POST
	// /v1/tools with Content-Type application/json and {"oci":
	// "HOST/REPO[:TAG]@sha256:DIGEST"}; the server pulls the module with
	// this client (into its Store) and goes on as for an upload of those
	// bytes. Nil: an upload sent as application/json answers 415.
	OCI *oci.Client
	// AllowedRegistries are the registries (HOST or HOST:PORT, as a
	// reference writes them) an OCI upload may name: a client never makes
	// the server reach another host. Empty: OCI uploads answer 403.
	AllowedRegistries []string
	// MaxBody bounds the body of a call or a run. Zero: DefaultMaxBody.
	MaxBody int64
	// MaxConcurrentCalls bounds the calls and runs in progress at once.
	// Zero: DefaultMaxConcurrentCalls.
	MaxConcurrentCalls int
	// MaxCallsPerClient bounds the calls and runs one token (without
	// tokens: one client address) has in progress at once. Zero: half of
	// MaxConcurrentCalls (at least 1); never more than it.
	MaxCallsPerClient int
	// CallTimeout bounds one call through the API. Zero:
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// ReadTimeout and WriteTimeout are the http.Server's, the write
	// deadline counted from each answer's start. Zero: DefaultReadTimeout,
	// DefaultWriteTimeout.
	ReadTimeout, WriteTimeout time.Duration
	// BodyTimeout bounds the time a client takes to send a request body.
	// Zero: DefaultBodyTimeout.
	BodyTimeout time.Duration
	// UploadsPerMinute bounds the uploads of one token (or client). Zero:
	// DefaultUploadsPerMinute.
	UploadsPerMinute int
	// Tokens are the accepted bearer tokens (each at least MinTokenLength
	// bytes), all of the one tenant DefaultTenant. None (and no Tenants):
	// no authentication, and Serve accepts only loopback listeners. With
	// Tenants it must be empty: each tenant has its own.
	Tokens []string
	// Tenants, when set, are the parties the server serves apart
	// (tenants.go, docs/API.md "Tenants"): each with its tokens, its
	// quotas and the grant ceiling of its uploads (Uploads is then not
	// used), its own uploads, runs, sessions and approvals; a tenant
	// sees the operator's tools (those of Registry when New is called)
	// and its own uploads, never another tenant's. Not with
	// SharedStore. Empty: one tenant, DefaultTenant, with Tokens, the
	// Uploads ceiling, no quota of its own and Registry as its registry.
	Tenants []Tenant
	// AuthenticateTenant is Authenticate for a server with Tenants: it
	// returns the caller's tenant (the Name of one of Tenants, whose
	// Tokens are then empty) and its identity within the tenant, or an
	// error (401 unauthorized, as Authenticate). An unknown tenant is
	// refused 401 and logged. Nil: the tenants' tokens.
	AuthenticateTenant func(r *http.Request) (tenant, client string, err error)
	// NewRegistry returns an empty registry for each tenant of Tenants,
	// with the policy and limits the operator's tools run under there
	// (New registers the operator's tools of Registry in it). Nil:
	// registry.New with Registry's permission checker.
	NewRegistry func() *registry.Registry
	// Authenticate, when set, replaces the bearer tokens with the
	// embedding app's own authentication (Tokens must then be empty),
	// every caller in tenant DefaultTenant (with Tenants, use
	// AuthenticateTenant): it
	// is called for every request but /healthz, before its body is read,
	// and returns the caller's identity — which keys the per-client
	// shares (calls, uploads per minute, body memory) as a token does —
	// or an error, answered 401 unauthorized with the error's text
	// (cleaned, at most 200 bytes) as the message. An empty identity is
	// refused. Nil: Tokens.
	Authenticate func(r *http.Request) (client string, err error)
	// BasePath is the path prefix the app mounts Handler under with
	// http.StripPrefix ("/agrun"), so that the paths the API writes in
	// its answers (an upload's Location) are the app's. Empty: the API
	// is at the root.
	BasePath string
	// Loop is the template of the model loop used by POST /v1/runs; the
	// Server sets History, OnMessage and OnRequest per run. Nil: runs answer 503.
	Loop *loop.Config
	// Sessions stores the runs' conversations (of tenant DefaultTenant;
	// every other tenant's are in <DataDir>/tenants/<name>/sessions). Nil:
	// a "sessions" folder in the data directory.
	Sessions *session.Files
	// Logger receives warnings (tools that fail to restore, requests that
	// fail on the server's side). Nil: slog.Default().
	Logger *slog.Logger
	// MaxTools bounds the uploaded tools stored at once. Zero: DefaultMaxTools.
	MaxTools int
	// MaxStoreBytes bounds the total size of the stored modules. Zero:
	// DefaultMaxStoreBytes.
	MaxStoreBytes int64
	// MaxConcurrentUploads bounds the uploads received and compiled at
	// once. Zero: DefaultMaxConcurrentUploads.
	MaxConcurrentUploads int
	// ShutdownTimeout is how long Serve waits for requests in flight after
	// its context is cancelled; then their contexts are cancelled. Zero:
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// MaxBodyMemory bounds the bytes of request bodies held in memory at
	// once, counted as they arrive (one client: half of it, or at least
	// one largest upload); a body that would go over is answered 429
	// busy. Zero: MaxConcurrentUploads uploads of MaxUpload plus
	// MaxConcurrentCalls bodies of MaxBody; never less than MaxUpload.
	MaxBodyMemory int64
	// MaxConnections bounds the connections open at once (Accept waits
	// when it is reached); MaxConnectionsPerClient those of one remote
	// IP address (one more is answered 503 and closed). Zero:
	// DefaultMaxConnections, DefaultMaxConnectionsPerClient (never more
	// than MaxConnections). Behind a reverse proxy, where every connection
	// comes from the proxy, set MaxConnectionsPerClient to MaxConnections.
	MaxConnections, MaxConnectionsPerClient int
	// Telemetry traces runs and calls (a run's span is the child of the
	// W3C trace context of the request that started it). Nil: off.
	Telemetry *telemetry.Telemetry
	// ApprovalTimeout is how long a run waits for a client's decision
	// about a call that needs approval (then the call is denied). Zero:
	// DefaultApprovalTimeout.
	ApprovalTimeout time.Duration
	// SharedStore, when set, is cluster mode (docs/API.md): the uploaded
	// tools live there, shared by every replica, and the Server keeps
	// nothing of its own — no data directory is opened or locked
	// (DataDir is not used), and without Runs the run endpoints answer
	// 501 not_supported. Nil: the data directory.
	SharedStore SharedStore
	// Runs, when set, runs the agent runs elsewhere (clusterruns.go;
	// agrun serve with [cluster]: workflows on the cluster's workers):
	// POST /v1/runs, GET /v1/runs/{id}, its approvals and GET
	// /v1/sessions/{id} are answered through it, and Loop, Sessions and
	// ApprovalTimeout are not used for them. Nil: the Server's own loop.
	Runs Runs
}

// Limits are the effective limits of a Server, defaults applied.
type Limits struct {
	MaxUpload            int64
	MaxBody              int64
	MaxConcurrentCalls   int
	MaxConcurrentUploads int
	CallTimeout          time.Duration
	ReadTimeout          time.Duration
	WriteTimeout         time.Duration
	UploadsPerMinute     int
	MaxTools             int
	MaxStoreBytes        int64
	ShutdownTimeout      time.Duration
	// BodyTimeout bounds the sending of one request body.
	BodyTimeout time.Duration
	// MaxCallsPerClient is the share of MaxConcurrentCalls one token (or,
	// without tokens, one client address) may hold; a client holds at
	// most half of MaxConcurrentUploads too.
	MaxCallsPerClient int
	// MaxBodyMemory bounds the request bodies held in memory at once.
	MaxBodyMemory int64
	// MaxConnections and MaxConnectionsPerClient bound the connections
	// Serve holds open at once, in all and from one client address (see
	// LimitListener).
	MaxConnections, MaxConnectionsPerClient int
	// ApprovalTimeout is how long a run waits for a decision (approvals.go).
	ApprovalTimeout time.Duration
}

// Server is the HTTP service. It is safe for concurrent use. Close it to
// release the uploaded tools.
type Server struct {
	rt        *runtime.Runtime
	oci       *oci.Client // OCI uploads (oci.go); nil: none
	ociHosts  []string    // the registries they may name
	limits    Limits
	auth      *authenticator
	basePath  string
	hosts     *hostPolicy
	rate      *rateLimiter
	calls     *quota // a slot per call or run in progress
	uploadsC  *quota // a slot per upload in progress
	bodyBytes *quota // the bytes of request bodies held in memory
	loopCfg   *loop.Config
	tel       *telemetry.Telemetry
	log       *slog.Logger
	dataDir   string
	handler   http.Handler
	started   time.Time // when New made it: the start of Usage's counters

	// tenants are the Server's tenants by name (tenants.go); def is
	// DefaultTenant's, nil when Options.Tenants has no such tenant.
	tenants map[string]*tenant
	def     *tenant

	mu       sync.Mutex    // serializes changes to the store, the indexes and uploads
	st       *store        // nil in cluster mode
	unserved tenantIndexes // stored tools of tenants not configured: kept, not served
	closed   bool

	// Cluster mode (shared.go, clusterruns.go).
	runs      Runs
	shared    SharedStore
	brokenSHA map[string]string // tenant and name (tenant.nameKey) -> the module that will not load (not tried again)
	loadMu    sync.Mutex        // guards loading
	loading   map[string]*load  // tenant, name and sha being loaded
}

// DefaultDataDir is $XDG_DATA_HOME/agrun/serve, else
// ~/.local/share/agrun/serve.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "agrun", "serve")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "agrun", "serve")
	}
	return filepath.Join(os.TempDir(), "agrun-serve")
}

// New opens the data directory, locks it (ErrDataDirLocked if another
// Server holds it), and restores the tools stored in it. A stored
// tool that no longer loads (its name is now an operator tool's, its file
// is damaged, the sandbox refuses it) is logged, listed with its error by
// GET /v1/tools, and kept on disk; it does not stop the others.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Runtime == nil || opts.Registry == nil {
		return nil, errors.New("server.Options.Runtime and server.Options.Registry are required")
	}
	if opts.Authenticate != nil && len(opts.Tokens) > 0 {
		return nil, errors.New("server.Options: Authenticate and Tokens are both set: use one")
	}
	if opts.BasePath != "" && (!strings.HasPrefix(opts.BasePath, "/") || strings.HasSuffix(opts.BasePath, "/")) {
		return nil, fmt.Errorf("server.Options.BasePath %q must begin with / and not end with one", opts.BasePath)
	}
	auth, err := newAuthenticator(opts.Tokens)
	if err != nil {
		return nil, err
	}
	auth.custom = opts.Authenticate
	auth.log = func(msg string, args ...any) {
		if opts.Logger != nil {
			opts.Logger.Warn(msg, args...)
		} else {
			slog.Warn(msg, args...)
		}
	}
	sv := opts
	lim := Limits{
		MaxUpload:            orDefault(sv.MaxUpload, DefaultMaxUpload),
		MaxBody:              orDefault(sv.MaxBody, DefaultMaxBody),
		MaxConcurrentCalls:   orDefault(sv.MaxConcurrentCalls, DefaultMaxConcurrentCalls),
		MaxConcurrentUploads: orDefault(opts.MaxConcurrentUploads, DefaultMaxConcurrentUploads),
		CallTimeout:          orDefault(sv.CallTimeout, DefaultCallTimeout),
		ReadTimeout:          orDefault(sv.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:         orDefault(sv.WriteTimeout, DefaultWriteTimeout),
		UploadsPerMinute:     orDefault(sv.UploadsPerMinute, DefaultUploadsPerMinute),
		MaxTools:             orDefault(opts.MaxTools, DefaultMaxTools),
		MaxStoreBytes:        orDefault(opts.MaxStoreBytes, DefaultMaxStoreBytes),
		ShutdownTimeout:      orDefault(opts.ShutdownTimeout, DefaultShutdownTimeout),
		BodyTimeout:          orDefault(sv.BodyTimeout, DefaultBodyTimeout),
		MaxConnections:       orDefault(sv.MaxConnections, DefaultMaxConnections),
		ApprovalTimeout:      orDefault(sv.ApprovalTimeout, DefaultApprovalTimeout),
	}
	lim.MaxConnectionsPerClient = min(lim.MaxConnections, orDefault(sv.MaxConnectionsPerClient, DefaultMaxConnectionsPerClient))
	lim.MaxCallsPerClient = min(lim.MaxConcurrentCalls, orDefault(sv.MaxCallsPerClient, max(1, lim.MaxConcurrentCalls/2)))
	lim.MaxBodyMemory = max(lim.MaxUpload, orDefault(opts.MaxBodyMemory, int64(lim.MaxConcurrentUploads)*lim.MaxUpload+int64(lim.MaxConcurrentCalls)*lim.MaxBody))
	hosts, err := newHostPolicy(sv.Addr, sv.AllowedHosts)
	if err != nil {
		return nil, err
	}
	if len(opts.Tenants) > 0 {
		switch {
		case len(opts.Tokens) > 0:
			return nil, errors.New("server.Options: Tokens and Tenants are both set: give each tenant its tokens")
		case opts.Authenticate != nil:
			return nil, errors.New("server.Options: Authenticate and Tenants are both set: use AuthenticateTenant")
		case opts.SharedStore != nil:
			if _, ok := opts.SharedStore.(TenantSharedStore); !ok {
				return nil, errors.New("server.Options: Tenants with a SharedStore need one that keeps each tenant's records apart (a TenantSharedStore)")
			}
		}
	} else if opts.AuthenticateTenant != nil {
		return nil, errors.New("server.Options.AuthenticateTenant needs Tenants (without tenants: Authenticate)")
	}
	var (
		dataDir string
		st      *store
		stored  = tenantIndexes{DefaultTenant: {Version: 1, Tools: map[string]indexEntry{}}}
	)
	if opts.SharedStore == nil {
		dataDir = sv.DataDir
		if dataDir == "" {
			dataDir = DefaultDataDir()
		}
		if st, stored, err = openStore(dataDir); err != nil {
			return nil, err
		}
	}
	fail := func(err error) (*Server, error) {
		if st != nil {
			st.close()
		}
		return nil, err
	}
	tenants := map[string]*tenant{}
	if len(opts.Tenants) == 0 {
		def := newTenant(DefaultTenant, opts.Registry, opts.Uploads)
		def.sessions = opts.Sessions
		if def.sessions == nil && dataDir != "" {
			if def.sessions, err = session.OpenFiles(TenantSessionsDir(dataDir, DefaultTenant)); err != nil {
				return fail(fmt.Errorf("%w", err))
			}
		}
		tenants[DefaultTenant] = def
	} else if tenants, err = newTenants(opts, lim, dataDir); err != nil {
		return fail(err)
	}
	if err := auth.setTenants(opts, tenants); err != nil {
		return fail(err)
	}
	for name, tn := range tenants {
		switch ts, ok := opts.SharedStore.(TenantSharedStore); {
		case ok && len(opts.Tenants) > 0:
			tn.shared = ts.ForTenant(name)
		case opts.SharedStore != nil:
			tn.shared = opts.SharedStore // the one tenant: the store's own records
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		rt:        opts.Runtime,
		oci:       opts.OCI,
		ociHosts:  slices.Clone(opts.AllowedRegistries),
		limits:    lim,
		auth:      auth,
		basePath:  opts.BasePath,
		hosts:     hosts,
		rate:      newRateLimiter(lim.UploadsPerMinute),
		calls:     newQuota(int64(lim.MaxConcurrentCalls), int64(lim.MaxCallsPerClient)),
		uploadsC:  newQuota(int64(lim.MaxConcurrentUploads), int64(max(1, lim.MaxConcurrentUploads/2))),
		bodyBytes: newQuota(lim.MaxBodyMemory, max(lim.MaxBodyMemory/2, lim.MaxUpload)),
		loopCfg:   opts.Loop,
		tel:       opts.Telemetry,
		log:       log,
		dataDir:   dataDir,
		started:   time.Now().UTC().Truncate(time.Second),
		st:        st,
		tenants:   tenants,
		def:       tenants[DefaultTenant],
		unserved:  tenantIndexes{},
		shared:    opts.SharedStore,
		runs:      opts.Runs,
		brokenSHA: map[string]string{},
		loading:   map[string]*load{},
	}
	for name, ix := range stored {
		if tn := tenants[name]; tn != nil {
			tn.idx = ix
		} else if len(ix.Tools) > 0 {
			s.unserved[name] = ix // kept on disk, with its modules
			log.Warn("stored tools of a tenant that is not configured are not served", "tenant", name, "tools", len(ix.Tools))
		}
	}
	if s.shared == nil {
		s.restore(ctx) // cluster mode loads each tool at its first use
	}
	s.handler = s.routes()
	return s, nil
}

func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// restore loads every tool of every tenant's index, a few at a time,
// each with its tenant's ceiling into its tenant's registry.
func (s *Server) restore(ctx context.Context) {
	sem := make(chan struct{}, max(1, goruntime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, tn := range s.sortedTenants() {
		names := make([]string, 0, len(tn.idx.Tools))
		for name := range tn.idx.Tools {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			e := tn.idx.Tools[name]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				u, err := s.restoreOne(ctx, tn, name, e)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					tn.broken[name] = err
					s.log.Warn("stored tool not restored", "tenant", tn.name, "tool", name, "sha256", e.SHA256, "error", err)
					return
				}
				tn.uploads[name] = u
			}()
		}
	}
	wg.Wait()
}

func (s *Server) restoreOne(ctx context.Context, tn *tenant, name string, e indexEntry) (*uploaded, error) {
	if _, ok := tn.reg.Get(name); ok {
		return nil, fmt.Errorf("a tool configured by the operator is now called %q", name)
	}
	wasm, err := s.st.readModule(e.SHA256)
	if err != nil {
		return nil, err
	}
	t, err := wasmtools.Load(runtime.WithOneCompileSlot(ctx), s.rt, wasm, tn.grant)
	if err != nil {
		return nil, err
	}
	if t.Name() != name {
		t.Close(ctx)
		return nil, fmt.Errorf("the stored module is named %q, not %q", t.Name(), name)
	}
	u := newUploaded(t, e)
	if err := tn.reg.Register(u); err != nil {
		t.Close(ctx)
		return nil, err
	}
	return u, nil
}

// Limits returns the effective limits, defaults applied.
func (s *Server) Limits() Limits { return s.limits }

// DataDir returns the data directory in use ("" in cluster mode).
func (s *Server) DataDir() string { return s.dataDir }

// Handler returns the HTTP handler of the API. It can be served by any
// http.Server (httptest included); Serve adds the timeouts.
func (s *Server) Handler() http.Handler { return s.handler }

// HTTPServer returns an http.Server for the API with the read, write,
// header and idle timeouts set. Long requests (calls, event streams)
// extend their own write deadline as they go.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadTimeout:       s.limits.ReadTimeout,
		ReadHeaderTimeout: min(ReadHeaderTimeout, s.limits.ReadTimeout),
		WriteTimeout:      s.limits.WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Serve answers requests on ln until ctx is cancelled, then shuts down
// gracefully: it stops accepting, lets requests in flight finish for up to
// ShutdownTimeout, then cancels them and closes every connection. It
// refuses (ErrNoTokens) a non-loopback listener when no token is
// configured. It closes ln. It returns nil after a shutdown caused by ctx.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := CheckListener(ln, s.tokens()); err != nil {
		ln.Close()
		return err
	}
	ln = LimitListener(ln, s.limits.MaxConnections, s.limits.MaxConnectionsPerClient)
	hs := s.HTTPServer()
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	hs.BaseContext = func(net.Listener) context.Context { return base }
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.limits.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		cancelBase() // requests still running: cancel their contexts
		hs.Close()
		s.log.Warn("shutdown deadline passed; requests in flight were cancelled", "timeout", s.limits.ShutdownTimeout)
	}
	<-errc
	return nil
}

// tokens reports whether authentication is on, as a slice for CheckListener.
func (s *Server) tokens() []string {
	if s.auth.open() {
		return nil
	}
	return []string{"configured"}
}

// Close unregisters the uploaded tools, releases their compiled modules and
// unlocks the data directory. Requests still running fail. Close is
// idempotent.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, tn := range s.tenants {
		for name, u := range tn.uploads {
			if cur, ok := tn.reg.Get(name); ok && cur == registry.Tool(u) {
				tn.reg.Unregister(name)
			}
			u.closeNow(ctx)
		}
		tn.uploads = map[string]*uploaded{}
	}
	if s.st != nil {
		s.st.close()
	}
	return nil
}
