package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/mcp"
)

// noConfig is an empty folder with no config to find, for the tests of
// agrun without one; runAt runs agrun there. The default compilation
// cache is the suite's shared one (not the user's).
func noConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// The default compile cache ($XDG_CACHE_HOME/agrun) is the suite's
	// shared one, so that each test does not compile the same guests
	// again (the hostile guest alone takes 10 s on a busy machine).
	cache := filepath.Join(dir, ".cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testguest.CompilationCacheDir(t), filepath.Join(cache, "agrun")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runAt runs the built agrun in dir (a noConfig folder): a child process
// with dir as its working directory, no $AGRUN_CONFIG and dir/.cache as
// $XDG_CACHE_HOME. A child rather than run in-process, because the
// working directory and the environment are the process's: with t.Chdir
// and t.Setenv these tests could not be parallel (CONTRIBUTING, "Suite
// time").
func runAt(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb strings.Builder
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AGRUN_CONFIG=", "XDG_CACHE_HOME="+filepath.Join(dir, ".cache"))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("agrun %q: %v", args, err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// hostileTool writes the hostile guest (one misbehaviour per "op") and a
// manifest for it into dir, output "json" or "text".
func hostileTool(t *testing.T, dir, output string) (wasm, manifest string) {
	t.Helper()
	wasm = filepath.Join(dir, "hostile.wasm")
	manifest = filepath.Join(dir, "hostile.toml")
	if err := os.WriteFile(wasm, testguest.Hostile(t), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(manifest, []byte(fmt.Sprintf("name = \"hostile\"\ndescription = \"misbehaves\"\noutput = %q\n[parameters]\ntype = \"object\"\n", output)), 0o644)
	return wasm, manifest
}

// TestCallFile: `agrun call FILE.wasm` with no config at all, with exactly
// the grants given on the command line.
func TestCallFile(t *testing.T) {
	t.Parallel()
	dir := noConfig(t)
	root := repoRoot(t)
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", "x.txt"), []byte("mounted text\n"), 0o644)
	wc := filepath.Join(root, "testdata/word_count.wasm")
	readFile := filepath.Join(root, "testdata/read_file.wasm")

	r := runAt(t, dir, "", "call", wc, `{"text":"one two"}`).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"words":2`) {
		t.Fatalf("word_count file: %+v", r)
	}
	// Nothing is granted by default: a filesystem tool is refused, and
	// the message says which flag grants it.
	r = runAt(t, dir, "", "call", readFile, `{"path":"/data/x.txt"}`).wantCode(t, exitFailure)
	for _, want := range []string{"permission_denied", "filesystem is not in [permissions] allowed (the default policy: no config file; `agrun init` writes one)", "--mount HOST:GUEST[:MODE]"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("no mount: stderr lacks %q: %s", want, r.stderr)
		}
	}
	r = runAt(t, dir, "", "call", readFile, `{"path":"/data/x.txt"}`, "--mount", "./data:/data:ro").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "mounted text") {
		t.Fatalf("with --mount: %+v", r)
	}
	// Only what was mounted exists.
	r = runAt(t, dir, "", "call", readFile, `{"path":"/etc/passwd"}`, "--mount", "./data:/data").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "execution_failed") {
		t.Fatalf("outside the mount: %+v", r)
	}
	// A writable mount consents to "write" for this call.
	os.MkdirAll(filepath.Join(dir, "notes"), 0o755)
	runAt(t, dir, "", "call", filepath.Join(root, "testdata/write_note.wasm"), `{"name":"n","text":"hi"}`, "--mount", "notes:/notes:rw").wantCode(t, exitOK)
	if b, err := os.ReadFile(filepath.Join(dir, "notes", "n.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("note: %q %v", b, err)
	}
	// A grant the tool cannot use is a warning, not silence.
	r = runAt(t, dir, "", "call", wc, `{"text":"x"}`, "--mount", "./data:/data", "--allow-host", "example.com").wantCode(t, exitOK)
	// The flags as given, not their placeholders (the mount's host made
	// absolute, as the call used it).
	if !strings.Contains(r.stderr, "warning: --mount "+filepath.Join(dir, "data")+`:/data:ro has no effect: the tool does not declare "filesystem"`) ||
		!strings.Contains(r.stderr, `warning: --allow-host example.com has no effect: the tool does not declare "network"`) {
		t.Fatalf("no warning for unusable grants: %q", r.stderr)
	}
	// Grant flags on a configured tool's name, a missing file, a bad mount.
	r = runAt(t, dir, "", "call", "word_count", "--allow-host", "a.example", "{}").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "--allow-host applies to a FILE.wasm only") {
		t.Fatalf("grant flag on a name: %q", r.stderr)
	}
	r = runAt(t, dir, "", "call", "--json", "./missing.wasm", "{}").wantCode(t, exitUsage)
	if !strings.HasPrefix(r.stdout, `{"ok":false,"error":{"kind":"module_refused","message":"./missing.wasm: open ./missing.wasm: no such file`) {
		t.Fatalf("missing file: %q", r.stdout)
	}
	runAt(t, dir, "", "call", wc, "--mount", "nocolon", "{}").wantCode(t, exitUsage)
	r = runAt(t, dir, "", "call", wc, "--mount", "nocolon", "--json", "{}").wantCode(t, exitUsage)
	if !strings.HasPrefix(r.stdout, `{"ok":false,"error":{"kind":"usage","message":"call: invalid value \"nocolon\" for --mount: mount \"nocolon\": want HOST:GUEST[:MODE]"}}`) {
		t.Fatalf("a flag error before --json: %q", r.stdout)
	}
	// A module without a manifest says how to give one; --manifest does.
	wasm, man := hostileTool(t, dir, "json")
	r = runAt(t, dir, "", "call", wasm, `{"op":"emit","stdout":"{\"a\":1}"}`).wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "module_refused") || !strings.Contains(r.stderr, "--manifest FILE") {
		t.Fatalf("no manifest: %q", r.stderr)
	}
	r = runAt(t, dir, "", "call", wasm, "--manifest", man, `{"op":"emit","stdout":"{\"a\":1}"}`).wantCode(t, exitOK)
	if r.stdout != `{"a":1}`+"\n" {
		t.Fatalf("--manifest: %+v", r)
	}
}

// TestErrorsNameTheSetting: each limit's message names its value and the
// setting that changes it, for a file (flags) and a configured tool
// (keys).
func TestErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	dir := noConfig(t)
	wasm, man := hostileTool(t, dir, "json")
	for _, tc := range []struct {
		name string
		args []string
		kind string
		want string
	}{
		{"timeout", []string{"--timeout", "1s", `{"op":"spin"}`}, "timeout", "timeout after 1s (--timeout)"},
		{"memory", []string{"--memory", "8MiB", `{"op":"alloc"}`}, "memory_limit", "memory limit 8MiB exceeded"},
		{"stderr", []string{`{"op":"errflood"}`}, "output_limit", "stderr exceeded 64KiB"},
		{"no network grant", []string{`{"op":"http","url":"http://example.com/"}`}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runAt(t, dir, "", append([]string{"call", "--json", wasm, "--manifest", man}, tc.args...)...)
			if tc.kind == "" {
				return // the guest reports its own refusal; only no crash matters
			}
			r.wantCode(t, exitFailure)
			var res struct {
				Error struct{ Kind, Message string }
			}
			json.Unmarshal([]byte(r.stdout), &res)
			if res.Error.Kind != tc.kind || !strings.Contains(res.Error.Message, tc.want) {
				t.Fatalf("got %s: %q, want %s containing %q", res.Error.Kind, res.Error.Message, tc.kind, tc.want)
			}
		})
	}
	if r := runAt(t, dir, "", "call", wasm, "--manifest", man, "--memory", "8MiB", `{"op":"alloc"}`); !strings.Contains(r.stderr, "memory limit 8MiB exceeded (--memory)") {
		t.Fatalf("memory hint: %q", r.stderr)
	}

	// A configured tool: the keys of its section, or [sandbox]'s.
	cfg := filepath.Join(dir, "agrun.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`[sandbox]
cache_dir = %q
memory = "8MiB"
[tools.slow]
wasm = %q
manifest = %q
timeout = "1s"
`, testguest.CompilationCacheDir(t), wasm, man)), 0o644)
	r := runAt(t, dir, "", "call", "slow", `{"op":"spin"}`).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, `tool "slow": timeout: timeout after 1s ([tools.slow] timeout)`) {
		t.Fatalf("timeout: %q", r.stderr)
	}
	r = runAt(t, dir, "", "call", "slow", `{"op":"alloc"}`).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "memory limit 8MiB exceeded ([sandbox] memory, or [tools.slow] memory for this tool)") {
		t.Fatalf("memory: %q", r.stderr)
	}
}

// TestLoopbackNamesAllowPrivate: a host that resolves to a loopback
// address is refused, and the message names allow_private.
func TestLoopbackNamesAllowPrivate(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	e := newTestEnv(t, "", fmt.Sprintf("\n[tools.get_weather]\nwasm = %q\nallowed_hosts = [%q]\n", filepath.Join(repoRoot(t), "testdata/get_weather.wasm"), host))
	r := e.run("", "call", "get_weather", fmt.Sprintf(`{"latitude":1,"longitude":2,"api_base":%q}`, srv.URL)).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "loopback") || !strings.Contains(r.stderr, "[tools.get_weather] allow_private = true") {
		t.Fatalf("loopback refusal: %q", r.stderr)
	}
}

// TestTextOutputAndVerbose: output = "text" prints the text itself (a JSON
// string with --json); -v shows guest logs and a failing tool's stderr
// under the tool's name.
func TestTextOutputAndVerbose(t *testing.T) {
	t.Parallel()
	dir := noConfig(t)
	wasm, man := hostileTool(t, dir, "text")
	r := runAt(t, dir, "", "call", wasm, "--manifest", man, `{"op":"emit","stdout":"line one\nline two"}`).wantCode(t, exitOK)
	if r.stdout != "line one\nline two\n" {
		t.Fatalf("text output: %q", r.stdout)
	}
	r = runAt(t, dir, "", "call", "--json", wasm, "--manifest", man, `{"op":"emit","stdout":"line one\nline two"}`).wantCode(t, exitOK)
	if r.stdout != `{"ok":true,"result":"line one\nline two"}`+"\n" {
		t.Fatalf("text --json: %q", r.stdout)
	}
	// Quiet by default; -v: the guest's log and the stderr of a failure.
	r = runAt(t, dir, "", "call", wasm, "--manifest", man, "--timeout", "1s", `{"op":"spin","log":"hello-token"}`).wantCode(t, exitFailure)
	if strings.Contains(r.stderr, "hello-token") {
		t.Fatalf("guest log shown without -v: %q", r.stderr)
	}
	r = runAt(t, dir, "", "-v", "call", wasm, "--manifest", man, "--timeout", "1s", `{"op":"spin","log":"hello-token"}`).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "agrun: info: hostile: hello-token") {
		t.Fatalf("-v: no guest log by tool name: %q", r.stderr)
	}
	r = runAt(t, dir, "", "--log-level", "debug", "call", wasm, "--manifest", man, `{"op":"emit","stdout":"{\"error\":\"bad\"}","stderr":"stderr-tail-token","exit":3}`).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "agrun: debug: hostile: failed call's stderr: stderr-tail-token") {
		t.Fatalf("debug: no stderr tail: %q", r.stderr)
	}
	runAt(t, dir, "", "--log-level", "loud", "tools").wantCode(t, exitUsage)
}

// TestInit: agrun init writes a config that loads, and never overwrites.
func TestInit(t *testing.T) {
	t.Parallel()
	dir := noConfig(t)
	r := runAt(t, dir, "", "tools").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "no config file found") || !strings.Contains(r.stderr, "agrun init") {
		t.Fatalf("tools without a config: %q", r.stderr)
	}
	runAt(t, dir, "", "init").wantCode(t, exitOK)
	p := filepath.Join(dir, "agrun.toml")
	if _, err := config.Load(p); err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	os.WriteFile(p, []byte("# mine\n"), 0o644)
	r = runAt(t, dir, "", "init").wantCode(t, exitUsage)
	if b, _ := os.ReadFile(p); string(b) != "# mine\n" || !strings.Contains(r.stderr, "not overwritten") {
		t.Fatalf("init overwrote: %q, %q", b, r.stderr)
	}
	r = runAt(t, dir, "", "tools").wantCode(t, exitOK)
	if strings.Contains(r.stderr, "no config file") {
		t.Fatalf("config not found after init: %q", r.stderr)
	}
}

// TestUnavailableToolsNotOffered: a tool that failed to load and one the
// policy denies are not sent to the model, nor listed by mcp serve; the
// model calling the broken one gets module_refused, as call --json does.
func TestUnavailableToolsNotOffered(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "broken", Args: `{}`}}},
		chattest.Reply{Text: "done"},
	)
	e := newTestEnv(t, srv.URL, fmt.Sprintf(`
[tools.broken]
wasm = "missing.wasm"

[tools.wc_mounted]
wasm = %q
mounts = ["./docs:/docs"]
`, filepath.Join(repoRoot(t), "testdata/word_count.wasm")))
	b, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, []byte(strings.Replace(string(b), `allowed = ["read", "network", "filesystem", "write"]`, `allowed = ["read", "network", "write"]`, 1)), 0o644)
	r := e.run("", "run", "go").wantCode(t, exitOK)
	for _, want := range []string{"tool broken not available: the tool failed to load", "tool read_file not offered", "filesystem is not in [permissions] allowed",
		`warning: tool wc_mounted: [tools.wc_mounted] mounts has no effect: the tool does not declare "filesystem"`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("run stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	reqs := srv.Requests()
	var offered []string
	for _, tl := range reqs[0].Tools {
		offered = append(offered, tl.Function.Name)
	}
	if got := strings.Join(offered, ","); got != "sum_c,wc_mounted,word_count" {
		t.Fatalf("offered %s", got)
	}
	if msg := *reqs[1].Messages[len(reqs[1].Messages)-1].Content; !strings.HasPrefix(msg, "error (module_refused): the tool failed to load") {
		t.Fatalf("model's tool message: %q", msg)
	}
	// agrun tools still shows them, with the reason and the warning.
	r = e.run("", "tools", "--json").wantCode(t, exitOK)
	var infos []toolInfo
	json.Unmarshal([]byte(r.stdout), &infos)
	byName := map[string]toolInfo{}
	for _, ti := range infos {
		byName[ti.Name] = ti
	}
	if ti := byName["broken"]; ti.Kind != "module_refused" || ti.Error == "" {
		t.Errorf("broken: %+v", ti)
	}
	if ti := byName["read_file"]; ti.Allowed || ti.Kind != "permission_denied" {
		t.Errorf("read_file: %+v", ti)
	}
	if ti := byName["wc_mounted"]; len(ti.Warnings) != 1 {
		t.Errorf("wc_mounted: %+v", ti)
	}
	// mcp serve (the binary, over stdio): tools/list has neither.
	cl, err := mcp.NewClient("agrun", mcp.Stdio{Command: binary(t), Args: []string{"-c", e.config, "mcp", "serve"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, tl := range cl.Tools() {
		listed = append(listed, strings.TrimPrefix(tl.Name(), "agrun__"))
	}
	if got := strings.Join(listed, ","); got != "sum_c,wc_mounted,word_count" {
		t.Fatalf("mcp tools/list: %q", got)
	}
}

// TestServeRefusedTool: `agrun serve` lists a configured tool that failed
// to load as not runnable, with the reason, and answers its calls with
// module_refused, as `agrun call --json` does.
func TestServeRefusedTool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agrun.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("[sandbox]\ncache_dir = %q\n[serve]\ndata_dir = \"served\"\n[tools.word_count]\nwasm = %q\n[tools.broken]\nwasm = \"missing.wasm\"\n",
		testguest.CompilationCacheDir(t), filepath.Join(repoRoot(t), "testdata/word_count.wasm"))), 0o644)
	cmd := exec.Command(binary(t), "-c", cfg, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGRUN_TOKENS=")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	sc := bufio.NewScanner(stderr)
	var base, line string
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving on "); ok {
			base, _, _ = strings.Cut(rest, " ")
			line = sc.Text()
			break
		}
	}
	if base == "" {
		t.Fatal("no serving line on stderr")
	}
	go io.Copy(io.Discard, stderr)
	if !strings.Contains(line, "(tools: 1,") {
		t.Errorf("start-up line counts the refused tool: %s", line)
	}
	resp, err := http.Get(base + "/v1/tools/broken")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Runnable bool
		Error    string
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info.Runnable || !strings.Contains(info.Error, "the tool failed to load") {
		t.Fatalf("GET broken: %+v", info)
	}
	resp, err = http.Post(base+"/v1/tools/broken/call", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), `"kind":"module_refused"`) {
		t.Fatalf("call broken: %d %s", resp.StatusCode, body)
	}
}
