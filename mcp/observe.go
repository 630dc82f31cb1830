package mcp

import (
	"context"
	"errors"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Operation is one MCP request as an Observe function sees it: sent by a
// Client (ClientOptions.Observe) or received by the server
// (ServerOptions.Observe). Package telemetry turns it into an MCP span of
// the OpenTelemetry semantic conventions; package mcp links no
// OpenTelemetry.
type Operation struct {
	// Client is true for a request a Client sends, false for one the
	// server receives.
	Client bool
	// Method is the request's method ("tools/call", "initialize", ...).
	Method string
	// Target is the tool's name for tools/call and the prompt's for
	// prompts/get (as on the wire: the upstream's name on a Client; on
	// the server Unknown for one it does not serve); empty otherwise.
	Target string
	// Server is the Client's configured server name; empty on the server.
	Server string
	// Transport is the OpenTelemetry network.transport: "pipe" (stdio),
	// "tcp" (streamable HTTP), "" when it is not known (SDKTransport,
	// Serve).
	Transport string
	// ServerAddress and ServerPort are a Client's HTTP server's host and
	// port (its URL's; the scheme's port when it names none).
	ServerAddress string
	ServerPort    int
	// SessionID and ProtocolVersion are the session's, when known.
	SessionID, ProtocolVersion string
	// Meta is the request's params._meta, where trace context travels
	// (keys "traceparent", "tracestate", "baggage": SEP-414). On a Client
	// the Observe function may add to it, and what it holds is sent; on
	// the server it is what the client sent (read it, do not keep it).
	// Nil for a request without params (tools/list and ping may have
	// none): nothing travels with it.
	Meta map[string]any
}

// Observe is told of each MCP request when it starts; it returns the
// context the request proceeds in (e.g. carrying a span) and a function
// called once when it ends, with its error: a JSON-RPC or transport
// error, or ErrToolResult for a tools/call answered with isError.
type Observe func(ctx context.Context, op *Operation) (context.Context, func(err error))

// ErrToolResult is what an Observe function's end is given for a
// tools/call whose result is an error (isError), which is not a protocol
// error.
var ErrToolResult = errors.New("tool_error")

// observed are the methods an Observe function is told of: requests, not
// notifications (which have no answer to time).
func observed(method string) bool {
	return !strings.HasPrefix(method, "notifications/")
}

// nilParams reports whether a request has no params (an interface
// holding a nil pointer included).
func nilParams(p sdk.Params) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// target is a request's tool or prompt name.
func target(p sdk.Params) string {
	if nilParams(p) {
		return ""
	}
	switch p := p.(type) {
	case *sdk.CallToolParams:
		return p.Name
	case *sdk.CallToolParamsRaw:
		return p.Name
	case *sdk.GetPromptParams:
		return p.Name
	}
	return ""
}

// endErr is the error an Observe function's end gets for a request's
// outcome.
func endErr(res sdk.Result, err error) error {
	if err != nil {
		return err
	}
	if r, ok := res.(*sdk.CallToolResult); ok && r != nil && r.IsError {
		return ErrToolResult
	}
	return nil
}

// clientObserver is the sending middleware of a Client with
// ClientOptions.Observe: it tells obs of each request and sends the
// _meta obs filled in.
func clientObserver(server string, t Transport, obs Observe) sdk.Middleware {
	transport, host, port := transportOf(t)
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (res sdk.Result, err error) {
			if !observed(method) {
				return next(ctx, method, req)
			}
			// A request without params (tools/list, ping, ... may have
			// none) is observed too; it carries no trace context.
			p := req.GetParams()
			op := &Operation{Client: true, Method: method, Target: target(p), Server: server, Transport: transport, ServerAddress: host, ServerPort: port}
			if !nilParams(p) {
				op.Meta = maps.Clone(p.GetMeta())
				if op.Meta == nil {
					op.Meta = map[string]any{}
				}
			}
			if cs, ok := req.GetSession().(*sdk.ClientSession); ok && cs != nil {
				op.SessionID = cs.ID()
				if r := cs.InitializeResult(); r != nil {
					op.ProtocolVersion = knownVersion(r.ProtocolVersion)
				}
			}
			ctx, end := obs(ctx, op)
			if len(op.Meta) > 0 && !nilParams(p) {
				p.SetMeta(op.Meta)
			}
			defer func() { end(endErr(res, err)) }() // a panic below still ends it
			return next(ctx, method, req)
		}
	}
}

// Unknown is an Operation's Target on the server for a tool or prompt it
// does not serve: a client's word never names a span or a metric series.
const Unknown = "unknown"

// knownVersion is the protocol version v when it is one the SDK speaks,
// else "_OTHER": the other side's word never names a metric series.
func knownVersion(v string) string {
	if v == "" || slices.Contains(sdk.SupportedProtocolVersions(), v) {
		return v
	}
	return "_OTHER"
}

// transportOf is a Client transport's network.transport and, for HTTP,
// its server's host and port.
func transportOf(t Transport) (transport, host string, port int) {
	switch t := t.(type) {
	case Stdio, *Stdio:
		return "pipe", "", 0
	case HTTP:
		return httpAddress(t.URL)
	case *HTTP:
		return httpAddress(t.URL)
	}
	return "", "", 0
}

func httpAddress(raw string) (transport, host string, port int) {
	u, err := url.Parse(raw)
	if err != nil {
		return "tcp", "", 0
	}
	port, _ = strconv.Atoi(u.Port())
	if port == 0 {
		port = map[string]int{"http": 80, "https": 443}[u.Scheme]
	}
	return "tcp", u.Hostname(), port
}

// negotiated is the protocol version the SDK's server settles on for a
// client that asked for v: v when the SDK speaks it, else its latest.
func negotiated(v string) string {
	if vs := sdk.SupportedProtocolVersions(); !slices.Contains(vs, v) && len(vs) > 0 {
		return vs[0]
	}
	return v
}

// serverObserver is the receiving middleware of a server with
// ServerOptions.Observe; known reports whether the server serves the
// tool (tools/call) or prompt (prompts/get) of that name.
func serverObserver(obs Observe, transport string, known func(method, name string) bool) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (res sdk.Result, err error) {
			if !observed(method) {
				return next(ctx, method, req)
			}
			p := req.GetParams()
			op := &Operation{Method: method, Target: target(p), Transport: transport}
			if !nilParams(p) {
				op.Meta = p.GetMeta()
			}
			if op.Target != "" && !known(method, op.Target) {
				op.Target = Unknown
			}
			if ss, ok := req.GetSession().(*sdk.ServerSession); ok && ss != nil {
				op.SessionID = ss.ID()
				if ip := ss.InitializeParams(); ip != nil {
					op.ProtocolVersion = negotiated(ip.ProtocolVersion)
				}
			}
			ctx, end := obs(ctx, op)
			defer func() { end(endErr(res, err)) }() // a panic below still ends it
			return next(ctx, method, req)
		}
	}
}

// knownCodes are the JSON-RPC error codes ErrorType names: JSON-RPC's
// own and MCP's (resource not found, URL elicitation required). Any
// other code is the other side's word and would make metric series at
// will.
var knownCodes = map[int64]bool{-32700: true, -32600: true, -32601: true, -32602: true, -32603: true, -32002: true, -32042: true}

// ErrorType is the error.type of a request's outcome, as the
// OpenTelemetry MCP conventions name it: "" for success, "tool_error"
// for ErrToolResult, the JSON-RPC error code for a standard one (e.g.
// "-32602"), "timeout" or "cancelled" for a context's end, else
// "_OTHER" (any other code included).
func ErrorType(err error) string {
	var je *jsonrpc.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrToolResult):
		return "tool_error"
	case errors.As(err, &je) && knownCodes[je.Code]:
		return strconv.FormatInt(je.Code, 10)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "_OTHER"
}
