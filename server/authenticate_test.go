package server_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
)

// TestAuthenticate: the app's authentication replaces the tokens (both
// at once are refused), its identities key the per-client shares (one
// user's spent upload rate does not stop another's), an empty identity
// or an error is 401 with the app's reason cleaned, and a BasePath that
// is not a clean prefix is refused.
func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	rt := testrt.New(t, runtime.Config{})
	var calls atomic.Int64
	auth := func(r *http.Request) (string, error) {
		calls.Add(1)
		switch u := r.Header.Get("X-User"); u {
		case "":
			return "", errors.New("no user\x1b[31m")
		case "nobody":
			return "", nil
		default:
			return u, nil
		}
	}
	if _, err := server.New(ctx, server.Options{Runtime: rt, Registry: registry.New(), DataDir: t.TempDir(),
		Authenticate: auth, Tokens: []string{strings.Repeat("t", 32)}}); err == nil {
		t.Fatal("Authenticate and Tokens together were accepted")
	}
	for _, bp := range []string{"agrun", "/agrun/"} {
		if _, err := server.New(ctx, server.Options{Runtime: rt, Registry: registry.New(), DataDir: t.TempDir(), BasePath: bp}); err == nil {
			t.Errorf("BasePath %q was accepted", bp)
		}
	}
	srv, err := server.New(ctx, server.Options{Runtime: rt, Registry: registry.New(), DataDir: t.TempDir(),
		Authenticate: auth, UploadsPerMinute: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(ctx)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	upload := func(user, name string) (int, string) {
		req, _ := http.NewRequest("POST", hs.URL+"/v1/tools", bytes.NewReader(okTool(t, name)))
		req.Header.Set("Content-Type", "application/wasm")
		if user != "" {
			req.Header.Set("X-User", user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := upload("", "a"); code != 401 || !strings.Contains(body, `"kind":"unauthorized"`) || !strings.Contains(body, "no user") || strings.Contains(body, "\x1b") {
		t.Errorf("no user: %d %s", code, body)
	}
	if code, _ := upload("nobody", "a"); code != 401 {
		t.Errorf("an empty identity: %d", code)
	}
	if code, body := upload("alice", "a1"); code != 201 {
		t.Fatalf("alice's first upload: %d %s", code, body)
	}
	if code, _ := upload("alice", "a2"); code != 429 {
		t.Errorf("alice's second upload within the minute: %d, want 429", code)
	}
	if code, body := upload("bob", "b1"); code != 201 {
		t.Errorf("bob's upload after alice spent her rate: %d %s", code, body)
	}
	calls.Store(0)
	upload("carol", "c1")
	if n := calls.Load(); n != 1 {
		t.Errorf("Authenticate was called %d times for one request, want once", n)
	}
}
