package setup

import (
	"context"

	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/telemetry"
)

// UseTelemetry makes the Env's MCP clients record their requests in tel
// (spans and mcp.client.operation.duration) from now on. Telemetry is
// set up after New, from the sandbox it builds, so the requests made
// while connecting (initialize, tools/list) are not recorded; every
// tools/call a run makes is, as a child of its execute_tool span.
func (e *Env) UseTelemetry(tel *telemetry.Telemetry) {
	e.tel.Store(tel)
}

// observeMCP is the MCP clients' Observe: the telemetry UseTelemetry
// gave, if any.
func (e *Env) observeMCP(ctx context.Context, op *mcp.Operation) (context.Context, func(error)) {
	if obs := MCPObserve(e.tel.Load()); obs != nil {
		return obs(ctx, op)
	}
	return ctx, func(error) {}
}

// MCPObserve is the mcp.Observe that records each MCP request in tel as
// the OpenTelemetry MCP conventions describe (telemetry.StartMCP): for
// agrun's MCP clients and for `agrun mcp serve`'s server. Nil (observe
// nothing) for a nil tel.
func MCPObserve(tel *telemetry.Telemetry) mcp.Observe {
	if tel == nil {
		return nil
	}
	return func(ctx context.Context, op *mcp.Operation) (context.Context, func(error)) {
		ctx, end := tel.StartMCP(ctx, telemetry.MCPOperation{
			Client: op.Client, Method: op.Method, Target: op.Target,
			SessionID: op.SessionID, ProtocolVersion: op.ProtocolVersion, Meta: op.Meta,
			Transport: op.Transport, ServerAddress: op.ServerAddress, ServerPort: op.ServerPort,
		})
		return ctx, func(err error) { end(mcp.ErrorType(err)) }
	}
}
