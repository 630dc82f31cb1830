package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// TestConformanceClient runs the official conformance suite
// (@modelcontextprotocol/conformance) in client mode: every client
// scenario, with this test binary as the client (conformanceClient:
// agrun's Client over HTTP, with OAuth), and
// testdata/conformance-client-baseline.yml listing the scenarios agrun's
// client cannot take part in, with the reason. The suite exits non-zero
// when a scenario outside the baseline fails or one inside it passes.
func TestConformanceClient(t *testing.T) {
	node := nodeBinary(t, 22)
	cli := npmScript(t, "@modelcontextprotocol/conformance", "dist/index.js")
	baseline, err := filepath.Abs(filepath.Join("testdata", "conformance-client-baseline.yml"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var failed []string
	for _, suite := range []string{"all"} {
		cmd := exec.CommandContext(ctx, node, cli, "client", "--command", self, "--suite", suite,
			"--expected-failures", baseline, "-o", t.TempDir())
		cmd.Env = append(os.Environ(), "NO_COLOR=1", "AGRUN_MCP_CONFORMANCE_CLIENT=1")
		b, err := cmd.CombinedOutput()
		out := string(b)
		summary := out
		if i := strings.Index(out, "=== SUMMARY ==="); i >= 0 {
			summary = out[i:]
		}
		if err != nil {
			failed = append(failed, suite)
			t.Errorf("conformance suite %s: %v\n%s", suite, err, summary)
			continue
		}
		t.Logf("conformance suite %s:\n%s", suite, summary)
	}
	if len(failed) > 0 {
		t.Logf("failed suites: %v", failed)
	}
}

// conformanceClient is the client the suite runs, as agrun connects to an
// HTTP server: Connect (initialize, tools/list), then the scenario's tool
// call. For the authorization scenarios, OAuth with the suite's
// authorization server, whose authorization endpoint redirects at once to
// the redirect URL with the code: Authorize follows it as a browser would,
// without a person. The suite passes the server URL as the last argument
// and the scenario in MCP_CONFORMANCE_SCENARIO.
func conformanceClient(serverURL string) int {
	scenario := os.Getenv("MCP_CONFORMANCE_SCENARIO")
	var extra struct {
		ClientID      string `json:"client_id"`
		ClientSecret  string `json:"client_secret"`
		PrivateKeyPEM string `json:"private_key_pem"`
	}
	json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &extra)
	h := HTTP{URL: serverURL}
	if strings.HasPrefix(scenario, "auth/") {
		h.OAuth = &OAuth{
			ClientID:          extra.ClientID,
			ClientSecret:      extra.ClientSecret,
			ClientMetadataURL: "https://conformance-test.local/client-metadata.json",
			RedirectURL:       "http://localhost:3000/callback",
			Authorize:         followRedirect,
		}
		if strings.HasPrefix(scenario, "auth/client-credentials-") {
			// A machine client: the grant with the suite's client and
			// its secret (basic) or its key (JWT), no person.
			h.OAuth = &OAuth{ClientCredentials: true, ClientID: extra.ClientID, ClientSecret: extra.ClientSecret, PrivateKey: []byte(extra.PrivateKeyPEM)}
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts := &ClientOptions{Logger: log, Timeout: 20 * time.Second}
	if scenario == "elicitation-sep1034-client-defaults" {
		// The person accepts without filling anything in: the
		// schema's defaults are applied (SEP-1034).
		opts.Elicit = func(context.Context, *Elicitation) (*ElicitAnswer, error) {
			return &ElicitAnswer{Action: "accept"}, nil
		}
	}
	c, err := NewClient("conformance", h, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	defer c.Close(ctx)
	if err := c.Connect(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return 1
	}
	tool := map[string]string{"tools_call": "add_numbers", "sse-retry": "test_reconnection",
		"elicitation-sep1034-client-defaults": "test_client_elicitation_defaults"}[scenario]
	args := `{}`
	if tool == "add_numbers" {
		args = `{"a":5,"b":3}`
	}
	if strings.HasPrefix(scenario, "auth/") {
		tool = "test-tool"
	}
	if tool != "" {
		if _, err := c.CallTool(ctx, tool, json.RawMessage(args)); err != nil {
			fmt.Fprintln(os.Stderr, "call:", err)
			return 1
		}
	}
	return 0
}

// followRedirect plays the browser for the suite's authorization server:
// it requests the authorization URL and takes the code, state and iss
// from the redirect it answers with.
func followRedirect(ctx context.Context, authURL string) (*auth.AuthorizationResult, error) {
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return nil, err
	}
	q := loc.Query()
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}
