package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// Defaults of ClientOptions.
const (
	DefaultTimeout         = 30 * time.Second
	DefaultMaxMessageBytes = 16 << 20
	DefaultMaxRestarts     = 3
	DefaultRestartBackoff  = time.Second
	DefaultMaxStderrBytes  = 64 << 10
)

// Bounds on what one server may list.
const (
	maxTools     = 1000 // tools per server
	maxPages     = 100  // tools/list pages per listing
	maxBackoff   = 30 * time.Second
	closeSession = 5 * time.Second // how long Close waits for the SDK session to wind down
)

// ClientOptions configures a Client. A nil *ClientOptions means all
// defaults; each zero field means its default.
type ClientOptions struct {
	// Timeout bounds each request to the server (initialize, each page of
	// tools/list, each tools/call). Zero means DefaultTimeout (30 s).
	Timeout time.Duration
	// MaxMessageBytes caps one message from the server; a larger one breaks
	// the connection and fails the pending calls with mcp_error. Zero means
	// DefaultMaxMessageBytes (16 MiB).
	MaxMessageBytes int
	// MaxRestarts bounds how many times in a row the Client reconnects
	// (restarts a stdio server) after losing the connection; a successful
	// tool call (not a listing) resets the count. Zero means DefaultMaxRestarts (3); negative
	// means never reconnect.
	MaxRestarts int
	// RestartBackoff is the wait before the first reconnection after a
	// loss; it doubles with each further one, up to 30 s. Zero means
	// DefaultRestartBackoff (1 s).
	RestartBackoff time.Duration
	// Permissions are what every tool of this server declares to the
	// registry's permission checker (MCP servers cannot declare their own).
	// Empty means the tools declare nothing.
	Permissions []permission.Permission
	// Logger receives the server's stderr (one record per line), lines it
	// wrote to stdout that were not JSON, and reconnection notices. Nil
	// means slog.Default().
	Logger *slog.Logger
	// MaxStderrBytes caps how much of a server process's stderr is logged
	// (per process); the rest is read and discarded. Zero means
	// DefaultMaxStderrBytes (64 KiB).
	MaxStderrBytes int
	// Elicit, if set, answers the server's questions for the person
	// (elicitation, form mode; see Elicitation): the Client then declares
	// the elicitation capability. Questions come one at a time, at most
	// MaxElicitationsPerMinute, each at most MaxElicitFields fields;
	// others, and every URL-mode request, are declined without asking.
	// A nil answer declines. Nil: no capability, and servers cannot ask.
	Elicit func(ctx context.Context, e *Elicitation) (*ElicitAnswer, error)
	// Progress, if set, gets the server's progress notifications for the
	// calls in progress (each call is sent with a progress token): the
	// tool's registry name and the server's figures, its message cleaned
	// and cut to 200 bytes. Notifications for no call in progress are
	// dropped. Nil: calls carry no progress token.
	Progress func(Progress)
	// ResourceTool offers the server's resources to the model as one more
	// registry tool, SERVER__read_resource (it declares "read"; its
	// description lists the resources, cut to MaxDescriptionBytes),
	// refreshed when the server says its resources changed. A server
	// without resources, or with a tool of that name, gets none.
	ResourceTool bool
	// Observe, if set, is told of each request the Client sends, and may
	// add trace context to its params._meta (package telemetry's
	// MCPObserve: the MCP spans of the OpenTelemetry conventions).
	Observe Observe
	// Sample, if set, answers the server's sampling requests
	// (sampling/createMessage) with a reply from agrun's model: the
	// Client then declares the sampling capability (without tools). Each
	// request is bounded and cleaned first (see SamplingRequest); one at
	// a time, at most MaxSamplingsPerMinute; a request with tools, or
	// with image or audio content, is refused. An error (a
	// *SamplingRefused to say why) refuses it, and its text goes to the
	// server. Nil: no capability, and servers cannot sample.
	Sample func(ctx context.Context, r *SamplingRequest) (*SamplingReply, error)
	// SamplingMaxTokens caps the maxTokens of each sampling request.
	// Zero means DefaultSamplingMaxTokens (1024).
	SamplingMaxTokens int
	// Roots are the directories offered to the server as its roots
	// (roots/list), as absolute paths: each becomes a file:// root named
	// by its last element. Roots only tell a server where to work; they
	// grant nothing (a stdio server runs with agrun's own access). Empty:
	// no roots capability.
	Roots []string
}

// Progress is one progress notification of a call (ClientOptions.Progress).
type Progress struct {
	Server, Tool string  // the server's name, the tool's registry name
	Progress     float64 // so far
	Total        float64 // 0: unknown
	Message      string  // cleaned, at most 200 bytes
}

// Client is a connection to one MCP server whose tools it offers to a
// registry. It reconnects on demand after losing the server (see
// ClientOptions.MaxRestarts), and turns every failure into a *registry.Error of
// kind mcp_error, mcp_timeout or mcp_not_initialized (plus execution_failed
// for tools that report an error, and timeout/cancelled when the caller's
// own context ends).
//
// A Client is safe for concurrent use. Close it when done: for a stdio
// server, Close ends the server's process group.
type Client struct {
	name string
	tr   Transport
	opts ClientOptions
	log  *slog.Logger
	sdk  *sdk.Client

	mu        sync.Mutex
	connected bool          // Connect succeeded
	closed    bool          // Close was called
	sess      *session      // the current session; may be dead
	dialing   chan struct{} // closed when the (re)connection in progress ends
	restarts  int           // reconnections since the last successful call
	lastLoss  time.Time     // when the last session died or dial failed
	lastErr   error         // why
	done      chan struct{} // closed by Close
	life      context.Context
	endLife   context.CancelFunc // cancels life; called by Close

	refresh     chan struct{} // a tools/list_changed arrived (coalescing, cap 1)
	gate        elicitGate    // the server's questions for the person (elicit.go)
	sampleGate  elicitGate    // the server's sampling requests (sampling.go)
	calls       sync.Map      // progress token -> progressCall of the call in progress
	nextCall    atomic.Int64  // progress tokens
	refreshOnce sync.Once     // starts the refresher
	// updated gets the server's notifications/resources/updated
	// (onResourceUpdated; nil: dropped).
	updated atomic.Pointer[func(uri string)]

	rootsMu  sync.Mutex // serializes SetRoots
	rootURIs []string   // the roots offered, as URIs

	syncMu  sync.Mutex // serializes tool list updates and Sync
	tools   []registry.Tool
	toolGen uint64 // generation of tools: listings started later win
	nextGen uint64
	syncs   []*syncTarget
}

// session is one connection to the server.
type session struct {
	cs     *sdk.ClientSession
	link   *link
	ctx    context.Context // cancelled when the session ends: in-flight calls stop
	cancel context.CancelFunc
	dead   chan struct{} // closed when the session ended
	err    error         // why it ended; set before dead is closed
	ending atomic.Bool   // the Client ended it on purpose
}

func (s *session) alive() bool {
	select {
	case <-s.dead:
		return false
	default:
		return true
	}
}

// NewClient returns an unconnected Client for the server called serverName
// (the prefix of its tools' registry names). It fails if serverName is
// empty or opts has negative values where they make no sense. Call Connect
// next.
func NewClient(serverName string, t Transport, opts *ClientOptions) (*Client, error) {
	if serverName == "" {
		return nil, errors.New("empty server name")
	}
	if t == nil {
		return nil, fmt.Errorf("server %q: nil transport", serverName)
	}
	var o ClientOptions
	if opts != nil {
		o = *opts
		o.Permissions = slices.Clone(opts.Permissions)
	}
	if o.Timeout < 0 || o.MaxMessageBytes < 0 || o.RestartBackoff < 0 || o.MaxStderrBytes < 0 || o.SamplingMaxTokens < 0 {
		return nil, fmt.Errorf("server %q: negative option", serverName)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxRestarts == 0 {
		o.MaxRestarts = DefaultMaxRestarts
	}
	if o.RestartBackoff == 0 {
		o.RestartBackoff = DefaultRestartBackoff
	}
	if o.MaxStderrBytes == 0 {
		o.MaxStderrBytes = DefaultMaxStderrBytes
	}
	if o.SamplingMaxTokens == 0 {
		o.SamplingMaxTokens = DefaultSamplingMaxTokens
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Client{
		name:    serverName,
		tr:      t,
		opts:    o,
		log:     log,
		done:    make(chan struct{}),
		refresh: make(chan struct{}, 1),
	}
	c.life, c.endLife = context.WithCancel(context.Background())
	so := &sdk.ClientOptions{
		Logger: log,
		// Sampling only with Sample, roots only with Roots, elicitation
		// only with Elicit.
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case c.refresh <- struct{}{}:
			default: // a refresh is already pending: floods coalesce
			}
		},
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			if req.Params == nil {
				return
			}
			v, ok := c.calls.Load(fmt.Sprint(req.Params.ProgressToken))
			if !ok {
				return
			}
			call := v.(progressCall)
			p := Progress{Server: c.name, Tool: call.tool, Progress: req.Params.Progress, Total: req.Params.Total, Message: SanitizeText(req.Params.Message, 200)}
			if o.Progress != nil {
				o.Progress(p)
			}
			if call.sink != nil { // agrun mcp serve's client asked for it
				call.sink(p)
			}
		},
		ResourceUpdatedHandler: func(_ context.Context, req *sdk.ResourceUpdatedNotificationRequest) {
			if f := c.updated.Load(); f != nil && *f != nil && req.Params != nil {
				(*f)(req.Params.URI)
			}
		},
		ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) {
			if !o.ResourceTool {
				return
			}
			select {
			case c.refresh <- struct{}{}: // the read_resource tool's list
			default:
			}
		},
	}
	if o.Elicit != nil {
		so.Capabilities.Elicitation = &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}}
		so.ElicitationHandler = c.elicit
	}
	if o.Sample != nil {
		c.offerSampling(so)
	}
	if len(o.Roots) > MaxRoots {
		return nil, fmt.Errorf("server %q: %d roots, at most %d", serverName, len(o.Roots), MaxRoots)
	}
	roots, err := fileRoots(o.Roots)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", serverName, err)
	}
	for _, r := range roots {
		c.rootURIs = append(c.rootURIs, r.URI)
	}
	if len(roots) > 0 {
		//lint:ignore SA1019 roots are offered to servers on protocol versions before 2026-07-28 (SEP-2577 deprecates them, with a 12-month window; docs/MCP.md)
		so.Capabilities.RootsV2 = &sdk.RootCapabilities{ListChanged: true}
	}
	c.sdk = sdk.NewClient(&sdk.Implementation{Name: "agrun", Version: "0.1.0"}, so)
	if o.Observe != nil {
		c.sdk.AddSendingMiddleware(clientObserver(serverName, t, o.Observe))
	}
	//lint:ignore SA1019 roots are offered to servers on protocol versions before 2026-07-28 (SEP-2577 deprecates them, with a 12-month window; docs/MCP.md)
	c.sdk.AddRoots(roots...)
	return c, nil
}

// Name returns the server's name as given to NewClient.
func (c *Client) Name() string { return c.name }

func (c *Client) errorf(k registry.Kind, tool, format string, args ...any) *registry.Error {
	name := c.name
	if tool != "" {
		name = ToolName(c.name, tool)
	}
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = cleanError(err)
		}
	}
	return registry.Errorf(k, name, "server %q: "+format, append([]any{c.name}, args...)...)
}

// maxErrorText caps the text of an error that may quote a server (see
// cleanError).
const maxErrorText = 2 << 10

// cleanError wraps err, whose text may quote what a server sent (the SDK's
// decoding errors quote the bytes it could not decode), so that its message
// is passed through textsafe and capped: fit for a model, a terminal and a
// log; errors.Is and errors.As still see the cause. nil and
// *registry.Error (whose messages this package built from clean parts) are
// returned as they are.
func cleanError(err error) error {
	if _, ok := err.(*registry.Error); ok {
		return err
	}
	return textsafe.WrapError(err, maxErrorText)
}

// Connect starts the server (or opens the HTTP session), performs the MCP
// handshake and lists the server's tools, each step bounded by
// ClientOptions.Timeout. Calling it again once connected does nothing. Errors are
// *registry.Error of kind mcp_error or mcp_timeout; after a failed Connect
// the Client may be connected again.
func (c *Client) Connect(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.errorf(registry.MCPNotInitialized, "", "client is closed")
	}
	if c.connected {
		c.mu.Unlock()
		return nil
	}
	if c.dialing != nil {
		c.mu.Unlock()
		return c.errorf(registry.MCPError, "", "Connect already in progress")
	}
	ch := make(chan struct{})
	c.dialing = ch
	c.mu.Unlock()

	s, err := c.dial(ctx)

	c.mu.Lock()
	c.dialing = nil
	close(ch)
	if err == nil {
		if c.closed {
			c.mu.Unlock()
			c.endSession(context.Background(), s)
			return c.errorf(registry.MCPNotInitialized, "", "client is closed")
		}
		c.sess = s
		c.connected = true
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := c.ListTools(ctx); err != nil {
		// Start over cleanly: no half-connected client, no lingering server.
		c.mu.Lock()
		c.connected = false
		s = c.sess
		c.sess = nil
		c.restarts = 0
		c.mu.Unlock()
		if s != nil {
			_ = c.endSession(context.Background(), s)
		}
		return err
	}
	c.refreshOnce.Do(func() { go c.refresher() })
	return nil
}

// dial opens a new session.
func (c *Client) dial(parent context.Context) (*session, error) {
	ctx, cancel := context.WithTimeoutCause(parent, c.opts.Timeout, errRequestTimeout)
	defer cancel()
	l, err := c.tr.open(ctx, &linkConfig{
		server:     c.name,
		maxMessage: c.opts.MaxMessageBytes,
		maxStderr:  c.opts.MaxStderrBytes,
		timeout:    c.opts.Timeout,
		log:        c.log,
	})
	if err != nil {
		return nil, c.errorf(registry.MCPError, "", "starting: %w", err)
	}
	cs, err := c.sdk.Connect(ctx, l.transport, nil)
	if err != nil {
		if perr := parent.Err(); perr != nil {
			err = registry.NewError(registry.KindOf(perr), c.name, perr)
		} else {
			err = c.classify(ctx, "", "initialize", err, l)
		}
		if l.stop != nil {
			stopCtx, cancel := context.WithTimeout(context.Background(), closeSession)
			_ = l.stop(stopCtx)
			cancel()
		}
		return nil, err
	}
	sctx, scancel := context.WithCancel(context.Background())
	s := &session{cs: cs, link: l, ctx: sctx, cancel: scancel, dead: make(chan struct{})}
	go c.watch(s)
	return s, nil
}

// watch waits for the session to end, records why, and releases what is
// behind it (for stdio, the process group).
func (c *Client) watch(s *session) {
	err := s.cs.Wait()
	if l := s.link; l.cause != nil {
		if cause := l.cause(); cause != nil {
			err = cause
		}
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	s.err = err
	s.cancel()
	close(s.dead)

	c.mu.Lock()
	if c.sess == s {
		c.lastLoss = time.Now()
		c.lastErr = err
	}
	closed := c.closed
	c.mu.Unlock()
	if !closed && !s.ending.Load() {
		c.log.Warn("lost the MCP server", "server", c.name, "error", err.Error())
	}
	if s.link.stop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeSession)
		_ = s.link.stop(ctx)
		cancel()
	}
}

// session returns a live session, reconnecting if the last one died and
// the restart budget allows.
func (c *Client) session(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock()
			return nil, c.errorf(registry.MCPNotInitialized, "", "client is closed")
		case !c.connected:
			c.mu.Unlock()
			return nil, c.errorf(registry.MCPNotInitialized, "", "not connected (call Connect first)")
		case c.sess != nil && c.sess.alive():
			s := c.sess
			c.mu.Unlock()
			return s, nil
		case c.dialing != nil:
			ch := c.dialing
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, registry.AsError(c.name, ctx.Err())
			}
		}
		if c.opts.MaxRestarts < 0 || c.restarts >= c.opts.MaxRestarts {
			err := c.lastErr
			n := c.restarts
			c.mu.Unlock()
			return nil, c.errorf(registry.MCPError, "", "connection lost and not restarted (%d restarts in a row; limit %d): %w", n, max(c.opts.MaxRestarts, 0), err)
		}
		c.restarts++
		attempt := c.restarts
		wait := c.opts.RestartBackoff << (attempt - 1)
		if wait > maxBackoff || wait <= 0 {
			wait = maxBackoff
		}
		wait -= time.Since(c.lastLoss)
		ch := make(chan struct{})
		c.dialing = ch
		c.mu.Unlock()

		var s *session
		var err error
		dialed := false
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				err = registry.AsError(c.name, ctx.Err())
			case <-c.done:
				err = c.errorf(registry.MCPNotInitialized, "", "client is closed")
			}
			t.Stop()
		}
		if err == nil {
			c.log.Info("reconnecting to the MCP server", "server", c.name, "attempt", attempt)
			s, err = c.dial(ctx)
			dialed = true
		}

		c.mu.Lock()
		c.dialing = nil
		close(ch)
		if err == nil && c.closed {
			c.mu.Unlock()
			c.endSession(context.Background(), s)
			return nil, c.errorf(registry.MCPNotInitialized, "", "client is closed")
		}
		switch {
		case !dialed:
			// Interrupted during the backoff: this attempt did not happen.
			c.restarts--
		case err != nil:
			c.lastLoss = time.Now()
			c.lastErr = err
		default:
			c.sess = s
		}
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		// The new server may have other tools.
		c.requestRefresh()
		return s, nil
	}
}

func (c *Client) requestRefresh() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// succeeded resets the restart budget after a tools/call got an answer
// (a listing does not count: a server that answers tools/list but dies on
// every call must run out of restarts).
func (c *Client) succeeded() {
	c.mu.Lock()
	c.restarts = 0
	c.mu.Unlock()
}

// classify turns an error of a request into a *registry.Error: the
// caller's context ending (timeout/cancelled), our per-request deadline
// (mcp_timeout), or anything else (mcp_error, with the link's own
// explanation when it has one).
func (c *Client) classify(ctx context.Context, tool, what string, err error, l *link) *registry.Error {
	name := c.name
	if tool != "" {
		name = ToolName(c.name, tool)
	}
	if errors.Is(context.Cause(ctx), errRequestTimeout) {
		return registry.NewError(registry.MCPTimeout, name, fmt.Errorf("server %q: %s: no answer within %s", c.name, what, c.opts.Timeout))
	}
	if l != nil && l.cause != nil {
		if cause := l.cause(); cause != nil {
			return registry.NewError(registry.MCPError, name, fmt.Errorf("server %q: %s: %w", c.name, what, cleanError(cause)))
		}
	}
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return registry.NewError(registry.MCPError, name, fmt.Errorf("server %q: %s: server error %d: %s", c.name, what, werr.Code, SanitizeText(werr.Message, 1024)))
	}
	return registry.NewError(registry.MCPError, name, fmt.Errorf("server %q: %s: %w", c.name, what, cleanError(err)))
}

// request runs f on a live session with the per-request timeout, mapping
// failures to *registry.Error.
func (c *Client) request(ctx context.Context, tool, what string, f func(ctx context.Context, s *session) error) error {
	if err := ctx.Err(); err != nil {
		return registry.NewError(registry.KindOf(err), c.toolName(tool), err)
	}
	s, err := c.session(ctx)
	if err != nil {
		return retool(err, c.toolName(tool))
	}
	rctx, cancel := context.WithTimeoutCause(ctx, c.opts.Timeout, errRequestTimeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	err = f(rctx, s)
	if err == nil {
		return nil
	}
	switch {
	case ctx.Err() != nil:
		return registry.NewError(registry.KindOf(ctx.Err()), c.toolName(tool), ctx.Err())
	case errors.Is(context.Cause(rctx), errRequestTimeout):
		return c.errorf(registry.MCPTimeout, tool, "%s: no answer within %s", what, c.opts.Timeout)
	case !s.alive() || s.ctx.Err() != nil || connectionLost(err):
		// The session is ending; wait (briefly) until the watcher knows why.
		t := time.NewTimer(closeSession)
		defer t.Stop()
		select {
		case <-s.dead:
			if c.isClosed() {
				return c.errorf(registry.MCPError, tool, "%s: client closed during the request", what)
			}
			return c.errorf(registry.MCPError, tool, "%s: %w", what, s.err)
		case <-t.C:
		}
	}
	return c.classify(rctx, tool, what, err, s.link)
}

var errRequestTimeout = errors.New("mcp request timeout")

// connectionLost reports whether err (from a request) means the connection
// broke, rather than the server answering with an error.
func connectionLost(err error) bool {
	var tl *tooLargeError
	return errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrClosed) || errors.As(err, &tl)
}

func (c *Client) toolName(tool string) string {
	if tool == "" {
		return c.name
	}
	return ToolName(c.name, tool)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// retool returns err with its Tool set to name.
func retool(err error, name string) error {
	var e *registry.Error
	if errors.As(err, &e) && e.Tool != name {
		c := *e
		c.Tool = name
		return &c
	}
	return err
}

// CallTool calls the server's tool called name (its name on the server,
// not the registry name) with args, a JSON object (empty means {}). The
// result is mapped as described in the package doc. Errors are
// *registry.Error: execution_failed when the tool reported an error (with
// its text), mcp_timeout when the server did not answer within
// ClientOptions.Timeout, mcp_error when the connection broke or the server
// answered with a protocol error, mcp_not_initialized before Connect or
// after Close, timeout or cancelled when ctx ended.
func (c *Client) CallTool(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	if !json.Valid(args) || strings.TrimSpace(string(args))[0] != '{' {
		return nil, c.errorf(registry.InvalidArguments, name, "arguments must be a JSON object")
	}
	var res *sdk.CallToolResult
	params := &sdk.CallToolParams{Name: name, Arguments: args}
	if sink := progressSink(ctx); c.opts.Progress != nil || sink != nil {
		token := fmt.Sprintf("agrun-%d", c.nextCall.Add(1))
		params.SetProgressToken(token)
		c.calls.Store(token, progressCall{tool: ToolName(c.name, name), sink: sink})
		defer c.calls.Delete(token)
	}
	err := c.request(ctx, name, "tools/call "+SanitizeText(name, 100), func(ctx context.Context, s *session) error {
		var err error
		res, err = s.cs.CallTool(ctx, params)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.succeeded()
	if res.IsError {
		msg := SanitizeText(contentText(res.Content), MaxErrorTextBytes)
		if strings.TrimSpace(msg) == "" {
			msg = "the tool reported an error without a message"
		}
		return nil, registry.NewError(registry.ExecutionFailed, ToolName(c.name, name), errors.New(msg))
	}
	out, err := resultJSON(res)
	if err != nil {
		return nil, c.errorf(registry.MCPError, name, "tools/call result: %w", err)
	}
	return out, nil
}

// ListTools fetches the server's tools (every page), replaces the Client's
// cached list (see Tools), updates every registry passed to Sync, and
// returns the tools as registry adapters. Tools whose input schema the
// registry would refuse are left out and logged. Two server tools that map
// to one registry name are an mcp_error, and the cached list is kept.
func (c *Client) ListTools(ctx context.Context) ([]registry.Tool, error) {
	c.syncMu.Lock()
	c.nextGen++
	gen := c.nextGen
	c.syncMu.Unlock()

	var all []*sdk.Tool
	var cursor string
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, c.errorf(registry.MCPError, "", "tools/list: more than %d pages", maxPages)
		}
		var res *sdk.ListToolsResult
		err := c.request(ctx, "", "tools/list", func(ctx context.Context, s *session) error {
			var err error
			res, err = s.cs.ListTools(ctx, &sdk.ListToolsParams{Cursor: cursor})
			return err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, res.Tools...)
		if len(all) > maxTools {
			return nil, c.errorf(registry.MCPError, "", "tools/list: more than %d tools", maxTools)
		}
		if res.NextCursor == "" || res.NextCursor == cursor {
			break
		}
		cursor = res.NextCursor
	}
	tools, err := c.adapters(all)
	if err != nil {
		return nil, err
	}
	if c.opts.ResourceTool {
		if rt := c.resourceToolFor(ctx); rt != nil {
			if slices.ContainsFunc(tools, func(t registry.Tool) bool { return t.Name() == rt.Name() }) {
				c.log.Warn("the MCP server has a tool named read_resource: no resource tool", "server", c.name)
			} else {
				tools = append(tools, rt)
				slices.SortFunc(tools, func(a, b registry.Tool) int { return strings.Compare(a.Name(), b.Name()) })
			}
		}
	}
	c.setTools(gen, tools)
	return slices.Clone(tools), nil
}

// adapters turns the server's tool list into registry tools.
func (c *Client) adapters(list []*sdk.Tool) ([]registry.Tool, error) {
	byName := map[string]string{} // registry name -> server name
	var out []registry.Tool
	for _, t := range list {
		if t == nil {
			continue
		}
		name := ToolName(c.name, t.Name)
		if prev, dup := byName[name]; dup {
			return nil, c.errorf(registry.MCPError, "", "tools %q and %q both map to the registry name %q",
				SanitizeText(prev, 100), SanitizeText(t.Name, 100), name)
		}
		byName[name] = t.Name
		params, err := sanitizeSchema(t.InputSchema)
		if err == nil {
			_, err = registry.CompileSchema(params)
		}
		if err != nil {
			c.log.Warn("MCP tool left out: unusable input schema", "server", c.name, "tool", SanitizeText(t.Name, 100), "error", err.Error())
			continue
		}
		title := t.Title
		if title == "" && t.Annotations != nil {
			title = t.Annotations.Title
		}
		out = append(out, &tool{
			c:      c,
			name:   name,
			remote: t.Name,
			desc:   SanitizeText(t.Description, MaxDescriptionBytes),
			params: params,
			perms:  c.opts.Permissions,
			hints:  annotationHints(t.Annotations),
			title:  SanitizeText(title, maxTitleBytes),
			out:    outputSchema(t.OutputSchema),
		})
	}
	slices.SortFunc(out, func(a, b registry.Tool) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// setTools installs a new tool list unless a later listing already did.
func (c *Client) setTools(gen uint64, tools []registry.Tool) {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	if gen < c.toolGen {
		return
	}
	c.toolGen = gen
	c.tools = tools
	for _, st := range c.syncs {
		st.apply(tools, c.log)
	}
}

// Tools returns the server's tools as of the last listing (Connect, a
// ListTools call, or a refresh after notifications/tools/list_changed), as
// registry adapters named ToolName(server, tool), sorted by name. Each
// adapter's Execute calls CallTool; its Permissions are
// ClientOptions.Permissions.
func (c *Client) Tools() []registry.Tool {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	return slices.Clone(c.tools)
}

// Sync registers the server's current tools in reg and keeps reg in step
// with later listings: when the server announces that its tools changed
// (or after a restart), new tools are registered, changed ones replaced and
// removed ones unregistered. Only names this Client registered are ever
// replaced or unregistered. If a tool cannot be registered now (its name is
// taken), Sync unregisters what it added and returns the error; later
// conflicts are logged and skipped. Sync may be called for several
// registries.
func (c *Client) Sync(reg *registry.Registry) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	st := &syncTarget{reg: reg, owned: map[string]bool{}}
	for _, t := range c.tools {
		if err := reg.Register(t); err != nil {
			for name := range st.owned {
				reg.Unregister(name)
			}
			return fmt.Errorf("server %q: %w", c.name, err)
		}
		st.owned[t.Name()] = true
	}
	c.syncs = append(c.syncs, st)
	return nil
}

type syncTarget struct {
	reg   *registry.Registry
	owned map[string]bool // names this Client registered in reg
}

func (st *syncTarget) apply(tools []registry.Tool, log *slog.Logger) {
	owned := make(map[string]bool, len(tools))
	for _, t := range tools {
		name := t.Name()
		var err error
		if st.owned[name] {
			_, err = st.reg.Replace(t)
		} else {
			err = st.reg.Register(t)
		}
		if err != nil {
			log.Warn("MCP tool not registered", "tool", name, "error", err.Error())
			continue
		}
		owned[name] = true
	}
	for name := range st.owned {
		if !owned[name] {
			st.reg.Unregister(name)
		}
	}
	st.owned = owned
}

// refresher re-lists the tools whenever the server says they changed.
func (c *Client) refresher() {
	for {
		select {
		case <-c.done:
			return
		case <-c.refresh:
		}
		if _, err := c.ListTools(c.life); err != nil && !c.isClosed() {
			c.log.Warn("refreshing the MCP server's tool list failed", "server", c.name, "error", err.Error())
		}
	}
}

// Close ends the session and, for a stdio server, the server's whole
// process group: it closes the server's stdin, waits up to 2 s for it to
// exit, then sends SIGTERM and after 2 s more SIGKILL to the group. A done
// ctx skips the waiting. Calls in flight fail with mcp_error. A server that
// exits on its own, whatever its exit status, is a normal shutdown: Close
// returns an error only if the server could not be ended. Close is
// idempotent; the Client cannot be used afterwards. Tools it registered
// with Sync stay registered; calling them fails with mcp_not_initialized.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	c.endLife()
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	return c.endSession(ctx, s)
}

func (c *Client) endSession(ctx context.Context, s *session) error {
	s.ending.Store(true)
	s.cancel() // in-flight calls return now
	closed := make(chan struct{})
	go func() { _ = s.cs.Close(); close(closed) }()
	var err error
	if s.link.stop != nil {
		err = s.link.stop(ctx)
	}
	t := time.NewTimer(closeSession)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
	case <-ctx.Done():
	}
	if err != nil {
		return registry.NewError(registry.MCPError, c.name, fmt.Errorf("server %q: close: %w", c.name, cleanError(err)))
	}
	return nil
}

// tool is a server's tool as a registry.Tool.
type tool struct {
	c      *Client
	name   string // registry name
	remote string // name on the server
	desc   string
	params json.RawMessage
	perms  []permission.Permission
	hints  []string        // from the server's annotations (hints.go)
	title  string          // the server's title, cleaned
	out    json.RawMessage // the server's output schema, cleaned; nil if none or unusable
}

var _ registry.Presented = (*tool)(nil)

// Title implements registry.Presented: the server's title for the tool.
func (t *tool) Title() string { return t.title }

// OutputSchema implements registry.Presented: the server's output schema.
func (t *tool) OutputSchema() json.RawMessage { return t.out }

func (t *tool) Name() string                         { return t.name }
func (t *tool) Description() string                  { return t.desc }
func (t *tool) Parameters() json.RawMessage          { return t.params }
func (t *tool) Permissions() []permission.Permission { return slices.Clone(t.perms) }

// Execute calls the tool on the server (see Client.CallTool).
func (t *tool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	return t.c.CallTool(ctx, t.remote, args)
}

// ExecuteAudited implements registry.AuditedTool: what agrun sees of an
// MCP call is the bytes each way (the duration and outcome are the
// Invocation's own).
func (t *tool) ExecuteAudited(ctx context.Context, args json.RawMessage) (json.RawMessage, *registry.Audit, error) {
	out, err := t.c.CallTool(ctx, t.remote, args)
	return out, &registry.Audit{Source: "mcp", BytesIn: int64(len(args)), BytesOut: int64(len(out))}, err
}
