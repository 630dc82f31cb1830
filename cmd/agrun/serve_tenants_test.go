package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/agcore/agrun/audit/lpriv"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testguest"
)

// TestTenantsConfigExamples: the [serve.tenants] examples of
// docs/CONFIG.md and docs/API.md decode as they say, into the server's
// tenants.
func TestTenantsConfigExamples(t *testing.T) {
	for _, doc := range []string{"docs/CONFIG.md", "docs/API.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), doc))
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, m := range regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
			if !strings.HasPrefix(m[1], "[serve.tenants.") {
				continue
			}
			found++
			cfg, err := config.Parse("agrun.toml", []byte(m[1]))
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			env := map[string]string{"ACME_TOKENS": acmeTok, "GLOBEX_TOKENS": globexTok}
			tenants, _, err := serveTenants(cfg, func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			a := tenants[0]
			if a.Name != "acme" || a.MaxModules != 50 || a.MaxStorage != 256<<20 || a.MaxConcurrentCalls != 4 || a.CallsPerMinute != 600 ||
				len(a.Uploads.AllowedHosts) != 1 || a.Uploads.AllowedHosts[0] != "api.acme.example" || len(a.Tokens) != 1 {
				t.Errorf("%s: acme = %+v", doc, a)
			}
		}
		if found == 0 {
			t.Errorf("%s has no [serve.tenants] example", doc)
		}
	}
}

const (
	acmeTok   = "acme-token-0123456789"
	globexTok = "globex-token-0123456789"
)

func tenantsConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agrun.toml")
	body := fmt.Sprintf(`[sandbox]
cache_dir = %q
[serve]
data_dir = "served"
[serve.tenants.acme]
tokens_env = "ACME_TOKENS"
max_modules = 1
[serve.tenants.globex]
tokens_env = "GLOBEX_TOKENS"
`, testguest.CompilationCacheDir(t))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestServeTenantsConfigErrors: a token listed for two tenants, and a
// tenant whose variable holds none, stop `agrun serve` at start with a
// configuration error (exit 2) naming the keys, never the token.
func TestServeTenantsConfigErrors(t *testing.T) {
	cfg := tenantsConfig(t)
	t.Setenv("ACME_TOKENS", acmeTok)
	t.Setenv("GLOBEX_TOKENS", globexTok+","+acmeTok)
	r := runIn(t, "", "-c", cfg, "serve", "--addr", "127.0.0.1:0").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "serve.tenants.globex.tokens_env") || !strings.Contains(r.stderr, "serve.tenants.acme.tokens_env") ||
		!strings.Contains(r.stderr, "agrun.toml:") || strings.Contains(r.stderr, acmeTok) {
		t.Errorf("a token of two tenants: %q", r.stderr)
	}
	t.Setenv("GLOBEX_TOKENS", "")
	r = runIn(t, "", "-c", cfg, "serve", "--addr", "127.0.0.1:0").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "serve.tenants.globex.tokens_env") || !strings.Contains(r.stderr, "$GLOBEX_TOKENS holds no token") {
		t.Errorf("a tenant without tokens: %q", r.stderr)
	}
	r = runIn(t, "", "-c", cfg, "mcp", "serve", "--http", "127.0.0.1:0").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "does not serve tenants") {
		t.Errorf("mcp serve --http with tenants: %q", r.stderr)
	}
}

// TestServeTenantsBinary: `agrun serve` with two tenants as users start
// it: each tenant's upload is its own, another's is not found, a quota
// answers 429, and the serving line counts tenants.
func TestServeTenantsBinary(t *testing.T) {
	t.Parallel()
	cfg := tenantsConfig(t)
	cmd := exec.Command(binary(t), "-c", cfg, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "ACME_TOKENS="+acmeTok, "GLOBEX_TOKENS="+globexTok, "AGRUN_TOKENS=")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	var base, line string
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving on "); ok {
			line = sc.Text()
			base, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	if base == "" {
		t.Fatal("no serving line on stderr")
	}
	if !strings.Contains(line, "auth: 2 tenant(s), 2 bearer token(s)") {
		t.Errorf("serving line: %q", line)
	}
	go io.Copy(io.Discard, stderr)
	do := func(token, method, path, ct string, body []byte) (int, string) {
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wasm, _ := os.ReadFile(filepath.Join(repoRoot(t), "testdata/word_count.wasm"))
	if st, b := do(acmeTok, "POST", "/v1/tools", "application/wasm", wasm); st != http.StatusCreated {
		t.Fatalf("acme's upload: %d %s", st, b)
	}
	if st, b := do(globexTok, "GET", "/v1/tools/word_count", "", nil); st != http.StatusNotFound {
		t.Errorf("globex reads acme's tool: %d %s", st, b)
	}
	if st, b := do(globexTok, "POST", "/v1/tools", "application/wasm", wasm); st != http.StatusCreated {
		t.Errorf("globex's own word_count: %d %s", st, b)
	}
	sum, _ := os.ReadFile(filepath.Join(repoRoot(t), "testdata/sum_c.wasm"))
	if st, b := do(acmeTok, "POST", "/v1/tools", "application/wasm", sum); st != http.StatusTooManyRequests || !strings.Contains(b, "max_modules") {
		t.Errorf("acme over max_modules: %d %s", st, b)
	}
	if st, b := do(globexTok, "POST", "/v1/tools/word_count/call", "application/json", []byte(`{"text":"a b"}`)); st != http.StatusOK || !strings.Contains(b, `"words":2`) {
		t.Errorf("globex's call: %d %s", st, b)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve did not exit cleanly: %v", err)
	}
}

// TestAuditTenant: runs of two tenants through a real `agrun serve`
// leave call records naming their tenant in the tenant's folder of
// [serve] data_dir; `agrun audit --tenant NAME` reports that tenant's
// calls only (acme's word_count, never globex's sum_c), and the other's
// likewise; a tenant not configured is a usage error; without --tenant
// the [sessions] folder is read, which serve's runs never touch.
func TestAuditTenant(t *testing.T) {
	t.Parallel()
	chat := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "word_count", Args: `{"text":"a b"}`}}},
		chattest.Reply{Text: "two"},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "sum_c", Args: `{"numbers":[2,3]}`}}},
		chattest.Reply{Text: "five"},
	)
	e := newTestEnv(t, chat.URL, `
[serve]
data_dir = "served"
[serve.tenants.acme]
tokens_env = "ACME_TOKENS"
[serve.tenants.globex]
tokens_env = "GLOBEX_TOKENS"
`)
	cmd := exec.Command(binary(t), "-c", e.config, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "ACME_TOKENS="+acmeTok, "GLOBEX_TOKENS="+globexTok, "AGRUN_TEST_KEY=k")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	var base string
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving on "); ok {
			base, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	if base == "" {
		t.Fatal("no serving line on stderr")
	}
	go io.Copy(io.Discard, stderr)
	runAs(t, base, acmeTok, "count a b") // first: the replies come in order
	runAs(t, base, globexTok, "add 2 and 3")
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve did not exit cleanly: %v", err)
	}

	report := func(args ...string) lpriv.Summary {
		t.Helper()
		r := e.run("", append([]string{"audit", "--json"}, args...)...).wantCode(t, exitOK)
		var rep lpriv.Summary
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("audit --json: %v\n%s", err, r.stdout)
		}
		return rep
	}
	calls := func(rep lpriv.Summary) map[string]int {
		m := map[string]int{}
		for _, r := range rep.Tools {
			if r.Calls > 0 {
				m[r.Tool] = r.Calls
			}
		}
		for _, o := range rep.Other {
			m[o.Tool] = o.Calls
		}
		return m
	}
	if rep := report("--tenant", "acme"); rep.Tenant != "acme" || rep.Sessions != 1 || !maps.Equal(calls(rep), map[string]int{"word_count": 1}) {
		t.Errorf("acme's audit: %+v", rep)
	}
	if rep := report("--tenant", "globex"); rep.Sessions != 1 || !maps.Equal(calls(rep), map[string]int{"sum_c": 1}) {
		t.Errorf("globex's audit: %+v", rep)
	}
	if rep := report(); rep.Sessions != 0 || len(calls(rep)) != 0 {
		t.Errorf("audit without --tenant read serve's runs: %+v", rep)
	}
	r := e.run("", "audit", "--tenant", "acme").wantCode(t, exitOK)
	if !strings.HasPrefix(r.stdout, "# agrun audit: tenant acme's every recorded call, 1 session") || !strings.Contains(r.stdout, "## word_count: 1 call") {
		t.Errorf("acme's text report:\n%s", r.stdout)
	}
	r = e.run("", "audit", "--tenant", "initech").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, `no tenant "initech" in [serve.tenants] (acme, globex)`) {
		t.Errorf("an unknown tenant: %q", r.stderr)
	}
}

// runAs makes one run as token against the serve at base and waits for
// its done event.
func runAs(t *testing.T, base, token, prompt string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"prompt": prompt})
	req, _ := http.NewRequest("POST", base+"/v1/runs", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "event: done") {
		t.Fatalf("run: %d %s", resp.StatusCode, b)
	}
}
