package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
)

// Upload a tool and call it over HTTP.
func Example() {
	ctx := context.Background()
	rt, _ := runtime.New(ctx, runtime.Config{})
	defer rt.Close(ctx)
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	dataDir, _ := os.MkdirTemp("", "agrun-serve-example")
	defer os.RemoveAll(dataDir)

	srv, err := server.New(ctx, server.Options{Runtime: rt, Registry: reg, DataDir: dataDir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close(ctx)
	hs := httptest.NewServer(srv.Handler()) // or srv.Serve(ctx, listener)
	defer hs.Close()

	wasm, _ := os.ReadFile("../testdata/word_count.wasm")
	resp, _ := http.Post(hs.URL+"/v1/tools", "application/wasm", bytes.NewReader(wasm))
	resp.Body.Close()
	fmt.Println(resp.Status)

	resp, _ = http.Post(hs.URL+"/v1/tools/word_count/call", "application/json", bytes.NewBufferString(`{"text":"hello agrun"}`))
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.Status, " ", string(body))
	// Output:
	// 201 Created
	// 200 OK {"ok":true,"result":{"words":2,"lines":1,"chars":11,"bytes":11}}
}
