// Package cluster runs agrun sessions on Temporal (issue 21): a session
// is a Temporal workflow, each model request an activity on the llm task
// queue, each WebAssembly tool call an activity on the wasm queue, each
// MCP call one on the mcp queue, so that a pool of worker processes
// (`agrun worker`) shares the load and a session survives the loss of the
// machine running it without repeating the model requests and tool calls
// that completed.
//
// The package owns the workflow and the activities; the stores they share
// are packages of their own, so that a program links only the clients of
// the stores it uses: cluster/store (the interfaces — an ObjectStore for
// modules, the names of uploaded tools and payloads passed by reference,
// and its directory implementation), cluster/s3store (S3); transcripts
// are a session.Store (package session: JSON-lines files, memory;
// session/pgstore: PostgreSQL), in session's record formats.
// It knows nothing of agrun.toml: the
// caller (cmd/agrun) builds the registry and the loop configuration and
// hands them in. loop, registry, runtime and wasmtools never import it
// (internal/testing/archtest). See docs/SCALING.md.
package cluster
