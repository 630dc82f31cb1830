// Package archtest checks that the packages keep to the import graph of
// docs/ARCHITECTURE.md (from design.md). It fails the build of the test
// suite as soon as someone adds an arrow the design does not have.
package archtest

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agcore/agrun"

// layers: for each top-level folder, the project folders its packages may
// import directly (besides themselves and internal/), and the third-party
// module prefixes they may import directly. Standard library imports are
// always allowed, except in guest-sdk where only the standard library is.
var layers = map[string]struct {
	project  []string
	external []string
}{
	"permission": {},
	// registry: jsonschema-go (the MCP SDK's) derives a Go function
	// tool's schema from its argument type (registry.NewFunc).
	"registry":  {project: []string{"permission"}, external: []string{"github.com/santhosh-tekuri/jsonschema/v6", "github.com/google/jsonschema-go"}},
	"runtime":   {external: []string{"github.com/tetratelabs/wazero"}},
	"wasmtools": {project: []string{"runtime", "registry", "permission"}, external: []string{"github.com/BurntSushi/toml"}},
	// mcp: golang.org/x/oauth2 is the type the go-sdk's auth package
	// speaks (its OAuthHandler hands out an oauth2.TokenSource; tokens are
	// oauth2.Token): OAuth for MCP servers (issue 30). go-jose signs the
	// client assertion of the client credentials grant (private_key_jwt,
	// RFC 7523), already in the module graph through sigstore.
	"mcp": {project: []string{"registry", "permission"}, external: []string{"github.com/modelcontextprotocol/go-sdk", "golang.org/x/oauth2", "github.com/go-jose/go-jose/v4"}},
	// loop's provider adapters (loop/chat, loop/responses, loop/anthropic,
	// loop/gemini) each use one SDK; package loop itself none
	// (TestAdaptersLinkOnlyTheirSDK).
	"loop": {project: []string{"registry", "permission"}, external: []string{"github.com/openai/openai-go/v3",
		"github.com/anthropics/anthropic-sdk-go/v2", "google.golang.org/genai"}},
	"guest-sdk": {},
	// cluster (issue 21): the Temporal workflow and activities over the
	// loop and the registry, and the stores they share (S3 or a directory
	// for modules, PostgreSQL or JSON lines for sessions). Its tests may
	// use anything (gofakes3, internal/testing/pgtest).
	"cluster": {project: []string{"loop", "registry", "permission", "session"}, external: []string{
		"go.temporal.io/sdk", "go.temporal.io/api",
		"github.com/aws/aws-sdk-go-v2", "github.com/aws/smithy-go",
	}},
	// The library packages for embedders (issue 31), once under
	// cmd/agrun/internal: the session store, the OpenTelemetry mapping,
	// the HTTP API, and the audit records with the least-privilege
	// analysis. The why of each top-level folder: docs/ARCHITECTURE.md.
	"session":   {project: []string{"loop", "registry", "permission"}, external: []string{"github.com/jackc/pgx/v5"}}, // pgx: session/pgstore only (TestStoresLinkOnlyTheirClient)
	"telemetry": {project: []string{"loop", "registry", "permission"}, external: []string{"go.opentelemetry.io/otel"}},
	// server -> cluster: cluster/store only (the uploads shared by
	// replicas: NewSharedStore, Uploads); TestStoresLinkOnlyTheirClient
	// holds that it links no Temporal, AWS SDK or pgx.
	// server -> oci: uploads by reference from [serve] allowed_registries
	// (issue 26, part 5).
	"server": {project: []string{"session", "telemetry", "loop", "wasmtools", "runtime", "registry", "permission", "cluster", "oci"},
		external: []string{"go.opentelemetry.io/otel", "golang.org/x/net/netutil"}},
	"audit": {project: []string{"registry", "permission"}},
	// oci (issue 26): pull and push tools through OCI registries with
	// oras-go; the local module store is cluster/store's ModuleStore (a
	// cluster shares it), the size bound the sandbox's
	// (runtime.DefaultMaxModuleBytes). Its tests run go-containerregistry's
	// registry in process. oci/sigverify checks the signatures oci keeps
	// with sigstore-go (and sigstore's signature package), which only it
	// links (TestSignaturesLinkOnlyInSigverify).
	"oci": {project: []string{"cluster", "runtime"}, external: []string{"oras.land/oras-go/v2", "github.com/opencontainers/image-spec",
		"github.com/sigstore/sigstore-go", "github.com/sigstore/sigstore"}},
}

// transitive lists, for each layer, every project folder it may reach at
// all, through any chain of imports: the closure of the arrows above.
var transitive = map[string][]string{
	"permission": {},
	"registry":   {"permission"},
	"runtime":    {},
	"wasmtools":  {"runtime", "registry", "permission"},
	"mcp":        {"registry", "permission"},
	"loop":       {"registry", "permission"},
	"guest-sdk":  {},
	"cluster":    {"loop", "registry", "permission", "session"},
	"session":    {"loop", "registry", "permission"},
	"telemetry":  {"loop", "registry", "permission"},
	"server":     {"session", "telemetry", "loop", "wasmtools", "runtime", "registry", "permission", "cluster", "oci"},
	"audit":      {"registry", "permission"},
	"oci":        {"cluster", "runtime", "registry", "permission"},
}

// touchSources opens every folder and stats every Go file of the module, so
// that go test's result cache, which tracks only what the test process
// itself reads, is invalidated whenever a source file changes.
func touchSources(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir("../../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == ".cache") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") || d.Name() == "go.mod" {
			_, err = os.Stat(p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	touchSources(t)
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// top returns the top-level folder of a module package path ("" for others).
func top(path string) string {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	d, _, _ := strings.Cut(rel, "/")
	return d
}

func TestImportGraph(t *testing.T) {
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p] = true
	}
	lines := goList(t, "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}}`, "./...")
	for _, l := range lines {
		parts := strings.SplitN(l, "|", 3)
		path, dir := parts[0], top(parts[0])
		layer, ok := layers[dir]
		if !ok {
			continue // cmd/, internal/: may import anything
		}
		for _, imp := range strings.Fields(parts[1]) {
			switch {
			case imp == "C" || std[imp]:
				// The standard library is open to all.
			case strings.HasPrefix(imp, module+"/"):
				d := top(imp)
				if d == dir || (d == "internal" && dir != "guest-sdk") || slices.Contains(layer.project, d) {
					continue
				}
				t.Errorf("%s imports %s: the import graph has no arrow %s -> %s", path, imp, dir, d)
			default:
				if dir == "guest-sdk" {
					t.Errorf("%s imports %s: guest-sdk may use only the standard library", path, imp)
					continue
				}
				if !slices.ContainsFunc(layer.external, func(p string) bool { return imp == p || strings.HasPrefix(imp, p+"/") }) {
					t.Errorf("%s imports %s: not a dependency of %s in the design", path, imp, dir)
				}
			}
		}
	}
}

// TestTransitive checks the closure: an internal/ helper must not become a
// back door from, say, runtime to registry.
func TestTransitive(t *testing.T) {
	for _, p := range goList(t, "./...") {
		dir := top(p)
		allowed, ok := transitive[dir]
		if !ok {
			continue
		}
		{
			for _, dep := range goList(t, "-deps", p) {
				d := top(dep)
				if d == "" || d == dir || d == "internal" || slices.Contains(allowed, d) {
					continue
				}
				t.Errorf("%s depends (transitively) on %s", p, dep)
			}
		}
	}
}

// TestAdaptersLinkOnlyTheirSDK: a program that imports package loop links
// no model SDK, and one that imports an adapter links only that adapter's
// (responses: openai-go's responses package, not its Chat Completions
// client) — the point of one package per API (docs/ARCHITECTURE.md).
func TestAdaptersLinkOnlyTheirSDK(t *testing.T) {
	const (
		openai    = "github.com/openai/openai-go/v3"
		anthropic = "github.com/anthropics/anthropic-sdk-go/v2"
		genai     = "google.golang.org/genai"
	)
	for pkg, allowed := range map[string][]string{
		"loop":           nil,
		"loop/chat":      {openai},
		"loop/responses": {openai},
		"loop/anthropic": {anthropic},
		"loop/gemini":    {genai},
	} {
		deps := goList(t, "-deps", "./"+pkg)
		for _, sdk := range []string{openai, anthropic, genai} {
			linked := slices.ContainsFunc(deps, func(d string) bool { return d == sdk || strings.HasPrefix(d, sdk+"/") })
			if linked != slices.Contains(allowed, sdk) {
				t.Errorf("%s links %s: %v, want %v", pkg, sdk, linked, !linked)
			}
		}
		if pkg == "loop/responses" && slices.Contains(deps, openai) {
			t.Errorf("loop/responses links openai-go's root package (the Chat Completions client and everything it imports)")
		}
	}
}

// TestSignaturesLinkOnlyInSigverify: sigstore-go and its dependencies
// are linked by oci/sigverify and the CLI, not by package oci (what
// agrun serve and a cluster's workers pull with) nor the server.
func TestSignaturesLinkOnlyInSigverify(t *testing.T) {
	const sigstore = "github.com/sigstore/"
	for pkg, want := range map[string]bool{"oci": false, "server": false, "oci/sigverify": true, "cmd/agrun": true} {
		deps := goList(t, "-deps", "./"+pkg)
		linked := slices.ContainsFunc(deps, func(d string) bool { return strings.HasPrefix(d, sigstore) })
		if linked != want {
			t.Errorf("%s links sigstore: %v, want %v", pkg, linked, want)
		}
	}
}

// TestStoresLinkOnlyTheirClient: the cluster's stores are packages of
// their own, so that a program using the PostgreSQL store does not link
// the AWS SDK or Temporal, one using S3 not pgx or Temporal, and the
// interfaces (cluster/store) none of them.
func TestStoresLinkOnlyTheirClient(t *testing.T) {
	const (
		temporal = "go.temporal.io/sdk"
		aws      = "github.com/aws/aws-sdk-go-v2"
		pgx      = "github.com/jackc/pgx/v5"
	)
	for pkg, allowed := range map[string][]string{
		"cluster/store":   nil,
		"cluster/s3store": {aws},
		"session/pgstore": {pgx},
		"session":         nil,
		"server":          nil,
		"cluster":         {temporal},
		"oci":             nil, // cluster/store's ModuleStore, not the cluster
	} {
		deps := goList(t, "-deps", "./"+pkg)
		for _, lib := range []string{temporal, aws, pgx} {
			linked := slices.ContainsFunc(deps, func(d string) bool { return d == lib || strings.HasPrefix(d, lib+"/") })
			if linked != slices.Contains(allowed, lib) {
				t.Errorf("%s links %s: %v, want %v", pkg, lib, linked, !linked)
			}
		}
	}
}
