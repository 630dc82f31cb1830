package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/mddoc"
	"github.com/agcore/agrun/loop"
)

// everythingSection is an [mcp.everything] section running the npm
// server-everything (its tool trigger-sampling-request samples), with
// extra keys; the test is skipped when Node or the package is missing.
func everythingSection(t *testing.T, extra string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIPPED: node is not installed: the MCP reference server cannot run and this test did NOT run; run scripts/setup-npm.sh (scripts/test.sh does)")
	}
	srvJS := filepath.Join(repoRoot(t), ".cache/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(srvJS); err != nil {
		t.Skipf("SKIPPED: npm package @modelcontextprotocol/server-everything is not installed (%s): this test did NOT run; run scripts/setup-npm.sh (scripts/test.sh does)", srvJS)
	}
	return fmt.Sprintf("\n[mcp.everything]\ncommand = %q\nargs = [%q, \"stdio\"]\npermissions = [\"read\"]\n%s\n", node, srvJS, extra)
}

// sampleCall is a model reply that calls server-everything's sampling tool.
func sampleCall(id, prompt string, maxTokens int) chattest.Reply {
	args, _ := json.Marshal(map[string]any{"prompt": prompt, "maxTokens": maxTokens})
	return chattest.Reply{ToolCalls: []chattest.Call{{ID: id, Name: "everything__trigger-sampling-request", Args: string(args)}}}
}

// sampledResult is the content of the tool message answering call id in
// the requests the model got.
func sampledResult(reqs []chattest.Request, id string) string {
	for _, r := range reqs {
		for _, m := range r.Messages {
			if m.Role == "tool" && m.ToolCallID == id && m.Content != nil {
				return *m.Content
			}
		}
	}
	return ""
}

// listsTool reports whether `agrun tools --json` lists name.
func listsTool(t *testing.T, e *testEnv, name string) bool {
	r := e.run("", "tools", "--json").wantCode(t, exitOK)
	var infos []toolInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil {
		t.Fatal(err)
	}
	for _, ti := range infos {
		if ti.Name == name {
			return true
		}
	}
	return false
}

// TestSamplingAllow: with sampling = "allow", server-everything's
// sampling request is answered by the run's model unasked — its system
// prompt and message reach the model, maxTokens is capped by
// sampling_max_tokens (the server asked for a million) — and the model's
// text reaches the server (its tool result); with "deny" the capability
// is not declared, so the server offers no sampling tool.
func TestSamplingAllow(t *testing.T) {
	t.Parallel()
	llm := chattest.New(t,
		sampleCall("call_1", "say hi", 1000000),
		chattest.Reply{Text: "Hello from agrun's model", Check: func(t testing.TB, got chattest.Request) {
			if len(got.Tools) != 0 || !strings.Contains(string(got.Raw), `"max_tokens":50`) ||
				len(got.Messages) != 2 || *got.Messages[0].Content != "You are a helpful test server." || !strings.Contains(*got.Messages[1].Content, "say hi") {
				t.Errorf("the sampling request the model got: %s", got.Raw)
			}
		}},
		chattest.Reply{Text: "done"},
	)
	e := newTestEnv(t, llm.URL, everythingSection(t, "sampling = \"allow\"\nsampling_max_tokens = 50"))
	r := e.run("", "run", "sample something").wantCode(t, exitOK)
	if got := sampledResult(llm.Requests(), "call_1"); !strings.Contains(got, "Hello from agrun's model") {
		t.Fatalf("the server's tool result %q lacks the model's text (stderr %q)", got, r.stderr)
	}
	if strings.Contains(r.stderr, "asks agrun's model") || strings.Contains(r.stderr, "warning") {
		t.Errorf("allow asked or warned: %q", r.stderr)
	}

	deny := newTestEnv(t, "", everythingSection(t, "sampling = \"deny\""))
	if listsTool(t, deny, "everything__trigger-sampling-request") || !listsTool(t, deny, "everything__echo") {
		t.Error(`with sampling = "deny" the server still saw the sampling capability (or did not load)`)
	}
}

// TestSamplingAsk: by default (sampling = "ask") the person is asked at
// the terminal, the server named and its text escaped: y serves the
// request, n declines it (the server gets the refusal); without a
// terminal, and in run --json (even on one), it is declined unasked and
// said on stderr, and the session records the decline.
func TestSamplingAsk(t *testing.T) {
	t.Parallel()
	llm := chattest.New(t,
		sampleCall("call_1", "hi\x1b]0;pwned\x07", 10), chattest.Reply{Text: "model text"}, chattest.Reply{Text: "done"},
		sampleCall("call_2", "again", 10), chattest.Reply{Text: "done"},
		sampleCall("call_3", "no one", 10), chattest.Reply{Text: "done"},
		sampleCall("call_4", "json", 10), chattest.Reply{Text: "done"},
	)
	e := newTestEnv(t, llm.URL, everythingSection(t, ""))
	r := e.runTTY("y\n", "run", "one").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "agrun: MCP server everything asks agrun's model to write for it (sampling: at most 10 tokens; its sampling in this run: 0 of 16384 tokens used):\n  | system: You are a helpful test server.\n  | user: Resource trigger-sampling-request context: hi]0;pwned") ||
		strings.Contains(r.stderr, "\x1b") {
		t.Errorf("the question: %q", r.stderr)
	}
	if got := sampledResult(llm.Requests(), "call_1"); !strings.Contains(got, "model text") {
		t.Errorf("y: the server got %q", got)
	}
	e.runTTY("n\n", "run", "two").wantCode(t, exitOK)
	if got := sampledResult(llm.Requests(), "call_2"); !strings.Contains(got, "sampling request refused by agrun: the user declined it") {
		t.Errorf("n: the server got %q", got)
	}
	r = e.run("", "run", "three").wantCode(t, exitOK)
	if got := sampledResult(llm.Requests(), "call_3"); !strings.Contains(got, "no one could be asked to allow it") {
		t.Errorf("without a terminal: the server got %q", got)
	}
	if !strings.Contains(r.stderr, "agrun: warning: MCP server everything asked agrun's model to write for it (sampling) and there is no one to ask: declined") {
		t.Errorf("without a terminal, stderr %q", r.stderr)
	}
	// run --json asks no one, even on a terminal.
	e.runTTY("y\n", "run", "--json", "four").wantCode(t, exitOK)
	if got := sampledResult(llm.Requests(), "call_4"); !strings.Contains(got, "no one could be asked to allow it") {
		t.Errorf("run --json: the server got %q", got)
	}
	// The session records who declined.
	sess, _ := os.ReadDir(filepath.Join(e.dir, "sessions"))
	found := false
	for _, f := range sess {
		b, _ := os.ReadFile(filepath.Join(e.dir, "sessions", f.Name()))
		if strings.Contains(string(b), `"tool":"sampling:everything"`) && strings.Contains(string(b), `"by":"non-interactive"`) {
			found = true
		}
	}
	if !found {
		t.Error("no session recorded the non-interactive decline")
	}
}

// TestSamplingBudgets: the tokens a server's sampling spends count in
// its sampling_max_run_tokens (a second request past it is refused with
// an error naming the key) and in the run's own budget (run --max-tokens:
// the run's 15 tokens and the sampling's 30 end it, where 15 alone would
// not); a request over 64 KiB of text is refused unasked.
func TestSamplingBudgets(t *testing.T) {
	t.Parallel()
	big := &chattest.Usage{PromptTokens: 20, CompletionTokens: 10, TotalTokens: 30}
	llm := chattest.New(t,
		sampleCall("call_1", "first", 10), chattest.Reply{Text: "one", Usage: big},
		sampleCall("call_2", "second", 10),
		sampleCall("call_3", strings.Repeat("x", 70<<10), 10),
		chattest.Reply{Text: "done"},
		sampleCall("call_4", "in a small run", 10), chattest.Reply{Text: "two", Usage: big},
		chattest.Reply{Text: "never sent"},
	)
	e := newTestEnv(t, llm.URL, everythingSection(t, "sampling = \"allow\"\nsampling_max_run_tokens = 20"))
	e.run("", "run", "spend").wantCode(t, exitOK)
	reqs := llm.Requests()
	if got := sampledResult(reqs, "call_2"); !strings.Contains(got, "the sampling budget of everything is spent: 30 of its 20 tokens in this run ([mcp.everything] sampling_max_run_tokens)") {
		t.Errorf("over the server's budget: the server got %q", got)
	}
	if got := sampledResult(reqs, "call_3"); !strings.Contains(got, "sampling request refused by agrun: its text is over 65536 bytes") {
		t.Errorf("a huge request: the server got %.300q", got)
	}
	if len(reqs) != 5 {
		t.Errorf("%d model requests, want 5 (the refused ones reach no model)", len(reqs))
	}

	r := e.run("", "run", "--max-tokens", "40", "small").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "token budget reached: the run used 45 tokens of its 40") {
		t.Errorf("the run's budget did not count the sampling: %q", r.stderr)
	}
	if n := len(llm.Requests()); n != 7 {
		t.Errorf("%d model requests, want 7 (none after the budget)", n)
	}
}

// TestMCPDocSamplingAndMachineClients: docs/MCP.md's examples of
// sampling and of machine clients (client credentials) are valid
// agrun.toml as written.
func TestMCPDocSamplingAndMachineClients(t *testing.T) {
	blocks := mddoc.Read(t, "docs/MCP.md").Section(t, "## Servers that need authorization (OAuth)").Blocks("toml")
	if len(blocks) != 2 {
		t.Fatalf("docs/MCP.md's OAuth section has %d toml examples, want 2 (machine clients, sampling)", len(blocks))
	}
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "agrun.toml"), []byte(blocks[0]+"\n"+blocks[1]))
	if err != nil {
		t.Fatalf("docs/MCP.md's examples: %v", err)
	}
	if o := cfg.MCP["signed"].OAuth; o == nil || !o.ClientCredentials || !strings.HasSuffix(o.PrivateKeyFile, "keys/agrun-ci.pem") {
		t.Errorf("the machine client example: %+v", o)
	}
	if s := cfg.MCP["everything"]; s.Sampling != "ask" || s.SamplingMaxTokens != 1024 || s.SamplingMaxRunTokens != 16384 {
		t.Errorf("the sampling example: %+v", s)
	}
}

// TestMCPLoginRefusesMachineClient: a server configured for the client
// credentials grant has no login; `agrun mcp login` says so.
func TestMCPLoginRefusesMachineClient(t *testing.T) {
	e := newTestEnv(t, "", "\n[mcp.ci]\nurl = \"http://127.0.0.1:1/mcp\"\noauth = { client_credentials = true, client_id = \"c\", client_secret_env = \"AGRUN_TEST_CC_SECRET\" }\n")
	r := e.run("", "mcp", "login", "ci").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "uses the client credentials grant: agrun authorizes itself when it connects, there is no login") {
		t.Errorf("stderr %q", r.stderr)
	}
}

// TestElicitationRecorded: server-everything (a real MCP server process)
// asks a question while its tool runs in `agrun run --json`: no one is
// asked (not even on a terminal), the server gets "decline", the
// decision is printed as an mcp_decision line on stdout, and the
// session records it like an approval decided by "non-interactive".
func TestElicitationRecorded(t *testing.T) {
	t.Parallel()
	llm := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "everything__trigger-elicitation-request", Args: "{}"}}},
		chattest.Reply{Text: "done"},
	)
	e := newTestEnv(t, llm.URL, everythingSection(t, ""))
	r := e.runTTY("y\n", "run", "--json", "ask me").wantCode(t, exitOK)
	if got := sampledResult(llm.Requests(), "call_1"); !strings.Contains(got, "decline") {
		t.Errorf("the server's tool result %q does not say it was declined (stderr %q)", got, r.stderr)
	}
	var dec *setup.MCPDecision
	for line := range strings.SplitSeq(r.stdout, "\n") {
		var d setup.MCPDecision
		if json.Unmarshal([]byte(line), &d) == nil && d.Type == "mcp_decision" {
			dec = &d
		}
	}
	if dec == nil || dec.Tool != "elicitation:everything" || dec.Answer != loop.Deny || dec.By != "non-interactive" || !strings.Contains(dec.Request, "Please provide inputs") {
		t.Errorf("run --json printed no mcp_decision for the question (%+v):\n%s", dec, r.stdout)
	}
	// docs/MCP.md shows this very line.
	var doc setup.MCPDecision
	for _, b := range mddoc.Read(t, "docs/MCP.md").Blocks("json") {
		if strings.Contains(b, `"mcp_decision"`) && json.Unmarshal([]byte(b), &doc) != nil {
			t.Errorf("docs/MCP.md's mcp_decision example is not JSON: %s", b)
		}
	}
	if dec != nil && doc != *dec {
		t.Errorf("docs/MCP.md shows %+v, run --json printed %+v", doc, *dec)
	}
	if !strings.Contains(r.stderr, "asked a question and there is no one to ask: declined") {
		t.Errorf("stderr %q", r.stderr)
	}
	sess, _ := os.ReadDir(filepath.Join(e.dir, "sessions"))
	var recorded bool
	for _, f := range sess {
		b, _ := os.ReadFile(filepath.Join(e.dir, "sessions", f.Name()))
		recorded = recorded || (strings.Contains(string(b), `"tool":"elicitation:everything"`) && strings.Contains(string(b), `"by":"non-interactive"`))
	}
	if !recorded {
		t.Error("the session does not record the declined question")
	}
}
