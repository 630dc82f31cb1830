package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/mddoc"
	"github.com/agcore/agrun/internal/testing/testguest"
)

// shippedConfig writes dir/agrun.toml: the repository's agrun.toml as a
// user has it, with only what a test must change: the model at llmURL,
// the shared compile cache, sessions in dir/sessions, write_note's mount
// in dir/notes (not the checkout's testdata/notes). dir/testdata and
// dir/docs are the repository's (symlinks), so
// the config's relative paths, and the documents' commands that name
// testdata/, work as from the repository's root. Each change must apply:
// the test fails when agrun.toml no longer has the line it changes.
func shippedConfig(t *testing.T, dir, llmURL string) string {
	t.Helper()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "agrun.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, r := range [][2]string{
		{`base_url = "https://api.openai.com/v1"`, fmt.Sprintf("base_url = %q", llmURL)},
		{"\ncache_dir = \"\"", fmt.Sprintf("\ncache_dir = %q", testguest.CompilationCacheDir(t))},
		{"[sessions]\ndir = \"\"", "[sessions]\ndir = \"sessions\""},
		{`"./testdata/notes:/notes:rw"`, `"./notes:/notes:rw"`},
	} {
		if strings.Count(cfg, r[0]) != 1 {
			t.Fatalf("agrun.toml has not one %q: the test's copy of it needs another change", r[0])
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	for _, d := range []string{"notes", "sessions"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"testdata", "docs"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, "agrun.toml")
	writeFile(t, p, cfg)
	return p
}

// userEnv is the environment of a user of dir: its own data and cache
// folders, the shipped config's key variable set, no $AGRUN_CONFIG.
func userEnv(dir string) []string {
	return []string{"XDG_DATA_HOME=" + filepath.Join(dir, "xdg-data"), "XDG_CACHE_HOME=" + filepath.Join(dir, "xdg-cache"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg-config"), "OPENAI_API_KEY=sk-docs-test", "AGRUN_CONFIG=", "AGRUN_TOKENS="}
}

// everydayCheck is what TestREADMEEverydayUse expects of the README's
// commands that start with prefix.
type everydayCheck struct {
	prefix string
	// replies are the fake model's answers to this command's requests.
	replies []chattest.Reply
	stdin   string
	// setup makes what the command names (files in dir) before it runs.
	setup func(t *testing.T, dir string)
	// rewrite, if set, changes the command before it runs (an address
	// the test cannot use as written), and says why.
	rewrite func(line string) string
	// serve: the command is a server: it runs until it has answered,
	// then gets SIGTERM; check gets the base URL in stdout.
	serve bool
	code  int
	check func(t *testing.T, dir string, r result)
}

func contains(subs ...string) func(*testing.T, string, result) {
	return func(t *testing.T, _ string, r result) {
		t.Helper()
		for _, s := range subs {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("stdout lacks %q:\n%s\nstderr: %s", s, r.stdout, r.stderr)
			}
		}
	}
}

func jsonObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, s)
	}
	return m
}

// TestREADMEEverydayUse runs every command of README.md's "Everyday use"
// block, in order, as written (with sh, in a folder holding the shipped
// agrun.toml: shippedConfig), against a scripted model, and checks each
// one's exit code and the shape of its output. A command of the block
// with no check below, or a check whose command left the block, fails
// the test: a changed example is a changed test.
func TestREADMEEverydayUse(t *testing.T) {
	t.Parallel()
	host, _ := startRegistry(t)
	dir := t.TempDir()
	var lastRequest chattest.Request
	record := func(tb testing.TB, r chattest.Request) { lastRequest = r }
	checks := []everydayCheck{
		{prefix: "agrun init", setup: func(t *testing.T, dir string) {
			// Beside the shipped agrun.toml it would refuse (never overwrites): an empty folder.
			os.MkdirAll(filepath.Join(dir, "fresh"), 0o755)
		}, rewrite: func(l string) string { return "cd fresh && " + l }, check: func(t *testing.T, dir string, r result) {
			if b, err := os.ReadFile(filepath.Join(dir, "fresh", "agrun.toml")); err != nil || !strings.Contains(string(b), "[llm]") {
				t.Errorf("no agrun.toml written: %v %s", err, r.stderr)
			}
		}},
		{prefix: "agrun tools", check: contains("get_weather", "read_file", "sum_c", "word_count", "write_note")},
		{prefix: "agrun call --json sum_c", check: func(t *testing.T, _ string, r result) {
			if m := jsonObject(t, r.stdout); m["ok"] != true || m["result"].(map[string]any)["sum"] != 6.0 {
				t.Errorf("%s", r.stdout)
			}
		}},
		{prefix: "agrun call testdata/read_file.wasm", check: func(t *testing.T, _ string, r result) {
			if m := jsonObject(t, r.stdout); !strings.HasPrefix(fmt.Sprint(m["content"]), "# Architecture") {
				t.Errorf("%s", r.stdout)
			}
		}},
		{prefix: "agrun -v call word_count", check: contains(`{"words":1,`)},
		{prefix: "agrun run --session demo", replies: []chattest.Reply{
			{ToolCalls: []chattest.Call{{ID: "c1", Name: "read_file", Args: `{"path":"/docs/ARCHITECTURE.md"}`}}},
			{Text: "A map of the packages.", Check: func(tb testing.TB, r chattest.Request) {
				if last := r.Messages[len(r.Messages)-1]; last.Role != "tool" || last.Content == nil || !strings.Contains(*last.Content, "# Architecture") {
					tb.Errorf("the model was not sent the file: %+v", last)
				}
			}},
		}, check: func(t *testing.T, dir string, r result) {
			if r.stdout != "A map of the packages.\n" {
				t.Errorf("stdout %q", r.stdout)
			}
			if _, err := os.Stat(filepath.Join(dir, "sessions", "demo.jsonl")); err != nil {
				t.Errorf("session demo not saved: %v", err)
			}
		}},
		{prefix: "agrun run --json --max-tokens", replies: []chattest.Reply{{Text: "ok"}}, check: func(t *testing.T, _ string, r result) {
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			for _, l := range lines {
				jsonObject(t, l)
			}
			if !strings.Contains(lines[len(lines)-1], `"type":"done"`) {
				t.Errorf("last event: %s", lines[len(lines)-1])
			}
		}},
		{prefix: "agrun run --show-reasoning -q", replies: []chattest.Reply{{Reasoning: "Thinking it over.", Text: "ok"}}, check: func(t *testing.T, _ string, r result) {
			if r.stdout != "ok\n" || !strings.Contains(r.stderr, "Thinking it over.") || strings.Contains(r.stderr, "tokens") {
				t.Errorf("stdout %q, stderr %q: want the reasoning on stderr and no usage line", r.stdout, r.stderr)
			}
		}},
		{prefix: "agrun run -c ", replies: []chattest.Reply{{Text: "In one line.", Check: func(tb testing.TB, r chattest.Request) {
			if len(r.Messages) < 4 { // system, the previous prompt and answer, this prompt
				tb.Errorf("-c did not continue a session: %d messages", len(r.Messages))
			}
		}}}, check: contains("In one line.")},
		{prefix: "agrun run -m gpt-4.1 -s", replies: []chattest.Reply{{Text: "Terse.", Check: func(tb testing.TB, r chattest.Request) {
			if r.Model != "gpt-4.1" || r.Messages[0].Role != "system" || *r.Messages[0].Content != "Be terse." {
				tb.Errorf("model %q, first message %+v", r.Model, r.Messages[0])
			}
		}}}, check: contains("Terse.")},
		{prefix: "git diff | agrun run --no-tools", setup: func(t *testing.T, dir string) {
			// A change for git diff to show.
			for _, args := range [][]string{{"init", "-q"}, {"add", "agrun.toml"}} {
				if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
					t.Fatalf("git %v: %v %s", args, err, out)
				}
			}
			f, _ := os.OpenFile(filepath.Join(dir, "agrun.toml"), os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("# a change to review\n")
			f.Close()
		}, replies: []chattest.Reply{{Text: "Looks fine.", Check: func(tb testing.TB, r chattest.Request) {
			if len(r.Tools) != 0 || !strings.Contains(*r.Messages[len(r.Messages)-1].Content, "+# a change to review") {
				tb.Errorf("tools %d, prompt %q", len(r.Tools), *r.Messages[len(r.Messages)-1].Content)
			}
		}}}, check: contains("Looks fine.")},
		{prefix: "echo \"Count the words", replies: []chattest.Reply{
			{ToolCalls: []chattest.Call{{ID: "c1", Name: "word_count", Args: `{"text":"a b c"}`}}, Check: func(tb testing.TB, r chattest.Request) {
				if len(r.Tools) != 1 || r.Tools[0].Function.Name != "word_count" || !strings.Contains(*r.Messages[len(r.Messages)-1].Content, "Count the words") {
					tb.Errorf("tools %+v, prompt %q", r.Tools, *r.Messages[len(r.Messages)-1].Content)
				}
			}},
			{Text: "3 words."},
		}, check: contains("3 words.")},
		{prefix: "agrun chat --session demo", stdin: "And now?\n", replies: []chattest.Reply{{Text: "Still a map.", Check: record}}, check: func(t *testing.T, _ string, r result) {
			if !strings.Contains(r.stdout, "Still a map.") || !strings.Contains(*lastRequest.Messages[1].Content, "Summarise /docs/ARCHITECTURE.md") {
				t.Errorf("stdout %q; the chat did not continue demo", r.stdout)
			}
		}},
		{prefix: "agrun sessions  ", check: contains("demo")},
		{prefix: "agrun sessions show demo", check: contains("Summarise /docs/ARCHITECTURE.md", "Still a map.")},
		{prefix: "agrun sessions export --format markdown demo > demo.md", check: func(t *testing.T, dir string, r result) {
			if b, _ := os.ReadFile(filepath.Join(dir, "demo.md")); !strings.Contains(string(b), "Summarise /docs/ARCHITECTURE.md") {
				t.Errorf("demo.md: %q", b)
			}
		}},
		{prefix: "agrun sessions compact demo", check: contains("session demo: ")},
		{prefix: "agrun sessions rm demo", check: func(t *testing.T, dir string, r result) {
			if _, err := os.Stat(filepath.Join(dir, "sessions", "demo.jsonl")); !os.IsNotExist(err) || r.stdout != "removed demo\n" {
				t.Errorf("stdout %q, session file: %v", r.stdout, err)
			}
		}},
		{prefix: "agrun sessions prune --older-than", check: func(*testing.T, string, result) {}},
		{prefix: "agrun run --schema person.json", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "person.json"), `{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}`)
		}, replies: []chattest.Reply{{Text: `{"name":"Frank Herbert"}`}}, check: func(t *testing.T, _ string, r result) {
			if m := jsonObject(t, r.stdout); m["name"] != "Frank Herbert" {
				t.Errorf("%s", r.stdout)
			}
		}},
		{prefix: "agrun audit --since", check: contains("## word_count: 1 call", "[tools.word_count]")}, // the echo | run above; demo (read_file) is removed
		{prefix: "agrun call --json --audit read_file", check: func(t *testing.T, _ string, r result) {
			var got struct {
				OK     bool `json:"ok"`
				Result struct {
					Path string `json:"path"`
				} `json:"result"`
				Audit struct {
					Mounts []struct {
						Paths []struct {
							Path string `json:"path"`
						} `json:"paths"`
					} `json:"mounts"`
				} `json:"audit"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || !got.OK || len(got.Audit.Mounts) != 1 || len(got.Audit.Mounts[0].Paths) == 0 ||
				got.Audit.Mounts[0].Paths[0].Path != got.Result.Path {
				t.Errorf("%v: %s", err, r.stdout)
			}
		}},
		{prefix: "agrun run --trace", replies: []chattest.Reply{{Text: "traced"}}, check: func(t *testing.T, _ string, r result) {
			if r.stdout != "traced\n" || !strings.Contains(r.stderr, "invoke_agent agrun") || !strings.Contains(r.stderr, "chat ") {
				t.Errorf("stdout %q, stderr %q: want the span tree", r.stdout, r.stderr)
			}
		}},
		{prefix: "agrun approvals list", check: func(*testing.T, string, result) {}},
		{prefix: "agrun inspect testdata/get_weather.wasm", check: contains("get_weather", "sha256")},
		{prefix: "agrun pack -m manifest.toml tool.wasm -o tool.packed.wasm", setup: func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(repoRoot(t), "testdata/sum_c.wasm"))
			writeFile(t, filepath.Join(dir, "tool.wasm"), string(b))
			writeFile(t, filepath.Join(dir, "manifest.toml"), "name = \"tool\"\ndescription = \"Add numbers\"\n[parameters]\ntype = \"object\"\n")
		}, check: func(t *testing.T, dir string, r result) {
			if _, err := os.Stat(filepath.Join(dir, "tool.packed.wasm")); err != nil {
				t.Error(err)
			}
		}},
		{prefix: "agrun push tool.wasm ghcr.io/", rewrite: func(l string) string {
			return strings.Replace(l, "ghcr.io", host, 1) // a registry on this machine in place of GHCR
		}, check: contains("digest:  sha256:")},
		{prefix: "agrun serve --addr", serve: true, rewrite: func(l string) string {
			return regexp.MustCompile(`127\.0\.0\.1:\d+`).ReplaceAllString(l, "127.0.0.1:0") // a free port
		}, check: func(t *testing.T, _ string, r result) {
			resp, err := http.Get(r.stdout + "/v1/tools/word_count/call")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("GET of a call: %d", resp.StatusCode)
			}
		}},
		{prefix: "agrun mcp serve", serve: true},
		{prefix: "agrun worker", code: exitUsage, check: func(t *testing.T, _ string, r result) {
			// Without [cluster] (the shipped config has none) a worker
			// has nothing to join: the message says what it needs.
			if !strings.Contains(r.stderr, "[cluster]") {
				t.Errorf("stderr %q", r.stderr)
			}
		}},
		{prefix: "agrun version", check: func(t *testing.T, _ string, r result) {
			if !strings.HasPrefix(r.stdout, "agrun ") || !strings.Contains(r.stdout, "wazero") {
				t.Errorf("%q", r.stdout)
			}
		}},
	}

	blocks := mddoc.Read(t, "README.md").Section(t, "## Everyday use").Blocks("sh")
	if len(blocks) == 0 {
		t.Fatal("README's Everyday use has no sh block")
	}
	cmds := mddoc.ShellCmds(blocks[0])
	if len(cmds) < 20 {
		t.Fatalf("%d commands in the Everyday use block", len(cmds))
	}
	// Each command has exactly one check, each check one command.
	plan := make([]*everydayCheck, len(cmds))
	used := make([]bool, len(checks))
	var script []chattest.Reply
	for i, c := range cmds {
		for j := range checks {
			if strings.HasPrefix(c.Line+"  ", checks[j].prefix) {
				if plan[i] != nil {
					t.Fatalf("%q matches two checks", c.Line)
				}
				if used[j] {
					t.Fatalf("check %q matches two commands", checks[j].prefix)
				}
				plan[i], used[j] = &checks[j], true
			}
		}
		if plan[i] == nil {
			t.Fatalf("README's Everyday use has %q, which this test does not check: add a check", c.Line)
		}
		script = append(script, plan[i].replies...)
	}
	for j, u := range used {
		if !u {
			t.Errorf("check %q: README's Everyday use has no such command any more", checks[j].prefix)
		}
	}
	model := chattest.New(t, script...)
	shippedConfig(t, dir, model.URL)
	sh := newDocShell(t, dir, userEnv(dir)...)
	for i, c := range cmds {
		ch := plan[i]
		t.Run(c.Line, func(t *testing.T) {
			if ch.setup != nil {
				ch.setup(t, dir)
			}
			line := c.Line
			if ch.rewrite != nil {
				line = ch.rewrite(line)
			}
			if ch.serve {
				serveDocCommand(t, sh, line, ch)
				return
			}
			r := sh.run(ch.stdin, line)
			if r.code != ch.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, ch.code, r.stdout, r.stderr)
			}
			if ch.check != nil {
				ch.check(t, dir, r)
			}
		})
	}
	if n := len(model.Requests()); n != len(script) {
		t.Errorf("the model got %d requests, the checks scripted %d", n, len(script))
	}
}

// serveDocCommand runs a server command of the README: `agrun serve`
// until it says where it serves and answers, `agrun mcp serve` until it
// lists the tools to an MCP client on its stdin; then SIGTERM, which
// must end it with exit 0.
func serveDocCommand(t *testing.T, sh *docShell, line string, ch *everydayCheck) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Dir, cmd.Env = sh.dir, sh.env
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	done := make(chan string, 1)
	if strings.Contains(line, "mcp serve") {
		fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"docs-test","version":"1"}}}`)
		fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		go func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if strings.Contains(sc.Text(), `"id":2`) {
					done <- sc.Text()
					return
				}
			}
			done <- ""
		}()
		go io.Copy(io.Discard, stderr)
	} else {
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if _, rest, ok := strings.Cut(sc.Text(), "serving on "); ok {
					base, _, _ := strings.Cut(rest, " ")
					done <- base
					io.Copy(io.Discard, stderr)
					return
				}
			}
			done <- ""
		}()
		go io.Copy(io.Discard, stdout)
	}
	var got string
	select {
	case got = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: no answer within 60 s", line)
	}
	if got == "" {
		t.Fatalf("%s: ended without answering", line)
	}
	if strings.Contains(line, "mcp serve") {
		var resp struct {
			Result struct {
				Tools []struct{ Name string } `json:"tools"`
			} `json:"result"`
		}
		json.Unmarshal([]byte(got), &resp)
		var names []string
		for _, tl := range resp.Result.Tools {
			names = append(names, tl.Name)
		}
		if !slices.Contains(names, "word_count") || !slices.Contains(names, "write_note") {
			t.Errorf("tools/list: %s", got)
		}
	} else if ch.check != nil {
		ch.check(t, sh.dir, result{stdout: got})
	}
	cmd.Process.Signal(syscall.SIGTERM)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("%s after SIGTERM: %v", line, err)
	}
}

// TestREADMECommandsAndExitCodes: README's list of every command is the
// CLI's (commands and sessions' subcommands), `agrun help sessions` names
// every subcommand, and README's exit codes are those `agrun help` gives.
func TestREADMECommandsAndExitCodes(t *testing.T) {
	t.Parallel()
	sec := mddoc.Read(t, "README.md").Section(t, "## Everyday use").Text
	list := regexp.MustCompile(`(?s)\nEvery command: (.*?)\n\n`).FindStringSubmatch(sec)
	if list == nil {
		t.Fatal(`README's Everyday use has no "Every command: ..." paragraph`)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(list[1], -1) {
		named[m[1]] = true
	}
	want := map[string]bool{"mcp serve": true, "agrun help": true}
	for _, c := range commands {
		if c.name != "mcp" {
			want[c.name] = true
		}
	}
	for name := range sessionCommands {
		want[name] = true
	}
	for name := range cmdDocs {
		if sub, ok := strings.CutPrefix(name, "approvals "); ok {
			want[sub] = true
		}
	}
	for name := range want {
		if !named[name] {
			t.Errorf("README's list of every command lacks `%s`", name)
		}
	}
	for name := range named {
		if !want[name] {
			t.Errorf("README's list of every command names `%s`, which agrun does not have", name)
		}
	}

	r := runIn(t, "", "help", "sessions").wantCode(t, exitOK)
	for name := range sessionCommands {
		if !strings.Contains(r.stdout, name) {
			t.Errorf("agrun help sessions does not name %s:\n%s", name, r.stdout)
		}
	}

	codes := func(text string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`(?:^|, |\), )(\d+) `).FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
		return out
	}
	para := regexp.MustCompile(`(?s)\nExit codes: (.*?)\. Results go to`).FindStringSubmatch(sec)
	help := regexp.MustCompile(`(?m)^Exit codes: (.*)$`).FindStringSubmatch(runIn(t, "", "help").wantCode(t, exitOK).stdout)
	if para == nil || help == nil {
		t.Fatalf("no exit codes in README (%v) or agrun help (%v)", para != nil, help != nil)
	}
	if got, want := codes(help[1]), codes(strings.Join(strings.Fields(para[1]), " ")); !slices.Equal(got, want) || len(want) < 5 {
		t.Errorf("agrun help's exit codes %v, README's %v", got, want)
	}
}
