package hostile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/wasmtools"
)

// agrunBinary is cmd/agrun, built once per version of the sources into
// the shared test cache (cmd/agrun's tests run the same build).
func agrunBinary(t *testing.T) string {
	t.Helper()
	return testguest.Agrun(t)
}

// cliEnv is a directory with an agrun.toml naming the attacker tools.
type cliEnv struct {
	t      *testing.T
	dir    string
	config string
}

func newCLIEnv(t *testing.T, llmURL, extra string) *cliEnv {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, b, 0o644))
		return p
	}
	textWasm, err := wasmtools.Pack(hostileWasm(t), wasmtools.Manifest{Name: "out_text", Description: "text", Output: wasmtools.OutputText})
	must(t, err)
	wc, err := filepath.Abs(filepath.Join(repoRoot, "testdata", "word_count.wasm"))
	must(t, err)
	if llmURL == "" {
		llmURL = "http://127.0.0.1:1/v1"
	}
	cfg := fmt.Sprintf(`[llm]
base_url = %q
model = "m"
api_key_env = "HOSTILE_TEST_KEY"
max_turns = 4

[sandbox]
cache_dir = %q
timeout = "2s"

[sessions]
dir = %q

[tools.word_count]
wasm = %q

[tools.out_json]
wasm = %q

[tools.out_text]
wasm = %q

[tools.broken_bigmin]
wasm = %q
`, llmURL, cacheDirFor(t), filepath.Join(dir, "sessions"), wc,
		write("out_json.wasm", pack(t, hostileWasm(t), "out_json")), write("out_text.wasm", textWasm),
		write("bigmin.wasm", pack(t, wat(t, "bigmin"), "bigmin")))
	return &cliEnv{t: t, dir: dir, config: write("agrun.toml", []byte(cfg+extra))}
}

type cliResult struct {
	stdout, stderr []byte
	code           int
}

func (e *cliEnv) run(stdin string, args ...string) cliResult {
	e.t.Helper()
	cmd := exec.Command(agrunBinary(e.t), append([]string{"-c", e.config}, args...)...)
	cmd.Env = append(os.Environ(), "HOSTILE_TEST_KEY=k")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
		e.t.Fatalf("agrun %v did not exit normally: %v\nstderr: %s", args, cmd.ProcessState, truncate(errb.String(), 2000))
	}
	return cliResult{out.Bytes(), errb.Bytes(), cmd.ProcessState.ExitCode()}
}

// checkTerminalSafe asserts b can go to a terminal: valid UTF-8, no ESC,
// no other C0 control but newline and tab, no DEL, no C1 control (U+0080 to
// U+009F: UTF-8 terminals such as xterm take U+009B as CSI), no bidi
// override.
func checkTerminalSafe(t testing.TB, what string, b []byte) {
	t.Helper()
	if !utf8.Valid(b) {
		t.Errorf("%s is not valid UTF-8: %q", what, truncate(string(b), 300))
	}
	var c1, bidi bool
	for _, r := range string(b) {
		switch {
		case r < 0x20 && r != '\n' && r != '\t' || r == 0x7f:
			t.Errorf("%s carries %U: %q", what, r, truncate(string(b), 600))
			return
		case r >= 0x80 && r < 0xa0:
			c1 = true
		case r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
			bidi = true
		}
	}
	if c1 {
		t.Errorf("%s: C1 control characters printed raw: %q", what, truncate(string(b), 600))
	}
	if bidi {
		t.Errorf("%s: bidi overrides printed raw: %q", what, truncate(string(b), 600))
	}
}

// TestCLIEscapes: whatever a tool writes, `agrun call` prints nothing a
// terminal would interpret.
func TestCLIEscapes(t *testing.T) {
	e := newCLIEnv(t, "", "")
	for _, c := range []struct {
		name, tool string
		args       map[string]any
		code       int
	}{
		{"text output", "out_text", emit(t, terminalAttack, "", 0), 0},
		{"JSON output with escaped escapes", "out_json", emit(t, `{"x":"\u001b[2J\u001b]0;pwned\u0007\u009b31m"}`, "", 0), 0},
		{"error on stderr", "out_json", emit(t, "", terminalAttack, 1), 1},
		{"error as JSON on stdout", "out_json", emit(t, `{"error":"\u001b[2J\u001b]0;pwned\u0007"}`, "", 1), 1},
		{"invalid JSON with raw escapes", "out_json", emit(t, terminalAttack, "", 0), 1},
	} {
		for _, asJSON := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/json=%v", c.name, asJSON), func(t *testing.T) {
				args := []string{"call"}
				if asJSON {
					args = append(args, "--json")
				}
				r := e.run("", append(args, c.tool, string(argsJSON(t, c.args)))...)
				if r.code != c.code {
					t.Errorf("exit %d; want %d\nstdout %q\nstderr %q", r.code, c.code, r.stdout, r.stderr)
				}
				checkTerminalSafe(t, "stdout", r.stdout)
				checkTerminalSafe(t, "stderr", r.stderr)
				if asJSON && !json.Valid(bytes.TrimSpace(r.stdout)) {
					t.Errorf("--json stdout is not one JSON value: %q", r.stdout)
				}
			})
		}
	}
}

// TestCLIBrokenTool: a tool the sandbox refuses is listed as broken, calls
// to it fail with module_refused (a configuration problem: exit 2), and
// the other tools work.
func TestCLIBrokenTool(t *testing.T) {
	e := newCLIEnv(t, "", "")
	r := e.run("", "tools")
	if r.code != 0 || !bytes.Contains(r.stdout, []byte("broken_bigmin")) || !bytes.Contains(r.stdout, []byte("broken")) {
		t.Errorf("tools: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "call", "--json", "broken_bigmin", "{}")
	var res struct {
		OK    bool `json:"ok"`
		Error struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.stdout, &res); err != nil || res.OK || res.Error.Kind != "module_refused" || r.code != 2 {
		t.Errorf("call broken: exit %d, %q (%v)", r.code, r.stdout, err)
	}
	t.Logf("a call to a broken tool: %s: %s", res.Error.Kind, res.Error.Message)
	if r := e.run("", "call", "word_count", wordCountArgs); r.code != 0 {
		t.Errorf("word_count: exit %d %s", r.code, r.stderr)
	}
}

// TestCLIModelText: a model's own text (and the tool names it makes up) do
// not reach the terminal raw, in `agrun run` and `agrun run --json`.
func TestCLIModelText(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			srv := chattest.New(t,
				chattest.Reply{Text: "thinking \x1b]0;pwned\x07", ToolCalls: []chattest.Call{{ID: "a", Name: "nope\x1b[2J", Args: `{}`}}},
				chattest.Reply{Text: "answer " + terminalAttack},
			)
			e := newCLIEnv(t, srv.URL, "")
			args := []string{"run"}
			if asJSON {
				args = append(args, "--json")
			}
			r := e.run("", append(args, "hi")...)
			if r.code != 0 {
				t.Errorf("exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
			}
			checkTerminalSafe(t, "stdout", r.stdout)
			checkTerminalSafe(t, "stderr", r.stderr)
		})
	}
}

// TestCLIMCPDescriptions: `agrun tools` shows an MCP server's hostile
// descriptions capped and escaped.
func TestCLIMCPDescriptions(t *testing.T) {
	bin := mcpServer(t, "evil")
	e := newCLIEnv(t, "", fmt.Sprintf("\n[mcp.evil]\ncommand = %q\n", bin))
	for _, args := range [][]string{{"tools"}, {"tools", "--json"}} {
		r := e.run("", args...)
		if r.code != 0 || !bytes.Contains(r.stdout, []byte("evil__inject")) {
			t.Errorf("%v: exit %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
		checkTerminalSafe(t, fmt.Sprint(args, " stdout"), r.stdout)
		checkTerminalSafe(t, fmt.Sprint(args, " stderr"), r.stderr)
		for _, inv := range []string{"\u200b", "\u2060", "\ufeff", "\U000E0049"} {
			if bytes.Contains(r.stdout, []byte(inv)) {
				t.Errorf("%v shows invisible %U raw", args, []rune(inv)[0])
			}
		}
		if len(r.stdout) > 64<<10 {
			t.Errorf("%v: %d bytes of output: descriptions not capped", args, len(r.stdout))
		}
	}
	r := e.run("", "call", "evil__fails", "{}")
	checkTerminalSafe(t, "call evil__fails stdout", r.stdout)
	checkTerminalSafe(t, "call evil__fails stderr", r.stderr)
}
