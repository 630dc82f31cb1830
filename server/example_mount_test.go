package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
)

// The HTTP API inside an app's own server: mounted under /agrun/ in the
// app's mux beside its own routes, behind the app's own authentication
// (here an API key header of the app's; a session cookie works the same
// way). The identity Authenticate returns is the client whose fair share
// of calls and uploads the API counts.
func ExampleServer_Handler() {
	ctx := context.Background()
	rt, _ := runtime.New(ctx, runtime.Config{})
	defer rt.Close(ctx)
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	dataDir, _ := os.MkdirTemp("", "agrun-mount-example")
	defer os.RemoveAll(dataDir)

	users := map[string]string{"key-of-alice": "alice"} // the app's own accounts
	srv, err := server.New(ctx, server.Options{
		Runtime:  rt,
		Registry: reg,
		DataDir:  dataDir,
		BasePath: "/agrun",
		Authenticate: func(r *http.Request) (string, error) {
			if user, ok := users[r.Header.Get("X-App-Key")]; ok {
				return user, nil
			}
			return "", errors.New("sign in to the app first (X-App-Key)")
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close(ctx)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the app's own page\n") })
	mux.Handle("/agrun/", http.StripPrefix("/agrun", srv.Handler()))
	app := httptest.NewServer(mux)
	defer app.Close()

	send := func(method, path, key, contentType string, body []byte, show bool) {
		req, _ := http.NewRequest(method, app.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if key != "" {
			req.Header.Set("X-App-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !show {
			b = nil
		}
		fmt.Println(strings.Join(strings.Fields(resp.Status+" "+resp.Header.Get("Location")+" "+string(b)), " "))
	}
	wasm, _ := os.ReadFile("../testdata/word_count.wasm")
	send("GET", "/hello", "", "", nil, true)
	send("POST", "/agrun/v1/tools/word_count/call", "", "application/json", []byte(`{"text":"hi"}`), true)
	send("POST", "/agrun/v1/tools", "key-of-alice", "application/wasm", wasm, false)
	send("POST", "/agrun/v1/tools/word_count/call", "key-of-alice", "application/json", []byte(`{"text":"hello agrun"}`), true)
	// Output:
	// 200 OK the app's own page
	// 401 Unauthorized {"ok":false,"error":{"kind":"unauthorized","message":"sign in to the app first (X-App-Key)"}}
	// 201 Created /agrun/v1/tools/word_count
	// 200 OK {"ok":true,"result":{"words":2,"lines":1,"chars":11,"bytes":11}}
}
