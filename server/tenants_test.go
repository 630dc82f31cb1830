package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/testing/testprovider"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// The tokens of the two hostile tenants of these tests.
var (
	acmeToken   = strings.Repeat("a", 24)
	globexToken = strings.Repeat("g", 24)
)

// twoTenants is a server with tenants acme and globex (each changed by
// edit) and an operator tool, word_count (a Go function).
func twoTenants(t *testing.T, s setup, edit func(acme, globex *server.Tenant)) *testServer {
	t.Helper()
	acme := server.Tenant{Name: "acme", Tokens: []string{acmeToken}}
	globex := server.Tenant{Name: "globex", Tokens: []string{globexToken}}
	if edit != nil {
		edit(&acme, &globex)
	}
	s.opts.Tenants = []server.Tenant{acme, globex}
	if s.opts.Registry == nil {
		s.opts.Registry = tenantsOperator(t)
	}
	return startServer(t, s)
}

// tenantsOperator holds the operator's word_count.
func tenantsOperator(t *testing.T) *registry.Registry {
	t.Helper()
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	wc, err := registry.NewFunc("word_count", "counts words", func(_ context.Context, in struct {
		Text string `json:"text"`
	}) (map[string]int, error) {
		return map[string]int{"words": len(strings.Fields(in.Text))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(wc); err != nil {
		t.Fatal(err)
	}
	return reg
}

// described is the ok tool called name whose description is desc: two
// tenants' modules of one name that differ.
func described(t *testing.T, name, desc string) []byte {
	t.Helper()
	return pack(t, testguest.WAT(t, "testdata/ok.wat"), wasmtools.Manifest{Name: name, Description: desc})
}

func (ts *testServer) uploadAs(token string, wasm []byte, query string) response {
	ts.t.Helper()
	return ts.requestAs(token, "POST", "/v1/tools"+query, "application/wasm", wasm)
}

func (ts *testServer) callAs(token, name, args string) response {
	ts.t.Helper()
	return ts.requestAs(token, "POST", "/v1/tools/"+name+"/call", "application/json", []byte(args))
}

func (ts *testServer) toolNames(token string) []string {
	ts.t.Helper()
	var list struct{ Tools []server.ToolInfo }
	ts.requestAs(token, "GET", "/v1/tools", "", nil).json(ts.t, &list)
	var names []string
	for _, ti := range list.Tools {
		names = append(names, ti.Name+":"+ti.Source)
	}
	return names
}

// sameAsMissing checks that got, the answer about another tenant's
// object called name, is byte for byte what a missing object called
// missing (as long) is answered.
func sameAsMissing(t *testing.T, what string, got, miss response, name, missing string) {
	t.Helper()
	if len(name) != len(missing) {
		t.Fatalf("names of unequal length: %q %q", name, missing)
	}
	if got.status != http.StatusNotFound || got.errorKind(t) != registry.NotFound {
		t.Errorf("%s: %d %s, want 404 not_found", what, got.status, got.body)
	}
	if miss.status != got.status || strings.ReplaceAll(string(got.body), name, missing) != string(miss.body) {
		t.Errorf("%s: another tenant's object answers\n%d %s\na missing one\n%d %s", what, got.status, got.body, miss.status, miss.body)
	}
}

// TestTenantsIsolateTools: two hostile tenants, black box through HTTP.
// Each sees the operator's tools and its own uploads only; names are per
// tenant; another tenant's tool answers exactly what a missing one does
// to listing, reading, calling, replacing and deleting; no answer shows
// that another tenant stores the same bytes.
func TestTenantsIsolateTools(t *testing.T) {
	ts := twoTenants(t, setup{}, nil)

	// Equal names: each tenant has its own x.
	ax := ts.uploadAs(acmeToken, described(t, "x", "acme's x"), "")
	gx := ts.uploadAs(globexToken, described(t, "x", "globex's x"), "")
	if ax.status != http.StatusCreated || gx.status != http.StatusCreated {
		t.Fatalf("equal names: %d %s / %d %s", ax.status, ax.body, gx.status, gx.body)
	}
	for token, want := range map[string]string{acmeToken: "acme's x", globexToken: "globex's x"} {
		var info server.ToolInfo
		ts.requestAs(token, "GET", "/v1/tools/x", "", nil).json(t, &info)
		if info.Description != want {
			t.Errorf("GET /v1/tools/x = %q, want %q", info.Description, want)
		}
	}

	// acme's secret, and a name nobody has, of the same length.
	if r := ts.uploadAs(acmeToken, described(t, "secret_a", "acme only"), ""); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if got := ts.toolNames(acmeToken); !slices.Equal(got, []string{"secret_a:upload", "word_count:config", "x:upload"}) {
		t.Errorf("acme lists %v", got)
	}
	if got := ts.toolNames(globexToken); !slices.Equal(got, []string{"word_count:config", "x:upload"}) {
		t.Errorf("globex lists %v", got)
	}
	g := func(method, path, ct, body string) response {
		return ts.requestAs(globexToken, method, path, ct, []byte(body))
	}
	sameAsMissing(t, "GET", g("GET", "/v1/tools/secret_a", "", ""), g("GET", "/v1/tools/secret_z", "", ""), "secret_a", "secret_z")
	sameAsMissing(t, "call", g("POST", "/v1/tools/secret_a/call", "application/json", "{}"), g("POST", "/v1/tools/secret_z/call", "application/json", "{}"), "secret_a", "secret_z")
	sameAsMissing(t, "DELETE", g("DELETE", "/v1/tools/secret_a", "", ""), g("DELETE", "/v1/tools/secret_z", "", ""), "secret_a", "secret_z")

	// Replacing: globex's upload of the name makes globex's own tool
	// (not a replace), and acme's is untouched.
	r := ts.uploadAs(globexToken, described(t, "secret_a", "globex's"), "?replace=true")
	var info server.ToolInfo
	r.json(t, &info)
	if r.status != http.StatusCreated || info.Replaced {
		t.Errorf("globex over acme's name: %d %s", r.status, r.body)
	}
	ts.requestAs(acmeToken, "GET", "/v1/tools/secret_a", "", nil).json(t, &info)
	if info.Description != "acme only" {
		t.Errorf("acme's tool after globex's upload: %+v", info)
	}

	// The same bytes as acme's: answered as a new tool (201, not 200
	// unchanged), and still there when acme deletes its own.
	same := described(t, "shared", "the same module")
	if r := ts.uploadAs(acmeToken, same, ""); r.status != http.StatusCreated {
		t.Fatalf("acme: %d %s", r.status, r.body)
	}
	r = ts.uploadAs(globexToken, same, "")
	r.json(t, &info)
	if r.status != http.StatusCreated || info.Unchanged || info.Replaced {
		t.Errorf("globex uploading acme's bytes: %d %s", r.status, r.body)
	}
	if r := ts.uploadAs(globexToken, same, ""); r.status != http.StatusOK {
		t.Errorf("globex uploading its own bytes again: %d %s, want 200 unchanged", r.status, r.body)
	}
	if r := ts.requestAs(acmeToken, "DELETE", "/v1/tools/shared", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("acme's delete: %d %s", r.status, r.body)
	}
	if r := ts.callAs(globexToken, "shared", "{}"); !r.ok() {
		t.Errorf("globex's tool after acme deleted the same bytes: %d %s", r.status, r.body)
	}

	// Deleting one's own x leaves the other's.
	if r := ts.requestAs(acmeToken, "DELETE", "/v1/tools/x", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := ts.callAs(globexToken, "x", "{}"); !r.ok() {
		t.Errorf("globex's x after acme deleted its own: %d %s", r.status, r.body)
	}
	if r := ts.callAs(acmeToken, "x", "{}"); r.status != http.StatusNotFound {
		t.Errorf("acme's deleted x: %d %s", r.status, r.body)
	}

	// The operator's tools are every tenant's, and neither's to change.
	for _, token := range []string{acmeToken, globexToken} {
		if r := ts.callAs(token, "word_count", `{"text":"a b c"}`); !r.ok() {
			t.Errorf("operator tool: %d %s", r.status, r.body)
		}
		if r := ts.requestAs(token, "DELETE", "/v1/tools/word_count", "", nil); r.status != http.StatusForbidden {
			t.Errorf("deleting the operator's tool: %d %s", r.status, r.body)
		}
		if r := ts.uploadAs(token, described(t, "word_count", "mine"), "?replace=true"); r.status != http.StatusForbidden {
			t.Errorf("replacing the operator's tool: %d %s", r.status, r.body)
		}
	}
	if r := ts.requestAs(strings.Repeat("z", 24), "GET", "/v1/tools", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("a token of no tenant: %d %s", r.status, r.body)
	}
}

// TestTenantCeiling: a tenant's upload gets its own ceiling's grant,
// whatever another tenant's ceiling or the same module elsewhere; no
// ceiling grants nothing.
func TestTenantCeiling(t *testing.T) {
	weather := newBlockingWeather(t)
	weather.release()
	host := strings.TrimPrefix(weather.url, "http://")
	ts := twoTenants(t, setup{}, func(acme, _ *server.Tenant) {
		acme.Uploads = wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true}
	})
	wasm := exampleTool(t, "get_weather")
	var a, g server.ToolInfo
	ts.uploadAs(acmeToken, wasm, "").json(t, &a)
	ts.uploadAs(globexToken, wasm, "").json(t, &g)
	if !slices.Equal(a.Granted, []string{"network"}) || !slices.Equal(a.AllowedHosts, []string{host}) {
		t.Errorf("acme's grant: %+v", a)
	}
	if len(g.Granted) != 0 || len(g.AllowedHosts) != 0 {
		t.Errorf("globex (no ceiling) is granted %v %v", g.Granted, g.AllowedHosts)
	}
	if r := ts.callAs(acmeToken, "get_weather", weatherArgs(weather.url)); !r.ok() {
		t.Errorf("acme's call: %d %s", r.status, r.body)
	}
	r := ts.callAs(globexToken, "get_weather", weatherArgs(weather.url))
	if res := callResult(t, r); res.OK || res.Error.Kind != string(registry.PermissionDenied) {
		t.Errorf("globex's call reached the network: %d %s", r.status, r.body)
	}
}

// TestTenantQuotas: every quota answers 429 quota_exceeded naming the
// limit (Retry-After for the rates and the concurrency), stores nothing,
// and leaves the other tenant served.
func TestTenantQuotas(t *testing.T) {
	small := described(t, "one", "ok")
	t.Run("max_modules and max_storage", func(t *testing.T) {
		dir := t.TempDir()
		ts := twoTenants(t, setup{dataDir: dir}, func(acme, globex *server.Tenant) {
			acme.MaxModules = 1
			globex.MaxStorage = int64(len(small)) + 10
		})
		if r := ts.uploadAs(acmeToken, small, ""); r.status != http.StatusCreated {
			t.Fatalf("%d %s", r.status, r.body)
		}
		wantQuota(t, ts.uploadAs(acmeToken, described(t, "two", "ok"), ""), "max_modules", false)
		// A replace adds no tool.
		if r := ts.uploadAs(acmeToken, described(t, "one", "v2"), "?replace=true"); r.status != http.StatusCreated {
			t.Errorf("replace at max_modules: %d %s", r.status, r.body)
		}
		if r := ts.uploadAs(globexToken, small, ""); r.status != http.StatusCreated {
			t.Fatalf("globex: %d %s", r.status, r.body)
		}
		wantQuota(t, ts.uploadAs(globexToken, described(t, "two", "ok"), ""), "max_storage", false)
		if r := ts.uploadAs(acmeToken, described(t, "two", "ok"), ""); r.status != http.StatusTooManyRequests {
			t.Errorf("acme's max_modules still holds: %d", r.status)
		}
		if got := len(moduleFiles(t, dir)); got != 2 { // acme's one v2, the shared small
			t.Errorf("%d modules stored, want 2 (nothing of the refused uploads)", got)
		}
	})
	t.Run("calls_per_minute", func(t *testing.T) {
		chat := chattest.New(t) // never reached: the run is refused first
		lc := &loop.Config{Provider: testprovider.Chat(t, chat.URL)}
		ts := twoTenants(t, setup{opts: server.Options{Loop: lc}}, func(acme, _ *server.Tenant) { acme.CallsPerMinute = 2 })
		for i := range 2 {
			if r := ts.callAs(acmeToken, "word_count", `{"text":"a"}`); !r.ok() {
				t.Fatalf("call %d: %d %s", i, r.status, r.body)
			}
		}
		wantQuota(t, ts.callAs(acmeToken, "word_count", `{"text":"a"}`), "calls_per_minute", true)
		// Runs count too.
		wantQuota(t, ts.requestAs(acmeToken, "POST", "/v1/runs", "application/json", []byte(`{"prompt":"hi"}`)), "calls_per_minute", true)
		for range 5 {
			if r := ts.callAs(globexToken, "word_count", `{"text":"a"}`); !r.ok() {
				t.Fatalf("globex is not served: %d %s", r.status, r.body)
			}
		}
	})
	t.Run("max_concurrent_calls", func(t *testing.T) {
		weather := newBlockingWeather(t)
		host := strings.TrimPrefix(weather.url, "http://")
		grant := wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true}
		lc := &loop.Config{Provider: testprovider.Chat(t, chattest.New(t).URL)} // never reached
		ts := twoTenants(t, setup{opts: server.Options{Loop: lc}}, func(acme, globex *server.Tenant) {
			acme.MaxConcurrentCalls, acme.Uploads, globex.Uploads = 1, grant, grant
		})
		for _, token := range []string{acmeToken, globexToken} {
			if r := ts.uploadAs(token, exampleTool(t, "get_weather"), ""); r.status != http.StatusCreated {
				t.Fatalf("%d %s", r.status, r.body)
			}
		}
		done := make(chan response, 1)
		go func() { done <- ts.callAs(acmeToken, "get_weather", weatherArgs(weather.url)) }()
		weather.waitArrived(t) // acme's one slot is taken
		wantQuota(t, ts.callAs(acmeToken, "word_count", `{"text":"a"}`), "max_concurrent_calls", true)
		wantQuota(t, ts.requestAs(acmeToken, "POST", "/v1/runs", "application/json", []byte(`{"prompt":"hi"}`)), "max_concurrent_calls", true)
		// globex's slots are its own: served meanwhile.
		if r := ts.callAs(globexToken, "word_count", `{"text":"a"}`); !r.ok() {
			t.Errorf("globex while acme is at its quota: %d %s", r.status, r.body)
		}
		weather.release()
		if r := <-done; !r.ok() {
			t.Errorf("acme's blocking call: %d %s", r.status, r.body)
		}
		if r := ts.callAs(acmeToken, "word_count", `{"text":"a"}`); !r.ok() {
			t.Errorf("acme after its call ended: %d %s", r.status, r.body)
		}
	})
}

// wantQuota checks a 429 quota_exceeded naming limit, with Retry-After
// where waiting helps.
func wantQuota(t *testing.T, r response, limit string, retry bool) {
	t.Helper()
	var res server.Result
	r.json(t, &res)
	if r.status != http.StatusTooManyRequests || res.Error == nil || res.Error.Kind != string(server.KindQuotaExceeded) || !strings.Contains(res.Error.Message, limit) {
		t.Errorf("%s: %d %s, want 429 quota_exceeded naming it", limit, r.status, r.body)
	}
	if got := r.header.Get("Retry-After") != ""; got != retry {
		t.Errorf("%s: Retry-After %q, want it set: %v", limit, r.header.Get("Retry-After"), retry)
	}
}

// pendingApprover asks the run's client about every call.
type pendingApprover struct{}

func (pendingApprover) NeedsApproval(loop.ApprovalRequest) bool { return true }
func (pendingApprover) Approve(context.Context, loop.ApprovalRequest) (loop.Decision, error) {
	return loop.Decision{}, loop.ErrApprovalPending
}

// TestTenantsIsolateRuns: another tenant's run, its approvals and its
// session answer what missing ones answer; a session id is per tenant, so
// another tenant's id starts a session of one's own.
func TestTenantsIsolateRuns(t *testing.T) {
	chat := chattest.New(t,
		askWordCount(0),
		answer(0, "acme's answer"),
		answer(0, "globex's answer"),
	)
	lc := &loop.Config{Provider: testprovider.Chat(t, chat.URL), Limits: loop.Limits{MaxRetries: -1}, Hooks: loop.Hooks{Approver: pendingApprover{}}}
	ts := twoTenants(t, setup{opts: server.Options{Loop: lc}}, nil)

	var wg sync.WaitGroup
	wg.Add(1)
	var acmeEvents []sseEvent
	go func() {
		defer wg.Done()
		_, acmeEvents, _ = ts.postRunWith(t, `{"prompt":"acme-private-prompt","session":"s-1"}`, bearer(acmeToken))
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct{ State string }
		if r := ts.requestAs(acmeToken, "GET", "/v1/runs/s-1", "", nil); r.status == http.StatusOK {
			r.json(t, &st)
			if st.State == "awaiting_approval" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("acme's run never asked for approval")
		}
		time.Sleep(20 * time.Millisecond)
	}
	g := func(method, path, body string) response {
		ct := ""
		if body != "" {
			ct = "application/json"
		}
		return ts.requestAs(globexToken, method, path, ct, []byte(body))
	}
	decision := `{"call_id":"call_1","answer":"once"}`
	sameAsMissing(t, "GET run", g("GET", "/v1/runs/s-1", ""), g("GET", "/v1/runs/s-2", ""), "s-1", "s-2")
	sameAsMissing(t, "decide", g("POST", "/v1/runs/s-1/approvals", decision), g("POST", "/v1/runs/s-2/approvals", decision), "s-1", "s-2")
	sameAsMissing(t, "GET session", g("GET", "/v1/sessions/s-1", ""), g("GET", "/v1/sessions/s-2", ""), "s-1", "s-2")

	// acme decides its own call; its run ends.
	if r := ts.requestAs(acmeToken, "POST", "/v1/runs/s-1/approvals", "application/json", []byte(`{"call_id":"call_1","answer":"deny"}`)); r.status != http.StatusOK {
		t.Fatalf("acme's decision: %d %s", r.status, r.body)
	}
	wg.Wait()
	if len(acmeEvents) == 0 || acmeEvents[len(acmeEvents)-1].name != "done" {
		t.Fatalf("acme's run: %v", eventNames(acmeEvents))
	}
	sameAsMissing(t, "GET finished session", g("GET", "/v1/sessions/s-1", ""), g("GET", "/v1/sessions/s-2", ""), "s-1", "s-2")

	// globex's run on "s-1" starts globex's own session: it does not see
	// acme's history, and acme's session is unchanged.
	status, evs, body := ts.postRunWith(t, `{"prompt":"hello","session":"s-1"}`, bearer(globexToken))
	if status != http.StatusOK || evs[len(evs)-1].name != "done" {
		t.Fatalf("globex's run: %d %s %v", status, body, eventNames(evs))
	}
	if reqs := bodies(chat); len(reqs) != 3 || strings.Contains(reqs[2], "acme-private-prompt") {
		t.Errorf("globex's run was sent acme's history: %s", reqs[len(reqs)-1])
	}
	var acmeSess, globexSess struct{ Messages []json.RawMessage }
	ts.requestAs(acmeToken, "GET", "/v1/sessions/s-1", "", nil).json(t, &acmeSess)
	ts.requestAs(globexToken, "GET", "/v1/sessions/s-1", "", nil).json(t, &globexSess)
	if len(acmeSess.Messages) != 4 || len(globexSess.Messages) != 2 {
		t.Errorf("sessions s-1: acme %d messages (want 4), globex %d (want 2)", len(acmeSess.Messages), len(globexSess.Messages))
	}
}

// TestTenantsRestart: a restart keeps each upload with its tenant (and
// its ceiling), and a directory written without tenants is tenant
// default's.
func TestTenantsRestart(t *testing.T) {
	dir := t.TempDir()
	rt := testrt.New(t, runtime.Config{})

	// A single-tenant server's directory, as every earlier version wrote it.
	legacy := startServer(t, setup{dataDir: dir, rt: rt})
	legacy.mustUpload(described(t, "old", "from before tenants"), "", http.StatusCreated)
	legacy.stop()
	if b, err := os.ReadFile(filepath.Join(dir, "index.json")); err != nil || !strings.Contains(string(b), `"version": 1`) || strings.Contains(string(b), "tenants") {
		t.Fatalf("a single-tenant index changed its form: %v %s", err, b)
	}

	reg := tenantsOperator(t)
	weather := newBlockingWeather(t)
	weather.release()
	host := strings.TrimPrefix(weather.url, "http://")
	withDefault := func(acme, globex *server.Tenant) {
		acme.Uploads = wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true}
		globex.Name = server.DefaultTenant // the tenant of the old uploads
	}
	ts := twoTenants(t, setup{dataDir: dir, rt: rt, opts: server.Options{Registry: reg}}, withDefault)
	if got := ts.toolNames(globexToken); !slices.Equal(got, []string{"old:upload", "word_count:config"}) {
		t.Errorf("tenant default after the upgrade lists %v", got)
	}
	ts.uploadAs(acmeToken, described(t, "x", "acme's x"), "")
	ts.uploadAs(globexToken, described(t, "x", "default's x"), "")
	ts.uploadAs(acmeToken, exampleTool(t, "get_weather"), "")
	ts.stop()

	ts = twoTenants(t, setup{dataDir: dir, rt: rt, opts: server.Options{Registry: reg}}, withDefault)
	if got := ts.toolNames(acmeToken); !slices.Equal(got, []string{"get_weather:upload", "word_count:config", "x:upload"}) {
		t.Errorf("acme after the restart lists %v", got)
	}
	if got := ts.toolNames(globexToken); !slices.Equal(got, []string{"old:upload", "word_count:config", "x:upload"}) {
		t.Errorf("default after the restart lists %v", got)
	}
	var info server.ToolInfo
	ts.requestAs(acmeToken, "GET", "/v1/tools/x", "", nil).json(t, &info)
	if info.Description != "acme's x" {
		t.Errorf("acme's x after the restart: %+v", info)
	}
	if r := ts.callAs(acmeToken, "get_weather", weatherArgs(weather.url)); !r.ok() {
		t.Errorf("acme's tool after the restart lost its ceiling: %d %s", r.status, r.body)
	}
	ts.stop()

	// Without the tenant acme configured its tools stay on disk, served
	// to nobody, and come back with it.
	only := startServer(t, setup{dataDir: dir, rt: rt, opts: server.Options{Registry: reg, Tenants: []server.Tenant{{Name: "default", Tokens: []string{globexToken}}}}})
	if got := only.toolNames(globexToken); !slices.Equal(got, []string{"old:upload", "word_count:config", "x:upload"}) {
		t.Errorf("default alone lists %v", got)
	}
	only.uploadAs(globexToken, described(t, "new", "n"), "")
	only.stop()
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil || !strings.Contains(string(b), `"acme"`) {
		t.Errorf("acme's tools were dropped from the index: %v %s", err, b)
	}
	ts = twoTenants(t, setup{dataDir: dir, rt: rt, opts: server.Options{Registry: reg}}, withDefault)
	if got := ts.toolNames(acmeToken); !slices.Equal(got, []string{"get_weather:upload", "word_count:config", "x:upload"}) {
		t.Errorf("acme back lists %v", got)
	}
}

// TestTenantOptions: a token of two tenants, tokens beside tenants, and
// tenants with the app's single-tenant Authenticate are refused by New.
func TestTenantOptions(t *testing.T) {
	rt := testrt.New(t, runtime.Config{})
	for name, o := range map[string]server.Options{
		"token of two tenants": {Tenants: []server.Tenant{{Name: "a", Tokens: []string{acmeToken}}, {Name: "b", Tokens: []string{globexToken, acmeToken}}}},
		"tokens beside":        {Tokens: []string{acmeToken}, Tenants: []server.Tenant{{Name: "a", Tokens: []string{globexToken}}}},
		"bad name":             {Tenants: []server.Tenant{{Name: "../a", Tokens: []string{acmeToken}}}},
		"short token":          {Tenants: []server.Tenant{{Name: "a", Tokens: []string{"short"}}}},
		"no token":             {Tenants: []server.Tenant{{Name: "a"}}},
		"single-tenant app auth": {Tenants: []server.Tenant{{Name: "a"}},
			Authenticate: func(*http.Request) (string, error) { return "u", nil }},
	} {
		o.Runtime, o.Registry, o.DataDir = rt, registry.New(), t.TempDir()
		if srv, err := server.New(context.Background(), o); err == nil {
			srv.Close(context.Background())
			t.Errorf("%s: accepted", name)
		} else if name == "token of two tenants" && (!strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"b"`) || strings.Contains(err.Error(), acmeToken)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestAuthenticateTenant: an app's authentication names the tenant.
func TestAuthenticateTenant(t *testing.T) {
	ts := startServer(t, setup{opts: server.Options{
		Registry: tenantsOperator(t),
		Tenants:  []server.Tenant{{Name: "acme"}, {Name: "globex"}},
		AuthenticateTenant: func(r *http.Request) (string, string, error) {
			return r.Header.Get("X-Tenant"), "user", nil
		},
	}})
	up := func(tenant string, wasm []byte) int {
		req, _ := http.NewRequest("POST", ts.url+"/v1/tools", strings.NewReader(string(wasm)))
		req.Header.Set("Content-Type", "application/wasm")
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := up("acme", described(t, "x", "a")); got != http.StatusCreated {
		t.Errorf("acme: %d", got)
	}
	if got := up("globex", described(t, "x", "g")); got != http.StatusCreated {
		t.Errorf("globex's own x: %d", got)
	}
	if got := up("initech", described(t, "y", "i")); got != http.StatusUnauthorized {
		t.Errorf("a tenant that is not configured: %d", got)
	}
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// TestTenantIndexRefusesBadTenants: an index.json naming a tenant that
// could not be configured (a path, tenant default twice) is damaged: New
// refuses it rather than guess.
func TestTenantIndexRefusesBadTenants(t *testing.T) {
	rt := testrt.New(t, runtime.Config{})
	for _, ix := range []string{
		`{"version":2,"tools":{},"tenants":{"../x":{}}}`,
		`{"version":2,"tools":{},"tenants":{"default":{}}}`,
	} {
		dir := t.TempDir()
		must(t, os.WriteFile(filepath.Join(dir, "index.json"), []byte(ix), 0o600))
		srv, err := server.New(context.Background(), server.Options{Runtime: rt, Registry: registry.New(), DataDir: dir})
		if err == nil {
			srv.Close(context.Background())
			t.Errorf("%s: accepted", ix)
		}
	}
}
