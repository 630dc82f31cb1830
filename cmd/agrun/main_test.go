package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testguest"
)

var update = flag.Bool("update", false, "rewrite golden files")

// repoRoot is the module's root folder.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// testEnv is a temp folder with an agrun.toml using the example tools.
type testEnv struct {
	t      *testing.T
	dir    string
	config string
	env    []string // more of the environment of the agrun processes e.cmd starts
}

// newTestEnv writes a config: the example tools from testdata/, a mount of
// a temp docs folder, sessions in the temp folder, extra appended.
func newTestEnv(t *testing.T, llmURL, extra string) *testEnv {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	for _, d := range []string{"docs", "notes", "sessions"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "docs", "hello.txt"), []byte("hello from the mount\n"), 0o644)
	if llmURL == "" {
		llmURL = "http://127.0.0.1:1/v1"
	}
	cfg := fmt.Sprintf(`[llm]
base_url = %q
model = "test-model"
api_key_env = "AGRUN_TEST_KEY"
max_turns = 5

[sandbox]
cache_dir = %q
timeout = "10s"

[permissions]
allowed = ["read", "network", "filesystem", "write"]
denied = ["delete", "shell"]

[tools.word_count]
wasm = %q

[tools.sum_c]
wasm = %q

[tools.read_file]
wasm = %q
mounts = ["./docs:/docs:ro"]

[tools.write_note]
wasm = %q
mounts = ["./notes:/notes:rw"]

[sessions]
dir = "sessions"
`, llmURL, testguest.CompilationCacheDir(t),
		filepath.Join(root, "testdata/word_count.wasm"), filepath.Join(root, "testdata/sum_c.wasm"),
		filepath.Join(root, "testdata/read_file.wasm"), filepath.Join(root, "testdata/write_note.wasm"))
	p := filepath.Join(dir, "agrun.toml")
	if err := os.WriteFile(p, []byte(cfg+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testEnv{t: t, dir: dir, config: p}
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs the CLI in-process with -c config.
func (e *testEnv) run(stdin string, args ...string) result {
	e.t.Helper()
	return runIn(e.t, stdin, append([]string{"-c", e.config}, args...)...)
}

func runIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return result{out.String(), errb.String(), code}
}

func (r result) wantCode(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// golden compares got with testdata/golden/name, after replacing the
// variable parts (folders) with placeholders.
func golden(t *testing.T, name, got string, repl ...string) {
	t.Helper()
	got = strings.NewReplacer(repl...).Replace(got)
	p := filepath.Join("testdata", "golden", name)
	if *update {
		os.WriteFile(p, []byte(got), 0o644)
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("golden file %s: %v (run go test -update to create it)", p, err)
	}
	if got != string(want) {
		t.Fatalf("%s differs from the golden file:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestVersionHelpUsage(t *testing.T) {
	r := runIn(t, "", "version").wantCode(t, exitOK)
	if !strings.HasPrefix(r.stdout, "agrun ") {
		t.Fatalf("version: %q", r.stdout)
	}
	runIn(t, "", "help").wantCode(t, exitOK)
	r = runIn(t, "").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "Usage:") {
		t.Fatal("no usage on stderr")
	}
	r = runIn(t, "", "frobnicate").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, `unknown command "frobnicate"`) || r.stdout != "" {
		t.Fatalf("unknown command: %+v", r)
	}
	runIn(t, "", "-nope").wantCode(t, exitUsage)
	runIn(t, "", "call").wantCode(t, exitUsage)
	runIn(t, "", "inspect").wantCode(t, exitUsage)
	runIn(t, "", "pack", "x.wasm").wantCode(t, exitUsage)
	runIn(t, "", "run").wantCode(t, exitUsage)
}

func TestCall(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	r := e.run("", "call", "word_count", `{"text":"the quick brown fox"}`).wantCode(t, exitOK)
	if r.stdout != `{"words":4,"lines":1,"chars":19,"bytes":19}`+"\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	// Arguments from stdin.
	r = e.run(`{"numbers":[1,2,3]}`, "call", "sum_c").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"sum":6`) {
		t.Fatalf("sum_c: %q", r.stdout)
	}
	// Files through the mount, and nothing outside it.
	r = e.run("", "call", "read_file", `{"path":"/docs/hello.txt"}`).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "hello from the mount") {
		t.Fatalf("read_file: %q", r.stdout)
	}
	r = e.run("", "call", "read_file", `{"path":"/etc/passwd"}`).wantCode(t, exitFailure)
	if r.stdout != "" || !strings.Contains(r.stderr, "execution_failed") {
		t.Fatalf("read outside the mount: %+v", r)
	}
	e.run("", "call", "write_note", `{"name":"n1","text":"note text"}`).wantCode(t, exitOK)
	if b, err := os.ReadFile(filepath.Join(e.dir, "notes", "n1.txt")); err != nil || string(b) != "note text" {
		t.Fatalf("note on the host: %q, %v", b, err)
	}
	// An unknown name is a configuration-type failure: exit 2.
	r = e.run("", "call", "nope", "{}").wantCode(t, exitUsage)
	if r.stdout != "" || !strings.Contains(r.stderr, `not_found: no tool named "nope" in `+e.config) {
		t.Fatalf("unknown tool: %+v", r)
	}
	// Arguments the tool refuses (not JSON, not its schema) are the
	// command line's mistake: message on stderr, exit 2, nothing on stdout.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"call", "word_count", `{"txt":1}`}, "invalid_arguments: /text: missing"},
		{[]string{"call", "word_count", `not json`}, "invalid_arguments: not JSON"},
	} {
		r := e.run("", tc.args...).wantCode(t, exitUsage)
		if r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %+v, want stderr containing %q", tc.args, r, tc.want)
		}
	}
}

func TestCallJSONShapes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	var lines []string
	for _, tc := range []struct {
		code int
		args []string
	}{
		{exitOK, []string{"call", "--json", "word_count", `{"text":"a b"}`}},
		{exitOK, []string{"call", "word_count", `{"text":"flags after"}`, "--json"}},
		{exitUsage, []string{"call", "--json", "nope", "{}"}},
		{exitUsage, []string{"call", "--json", "word_count", `{"text":1}`}},
		{exitFailure, []string{"call", "--json", "read_file", `{"path":"/nope/x"}`}},
		{exitUsage, []string{"call", "--json"}},
	} {
		r := e.run("", tc.args...).wantCode(t, tc.code)
		if strings.Count(r.stdout, "\n") != 1 || !json.Valid([]byte(r.stdout)) {
			t.Fatalf("%v: stdout is not exactly one JSON object: %q", tc.args, r.stdout)
		}
		lines = append(lines, r.stdout)
	}
	// A configuration error is one object too, with exit code 2.
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("[tools.x]\nwasm = \"x.wasm\"\nbogus = 1\n"), 0o644)
	r := runIn(t, "", "-c", bad, "call", "--json", "x", "{}").wantCode(t, exitUsage)
	lines = append(lines, r.stdout)
	golden(t, "call_json.txt", strings.Join(lines, ""), bad, "$BAD", e.dir, "$DIR")
}

func TestTools(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", `
[tools.broken]
wasm = "missing.wasm"

[tools.pinned]
wasm = "`+filepath.Join(repoRoot(t), "testdata/word_count.wasm")+`"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
`)
	r := e.run("", "tools", "--json").wantCode(t, exitOK)
	wc, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata/word_count.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wc) // changes with every rebuild of the example
	golden(t, "tools.json", r.stdout, repoRoot(t), "$ROOT", e.dir, "$DIR", hex.EncodeToString(sum[:]), "$WORD_COUNT_SHA256")
	r = e.run("", "tools").wantCode(t, exitOK)
	// Reasons lead with what to change; long ones are cut in the table
	// (whole in --json, above).
	for _, want := range []string{"word_count", "read_file", "filesystem,read", "broken: no such file or directory ([tools.broken] wasm)",
		"broken: [tools.pinned] sha256 does not match the module", "`agrun tools --json` has them whole"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("tools output lacks %q:\n%s", want, r.stdout)
		}
	}
	// A broken tool fails when called, with the reason and the key to
	// fix (a configuration problem: exit 2); the others work.
	r = e.run("", "call", "broken", "{}").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "module_refused: the tool failed to load") || !strings.Contains(r.stderr, "([tools.broken] wasm)") {
		t.Fatalf("call broken: %+v", r)
	}
	r = e.run("", "call", "--json", "broken", "{}").wantCode(t, exitUsage)
	if !strings.Contains(r.stdout, `{"ok":false,"error":{"kind":"module_refused","message":"the tool failed to load: open `) {
		t.Fatalf("call --json broken: %+v", r)
	}
	e.run("", "call", "word_count", `{"text":"x"}`).wantCode(t, exitOK)
}

func TestToolsDeniedByPolicy(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	// Rewrite the policy to the defaults: filesystem is not allowed.
	b, _ := os.ReadFile(e.config)
	s := strings.Replace(string(b), `allowed = ["read", "network", "filesystem", "write"]`, `allowed = ["read", "network"]`, 1)
	os.WriteFile(e.config, []byte(s), 0o644)
	r := e.run("", "tools", "--json").wantCode(t, exitOK)
	var infos []toolInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil {
		t.Fatal(err)
	}
	for _, ti := range infos {
		wantAllowed := ti.Name == "word_count" || ti.Name == "sum_c"
		if ti.Allowed != wantAllowed {
			t.Errorf("%s: allowed %v, want %v (%s)", ti.Name, ti.Allowed, wantAllowed, ti.Denied)
		}
	}
	r = e.run("", "call", "read_file", `{"path":"/docs/hello.txt"}`).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "permission_denied") || !strings.Contains(r.stderr, `needs "filesystem": filesystem is not in [permissions] allowed`) {
		t.Fatalf("denied call: %+v", r)
	}
}

// TestToolsExitWhenMCPDown: a configured MCP server that cannot be
// reached makes `agrun tools` (table and --json) exit 1 naming it on
// stderr, its stdout still the whole listing; a WASM tool that fails to
// load leaves the exit code 0 (docs/MCP.md, "When a server misbehaves").
func TestToolsExitWhenMCPDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a port nothing listens on
	e := newTestEnv(t, "", "\n[mcp.remote]\nurl = \"http://"+addr+"/mcp\"\n\n[tools.gone]\nwasm = \"missing.wasm\"\n")
	r := e.run("", "tools", "--json").wantCode(t, exitFailure)
	var infos []toolInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil {
		t.Fatalf("--json's stdout is not the listing: %v\n%s", err, r.stdout)
	}
	var remote, wc bool
	for _, ti := range infos {
		remote = remote || (ti.Name == "remote__*" && ti.Error != "")
		wc = wc || ti.Name == "word_count"
	}
	if !remote || !wc {
		t.Fatalf("the listing lacks the broken server or the working tools: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "MCP server remote cannot be used") || strings.Contains(r.stderr, "gone") {
		t.Fatalf("stderr should name the server (and only it): %q", r.stderr)
	}
	r = e.run("", "tools").wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, "remote__*") || !strings.Contains(r.stderr, "MCP server remote cannot be used") {
		t.Fatalf("the table: %+v", r)
	}

	w := newTestEnv(t, "", "\n[tools.gone]\nwasm = \"missing.wasm\"\n")
	r = w.run("", "tools", "--json").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"gone"`) {
		t.Fatalf("the broken WASM tool is not listed: %s", r.stdout)
	}
}

// TestToolsHintOn401: a server that answers 401 to a configuration
// without oauth makes `agrun tools` say what to do (oauth and `agrun mcp
// login`, or headers_env), not only "Unauthorized" (issue 30).
func TestToolsHintOn401(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	}))
	defer srv.Close()
	e := newTestEnv(t, "", "\n[mcp.locked]\nurl = \""+srv.URL+"/mcp\"\n")
	r := e.run("", "tools", "--json").wantCode(t, exitFailure)
	for _, want := range []string{"401", "add oauth = {} to [mcp.locked]", "agrun mcp login locked", "headers_env"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("no %q in what agrun tools said:\nstdout %s\nstderr %s", want, r.stdout, r.stderr)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, toml, want string
	}{
		{"unknown key", "[llm]\nmodel = \"m\"\nmodle = \"x\"\n", "bad.toml:3: llm.modle: unknown key"},
		{"wrong type", "[sandbox]\nmax_parallel = \"eight\"\n", "bad.toml:2: sandbox.max_parallel: incompatible types"},
		{"bad duration", "[sandbox]\ntimeout = \"10\"\n", "bad.toml:2: sandbox.timeout: bad duration"},
		{"bad size", "[sandbox]\nmemory = \"lots\"\n", "bad.toml:2: sandbox.memory: bad size"},
		{"unknown permission", "[permissions]\n\nallowed = [\"rread\"]\n", "bad.toml:3: permissions.allowed: "},
		{"mcp without command or url", "[mcp.srv]\ntimeout = \"1s\"\n", "bad.toml:1: mcp.srv: needs \"command\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "bad.toml")
			os.WriteFile(p, []byte(tc.toml), 0o644)
			for _, cmd := range [][]string{{"tools"}, {"call", "x", "{}"}, {"run", "hi"}, {"sessions"}} {
				r := runIn(t, "", append([]string{"-c", p}, cmd...)...).wantCode(t, exitUsage)
				if !strings.Contains(r.stderr, tc.want) {
					t.Fatalf("%v: stderr %q, want %q", cmd, r.stderr, tc.want)
				}
			}
		})
	}
	// A missing explicit config is an error; AGRUN_CONFIG is honoured.
	runIn(t, "", "-c", filepath.Join(dir, "none.toml"), "tools").wantCode(t, exitUsage)
	t.Setenv("AGRUN_CONFIG", filepath.Join(dir, "none.toml"))
	r := runIn(t, "", "tools").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "none.toml") {
		t.Fatalf("AGRUN_CONFIG not used: %q", r.stderr)
	}
}

func TestInspectAndPack(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	r := runIn(t, "", "inspect", filepath.Join(root, "testdata/word_count.wasm")).wantCode(t, exitOK)
	for _, want := range []string{"sha256:", `"name": "word_count"`, "wasi_snapshot_preview1.fd_write", "_initialize", "agrun_call"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runIn(t, "", "inspect", "--json", filepath.Join(root, "testdata/sum_c.wasm")).wantCode(t, exitOK)
	var info struct {
		SHA256   string `json:"sha256"`
		Manifest struct{ Name string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Manifest.Name != "sum_c" || len(info.SHA256) != 64 {
		t.Fatalf("inspect --json: %+v %v", info, err)
	}
	runIn(t, "", "inspect", filepath.Join(root, "go.mod")).wantCode(t, exitFailure)

	// Pack a renamed manifest onto word_count, then call it under its new
	// name through a config that gives no manifest.
	dir := t.TempDir()
	man := filepath.Join(dir, "m.toml")
	os.WriteFile(man, []byte(`name = "counter"
description = "counts words"
[parameters]
type = "object"
required = ["text"]
[parameters.properties.text]
type = "string"
`), 0o644)
	out := filepath.Join(dir, "counter.wasm")
	runIn(t, "", "pack", "-m", man, filepath.Join(root, "testdata/word_count.wasm"), "-o", out).wantCode(t, exitOK)
	r = runIn(t, "", "inspect", out).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"name": "counter"`) {
		t.Fatalf("packed manifest not shown:\n%s", r.stdout)
	}
	cfg := filepath.Join(dir, "c.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("[sandbox]\ncache_dir = %q\n[tools.counter]\nwasm = \"counter.wasm\"\n", testguest.CompilationCacheDir(t))), 0o644)
	r = runIn(t, "", "-c", cfg, "call", "counter", `{"text":"one two"}`).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"words":2`) {
		t.Fatalf("packed tool: %+v", r)
	}
	// A bad manifest is a usage error naming the field.
	os.WriteFile(man, []byte("name = \"bad name\"\ndescription = \"d\"\n"), 0o644)
	r = runIn(t, "", "pack", "-m", man, filepath.Join(root, "testdata/word_count.wasm"), "-o", out).wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "name") {
		t.Fatalf("bad manifest: %q", r.stderr)
	}
}

func TestRunStreamsAndSavesSession(t *testing.T) {
	srv := chattest.New(t,
		chattest.Reply{Text: "Let me count.", ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"a b c"}`}}},
		chattest.Reply{Text: "There are 3 words."},
		chattest.Reply{Text: "Still 3."},
	)
	e := newTestEnv(t, srv.URL, "")
	t.Setenv("AGRUN_TEST_KEY", "sk-secret-test")
	r := e.run("", "run", "--session", "s1", "count a b c").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "Let me count.") || !strings.HasSuffix(r.stdout, "There are 3 words.\n") {
		t.Fatalf("stdout %q", r.stdout)
	}
	if !strings.Contains(r.stderr, `agrun: word_count {"text":"a b c"} → ok {"words":3`) {
		t.Fatalf("stderr lacks tool activity: %q", r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "sk-secret-test") {
		t.Fatal("the API key was printed")
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Auth != "Bearer sk-secret-test" || len(reqs[0].Tools) != 4 {
		t.Fatalf("requests: %d, auth %q, tools %d", len(reqs), reqs[0].Auth, len(reqs[0].Tools))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != "tool" || last.ToolCallID != "call_1" || !strings.Contains(*last.Content, `"words":3`) {
		t.Fatalf("tool message sent back: %+v", last)
	}
	// The session continues with its whole history.
	e.run("", "run", "--session", "s1", "and now?").wantCode(t, exitOK)
	reqs = srv.Requests()
	if n := len(reqs[2].Messages); n != 5 { // user, assistant, tool, assistant, user (no system prompt configured)
		t.Fatalf("resumed request has %d messages", n)
	}
	r = e.run("", "sessions", "--json").wantCode(t, exitOK)
	var infos []struct {
		ID          string `json:"id"`
		FirstPrompt string `json:"first_prompt"`
		Turns       int    `json:"turns"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != 1 || infos[0].ID != "s1" || infos[0].FirstPrompt != "count a b c" || infos[0].Turns != 2 { // turns: user prompts
		t.Fatalf("sessions: %s %v", r.stdout, err)
	}
	r = e.run("", "sessions", "show", "s1").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "word_count") || !strings.Contains(r.stdout, "Still 3.") {
		t.Fatalf("sessions show: %s", r.stdout)
	}
	e.run("", "sessions", "show", "nope").wantCode(t, exitFailure)
}

func TestRunJSONEvents(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"x y"}`}, {ID: "call_2", Name: "nope", Args: `{}`}}},
		chattest.Reply{Text: "Two words."},
	)
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "--json", "--session", "j1", "count").wantCode(t, exitOK)
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if !strings.HasPrefix(line, `{"type":`) {
			t.Fatalf("type is not first: %s", line)
		}
		types = append(types, ev["type"].(string))
		switch ev["type"] {
		case "tool_completed":
			if ev["id"] == "call_2" && (ev["is_error"] != true || ev["error_kind"] != "not_found") {
				t.Fatalf("failed call event: %s", line)
			}
		case "done":
			if ev["session"] != "j1" || ev["text"] != "Two words." {
				t.Fatalf("done: %s", line)
			}
		}
	}
	got := strings.Join(types, ",")
	want := "turn_complete,tool_started,tool_started,tool_completed,tool_completed,text_delta,text_delta,text_delta,turn_complete,done"
	if got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
}

func TestRunProviderErrors(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t, chattest.Reply{Status: 401, Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`})
	e := newTestEnv(t, srv.URL, "")
	r := e.run("", "run", "hi").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "Incorrect API key") {
		t.Fatalf("401: %q", r.stderr)
	}
	r = e.run("", "run", "--json", "hi").wantCode(t, exitFailure) // script exhausted: a 400
	if !strings.Contains(r.stdout, `"type":"error","kind":"provider"`) && !strings.Contains(r.stdout, `"kind":"provider"`) {
		t.Fatalf("--json error line: %q", r.stdout)
	}
	// Unreachable endpoint (the default test config points at port 1).
	e3 := newTestEnv(t, "", "")
	b, _ := os.ReadFile(e3.config)
	os.WriteFile(e3.config, []byte(strings.Replace(string(b), "max_turns = 5", "max_turns = 5\nmax_retries = 0", 1)), 0o644)
	r = e3.run("", "run", "hi").wantCode(t, exitFailure)
	if r.stderr == "" {
		t.Fatal("no message for an unreachable endpoint")
	}
}

func TestChatThroughPipe(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{Text: "Hello!"},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "sum_c", Args: `{"numbers":[2,3]}`}}},
		chattest.Reply{Text: "It is 5."},
		chattest.Reply{Text: "Fresh start."},
	)
	e := newTestEnv(t, srv.URL, "")
	in := "hi\n/tools\nadd 2 and 3\n/history\n/bogus\n/new\nagain\n/exit\nnever sent\n"
	r := e.run(in, "chat", "--session", "c1").wantCode(t, exitOK)
	for _, want := range []string{"Hello!", "It is 5.", "word_count\t", "user: add 2 and 3", "assistant: -> sum_c", "Fresh start."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("chat stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "unknown command /bogus") || !strings.Contains(r.stderr, "new session") {
		t.Errorf("chat stderr: %s", r.stderr)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Fatalf("%d requests, want 4 (the line after /exit must not be sent)", n)
	}
	// /new started a second session; EOF also ends a chat.
	e.run("", "chat", "--session", "c1").wantCode(t, exitOK)
	r = e.run("", "sessions", "--json").wantCode(t, exitOK)
	if strings.Count(r.stdout, `"id"`) != 2 {
		t.Fatalf("sessions: %s", r.stdout)
	}
}

// TestSessionLocked: a session used by another process is refused.
func TestSessionLocked(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	started := make(chan struct{})
	srv := chattest.New(t, chattest.Reply{Text: "slow", Hold: hold, Started: started}, chattest.Reply{Text: "ok"})
	e := newTestEnv(t, srv.URL, "")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.run("", "run", "--session", "busy", "first")
	}()
	<-started
	r := e.run("", "run", "--json", "--session", "busy", "second").wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, `"kind":"session_locked"`) {
		t.Fatalf("second run: %q", r.stdout)
	}
	close(hold)
	wg.Wait()
}

// binary is the agrun command for end-to-end tests: built once per
// version of the sources into the shared test cache, with the test
// binary's own build tags (-tags cluster or none), the same build the
// hostile suite runs.
func binary(t *testing.T) string {
	t.Helper()
	return testguest.Agrun(t)
}

// TestMCPServerTools: an MCP server from the config contributes
// <server>__<tool> tools that list and call like any other.
func TestMCPServerTools(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIPPED: node is not installed: the MCP reference server cannot run and this test did NOT run; run scripts/setup-npm.sh (scripts/test.sh does)")
	}
	srvJS := filepath.Join(repoRoot(t), ".cache/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(srvJS); err != nil {
		t.Skipf("SKIPPED: npm package @modelcontextprotocol/server-everything is not installed (%s): this test did NOT run; run scripts/setup-npm.sh (scripts/test.sh does)", srvJS)
	}
	e := newTestEnv(t, "", fmt.Sprintf(`
[mcp.everything]
command = %q
args = [%q, "stdio"]
permissions = ["read"]
`, node, srvJS))
	r := e.run("", "tools", "--json").wantCode(t, exitOK)
	var infos []toolInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ti := range infos {
		if ti.Name == "everything__echo" {
			found = ti.Source == "mcp:everything" && ti.Allowed && len(ti.Permissions) == 1
		}
	}
	if !found {
		t.Fatalf("everything__echo missing or wrong: %s", r.stdout)
	}
	r = e.run("", "call", "everything__echo", `{"message":"hello mcp"}`).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "hello mcp") {
		t.Fatalf("echo: %+v", r)
	}
}
