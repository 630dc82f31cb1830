package server_test

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/server"
)

// A second token of tenant acme.
var acmeToken2 = strings.Repeat("b", 24)

// TestTenantBodyMemoryShare: the bytes of request bodies held in memory
// are shared per tenant, then per client within it: while one of acme's
// tokens holds a stalled body, another of acme's tokens is refused 429
// busy once acme's share would be over (though that token's own share
// and the server's budget have room), and globex is served meanwhile.
func TestTenantBodyMemoryShare(t *testing.T) {
	ts := twoTenants(t, setup{opts: server.Options{
		MaxBodyMemory:    200 << 10, // shares: a tenant 100 KiB, a client 100 KiB
		MaxUpload:        64 << 10,
		UploadsPerMinute: 1000,
		ReadTimeout:      10 * time.Minute,
		BodyTimeout:      3 * time.Second,
	}}, func(acme, _ *server.Tenant) { acme.Tokens = append(acme.Tokens, acmeToken2) })
	conn := slowBody(t, ts, "/v1/tools", "application/wasm", 64<<10, "Authorization: Bearer "+acmeToken+"\r\n")
	if _, err := conn.Write(bytes.Repeat([]byte{'x'}, 60<<10-1)); err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte{'y'}, 60<<10)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := ts.uploadAs(acmeToken2, garbage, "")
		if r.status == http.StatusTooManyRequests {
			if r.errorKind(t) != server.KindBusy || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "this tenant's request bodies") {
				t.Errorf("over acme's share: %d %v %s", r.status, r.header, r.body)
			}
			break
		}
		if r.status != http.StatusBadRequest || time.Now().After(deadline) {
			t.Fatalf("acme's second token over acme's share: %d %s", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond) // the stalled body is not all read yet
	}
	if r := ts.uploadAs(globexToken, garbage, ""); r.status != http.StatusBadRequest || r.errorKind(t) != server.KindMalformedModule {
		t.Errorf("globex while acme holds its share: %d %s", r.status, r.body)
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("the stalled body: %v %v", resp, err)
	}
	resp.Body.Close()
	if r := ts.uploadAs(acmeToken2, garbage, ""); r.status != http.StatusBadRequest || r.errorKind(t) != server.KindMalformedModule {
		t.Errorf("acme after its stalled body was cut off: %d %s", r.status, r.body)
	}
}

// TestTenantUploadRate: uploads_per_minute bounds a tenant's uploads,
// all its tokens together (a tenant cannot multiply it by holding many
// tokens), and each token's as before; another tenant is served.
func TestTenantUploadRate(t *testing.T) {
	ts := twoTenants(t, setup{opts: server.Options{UploadsPerMinute: 2}},
		func(acme, _ *server.Tenant) { acme.Tokens = append(acme.Tokens, acmeToken2) })
	for i, name := range []string{"one", "two"} {
		if r := ts.uploadAs(acmeToken, okTool(t, name), ""); r.status != http.StatusCreated {
			t.Fatalf("upload %d: %d %s", i, r.status, r.body)
		}
	}
	r := ts.uploadAs(acmeToken2, okTool(t, "three"), "")
	if r.status != http.StatusTooManyRequests || r.errorKind(t) != server.KindRateLimited || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "for this tenant") {
		t.Errorf("acme's other token past acme's uploads_per_minute: %d %s", r.status, r.body)
	}
	if r := ts.uploadAs(globexToken, okTool(t, "three"), ""); r.status != http.StatusCreated {
		t.Errorf("globex: %d %s", r.status, r.body)
	}
}
