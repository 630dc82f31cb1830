package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
)

// TestGlobalFlagsAfterTheCommand: the global flags (-c/--config FILE, -v,
// --log-level, --version) work after the command as before it, among a
// command's own flags and after its arguments (issue 32); a command's own
// flag of the same name wins (run's -c is --continue, --config names the
// config there); a bad global flag after a command is that command's
// three-line usage error.
func TestGlobalFlagsAfterTheCommand(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	// Only the flag finds the config: there is no $AGRUN_CONFIG (TestMain)
	// and no ./agrun.toml in the package's folder, where the test runs.
	if _, err := os.Stat("agrun.toml"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("./agrun.toml: %v, want none", err)
	}

	// The same answer, wherever the flag is.
	same := func(before []string, after ...[]string) {
		t.Helper()
		want := runIn(t, "", before...)
		if want.code != exitOK {
			t.Fatalf("%q: exit %d\n%s", before, want.code, want.stderr)
		}
		for _, args := range after {
			if got := runIn(t, "", args...); got != want {
				t.Errorf("%q: %+v\nwant what %q answers: %+v", args, got, before, want)
			}
		}
	}
	same([]string{"-c", e.config, "tools", "--json"},
		[]string{"tools", "-c", e.config, "--json"},
		[]string{"tools", "--json", "--config", e.config},
		[]string{"tools", "--json", "--config=" + e.config},
		[]string{"--config", e.config, "tools", "--json"})
	same([]string{"-c", e.config, "call", "word_count", `{"text":"a b c"}`},
		[]string{"call", "word_count", `{"text":"a b c"}`, "-c", e.config},
		[]string{"call", "--config", e.config, "word_count", `{"text":"a b c"}`})
	same([]string{"-c", e.config, "sessions", "--json"}, []string{"sessions", "--json", "-c", e.config})
	same([]string{"-c", e.config, "approvals", "list"},
		[]string{"approvals", "list", "-c", e.config},
		[]string{"approvals", "-c", e.config, "list"})
	same([]string{"version"}, []string{"tools", "--version"}, []string{"--version"})
	if r := runIn(t, "", "mcp", "-c", e.config, "serve", "-h").wantCode(t, exitOK); !strings.HasPrefix(r.stdout, cmdDocs["mcp serve"].summary) {
		t.Errorf("mcp -c FILE serve -h: %+v", r)
	}
	// A global flag after the command is not one of call's FILE-only
	// grant flags.
	if r := runIn(t, "", "call", "word_count", `{"text":"a"}`, "-v", "--log-level", "error", "--config", e.config); r.code != exitOK {
		t.Errorf("call NAME with -v, --log-level, --config after it: %+v", r)
	}

	// -v and --log-level after the command set the level, as before it.
	for _, tc := range []struct {
		args []string
		want slog.Level
	}{
		{[]string{"tools", "-c", e.config}, slog.LevelWarn},
		{[]string{"tools", "-c", e.config, "-v"}, slog.LevelDebug},
		{[]string{"-v", "tools", "-c", e.config}, slog.LevelDebug},
		{[]string{"tools", "-c", e.config, "--log-level", "info"}, slog.LevelInfo},
		{[]string{"-v", "tools", "-c", e.config, "--log-level", "error"}, slog.LevelDebug}, // -v wins, as before the command
		{[]string{"--log-level", "debug", "tools", "-c", e.config, "--log-level", "error"}, slog.LevelError},
	} {
		var out, errb bytes.Buffer
		c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}
		if code := c.main(context.Background(), tc.args); code != exitOK || c.logLevel != tc.want {
			t.Errorf("%q: exit %d, level %v, want %v\n%s", tc.args, code, c.logLevel, tc.want, errb.String())
		}
	}

	// run: -c after the command is --continue; --config names the config.
	srv := chattest.New(t, chattest.Reply{Text: "first"}, chattest.Reply{Text: "second"})
	e = newTestEnv(t, srv.URL, "")
	runIn(t, "", "run", "--session", "s1", "hello", "--config", e.config).wantCode(t, exitOK)
	r := runIn(t, "", "run", "--config", e.config, "-c", "and then?").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "agrun: session s1\n") {
		t.Fatalf("run --config FILE -c: -c did not continue: %s", r.stderr)
	}
	if reqs := srv.Requests(); len(reqs) != 2 || len(reqs[1].Messages) != 3 {
		t.Fatalf("continued request: %+v", reqs)
	}
	r = runIn(t, "", "run", "-c", e.config, "hi").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "-c after run is --continue; a config file is --config "+e.config+" after the command, or -c before it") {
		t.Fatalf("run -c FILE: %s", r.stderr)
	}

	// Usage errors of global flags after a command: the command's three
	// lines.
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"tools", "--log-level", "loud"}, `tools: --log-level "loud": want debug, info, warn or error`},
		{[]string{"tools", "--config"}, "tools: --config needs a value"},
		{[]string{"sessions", "show", "-c"}, "sessions show: -c needs a value"},
		{[]string{"mcp", "--log-level", "x", "serve"}, `mcp: --log-level "x": want debug, info, warn or error`},
	} {
		name := strings.Join(tc.args[:1], " ")
		if tc.args[0] == "sessions" {
			name = "sessions show"
		}
		want := "agrun: " + tc.msg + "\nusage: " + synopsis(newFlags(name)) + "\n`agrun " + name + " -h` shows its flags and an example\n"
		if r := runIn(t, "", tc.args...).wantCode(t, exitUsage); r.stdout != "" || r.stderr != want {
			t.Errorf("%q: stdout %q\nstderr %q\nwant   %q", tc.args, r.stdout, r.stderr, want)
		}
	}

	// Each command's help names the global flags it takes, not as its own.
	for _, tc := range []struct{ cmd, want string }{
		{"tools", "Global flags (before or after the command): -c/--config FILE, --log-level LEVEL, -v, --version\n"},
		{"run", "Global flags (before or after the command): --config FILE, --log-level LEVEL, -v, --version\n"},
	} {
		r := runIn(t, "", tc.cmd, "-h").wantCode(t, exitOK)
		if !strings.Contains(r.stdout, tc.want) || strings.Contains(r.stdout, "--log-level LEVEL   ") {
			t.Errorf("%s -h:\n%s", tc.cmd, r.stdout)
		}
	}
}
