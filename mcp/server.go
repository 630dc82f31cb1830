package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// ServerOptions configures NewServer, Serve, ServeStdio and
// NewHTTPHandler. A nil *ServerOptions means all defaults; each zero field
// means its default.
type ServerOptions struct {
	// Name and Version are what the server reports to clients. Empty means
	// "agrun" and "0.1.0".
	Name, Version string
	// Logger receives the SDK's diagnostics and tools that could not be
	// exposed. Nil means warnings and errors to stderr (never stdout, which
	// carries the stdio protocol).
	Logger *slog.Logger
	// MaxRequestBytes caps one message from a client: a line for
	// ServeStdio, a request body for NewHTTPHandler (unless
	// HTTP.MaxRequestBodyBytes is set). Zero means DefaultMaxRequestBytes
	// (4 MiB).
	MaxRequestBytes int
	// MaxSessions caps the sessions NewHTTPHandler keeps at once, and
	// MaxSessionsPerClient those of one client address (an IPv4 address,
	// an IPv6 /64). A request that would open one more is refused with
	// 503 (total) or 429 (per client) and a JSON-RPC error. Zero means
	// DefaultMaxSessions (256) and DefaultMaxSessionsPerClient (16).
	MaxSessions, MaxSessionsPerClient int
	// HTTP configures NewHTTPHandler (ignored by Serve and ServeStdio).
	// Nil means the SDK's defaults (which include protection against DNS
	// rebinding for servers listening on localhost). Its SessionTimeout,
	// how long a session that receives no request is kept, zero means
	// DefaultSessionTimeout (5 minutes); negative means forever (do not,
	// for a server that untrusted clients reach).
	HTTP *sdk.StreamableHTTPOptions
	// Approve, if set, is asked about each tools/call before it runs,
	// as agrun's approver is about a model's calls in `agrun run` (the
	// clients of an MCP server are usually agents driven by a model):
	// its Approval runs the call, refuses it, or asks the client's user.
	// The question goes through elicitation (form mode, the answer a
	// yes/no and an optional reason): elicitation/create on protocol
	// versions before 2026-07-28, an input-required result on later ones
	// (SEP-2322; the client's retry must carry the answer to the question
	// asked about that very call, within 15 minutes). A client that
	// offers no elicitation gets a denied_by_user error, never a silent
	// run. An answer is only as good as the client: one that answers for
	// its user is trusted to. Nil: every call runs unasked.
	Approve func(ApprovalCall) Approval
	// Upstreams, if set, have their resources, resource templates and
	// prompts re-served (`[mcp.NAME] serve_resources`): the server then
	// lists what these clients list (again at most every 5 seconds) and
	// answers resources/read and prompts/get through them, everything
	// cleaned and bounded as agrun's Client takes it (Client.Resources,
	// ResourceTemplates, Prompts; text cut to MaxResourceTextBytes, binary
	// data — blobs, images, audio — passed on up to MaxResourceBlobBytes
	// per answer, more an error). A resource keeps its URI and a template
	// its URI template, served by the first client in this order that
	// lists it; a prompt keeps its name, served by the first client
	// listing it, a later client's prompt of the same name as
	// SERVER__NAME. completion/complete and resource subscriptions are
	// declared when an upstream offers them (as it did when NewServer
	// was called) and forwarded to the one serving the prompt, template
	// or resource named (MaxCompletionValues, MaxSubscriptionsPerSession,
	// MaxSubscriptions, MaxUpdatesPerSecond). A client's
	// notifications/resources/updated go to the server NewServer made
	// last with it. Nil: the resources and prompts listings are empty.
	Upstreams []*Client
	// Observe, if set, is told of each request the server receives, with
	// the client's params._meta (where trace context travels): package
	// telemetry's MCPObserve makes the server spans of the OpenTelemetry
	// MCP conventions, children of the client's.
	Observe Observe
	// ProgressInterval is how often a call whose client asked for
	// progress (a progress token) is reported still running, with the
	// seconds elapsed as its progress; a tool of an upstream MCP server
	// that reports progress has that relayed instead (cleaned, at most
	// ten a second). Zero means DefaultProgressInterval (2 s); negative:
	// no heartbeat (upstream progress is still relayed).
	ProgressInterval time.Duration
	// ApprovalTimeout bounds the wait for the user's answer on protocol
	// versions that send elicitation/create; no answer in time denies the
	// call. Zero means DefaultApprovalTimeout (10 minutes).
	ApprovalTimeout time.Duration

	// transport is the network.transport of what serves it ("pipe" for
	// ServeStdio, "tcp" for NewHTTPHandler; "" for Serve's).
	transport string
}

func (o *ServerOptions) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return o.Logger
}

func (o *ServerOptions) maxRequestBytes() int {
	if o.MaxRequestBytes <= 0 {
		return DefaultMaxRequestBytes
	}
	return o.MaxRequestBytes
}

// NewServer returns an MCP server that offers every tool of reg: each
// registry tool becomes an MCP tool with the same name, description and
// input schema, and each call goes through reg.Invoke, so the registry's
// permission check and argument validation apply exactly as for the model.
// A failed call is an isError result whose text is "error (<kind>):
// <message>"; a successful one is a text block holding the tool's output (a
// JSON string output as its plain text, anything else as JSON), with the
// output also as structuredContent when it is a JSON object.
//
// The tool list follows the registry: it is brought up to date before
// every tools/list and tools/call, and connected clients are sent
// notifications/tools/list_changed when it changed.
func NewServer(reg *registry.Registry, opts *ServerOptions) *sdk.Server {
	var o ServerOptions
	if opts != nil {
		o = *opts
	}
	if o.Name == "" {
		o.Name = "agrun"
	}
	if o.Version == "" {
		o.Version = "0.1.0"
	}
	o.Logger = o.logger()
	// Capabilities exactly as served: the SDK's default (logging) and
	// tools, announced even while the registry has none (tools come and
	// go, and the list can change).
	caps := &sdk.ServerCapabilities{
		//lint:ignore SA1019 the SDK's own default, kept so the initialize answer does not change (logging stays functional for the deprecation window)
		Logging: &sdk.LoggingCapabilities{},
		Tools:   &sdk.ToolCapabilities{ListChanged: true},
	}
	// Resources and prompts are declared always, as they are answered
	// (empty listings without upstreams, which the conformance suite's
	// resources-list and prompts-list check); their lists change only
	// when re-served from upstreams. Completions and subscriptions are
	// declared when an upstream re-served offers them, and forwarded.
	caps.Resources = &sdk.ResourceCapabilities{ListChanged: len(o.Upstreams) > 0}
	caps.Prompts = &sdk.PromptCapabilities{ListChanged: len(o.Upstreams) > 0}
	so := &sdk.ServerOptions{Logger: o.Logger, Capabilities: caps}
	var up *republisher
	if len(o.Upstreams) > 0 {
		up = &republisher{ups: o.Upstreams, log: o.Logger}
		for _, c := range o.Upstreams {
			uc := c.currentCaps()
			if uc.Completions != nil {
				so.CompletionHandler = up.complete
			}
			if uc.Resources != nil && uc.Resources.Subscribe {
				caps.Resources.Subscribe = true
				so.SubscribeHandler, so.UnsubscribeHandler = up.subscribe, up.unsubscribe
			}
		}
	}
	b := &bridge{reg: reg, log: o.Logger, exposed: map[string]string{}, approve: newApprover(&o), progressEvery: o.ProgressInterval}
	if b.progressEvery == 0 {
		b.progressEvery = DefaultProgressInterval
	}
	b.srv = sdk.NewServer(&sdk.Implementation{Name: o.Name, Version: o.Version}, so)
	if up != nil {
		up.srv = b.srv
		up.watchUpdates()
	}
	b.sync()
	b.srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			switch {
			case method == "tools/list" || method == "tools/call":
				b.sync()
			case up != nil && syncedMethods[method]:
				up.sync(ctx)
			}
			return next(ctx, method, req)
		}
	})
	if o.Observe != nil {
		// Added last, so outermost: a span covers the whole request.
		b.srv.AddReceivingMiddleware(serverObserver(o.Observe, o.transport, func(method, name string) bool {
			if method == "prompts/get" {
				return up != nil && up.served(name)
			}
			_, ok := reg.Get(name)
			return ok
		}))
	}
	return b.srv
}

// Serve serves reg over t until the client disconnects or ctx is done, as
// NewServer describes. For a stdio server use ServeStdio, which survives
// malformed lines (the SDK's StdioTransport ends the session on the first
// one).
func Serve(ctx context.Context, reg *registry.Registry, t sdk.Transport, opts *ServerOptions) error {
	return NewServer(reg, opts).Run(ctx, t)
}

// bridge keeps an sdk.Server's tools in step with a registry.
type bridge struct {
	reg     *registry.Registry
	srv     *sdk.Server
	log     *slog.Logger
	approve *approver // nil: calls run unasked
	// progressEvery is ServerOptions.ProgressInterval, resolved.
	progressEvery time.Duration

	mu      sync.Mutex
	exposed map[string]string // tool name -> fingerprint of its definition
}

func (b *bridge) sync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range b.reg.Definitions() {
		seen[d.Name] = true
		t := b.describe(d)
		ann, _ := json.Marshal(t.Annotations)
		fp := d.Description + "\x00" + string(d.Parameters) + "\x00" + t.Title + "\x00" + string(ann) + "\x00" + fmt.Sprint(t.OutputSchema)
		if b.exposed[d.Name] == fp {
			continue
		}
		if err := b.add(t); err != nil {
			b.log.Warn("tool not served over MCP", "tool", d.Name, "error", err.Error())
			delete(b.exposed, d.Name)
			b.srv.RemoveTools(d.Name)
			continue
		}
		b.exposed[d.Name] = fp
	}
	var gone []string
	for name := range b.exposed {
		if !seen[name] {
			gone = append(gone, name)
			delete(b.exposed, name)
		}
	}
	if len(gone) > 0 {
		b.srv.RemoveTools(gone...)
	}
}

// describe is the MCP tool a registry tool is served as: its name,
// description and input schema, its title and output schema when it has
// them (registry.Presented: an upstream MCP server's are kept), and
// annotations from what agrun knows it may do (serveAnnotations).
func (b *bridge) describe(d registry.Definition) *sdk.Tool {
	t := &sdk.Tool{Name: d.Name, Description: d.Description, InputSchema: d.Parameters}
	rt, ok := b.reg.Get(d.Name)
	if !ok {
		return t
	}
	title, out := registry.PresentationOf(rt)
	t.Title = SanitizeText(title, maxTitleBytes)
	if len(out) > 0 {
		t.OutputSchema = out
	}
	t.Annotations = serveAnnotations(registry.DescribeGrant(rt), t.Title)
	return t
}

// add exposes one tool; the SDK panics on schemas it dislikes, and a
// registry tool's schema may come from an untrusted module.
func (b *bridge) add(t *sdk.Tool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	b.srv.AddTool(t, b.call)
	return nil
}

func (b *bridge) call(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	if b.approve != nil {
		if t, ok := b.reg.Get(req.Params.Name); ok {
			if res := b.approve.check(ctx, req, t); res != nil {
				if res.IsError {
					b.log.Info("mcp serve: call refused", "tool", req.Params.Name, "reason", res.Content[0].(*sdk.TextContent).Text)
				}
				return res, nil
			}
		}
	}
	ctx, stop := startProgress(ctx, req, b.progressEvery)
	inv := b.reg.Invoke(ctx, req.Params.Name, req.Params.Arguments)
	stop()
	if inv.Err != nil {
		e := registry.AsError(req.Params.Name, inv.Err)
		return &sdk.CallToolResult{
			IsError: true,
			Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("error (%s): %s", e.Kind, SanitizeText(e.Message(), MaxErrorTextBytes))}},
		}, nil
	}
	res := outputResult(inv.Output)
	if rt, ok := b.reg.Get(req.Params.Name); ok && res.StructuredContent == nil {
		if _, out := registry.PresentationOf(rt); len(out) > 0 {
			// The tool advertised an outputSchema: MCP requires its
			// results to carry structuredContent that conforms, so a
			// result that is not even an object is an error (a WASM
			// tool's result is checked against its schema already).
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("error (%s): the tool's result is not a JSON object, as its output schema requires", registry.ExecutionFailed)}}}, nil
		}
	}
	return res, nil
}

// outputResult renders a registry tool's output as a tools/call result.
func outputResult(out json.RawMessage) *sdk.CallToolResult {
	out = cleanOutput(bytes.TrimSpace(out))
	var s string
	if len(out) > 0 && out[0] == '"' && json.Unmarshal(out, &s) == nil {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(out)}}}
	if len(out) > 0 && out[0] == '{' {
		res.StructuredContent = json.RawMessage(out)
	}
	return res
}
