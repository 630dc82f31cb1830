// Package mcp connects agrun to the Model Context Protocol in both
// directions: a [Client] turns the tools of an MCP server into
// registry.Tools, which sit in the registry next to WASM tools (the loop
// cannot tell them apart), and [NewServer], [ServeStdio], [Serve] and
// [NewHTTPHandler] offer every tool of a registry to any MCP client (Claude Desktop, Cursor,
// ...). It is built on github.com/modelcontextprotocol/go-sdk.
//
// # Client
//
//	c, err := mcp.NewClient("everything", mcp.Stdio{
//		Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-everything"},
//	}, &mcp.ClientOptions{Permissions: []permission.Permission{permission.Read}})
//	if err != nil { ... }
//	defer c.Close(ctx)
//	if err := c.Connect(ctx); err != nil { ... } // handshake + tools/list
//	if err := c.Sync(reg); err != nil { ... }    // registers everything__echo, ...
//	inv := reg.Invoke(ctx, "everything__echo", json.RawMessage(`{"message":"hi"}`))
//
// Transports: [Stdio] runs the server as a child process in its own
// process group; [HTTP] speaks streamable HTTP; [SDKTransport] wraps any
// SDK transport (in-memory ones for tests).
//
// Tool names in the registry are "<server>__<tool>" made safe by
// [ToolName]; two server tools that map to one name are an error.
// Descriptions (and the descriptions and titles inside input schemas) come
// from an untrusted server: [SanitizeText] drops control and invisible
// characters and cuts them to [MaxDescriptionBytes]. MCP servers cannot
// declare permissions: every tool of a server declares
// [ClientOptions.Permissions], which the registry's permission checker judges
// like any tool's. The registry validates arguments against the server's
// schema before a call leaves the process.
//
// Results: structuredContent, when present, is returned as JSON; otherwise
// the content becomes one JSON string, text blocks joined by newlines,
// images and audio as a placeholder such as "[image: image/png, 48213
// bytes]", resource links as their URI, embedded resources as their text.
// A result with isError is an execution_failed error carrying the server's
// text, cut to [MaxErrorTextBytes]. All text a server sends that reaches
// the model passes through [SanitizeText]: result text, every string
// (keys included) inside structuredContent, isError messages, and the
// parts of error messages that quote the server (such as the bytes an SDK
// decoding error shows), so no control character but newline and tab, and
// no invisible character, gets through.
//
// # Failures
//
// Every failure is a *registry.Error, never a hang or a panic:
//
//   - mcp_not_initialized: before Connect, after Close;
//   - mcp_timeout: no answer within [ClientOptions.Timeout] (default 30 s),
//     including a response that only ever comes back with an unknown id;
//   - mcp_error: the server exited (pending calls fail at once, with its
//     exit status), sent a message over [ClientOptions.MaxMessageBytes]
//     (default 16 MiB), refused the request, or could not be restarted;
//   - execution_failed: the tool itself reported an error;
//   - timeout / cancelled: the caller's own context ended.
//
// After losing a server, the next call reconnects (restarts a stdio
// server), at most [ClientOptions.MaxRestarts] times in a row with
// exponential backoff from [ClientOptions.RestartBackoff]; a successful
// tool call resets the count. Lines a stdio server writes to stdout that are not JSON are
// logged and skipped; its stderr is logged, capped at
// [ClientOptions.MaxStderrBytes]; floods of notifications are absorbed (tool
// list changes coalesce into one refresh at a time). When the server
// announces notifications/tools/list_changed (or after a restart) the tool
// list is fetched again and every registry given to [Client.Sync] follows.
//
// [Client.Close] closes a stdio server's stdin, waits up to 2 s, then sends
// SIGTERM and, 2 s later, SIGKILL to its whole process group, so helpers it
// spawned do not outlive it; a server that exits on its own is a normal
// shutdown whatever its exit status.
//
// # Server
//
//	err := mcp.ServeStdio(ctx, reg, os.Stdin, os.Stdout, nil) // agrun mcp serve
//	http.Handle("/mcp", mcp.NewHTTPHandler(reg, nil))       // agrun mcp serve --http ADDR
//
// Every registry tool becomes an MCP tool with its name, description and
// schema; calls go through registry.Invoke, so permission checks and
// argument validation apply; failures are isError results reading
// "error (<kind>): <message>". See docs/MCP.md for configuration and the
// conformance results.
package mcp
