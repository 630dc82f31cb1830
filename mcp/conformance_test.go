package mcp

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/agcore/agrun/internal/testing/mcpconform"
	"github.com/agcore/agrun/registry"
)

// conformanceRegistry holds the tools the conformance scenarios call.
func conformanceRegistry(t *testing.T) *registry.Registry {
	reg := registry.New()
	for _, tl := range []fakeTool{
		{name: "test_simple_text", run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`"This is a simple text response for testing."`), nil
		}},
		{name: "test_error_handling", run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return nil, registry.Errorf(registry.ExecutionFailed, "test_error_handling", "This tool intentionally returns an error for testing")
		}},
		{name: "json_schema_2020_12_tool", schema: `{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type": "object",
			"$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
			"properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
			"additionalProperties": false}`},
	} {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// conformanceUpstream is agrun's Client of mcpconform.Upstream, whose
// resources, templates, prompts and completions agrun re-serves
// (ServerOptions.Upstreams, `serve_resources`) as the suite's scenarios
// ask: the proxy half of `agrun mcp serve`.
func conformanceUpstream(t *testing.T) *Client { return upstreamOf(t, mcpconform.Upstream()) }

// TestConformance runs the official conformance suite
// (@modelcontextprotocol/conformance, installed by scripts/setup-npm.sh)
// in server mode against NewHTTPHandler: every scenario of the suite, with
// testdata/conformance-baseline.yml listing those a registry of tools
// cannot take part in (and why). The suite exits non-zero when a scenario
// outside the baseline fails or one inside it passes. It needs Node 22.
func TestConformance(t *testing.T) {
	node := nodeBinary(t, 22)
	cli := npmScript(t, "@modelcontextprotocol/conformance", "dist/index.js")
	baseline, err := filepath.Abs(filepath.Join("testdata", "conformance-baseline.yml"))
	if err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The suite opens a session per scenario, all from one address, and
	// closes none: more than DefaultMaxSessionsPerClient.
	srv := &http.Server{Handler: NewHTTPHandler(conformanceRegistry(t), &ServerOptions{
		MaxSessionsPerClient: DefaultMaxSessions,
		Upstreams:            []*Client{conformanceUpstream(t)},
	})}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/mcp"

	mcpconform.RunServer(t, node, cli, url, baseline, nil)
}
