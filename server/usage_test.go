package server_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testprovider"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/telemetry"
	"github.com/agcore/agrun/wasmtools"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// usageOf is GET /v1/usage as token (and a query that must change
// nothing).
func (ts *testServer) usageOf(token, query string) server.Usage {
	ts.t.Helper()
	r := ts.requestAs(token, "GET", "/v1/usage"+query, "", nil)
	if r.status != http.StatusOK {
		ts.t.Fatalf("GET /v1/usage: %d %s", r.status, r.body)
	}
	var u server.Usage
	r.json(ts.t, &u)
	return u
}

// TestTenantUsage: two tenants through HTTP, each GET /v1/usage answers
// the caller's own calls (direct and its runs'), runs, CPU, fuel,
// modules, storage and quotas, never the other's, whatever the query
// names; the metrics carry agrun.tenant, the tenant's name and never a
// token, with each tenant's calls under its own name.
func TestTenantUsage(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	tel, err := telemetry.Setup(ctx, telemetry.Config{MetricReader: reader})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	chat := chattest.New(t, askWordCount(0), answer(0, "three"))
	lc := &loop.Config{Provider: testprovider.Chat(t, chat.URL), Limits: loop.Limits{MaxRetries: -1}}
	// The operator's word_count is the Go example (a call spends
	// measurable CPU).
	rt := testrt.New(t, runtime.Config{})
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	wc, err := wasmtools.Load(ctx, rt, exampleTool(t, "word_count"), wasmtools.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close(ctx) })
	if err := reg.Register(wc); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UTC().Add(-time.Second)
	ts := twoTenants(t, setup{rt: rt, opts: server.Options{Registry: reg, Loop: lc, Telemetry: tel}}, func(acme, globex *server.Tenant) {
		acme.MaxModules, acme.MaxStorage, acme.CallsPerMinute = 5, 1<<20, 100
		globex.MaxConcurrentCalls = 3
	})

	// acme: an upload, two calls of it, a call of no tool, a run that
	// calls word_count; globex: one call of word_count. The audits the
	// calls answer are what the usage must add up to.
	var acmeCPU, globexCPU time.Duration
	var acmeFuel, globexFuel int64
	audited := func(token, name, args string, cpu *time.Duration, fuel *int64) {
		t.Helper()
		r := ts.requestAs(token, "POST", "/v1/tools/"+name+"/call?audit=true", "application/json", []byte(args))
		res := callResult(t, r)
		if !res.OK || res.Audit == nil {
			t.Fatalf("call %s: %d %s", name, r.status, r.body)
		}
		*cpu += res.Audit.CPU
		*fuel += res.Audit.Fuel
	}
	x := okTool(t, "x")
	if r := ts.uploadAs(acmeToken, x, ""); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	for range 2 {
		audited(acmeToken, "x", `{}`, &acmeCPU, &acmeFuel)
	}
	if r := ts.callAs(acmeToken, "nosuch", `{}`); r.status != http.StatusNotFound {
		t.Fatalf("call nosuch: %d %s", r.status, r.body)
	}
	status, evs, body := ts.postRunWith(t, `{"prompt":"count","session":"u-1"}`, bearer(acmeToken))
	if status != http.StatusOK || evs[len(evs)-1].name != "done" {
		t.Fatalf("run: %d %s", status, body)
	}
	for _, ev := range evs {
		if ev.name == "tool_completed" {
			var c struct{ Audit registry.Audit }
			if err := json.Unmarshal([]byte(ev.raw), &c); err != nil || c.Audit.Fuel == 0 {
				t.Fatalf("tool_completed %s: %v", ev.raw, err)
			}
			acmeCPU += c.Audit.CPU
			acmeFuel += c.Audit.Fuel
		}
	}
	audited(globexToken, "word_count", `{"text":"a b"}`, &globexCPU, &globexFuel)
	// The run's call record names its tenant (`agrun audit --tenant`).
	st, err := session.OpenFiles(filepath.Join(ts.srv.DataDir(), "tenants", "acme", "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	if recs, _, err := st.Calls("u-1"); err != nil || len(recs) != 1 || recs[0].Tenant != "acme" || recs[0].Tool != "word_count" {
		t.Errorf("acme's call records %+v, %v", recs, err)
	}

	a := ts.usageOf(acmeToken, "")
	if a.Tenant != "acme" || a.Calls != 4 || a.FailedCalls != 1 || a.Runs != 1 || a.Modules != 1 || a.StorageBytes != int64(len(x)) {
		t.Errorf("acme's usage %+v", a)
	}
	if a.Fuel != acmeFuel || a.Fuel == 0 || math.Abs(a.CPUSeconds-acmeCPU.Seconds()) > 1e-9 {
		t.Errorf("acme's usage: CPU %vs, fuel %d; its calls' audits: %v, %d", a.CPUSeconds, a.Fuel, acmeCPU, acmeFuel)
	}
	if a.Since.Before(before) || a.Since.After(time.Now()) {
		t.Errorf("since %v, want when the server started (after %v)", a.Since, before)
	}
	if want := (server.UsageQuotas{MaxModules: 5, MaxStorage: 1 << 20, MaxConcurrentCalls: server.DefaultMaxConcurrentCalls / 2, CallsPerMinute: 100}); a.Quotas != want {
		t.Errorf("acme's quotas %+v, want %+v", a.Quotas, want)
	}
	g := ts.usageOf(globexToken, "")
	want := server.Usage{Tenant: "globex", Since: a.Since, Calls: 1, CPUSeconds: globexCPU.Seconds(), Fuel: globexFuel, Quotas: server.UsageQuotas{MaxConcurrentCalls: 3}}
	if g != want || g.Fuel == 0 {
		t.Errorf("globex's usage %+v, want %+v", g, want)
	}
	// No way to name another tenant: a query changes nothing.
	if g2 := ts.usageOf(globexToken, "?tenant=acme"); g2 != g {
		t.Errorf("globex asking for acme's usage got %+v", g2)
	}
	if r := ts.request("GET", "/v1/usage", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s", r.status, r.body)
	}
	if u, err := ts.srv.Usage("acme"); err != nil || u != a {
		t.Errorf("Server.Usage(acme) = %+v, %v; want %+v", u, err, a)
	}
	if _, err := ts.srv.Usage("initech"); registry.KindOf(err) != registry.NotFound {
		t.Errorf("Server.Usage of no tenant: %v", err)
	}

	// The metrics: agrun.tool.calls by tenant, and no point without a
	// tenant or with a token in it.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var sets []string
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					tn, _ := p.Attributes.Value("agrun.tenant")
					if m.Name == "agrun.tool.calls" {
						calls[tn.AsString()] += p.Value
					}
					sets = append(sets, p.Attributes.Encoded(attribute.DefaultEncoder()))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes.Encoded(attribute.DefaultEncoder()))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes.Encoded(attribute.DefaultEncoder()))
				}
			}
			for _, s := range sets {
				if !strings.Contains(s, "agrun.tenant=acme") && !strings.Contains(s, "agrun.tenant=globex") {
					t.Errorf("%s point without a tenant: %s", m.Name, s)
				}
				if strings.Contains(s, acmeToken) || strings.Contains(s, globexToken) {
					t.Errorf("%s point holds a token: %s", m.Name, s)
				}
			}
		}
	}
	if calls["acme"] != 4 || calls["globex"] != 1 || len(calls) != 2 {
		t.Errorf("agrun.tool.calls by tenant %v, want acme 4, globex 1", calls)
	}
}

// TestUsageSingleTenant: a server without tenants answers GET /v1/usage
// as tenant default, with no quota of its own.
func TestUsageSingleTenant(t *testing.T) {
	token := strings.Repeat("t", 20)
	ts := startServer(t, setup{opts: server.Options{Tokens: []string{token}, Registry: tenantsOperator(t)}})
	if r := ts.callAs(token, "word_count", `{"text":"a"}`); !r.ok() {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	u := ts.usageOf(token, "")
	if u.Tenant != server.DefaultTenant || u.Calls != 1 || u.FailedCalls != 0 || u.Quotas != (server.UsageQuotas{}) {
		t.Errorf("usage %+v", u)
	}
}
