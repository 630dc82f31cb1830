package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/testing/mcpconform"
	"github.com/agcore/agrun/internal/testing/syncbuf"
)

// conformanceTools are the tools the suite's tool scenarios call, as WASM
// tools: the committed word_count.wasm under manifests given in the
// config. test_error_handling requires an argument the suite does not
// send, so its call is an isError result (invalid_arguments).
var conformanceTools = map[string]string{
	"test_simple_text":    `{"name":"test_simple_text","description":"Count the words of a text.","parameters":{"type":"object","properties":{"text":{"type":"string"}}}}`,
	"test_error_handling": `{"name":"test_error_handling","description":"Fails: needs a text.","parameters":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`,
	"json_schema_2020_12_tool": `{"name":"json_schema_2020_12_tool","description":"A JSON Schema 2020-12 input schema.","parameters":{
		"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
		"$defs":{"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
		"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"}},"additionalProperties":false}}`,
}

// TestMCPServeConformance runs the official conformance suite
// (@modelcontextprotocol/conformance, installed by scripts/setup-npm.sh)
// in server mode, `--suite all` in one run, against one process of the
// built binary, `agrun mcp serve --http`, as a user runs it: WASM tools
// for the tool scenarios, and an upstream MCP server re-served with
// `serve_resources = true` (mcpconform.Upstream, over streamable HTTP)
// for the resource, template, subscription, prompt and completion
// scenarios. mcp/testdata/conformance-baseline.yml lists the scenarios
// that cannot apply to a tools-and-proxy server, with the reason; the
// suite exits non-zero when a scenario outside it fails or one inside it
// passes. It needs Node 22.
func TestMCPServeConformance(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	node, suite := mcpconform.Suite(t, root)
	up := mcpconform.Upstream()
	upstream := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return up }, nil))
	// A cleanup, not a defer: cleanups run last first, so agrun (whose
	// stream from the upstream stays open) is stopped before Close waits
	// for the upstream's connections.
	t.Cleanup(upstream.Close)

	e := newTestEnv(t, "", "")
	wasm := filepath.Join(root, "testdata", "word_count.wasm")
	var cfg strings.Builder
	for name, m := range conformanceTools {
		if err := os.WriteFile(filepath.Join(e.dir, name+".json"), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&cfg, "\n[tools.%s]\nwasm = %q\nmanifest = %q\n", name, wasm, name+".json")
	}
	fmt.Fprintf(&cfg, "\n[mcp.test]\nurl = %q\npermissions = [\"read\"]\nserve_resources = true\n", upstream.URL)
	f, err := os.OpenFile(e.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(cfg.String())
	f.Close()

	// The suite opens a session per scenario, all from one address, and
	// closes none: more than the default per-client cap.
	url, stderr := startMCPServeHTTP(t, e, "--max-sessions-per-client", "256")
	baseline := filepath.Join(root, "mcp", "testdata", "conformance-baseline.yml")
	mcpconform.RunServer(t, node, suite, url, baseline, func() string { return "agrun's stderr:\n" + stderr.String() })
}

// startMCPServeHTTP starts the built `agrun mcp serve --http 127.0.0.1:0`
// of e with flags and returns its endpoint (from its start line) and its
// stderr. The process is killed when the test ends.
func startMCPServeHTTP(t *testing.T, e *testEnv, flags ...string) (string, *syncbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"-c", e.config, "mcp", "serve", "--http", "127.0.0.1:0"}, flags...)...)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), e.env...)
	pr, pw := io.Pipe()
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = io.MultiWriter(stderr, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); pw.Close() })
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "MCP server on "); ok {
				u, _, _ := strings.Cut(rest, " ")
				urlc <- u
				break
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case u := <-urlc:
		return u, stderr
	case <-time.After(2 * time.Minute):
		t.Fatalf("agrun mcp serve --http did not say where it listens: %s", stderr.String())
	}
	return "", nil
}
