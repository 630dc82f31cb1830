package server_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cstore "github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
)

// tenantReplicas starts n Servers with tenants acme and globex (changed
// by edit) sharing the cluster's store over a real directory, as agrun
// serve replicas with [serve.tenants] and [cluster] do; it returns them
// and the store's directory.
func tenantReplicas(t *testing.T, n int, edit func(acme, globex *server.Tenant)) ([]*testServer, string) {
	t.Helper()
	dir := t.TempDir()
	objs, err := cstore.NewDirObjects(dir)
	if err != nil {
		t.Fatal(err)
	}
	shared := server.NewSharedStore(objs, 0)
	reg := tenantsOperator(t)
	var out []*testServer
	for range n {
		out = append(out, twoTenants(t, setup{opts: server.Options{SharedStore: shared, Registry: reg}, rt: testrt.New(t, runtime.Config{})}, edit))
	}
	return out, dir
}

// TestTenantsOnSharedStore: tenants hold across agrun serve replicas
// (issue 27 item 3). Each tenant's names are its own in the shared store
// (both have an x, each calls its own through either replica); another
// tenant's tool answers what a missing one does on every replica; a
// delete through one replica reaches only the caller's record;
// max_modules and max_storage count the tenant's records in the shared
// store, whichever replica wrote them.
func TestTenantsOnSharedStore(t *testing.T) {
	small := described(t, "one", "ok")
	rs, dir := tenantReplicas(t, 2, func(acme, globex *server.Tenant) {
		acme.MaxModules = 2
		globex.MaxStorage = int64(len(small)) + 10
	})
	a, b := rs[0], rs[1]

	if r := a.uploadAs(acmeToken, described(t, "x", "acme's x"), ""); r.status != http.StatusCreated {
		t.Fatalf("acme's x: %d %s", r.status, r.body)
	}
	if r := b.uploadAs(globexToken, described(t, "x", "globex's x"), ""); r.status != http.StatusCreated {
		t.Fatalf("globex's x (an equal name on another replica): %d %s", r.status, r.body)
	}
	for _, ts := range rs {
		for token, want := range map[string]string{acmeToken: "acme's x", globexToken: "globex's x"} {
			var info server.ToolInfo
			r := ts.requestAs(token, "GET", "/v1/tools/x", "", nil)
			r.json(t, &info)
			if r.status != http.StatusOK || info.Description != want {
				t.Errorf("GET x: %d %+v, want %q", r.status, info, want)
			}
			if r := ts.callAs(token, "x", `{}`); !r.ok() {
				t.Errorf("call x: %d %s", r.status, r.body)
			}
		}
	}
	// The records are apart in the store, one folder per tenant.
	for _, p := range []string{"tenants/acme/tools/x.json", "tenants/globex/tools/x.json"} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			t.Errorf("record %s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tools", "x.json")); err == nil {
		t.Error("a tenant's record is under tools/, the records of a serve without tenants")
	}

	// acme's only tool is invisible to globex on both replicas.
	if r := a.uploadAs(acmeToken, described(t, "secret", "acme only"), ""); r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for _, ts := range rs {
		sameAsMissing(t, "GET another tenant's tool", ts.requestAs(globexToken, "GET", "/v1/tools/secret", "", nil), ts.requestAs(globexToken, "GET", "/v1/tools/nosuch", "", nil), "secret", "nosuch")
		sameAsMissing(t, "call another tenant's tool", ts.callAs(globexToken, "secret", `{}`), ts.callAs(globexToken, "nosuch", `{}`), "secret", "nosuch")
		sameAsMissing(t, "DELETE another tenant's tool", ts.requestAs(globexToken, "DELETE", "/v1/tools/secret", "", nil), ts.requestAs(globexToken, "DELETE", "/v1/tools/nosuch", "", nil), "secret", "nosuch")
		if names := ts.toolNames(globexToken); slices.Contains(names, "secret:upload") {
			t.Errorf("globex lists acme's tool: %v", names)
		}
	}

	// acme has 2 tools (x, secret), written through replica a: its
	// max_modules holds on b too, and nothing is stored.
	wantQuota(t, b.uploadAs(acmeToken, small, ""), "max_modules", false)
	if r := b.requestAs(acmeToken, "GET", "/v1/tools/one", "", nil); r.status != http.StatusNotFound {
		t.Errorf("the refused upload is served: %d %s", r.status, r.body)
	}
	// globex's storage: x and then small pass its max_storage on a.
	wantQuota(t, a.uploadAs(globexToken, small, ""), "max_storage", false)

	// globex deletes its x through a; acme's x stays, on both replicas.
	if r := a.requestAs(globexToken, "DELETE", "/v1/tools/x", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("globex's delete: %d %s", r.status, r.body)
	}
	for _, ts := range rs {
		if r := ts.callAs(acmeToken, "x", `{}`); !r.ok() {
			t.Errorf("acme's x after globex deleted its own: %d %s", r.status, r.body)
		}
		if r := ts.callAs(globexToken, "x", `{}`); r.status != http.StatusNotFound {
			t.Errorf("globex's deleted x: %d %s", r.status, r.body)
		}
	}
	// The operator's tool is everyone's, on every replica.
	for _, ts := range rs {
		for _, token := range []string{acmeToken, globexToken} {
			if r := ts.callAs(token, "word_count", `{"text":"a b"}`); !r.ok() || !strings.Contains(string(r.body), `"words":2`) {
				t.Errorf("word_count: %d %s", r.status, r.body)
			}
		}
	}
}

// TestTenantsNeedATenantSharedStore: a SharedStore that cannot keep the
// tenants' records apart is refused at New, not shared by them.
func TestTenantsNeedATenantSharedStore(t *testing.T) {
	_, err := server.New(t.Context(), server.Options{
		Runtime: testrt.New(t, runtime.Config{}), Registry: tenantsOperator(t), SharedStore: newMemShared(),
		Tenants: []server.Tenant{{Name: "acme", Tokens: []string{acmeToken}}},
	})
	if err == nil || !strings.Contains(err.Error(), "TenantSharedStore") {
		t.Errorf("New = %v; want the store refused", err)
	}
}
