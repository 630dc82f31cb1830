package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/hostile"
)

// TestCLIEscapes: whatever a tool writes, `agrun call` prints nothing a
// terminal would interpret.
func TestCLIEscapes(t *testing.T) {
	e := hostile.NewCLIEnv(t, "", "")
	for _, c := range []struct {
		name, tool string
		args       map[string]any
		code       int
	}{
		{"text output", "out_text", hostile.Emit(t, hostile.TerminalAttack, "", 0), 0},
		{"JSON output with escaped escapes", "out_json", hostile.Emit(t, `{"x":"\u001b[2J\u001b]0;pwned\u0007\u009b31m"}`, "", 0), 0},
		{"error on stderr", "out_json", hostile.Emit(t, "", hostile.TerminalAttack, 1), 1},
		{"error as JSON on stdout", "out_json", hostile.Emit(t, `{"error":"\u001b[2J\u001b]0;pwned\u0007"}`, "", 1), 1},
		{"invalid JSON with raw escapes", "out_json", hostile.Emit(t, hostile.TerminalAttack, "", 0), 1},
	} {
		for _, asJSON := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/json=%v", c.name, asJSON), func(t *testing.T) {
				args := []string{"call"}
				if asJSON {
					args = append(args, "--json")
				}
				r := e.Run("", append(args, c.tool, string(hostile.ArgsJSON(t, c.args)))...)
				if r.Code != c.code {
					t.Errorf("exit %d; want %d\nstdout %q\nstderr %q", r.Code, c.code, r.Stdout, r.Stderr)
				}
				hostile.CheckTerminalSafe(t, "stdout", r.Stdout)
				hostile.CheckTerminalSafe(t, "stderr", r.Stderr)
				if asJSON && !json.Valid(bytes.TrimSpace(r.Stdout)) {
					t.Errorf("--json stdout is not one JSON value: %q", r.Stdout)
				}
			})
		}
	}
}

// TestCLIBrokenTool: a tool the sandbox refuses is listed as broken, calls
// to it fail with module_refused (a configuration problem: exit 2), and
// the other tools work.
func TestCLIBrokenTool(t *testing.T) {
	e := hostile.NewCLIEnv(t, "", "")
	r := e.Run("", "tools")
	if r.Code != 0 || !bytes.Contains(r.Stdout, []byte("broken_bigmin")) || !bytes.Contains(r.Stdout, []byte("broken")) {
		t.Errorf("tools: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	r = e.Run("", "call", "--json", "broken_bigmin", "{}")
	var res struct {
		OK    bool `json:"ok"`
		Error struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Stdout, &res); err != nil || res.OK || res.Error.Kind != "module_refused" || r.Code != 2 {
		t.Errorf("call broken: exit %d, %q (%v)", r.Code, r.Stdout, err)
	}
	t.Logf("a call to a broken tool: %s: %s", res.Error.Kind, res.Error.Message)
	if r := e.Run("", "call", "word_count", hostile.WordCountArgs); r.Code != 0 {
		t.Errorf("word_count: exit %d %s", r.Code, r.Stderr)
	}
}

// TestCLIModelText: a model's own text (and the tool names it makes up) do
// not reach the terminal raw, in `agrun run` and `agrun run --json`.
func TestCLIModelText(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			srv := chattest.New(t,
				chattest.Reply{Text: "thinking \x1b]0;pwned\x07", ToolCalls: []chattest.Call{{ID: "a", Name: "nope\x1b[2J", Args: `{}`}}},
				chattest.Reply{Text: "answer " + hostile.TerminalAttack},
			)
			e := hostile.NewCLIEnv(t, srv.URL, "")
			args := []string{"run"}
			if asJSON {
				args = append(args, "--json")
			}
			r := e.Run("", append(args, "hi")...)
			if r.Code != 0 {
				t.Errorf("exit %d\nstdout %q\nstderr %q", r.Code, r.Stdout, r.Stderr)
			}
			hostile.CheckTerminalSafe(t, "stdout", r.Stdout)
			hostile.CheckTerminalSafe(t, "stderr", r.Stderr)
		})
	}
}

// TestCLIMCPDescriptions: `agrun tools` shows an MCP server's hostile
// descriptions capped and escaped.
func TestCLIMCPDescriptions(t *testing.T) {
	bin := hostile.McpServer(t, "evil")
	e := hostile.NewCLIEnv(t, "", fmt.Sprintf("\n[mcp.evil]\ncommand = %q\n", bin))
	for _, args := range [][]string{{"tools"}, {"tools", "--json"}} {
		r := e.Run("", args...)
		if r.Code != 0 || !bytes.Contains(r.Stdout, []byte("evil__inject")) {
			t.Errorf("%v: exit %d\n%s\n%s", args, r.Code, r.Stdout, r.Stderr)
		}
		hostile.CheckTerminalSafe(t, fmt.Sprint(args, " stdout"), r.Stdout)
		hostile.CheckTerminalSafe(t, fmt.Sprint(args, " stderr"), r.Stderr)
		for _, inv := range []string{"\u200b", "\u2060", "\ufeff", "\U000E0049"} {
			if bytes.Contains(r.Stdout, []byte(inv)) {
				t.Errorf("%v shows invisible %U raw", args, []rune(inv)[0])
			}
		}
		if len(r.Stdout) > 64<<10 {
			t.Errorf("%v: %d bytes of output: descriptions not capped", args, len(r.Stdout))
		}
	}
	r := e.Run("", "call", "evil__fails", "{}")
	hostile.CheckTerminalSafe(t, "call evil__fails stdout", r.Stdout)
	hostile.CheckTerminalSafe(t, "call evil__fails stderr", r.Stderr)
}
