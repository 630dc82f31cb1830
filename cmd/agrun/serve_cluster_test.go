//go:build cluster

package main

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/store"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/internal/testing/pgtest"
	"github.com/agcore/agrun/internal/testing/s3test"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// startServeReplica starts the built binary's `agrun serve` with cfg and
// env on a free loopback port and returns its base URL.
func startServeReplica(t *testing.T, cfg string, env []string) string {
	t.Helper()
	cmd := exec.Command(binary(t), "-c", cfg, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), env...)
	line := startDaemon(t, cmd, "serving on ", true)
	_, rest, _ := strings.Cut(line, "serving on ")
	if !strings.Contains(line, "shared: ") {
		t.Errorf("the serving line does not name the shared store: %s", line)
	}
	base, _, _ := strings.Cut(rest, " ")
	return base
}

// httpDo sends one request and returns its status and body.
func httpDo(t *testing.T, method, url, contentType string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeClusterReplicas: two `agrun serve` processes (the built
// binary) on different ports, one agrun.toml whose [cluster] is a real
// Temporal dev server, an S3 bucket (gofakes3 in this process) and a real
// PostgreSQL, and one data_dir (cluster mode must not lock it). A tool
// uploaded through A is listed and called through B; replaced through B,
// A's next call runs the new module; deleted through A, B answers 404.
func TestServeClusterReplicas(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	dsn := pgtest.Start(t)
	s3 := s3test.StartQuiet(t) // the replicas' credentials: env

	dir := t.TempDir()
	cfg := filepath.Join(dir, "agrun.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
[sandbox]
cache_dir = %q
[sessions]
dir = "sessions"
[serve]
data_dir = "served"
[cluster]
temporal_address = %q
task_queue_prefix = "serve-e2e-"
module_store = "s3://%s/replicas"
s3_endpoint = %q
s3_region = "us-east-1"
s3_path_style = true
session_store = "postgres"
`, testguest.CompilationCacheDir(t), addr, s3test.Bucket, s3.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"AGRUN_TOKENS=",
		"AWS_ACCESS_KEY_ID=test-key-id", "AWS_SECRET_ACCESS_KEY=test-secret",
		"AWS_CONFIG_FILE=" + filepath.Join(dir, "no-aws-config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "no-aws-credentials"),
		"AGRUN_POSTGRES_DSN=" + dsn,
	}
	a := startServeReplica(t, cfg, env)
	b := startServeReplica(t, cfg, env)

	wc, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "word_count.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := wasmtools.Pack(testguest.WAT(t, filepath.Join("..", "..", "server", "testdata", "ok.wat")), wasmtools.Manifest{Name: "word_count", Description: "answers ok"})
	if err != nil {
		t.Fatal(err)
	}

	// Upload through A.
	if st, body := httpDo(t, "POST", a+"/v1/tools", "application/wasm", wc); st != http.StatusCreated {
		t.Fatalf("upload through A: %d %s", st, body)
	}
	// The module and its name record are in the bucket, where docs/API.md says.
	for _, key := range []string{"replicas/" + store.ModuleKey(store.Digest(wc)), "replicas/tools/word_count.json"} {
		if _, err := s3.Backend.HeadObject(s3test.Bucket, key); err != nil {
			t.Errorf("object %s after the upload: %v", key, err)
		}
	}
	// List and call through B.
	if st, body := httpDo(t, "GET", b+"/v1/tools", "", nil); st != http.StatusOK || !strings.Contains(body, `"name":"word_count"`) || !strings.Contains(body, `"sha256":"`+store.Digest(wc)+`"`) {
		t.Fatalf("list through B: %d %s", st, body)
	}
	if st, body := httpDo(t, "POST", b+"/v1/tools/word_count/call", "application/json", []byte(`{"text":"one two three"}`)); st != http.StatusOK || !strings.Contains(body, `"ok":true`) || !strings.Contains(body, `"words":3`) {
		t.Fatalf("call through B: %d %s", st, body)
	}
	// Replace through B (without replace first: the name is taken).
	if st, body := httpDo(t, "POST", b+"/v1/tools", "application/wasm", other); st != http.StatusConflict || !strings.Contains(body, `"exists"`) {
		t.Errorf("upload of another module under the name through B: %d %s", st, body)
	}
	if st, body := httpDo(t, "POST", b+"/v1/tools?replace=true", "application/wasm", other); st != http.StatusCreated || !strings.Contains(body, `"replaced":true`) {
		t.Fatalf("replace through B: %d %s", st, body)
	}
	// A's next call runs the new module.
	if st, body := httpDo(t, "POST", a+"/v1/tools/word_count/call", "application/json", []byte(`{"text":"one two three"}`)); st != http.StatusOK || !strings.Contains(body, `"result":{"ok":true}`) {
		t.Fatalf("call through A after B replaced the tool: %d %s", st, body)
	}
	// Delete through A; B answers 404.
	if st, body := httpDo(t, "DELETE", a+"/v1/tools/word_count", "", nil); st != http.StatusNoContent {
		t.Fatalf("delete through A: %d %s", st, body)
	}
	if st, body := httpDo(t, "POST", b+"/v1/tools/word_count/call", "application/json", []byte(`{"text":"x"}`)); st != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
		t.Errorf("call through B after A deleted: %d %s", st, body)
	}
	if st, body := httpDo(t, "GET", b+"/v1/tools/word_count", "", nil); st != http.StatusNotFound {
		t.Errorf("get through B after A deleted: %d %s", st, body)
	}
	// Runs are served through the cluster (TestServeClusterRuns runs
	// them): an unknown run and session are looked up there, in the
	// PostgreSQL session store; a schema that does not compile is
	// refused before anything starts, as locally.
	if st, body := httpDo(t, "GET", b+"/v1/runs/nosuch", "", nil); st != http.StatusNotFound || !strings.Contains(body, `no run in progress on session \"nosuch\"`) {
		t.Errorf("GET /v1/runs/nosuch in cluster mode: %d %s", st, body)
	}
	if st, body := httpDo(t, "GET", a+"/v1/sessions/nosuch", "", nil); st != http.StatusNotFound || !strings.Contains(body, `no session \"nosuch\"`) {
		t.Errorf("GET /v1/sessions/nosuch in cluster mode: %d %s", st, body)
	}
	if st, body := httpDo(t, "POST", a+"/v1/runs", "application/json", []byte(`{"prompt":"hi","schema":{"type":"nope"}}`)); st != http.StatusBadRequest || !strings.Contains(body, `"bad_request"`) || !strings.Contains(body, "schema") {
		t.Errorf("POST /v1/runs with a bad schema in cluster mode: %d %s", st, body)
	}
	// Both replicas ran on one data_dir, which neither locked.
	if _, err := os.Stat(filepath.Join(dir, "served", "lock")); err == nil {
		t.Error("a replica locked the data directory in cluster mode")
	}
}

// TestSharedToolsAdapter: the server's SharedStore over the cluster
// stores (a directory here): records round-trip, a missing name is
// server.ErrNoStoredTool (what makes the API answer 404), and a module
// changed in the store is refused by its digest.
func TestSharedToolsAdapter(t *testing.T) {
	ctx := t.Context()
	objs, err := store.NewDirObjects(filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	st := server.NewSharedStore(objs, 0)
	wasm := []byte("\x00asm\x01\x00\x00\x00 not run here")
	sha, err := st.PutModule(ctx, wasm)
	if err != nil || sha != store.Digest(wasm) {
		t.Fatalf("PutModule = %s, %v", sha, err)
	}
	if got, err := st.Module(ctx, sha); err != nil || !bytes.Equal(got, wasm) {
		t.Fatalf("Module = %q, %v", got, err)
	}
	when := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	for _, name := range []string{"word_count", "Word_Count"} {
		if err := st.PutTool(ctx, name, server.StoredTool{SHA256: sha, Size: int64(len(wasm)), Uploaded: when}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := st.Tool(ctx, "Word_Count"); err != nil || got != (server.StoredTool{SHA256: sha, Size: int64(len(wasm)), Uploaded: when}) {
		t.Errorf("Tool = %+v, %v", got, err)
	}
	if all, err := st.Tools(ctx); err != nil || len(all) != 2 || all["word_count"].SHA256 != sha {
		t.Errorf("Tools = %+v, %v", all, err)
	}
	if err := st.DeleteTool(ctx, "word_count"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Tool(ctx, "word_count"); !errors.Is(err, server.ErrNoStoredTool) {
		t.Errorf("Tool after delete: %v, want ErrNoStoredTool", err)
	}
	if err := st.DeleteTool(ctx, "word_count"); !errors.Is(err, server.ErrNoStoredTool) {
		t.Errorf("second DeleteTool: %v, want ErrNoStoredTool", err)
	}
	if err := objs.Put(ctx, store.ModuleKey(sha), append(bytes.Clone(wasm), '!')); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Module(ctx, sha); !errors.Is(err, store.ErrDigest) {
		t.Errorf("Module of a changed object: %v, want ErrDigest", err)
	}
}

// httpAs is httpDo with a bearer token.
func httpAs(t *testing.T, token, method, url, contentType string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeClusterTenants: two `agrun serve` processes with
// [serve.tenants] and [cluster] (a real Temporal dev server, the module
// store a directory), black box through HTTP (issue 27 item 3). Both
// tenants upload a word_count of their own through different replicas;
// each calls its own through either; the other's tool-only name answers
// 404 as a missing one does; acme's max_modules holds across replicas; a
// token of neither tenant is refused.
func TestServeClusterTenants(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agrun.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
[sandbox]
cache_dir = %q
[serve]
data_dir = "served"
[serve.tenants.acme]
tokens_env = "ACME_TOKENS"
max_modules = 1
[serve.tenants.globex]
tokens_env = "GLOBEX_TOKENS"
[cluster]
temporal_address = %q
task_queue_prefix = "serve-tenants-"
module_store = "modules"
`, testguest.CompilationCacheDir(t), addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	acme, globex := strings.Repeat("a", 32), strings.Repeat("g", 32)
	env := []string{"ACME_TOKENS=" + acme, "GLOBEX_TOKENS=" + globex}
	a := startServeReplica(t, cfg, env)
	b := startServeReplica(t, cfg, env)

	wc, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "word_count.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	ok := func(name, desc string) []byte {
		w, err := wasmtools.Pack(testguest.WAT(t, filepath.Join("..", "..", "server", "testdata", "ok.wat")), wasmtools.Manifest{Name: name, Description: desc})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if st, body := httpAs(t, acme, "POST", a+"/v1/tools", "application/wasm", wc); st != http.StatusCreated {
		t.Fatalf("acme's word_count through A: %d %s", st, body)
	}
	if st, body := httpAs(t, globex, "POST", b+"/v1/tools", "application/wasm", ok("word_count", "globex's")); st != http.StatusCreated {
		t.Fatalf("globex's word_count through B (the same name): %d %s", st, body)
	}
	for _, base := range []string{a, b} {
		if st, body := httpAs(t, acme, "POST", base+"/v1/tools/word_count/call", "application/json", []byte(`{"text":"one two three"}`)); st != http.StatusOK || !strings.Contains(body, `"words":3`) {
			t.Errorf("acme's word_count through %s: %d %s", base, st, body)
		}
		if st, body := httpAs(t, globex, "POST", base+"/v1/tools/word_count/call", "application/json", []byte(`{"text":"x"}`)); st != http.StatusOK || !strings.Contains(body, `"result":{"ok":true}`) {
			t.Errorf("globex's word_count through %s: %d %s", base, st, body)
		}
	}
	if st, body := httpAs(t, globex, "POST", a+"/v1/tools", "application/wasm", ok("globex_only", "x")); st != http.StatusCreated {
		t.Fatalf("%d %s", st, body)
	}
	st1, other := httpAs(t, acme, "GET", b+"/v1/tools/globex_only", "", nil)
	st2, missing := httpAs(t, acme, "GET", b+"/v1/tools/nosuch_tool", "", nil)
	if st1 != http.StatusNotFound || st1 != st2 || strings.ReplaceAll(other, "globex_only", "nosuch_tool") != missing {
		t.Errorf("another tenant's tool: %d %s; a missing one: %d %s", st1, other, st2, missing)
	}
	// acme stores one tool (written through A): B refuses a second.
	if st, body := httpAs(t, acme, "POST", b+"/v1/tools", "application/wasm", ok("second", "x")); st != http.StatusTooManyRequests || !strings.Contains(body, "max_modules") {
		t.Errorf("acme's second tool through B: %d %s; want 429 naming max_modules", st, body)
	}
	if st, _ := httpAs(t, strings.Repeat("z", 32), "GET", a+"/v1/tools", "", nil); st != http.StatusUnauthorized {
		t.Errorf("a token of no tenant: %d", st)
	}
	for _, p := range []string{"tenants/acme/tools/word_count.json", "tenants/globex/tools/word_count.json", "tenants/globex/tools/globex_only.json"} {
		if _, err := os.Stat(filepath.Join(dir, "modules", filepath.FromSlash(p))); err != nil {
			t.Errorf("record %s: %v", p, err)
		}
	}
}
