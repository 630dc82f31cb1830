package wasmtools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// The sandbox behind an http.Handler of an app's own: POST /tools/NAME
// with the arguments as the body calls the tool through the registry
// (permission check, schema validation, limits), and a failure is a typed
// error with the registry's kind.
func Example_httpHandler() {
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	wasm, err := os.ReadFile("../testdata/sum_c.wasm")
	if err != nil {
		panic(err)
	}
	tool, err := wasmtools.Load(ctx, rt, wasm, wasmtools.Grant{Limits: runtime.Limits{MemoryBytes: 16 << 20}})
	if err != nil {
		panic(err)
	}
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	if err := reg.Register(tool); err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /tools/{name}", func(w http.ResponseWriter, r *http.Request) {
		args, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		inv := reg.Invoke(r.Context(), r.PathValue("name"), args)
		w.Header().Set("Content-Type", "application/json")
		if inv.Err != nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			json.NewEncoder(w).Encode(map[string]string{"kind": string(registry.KindOf(inv.Err)), "error": inv.Err.Error()})
			return
		}
		w.Write(inv.Output)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, body := range []string{`{"numbers":[1,2,3]}`, `{"numbers":"many"}`} {
		res, err := http.Post(srv.URL+"/tools/sum_c", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Println(res.StatusCode, strings.TrimSpace(string(b)))
	}
	// Output:
	// 200 {"sum":6,"count":3}
	// 422 {"error":"tool \"sum_c\": invalid_arguments: /numbers: got string, want array","kind":"invalid_arguments"}
}

// The loop with a Go-function tool beside a sandboxed WASM tool, against
// any Chat Completions server (here a scripted one that calls both).
func Example_loopWithGoAndWASMTools() {
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	wasm, err := os.ReadFile("../testdata/sum_c.wasm")
	if err != nil {
		panic(err)
	}
	sum, err := wasmtools.Load(ctx, rt, wasm, wasmtools.Grant{})
	if err != nil {
		panic(err)
	}
	double, err := registry.NewFunc("double", "Double a number", func(_ context.Context, in struct {
		X float64 `json:"x"`
	}) (map[string]float64, error) {
		return map[string]float64{"double": 2 * in.X}, nil
	})
	if err != nil {
		panic(err)
	}
	reg := registry.New()
	if err := reg.RegisterAll([]registry.Tool{sum, double}); err != nil {
		panic(err)
	}

	model := scriptedModel()
	defer model.Close()
	p, err := chat.New(chat.Config{BaseURL: model.URL, Model: "any"})
	if err != nil {
		panic(err)
	}
	c, err := loop.New(loop.Config{Provider: p})
	if err != nil {
		panic(err)
	}
	resp, err := c.SubmitWithTools(ctx, "Sum 1 and 2, and double 21.", reg)
	if err != nil {
		panic(err)
	}
	for _, m := range c.Messages() {
		if m.Role == loop.RoleTool { // in call order
			fmt.Println(m.Name, m.Content)
		}
	}
	fmt.Println(resp.Text)
	// Output:
	// sum_c {"sum":3,"count":2}
	// double {"double":42}
	// 3 and 42.
}

// scriptedModel stands in for a Chat Completions server: it asks for
// both tools, then answers.
func scriptedModel() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(string(body), `"role":"tool"`) {
			io.WriteString(w, `{"id":"1","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[`+
				`{"id":"call_1","type":"function","function":{"name":"sum_c","arguments":"{\"numbers\":[1,2]}"}},`+
				`{"id":"call_2","type":"function","function":{"name":"double","arguments":"{\"x\":21}"}}]}}]}`)
			return
		}
		io.WriteString(w, `{"id":"2","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"3 and 42."}}]}`)
	}))
}
