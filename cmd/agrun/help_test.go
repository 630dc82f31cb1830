package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// allCommands is every command and subcommand, as `agrun help` takes it.
func allCommands() [][]string {
	var out [][]string
	for _, c := range commands {
		out = append(out, []string{c.name})
	}
	for name := range sessionCommands {
		out = append(out, []string{"sessions", name})
	}
	return append(out, []string{"mcp", "serve"})
}

// TestEveryCommandHasHelp: `CMD -h`, `CMD --help` and `help CMD` print the
// same usage on stdout and exit 0, for every command; each has a
// synopsis, a summary and an example, and its flags.
func TestEveryCommandHasHelp(t *testing.T) {
	e := newTestEnv(t, "", "")
	for _, words := range allCommands() {
		name := strings.Join(words, " ")
		t.Run(name, func(t *testing.T) {
			d, ok := cmdDocs[name]
			if !ok || d.synopsis == "" || d.summary == "" || d.example == "" {
				t.Fatalf("cmdDocs[%q] = %+v: want a synopsis, a summary and an example", name, d)
			}
			short := e.run("", append(words, "-h")...).wantCode(t, exitOK)
			long := e.run("", append(words, "--help")...).wantCode(t, exitOK)
			viaHelp := e.run("", append([]string{"help"}, words...)...).wantCode(t, exitOK)
			if short.stdout != long.stdout || short.stdout != viaHelp.stdout {
				t.Fatalf("-h, --help and help differ:\n%s\n---\n%s\n---\n%s", short.stdout, long.stdout, viaHelp.stdout)
			}
			if short.stderr != "" || !strings.HasPrefix(short.stdout, d.summary+"\n\nUsage: "+d.synopsis) || !strings.Contains(short.stdout, "Example:\n  ") {
				t.Fatalf("help of %s:\n%s\nstderr: %s", name, short.stdout, short.stderr)
			}
		})
	}
	// Flags that exist are in the help, with their other names and defaults.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"inspect", "-h"}, []string{"--json"}},
		{[]string{"run", "-h"}, []string{"-m, --model MODEL", "-s, --system PROMPT", "-c, --continue", "--max-turns N", "--base-url URL", "--session ID", "--tools NAMES", "--no-tools", "--json"}},
		{[]string{"chat", "-h"}, []string{"-m, --model MODEL", "--tools NAMES"}},
		{[]string{"sessions", "export", "-h"}, []string{`--format FORMAT`, `(default "markdown")`}},
		{[]string{"-h"}, []string{"-c FILE", "--version", "Commands:", "  sessions  ", "  version  "}},
		{[]string{"help"}, []string{"-c FILE", "Commands:"}},
	} {
		r := runIn(t, "", tc.args...).wantCode(t, exitOK)
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%v lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
}

// TestHelpRendersTheFlagSet: the usage comes from the FlagSet as it is
// when printed, so a flag added to a command is in its help.
func TestHelpRendersTheFlagSet(t *testing.T) {
	fs := newFlags("tools")
	fs.Bool("json", false, "print JSON")
	fs.String("log-level", "warn", "log `LEVEL`: debug, info, warn or error")
	alias(fs, "log-level", "v")
	fs.Int("limit", 5, "at most `N`")
	got := helpText(fs)
	for _, want := range []string{
		"  -v, --log-level LEVEL   log LEVEL: debug, info, warn or error (default \"warn\")\n",
		"      --json              print JSON\n",
		"      --limit N           at most N (default 5)\n",
		"Usage: agrun [-c FILE] tools [--json]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("help lacks %q:\n%s", want, got)
		}
	}
	// A command without a cmdDocs entry still gets a usage.
	if got := helpText(newFlags("frob")); !strings.Contains(got, "Usage: agrun frob [FLAGS]") {
		t.Errorf("undocumented command: %q", got)
	}
}

// TestUsageErrors: an unknown flag prints the error and the command's
// usage on stderr (exit 2); `help nosuch` is a usage error.
func TestUsageErrors(t *testing.T) {
	e := newTestEnv(t, "", "")
	for _, args := range [][]string{{"run", "--bogus", "hi"}, {"chat", "-x"}, {"sessions", "prune", "--older"}, {"tools", "--nope"}, {"mcp", "serve", "--stdio"}, {"version", "--short"}} {
		r := e.run("", args...).wantCode(t, exitUsage)
		name := args[0]
		if args[0] == "sessions" || args[0] == "mcp" {
			name += " " + args[1]
		}
		// One line of error, the synopsis, where the help is: the error
		// stays on screen (the whole help is -h's); the flag as typed.
		flag := args[len(args)-1]
		if args[0] == "run" {
			flag = "--bogus"
		}
		want := "agrun: " + name + ": unknown flag " + flag + "\nusage: " + cmdDocs[name].synopsis + "\n`agrun " + name + " -h` shows its flags and an example\n"
		if r.stdout != "" || r.stderr != want {
			t.Errorf("%v: stdout %q\nstderr %s", args, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{{"help", "nosuch"}, {"help", "sessions", "nosuch"}, {"help", "run", "x"}, {"sessions", "nosuch"}, {"mcp"}, {"mcp", "nosuch"}, {"nosuch"}} {
		r := e.run("", args...).wantCode(t, exitUsage)
		if r.stdout != "" || !strings.Contains(r.stderr, "\nusage: agrun") || strings.Count(r.stderr, "\n") > 5 {
			t.Errorf("%v: %+v", args, r)
		}
	}
	// A flag's bad value names the flag as typed and what it wants, in
	// words (not "parse error", not Go's "time:" or "-flag").
	for args, want := range map[string]string{
		"run --max-turns x hi":        `agrun: run: invalid value "x" for --max-turns: want a number`,
		"run --json=maybe hi":         `agrun: run: invalid value "maybe" for --json: want true or false`,
		"run -max-turns 1e99999 hi":   `agrun: run: invalid value "1e99999" for -max-turns: want a number`,
		"call word_count --timeout":   `agrun: call: --timeout needs a value`,
		"sessions prune --older-than": `agrun: sessions prune: --older-than needs a value`,
		// A usage error comes before the missing API key (none is set).
		"run --tools nosuch hi": "agrun: run: --tools: no tool \"nosuch\" in the config (`agrun tools` lists them)",
	} {
		r := e.run("", strings.Fields(args)...).wantCode(t, exitUsage)
		if first, _, _ := strings.Cut(r.stderr, "\n"); first != want {
			t.Errorf("%s: %q, want %q", args, first, want)
		}
	}
	// An unknown command says so once (no "agrun: agrun:"), with the
	// nearest command.
	if r := e.run("", "sesions"); r.code != exitUsage || !strings.HasPrefix(r.stderr, "agrun: unknown command \"sesions\" (did you mean \"sessions\"?)\n") {
		t.Errorf("sesions: %+v", r)
	}
	if r := e.run("", "zzzzzz"); strings.Contains(r.stderr, "did you mean") {
		t.Errorf("zzzzzz: %+v", r)
	}
	// call --json keeps its one-object contract; the usage goes to stderr.
	r := e.run("", "call", "--json", "--bogus", "word_count").wantCode(t, exitUsage)
	var obj struct {
		OK    bool
		Error struct{ Kind string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &obj); err != nil || obj.Error.Kind != "usage" || !strings.Contains(r.stderr, "usage: agrun [-c FILE] call") {
		t.Fatalf("call --json --bogus: %+v", r)
	}
	if r := e.run("", "call", "--json", "-h"); r.code != exitOK || !strings.HasPrefix(r.stdout, cmdDocs["call"].summary) {
		t.Fatalf("call --json -h: %+v", r)
	}
}

// TestVersion: `agrun version` and `agrun --version` print the module
// version, the revision (or why there is none), Go's and wazero's
// versions, all from the build info.
func TestVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	wazero := regexp.MustCompile(`github.com/tetratelabs/wazero (v\S+)`).FindSubmatch(mod)
	if wazero == nil {
		t.Fatal("no wazero in go.mod")
	}
	r := runIn(t, "", "version").wantCode(t, exitOK)
	if r2 := runIn(t, "", "--version").wantCode(t, exitOK); r2.stdout != r.stdout {
		t.Fatalf("--version %q != version %q", r2.stdout, r.stdout)
	}
	// go.mod replaces wazero with agrun's patched copy: the version says
	// which release it is and that it is patched.
	wantWazero := "\n  wazero    " + string(wazero[1]) + "\n"
	if regexp.MustCompile(`(?m)^replace github.com/tetratelabs/wazero => \./third_party/wazero$`).Match(mod) {
		wantWazero = "\n  wazero    " + string(wazero[1]) + " (patched: ./third_party/wazero)\n"
	}
	for _, want := range []string{"agrun ", "\n  revision  ", "\n  go        go1.", wantWazero} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("version lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "dev\n") {
		t.Errorf("version says dev: %s", r.stdout)
	}
	runIn(t, "", "version", "extra").wantCode(t, exitUsage)

	// What other builds print (a release, no build info):
	// internal/cli/buildinfo's TestText.
}

// TestSilentWaitsSpeak: on a terminal, a tool load that takes longer
// than noticeAfter says why, `call NAME` without ARGS_JSON says it reads
// stdin; on a pipe neither line is printed.
func TestSilentWaitsSpeak(t *testing.T) {
	e := newTestEnv(t, "", "")
	old := noticeAfter
	noticeAfter = 0 // every load is "slow"
	t.Cleanup(func() { noticeAfter = old })
	for _, tty := range []bool{true, false} {
		var out, errb bytes.Buffer
		c := &cli{stdin: strings.NewReader(`{"text":"a b"}`), stdout: &out, stderr: &errb, terminal: func(any) bool { return tty }}
		if code := c.main(context.Background(), []string{"-c", e.config, "call", "word_count"}); code != exitOK {
			t.Fatalf("tty %v: exit %d: %s", tty, code, errb.String())
		}
		said := strings.Contains(errb.String(), "agrun: loading the tools: a module is compiled the first time it is used (cached afterwards)…\n") &&
			strings.Contains(errb.String(), "agrun: reading ARGS_JSON from stdin (type it, then Ctrl-D; or give it after the name)\n")
		if said != tty {
			t.Errorf("tty %v: stderr %q", tty, errb.String())
		}
		if !strings.Contains(out.String(), `"words":2`) {
			t.Errorf("tty %v: stdout %q", tty, out.String())
		}
	}
}
