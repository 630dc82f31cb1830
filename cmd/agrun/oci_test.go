package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/testing/mddoc"
)

// startRegistry runs go-containerregistry's registry in process and
// returns its address as localhost:PORT (loopback: plain HTTP), and the
// function that stops it.
func startRegistry(t *testing.T) (string, func()) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return "localhost:" + u.Port(), srv.Close
}

// TestPublishToolExample runs README.md's "Publish a tool" as a user
// would: push, pull (the pinned line taken from pull's output), the
// [tools.word_count] block with it, and the call; against a real
// registry, with the registry's address in place of localhost:5000.
func TestPublishToolExample(t *testing.T) {
	t.Parallel()
	host, stop := startRegistry(t)
	sec := mddoc.Read(t, "README.md").Section(t, "## Publish a tool")
	sec.Text, _, _ = strings.Cut(sec.Text, "\n### ") // its signing: TestSignToolExample
	sec.Text = strings.ReplaceAll(sec.Text, "localhost:5000", host)
	var cmds [][]string
	for _, c := range sec.ShellCmds() {
		cmds = append(cmds, mddoc.ShellWords(c.Line))
	}
	tomls := sec.Blocks("toml")
	if len(cmds) != 3 || len(tomls) == 0 {
		t.Fatalf("want push, pull, call and one toml block in the section; have %q", cmds)
	}
	e := newTestEnv(t, "", "\n[oci]\ndir = \"modules\"\n")
	root := repoRoot(t)
	push := cmds[0]
	push[2] = filepath.Join(root, push[2]) // the README runs from the repository's root
	r := e.run("", push[1:]...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "digest:  sha256:") {
		t.Fatalf("push: %q", r.stdout)
	}
	r = e.run("", cmds[1][1:]...).wantCode(t, exitOK)
	line := regexp.MustCompile(`(?m)^  (oci = "` + regexp.QuoteMeta(host) + `/tools/word_count:1\.0@(sha256:[0-9a-f]{64})")$`).FindStringSubmatch(r.stdout)
	sum := regexp.MustCompile(`sha256 ([0-9a-f]{64}) `).FindStringSubmatch(r.stdout)
	if line == nil || sum == nil {
		t.Fatalf("pull printed no pinned line and module sha256:\n%s", r.stdout)
	}
	if !strings.HasPrefix(r.stdout, "pulled:  "+host+"/tools/word_count:1.0\ndigest:  "+line[2]+"\n") || !strings.Contains(r.stdout, "\nsigned:  no signature published (a tool that requires one is refused)\n") {
		t.Fatalf("pull output:\n%s", r.stdout)
	}
	// The block as the user fills it in, in place of the example's own
	// [tools.word_count] (a file path).
	toml := regexp.MustCompile(`(?m)^oci = .*$`).ReplaceAllString(tomls[0], line[1])
	toml = strings.Replace(toml, "MODULE_SHA256", sum[1], 1)
	cfg, _ := os.ReadFile(e.config)
	wasmLine := "wasm = " + quote(filepath.Join(root, "testdata/word_count.wasm")) + "\n"
	withOCI := strings.Replace(string(cfg), "[tools.word_count]\n"+wasmLine, "", 1) + "\n" + toml
	os.WriteFile(e.config, []byte(withOCI), 0o644)
	stop() // offline from here
	r = e.run("", cmds[2][1:]...).wantCode(t, exitOK)
	if r.stdout != `{"words":6,"lines":1,"chars":18,"bytes":18}`+"\n" {
		t.Fatalf("call through oci =: %q (stderr %s)", r.stdout, r.stderr)
	}
	r = e.run("", "tools", "--json").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"source":"oci:`+strings.TrimPrefix(line[1], `oci = "`)) {
		t.Fatalf("tools --json does not say the tool comes from the registry:\n%s", r.stdout)
	}
	// The sha256 pin is still checked.
	os.WriteFile(e.config, []byte(strings.Replace(withOCI, sum[1], strings.Repeat("0", 64), 1)), 0o644)
	r = e.run("", "call", "--json", "word_count", `{"text":"a"}`).wantCode(t, exitUsage) // module_refused: the config is wrong
	if !strings.Contains(r.stdout, `"kind":"module_refused"`) || !strings.Contains(r.stdout, "sha256") {
		t.Fatalf("a wrong sha256 pin on an oci tool: %s", r.stdout)
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestOCIErrors: what a user sees when the store lacks the digest, when
// the config names a tag alone, and for a bad reference.
func TestOCIErrors(t *testing.T) {
	t.Parallel()
	host, _ := startRegistry(t)
	digest := "sha256:" + strings.Repeat("ab", 32)
	e := newTestEnv(t, "", "\n[oci]\ndir = \"modules\"\n\n[tools.remote]\noci = \""+host+"/tools/x:1@"+digest+"\"\n")
	r := e.run("", "call", "--json", "remote", `{}`).wantCode(t, exitUsage)
	if !strings.Contains(r.stdout, `"kind":"module_refused"`) || !strings.Contains(r.stdout, "run `agrun pull "+host+"/tools/x:1@"+digest+"`") {
		t.Fatalf("a digest never pulled: %s", r.stdout)
	}
	// A store that does not hold the digest.
	os.MkdirAll(filepath.Join(e.dir, "modules"), 0o700)
	r = e.run("", "call", "--json", "remote", `{}`).wantCode(t, exitUsage)
	if !strings.Contains(r.stdout, "not in the local module store") || !strings.Contains(r.stdout, "agrun pull") {
		t.Fatalf("a digest not in the store: %s", r.stdout)
	}

	tagOnly := newTestEnv(t, "", "\n[tools.remote]\noci = \""+host+"/tools/x:1\"\n")
	r = tagOnly.run("", "tools").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "tools.remote.oci") || !strings.Contains(r.stderr, "agrun pull "+host+"/tools/x:1") {
		t.Fatalf("a tag alone in the config: %s", r.stderr)
	}

	creds := newTestEnv(t, "", "\n[oci]\ndir = \"modules\"\n\n[registries.\""+host+"\"]\nusername_env = \"AGRUN_TEST_NO_SUCH_USER\"\npassword_env = \"AGRUN_TEST_NO_SUCH_PASS\"\n")
	r = creds.run("", "pull", host+"/tools/x:1").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "$AGRUN_TEST_NO_SUCH_USER or $AGRUN_TEST_NO_SUCH_PASS is not set") {
		t.Fatalf("pull with credential variables unset: %s", r.stderr)
	}

	r = e.run("", "pull", "NoHost").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "not a valid OCI reference") {
		t.Fatalf("pull of a bad reference: %s", r.stderr)
	}
	r = e.run("", "pull", host+"/tools/missing:1").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "pull "+host+"/tools/missing:1: ") {
		t.Fatalf("pull of a missing tag: %s", r.stderr)
	}
	r = e.run("", "push", filepath.Join(repoRoot(t), "agrun.toml"), host+"/tools/x:1").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "not a WebAssembly module") {
		t.Fatalf("push of a text file: %s", r.stderr)
	}

	// --json: the digests and the line, one object.
	r = e.run("", "push", "--json", filepath.Join(repoRoot(t), "testdata/word_count.wasm"), host+"/tools/wc:2").wantCode(t, exitOK)
	var pushed struct{ Pinned, Digest, Line string }
	if json.Unmarshal([]byte(r.stdout), &pushed) != nil || pushed.Line != `oci = "`+pushed.Pinned+`"` {
		t.Fatalf("push --json: %q", r.stdout)
	}
	r = e.run("", "pull", "--json", host+"/tools/wc:2").wantCode(t, exitOK)
	var pulled struct {
		Digest, Line string
		ModuleSHA256 string `json:"module_sha256"`
	}
	if json.Unmarshal([]byte(r.stdout), &pulled) != nil || pulled.Digest != pushed.Digest || pulled.Line != pushed.Line || len(pulled.ModuleSHA256) != 64 {
		t.Fatalf("pull --json: %q, push said %+v", r.stdout, pushed)
	}
}

// TestOCIConfigExample: docs/CONFIG.md's [oci] example parses, and its
// tool asks for agrun pull (its digest was never pulled).
func TestOCIConfigExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs/CONFIG.md"))
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, m := range regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.HasPrefix(m[1], "[oci]") {
			block = m[1]
		}
	}
	if block == "" {
		t.Fatal("docs/CONFIG.md has no [oci] example")
	}
	block = strings.Replace(block, `dir = "~/.local/share/agrun/modules"`, `dir = "modules"`, 1)
	e := newTestEnv(t, "", "")
	cfg, _ := os.ReadFile(e.config)
	wasmLine := "[tools.word_count]\nwasm = " + quote(filepath.Join(repoRoot(t), "testdata/word_count.wasm")) + "\n"
	os.WriteFile(e.config, []byte(strings.Replace(string(cfg), wasmLine, "", 1)+"\n"+block), 0o644)
	t.Setenv("GHCR_USER", "u")
	t.Setenv("GHCR_TOKEN", "p")
	r := e.run("", "call", "--json", "word_count", `{"text":"a"}`).wantCode(t, exitUsage)
	if !strings.Contains(r.stdout, `"kind":"module_refused"`) || !strings.Contains(r.stdout, "run `agrun pull ghcr.io/acme/word_count:1.0@sha256:") {
		t.Fatalf("the example's tool: %s", r.stdout)
	}
}

// TestServeOCIOptions: [serve] allowed_registries reaches the server with
// a client bounded by max_upload; without it the server takes no OCI
// uploads.
func TestServeOCIOptions(t *testing.T) {
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "agrun.toml"), []byte("[oci]\ndir = \"modules\"\n[serve]\nmax_upload = \"2MiB\"\nallowed_registries = [\"ghcr.io\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts := serveOptions(cfg.Serve)
	if err := setup.ServeOCI(cfg, &opts); err != nil {
		t.Fatal(err)
	}
	if opts.OCI == nil || opts.OCI.MaxModuleBytes != 2<<20 || len(opts.AllowedRegistries) != 1 || opts.AllowedRegistries[0] != "ghcr.io" {
		t.Fatalf("options %+v", opts)
	}
	cfg.Serve.AllowedRegistries = nil
	opts = serveOptions(cfg.Serve)
	if err := setup.ServeOCI(cfg, &opts); err != nil || opts.OCI != nil {
		t.Fatalf("without allowed_registries: %+v, %v", opts.OCI, err)
	}
}

// TestPullPlugin: an MCP-style plug-in published to a registry is pulled,
// pinned as [plugins.NAME] oci = the line pull prints, and its tools are
// listed and called offline.
func TestPullPlugin(t *testing.T) {
	t.Parallel()
	host, stop := startRegistry(t)
	e := newTestEnv(t, "", "\n[oci]\ndir = \"modules\"\n")
	e.run("", "push", filepath.Join(repoRoot(t), "testdata", "plugins", "textkit.wasm"), host+"/plugins/textkit:1").wantCode(t, exitOK)
	r := e.run("", "pull", host+"/plugins/textkit:1").wantCode(t, exitOK)
	line := regexp.MustCompile(`(?m)^  (oci = "[^"]+")$`).FindStringSubmatch(r.stdout)
	if line == nil {
		t.Fatalf("pull: %s", r.stdout)
	}
	stop()
	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte("\n[plugins.kit]\n"+line[1]+"\n")...), 0o644)
	r = e.run("", "tools", "--json").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"name":"kit__stats"`) || !strings.Contains(r.stdout, `"source":"oci:`+host) {
		t.Fatalf("tools: %s", r.stdout)
	}
	if r := e.run("", "call", "kit__reverse", `{"text":"ab"}`).wantCode(t, exitOK); r.stdout != "\"ba\"\n" {
		t.Fatalf("call: %q", r.stdout)
	}
}
