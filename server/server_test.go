package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

func TestUploadCallListDelete(t *testing.T) {
	ts := startServer(t, setup{})
	wasm := exampleTool(t, "word_count")

	info := ts.mustUpload(wasm, "", http.StatusCreated)
	if info.Name != "word_count" || info.Source != server.SourceUpload || info.SHA256 != hashHex(wasm) || info.Size != int64(len(wasm)) {
		t.Errorf("upload answer: %+v", info)
	}
	if !info.Runnable || len(info.Declared) != 0 || info.Granted == nil || len(info.Granted) != 0 || info.Replaced {
		t.Errorf("upload answer permissions: %+v", info)
	}
	if !json.Valid(info.Parameters) || !strings.Contains(string(info.Parameters), `"text"`) {
		t.Errorf("upload answer parameters: %s", info.Parameters)
	}

	r := ts.call("word_count", `{"text":"one two three"}`)
	res := callResult(t, r)
	if r.status != http.StatusOK || !res.OK {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	var counts struct{ Words int }
	if err := json.Unmarshal(res.Result, &counts); err != nil || counts.Words != 3 {
		t.Errorf("call result %s (%v), want 3 words", res.Result, err)
	}

	// The same module again: nothing to do, with or without replace.
	again := ts.mustUpload(wasm, "", http.StatusOK)
	if !again.Unchanged || again.SHA256 != info.SHA256 {
		t.Errorf("re-upload: %+v", again)
	}

	// Arguments are validated against the manifest's schema; nothing runs.
	r = ts.call("word_count", `{"txt":"x"}`)
	if r.status != http.StatusBadRequest || r.errorKind(t) != "invalid_arguments" {
		t.Errorf("bad arguments: %d %s", r.status, r.body)
	}
	r = ts.call("word_count", `not json`)
	if r.status != http.StatusBadRequest || r.errorKind(t) != "invalid_arguments" {
		t.Errorf("arguments not JSON: %d %s", r.status, r.body)
	}
	r = ts.call("nope", `{}`)
	if r.status != http.StatusNotFound || r.errorKind(t) != "not_found" {
		t.Errorf("unknown tool: %d %s", r.status, r.body)
	}

	r = ts.request("GET", "/v1/tools", "", nil)
	var list struct{ Tools []server.ToolInfo }
	r.json(t, &list)
	if r.status != http.StatusOK || len(list.Tools) != 1 || list.Tools[0].Name != "word_count" || list.Tools[0].Parameters != nil {
		t.Errorf("list: %d %s", r.status, r.body)
	}
	r = ts.request("GET", "/v1/tools/word_count", "", nil)
	var one server.ToolInfo
	r.json(t, &one)
	if r.status != http.StatusOK || one.SHA256 != info.SHA256 || one.Uploaded == nil || len(one.Parameters) == 0 {
		t.Errorf("get: %d %s", r.status, r.body)
	}
	if r := ts.request("GET", "/v1/tools/nope", "", nil); r.status != http.StatusNotFound || r.errorKind(t) != "not_found" {
		t.Errorf("get unknown: %d %s", r.status, r.body)
	}

	if r := ts.request("DELETE", "/v1/tools/word_count", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := ts.call("word_count", `{"text":"a"}`); r.status != http.StatusNotFound {
		t.Errorf("call after delete: %d %s", r.status, r.body)
	}
	if r := ts.request("DELETE", "/v1/tools/word_count", "", nil); r.status != http.StatusNotFound {
		t.Errorf("second delete: %d %s", r.status, r.body)
	}
	if n := storedTools(t, ts.srv.DataDir()); len(n) != 0 {
		t.Errorf("index after delete: %v", n)
	}
	if f := moduleFiles(t, ts.srv.DataDir()); len(f) != 0 {
		t.Errorf("module files after delete: %v", f)
	}
}

func TestEndpointsAnswerJSON(t *testing.T) {
	ts := startServer(t, setup{})
	r := ts.request("GET", "/healthz", "", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"ok":true`) {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	r = ts.request("GET", "/v2/nothing", "", nil)
	if r.status != http.StatusNotFound || r.errorKind(t) != "not_found" {
		t.Errorf("unknown path: %d %s", r.status, r.body)
	}
	r = ts.request("PUT", "/v1/tools", "", nil)
	if r.status != http.StatusMethodNotAllowed || r.errorKind(t) != "method_not_allowed" || r.header.Get("Allow") == "" {
		t.Errorf("wrong method: %d %v %s", r.status, r.header, r.body)
	}
}

func TestAuthentication(t *testing.T) {
	const good, other = "s3cret-token-0123456789", "another-token-abcdefghij"
	ts := startServer(t, setup{opts: server.Options{Tokens: []string{good, other}}})
	wasm := okTool(t, "ok_tool")

	for _, tok := range []string{"", "wrong-token-0123456789", good + "x", good[:len(good)-1]} {
		r := ts.requestAs(tok, "POST", "/v1/tools", "application/wasm", wasm)
		if r.status != http.StatusUnauthorized || r.errorKind(t) != server.KindUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token %q: upload %d %v %s", tok, r.status, r.header, r.body)
		}
		for _, p := range []struct{ method, path string }{{"GET", "/v1/tools"}, {"POST", "/v1/tools/ok_tool/call"}, {"DELETE", "/v1/tools/ok_tool"}, {"POST", "/v1/runs"}, {"GET", "/v1/sessions/x"}, {"GET", "/nothing"}} {
			if r := ts.requestAs(tok, p.method, p.path, "application/json", []byte(`{}`)); r.status != http.StatusUnauthorized {
				t.Errorf("token %q: %s %s: %d %s", tok, p.method, p.path, r.status, r.body)
			}
		}
	}
	if n := storedTools(t, ts.srv.DataDir()); len(n) != 0 {
		t.Fatalf("unauthenticated uploads were stored: %v", n)
	}
	if f := moduleFiles(t, ts.srv.DataDir()); len(f) != 0 {
		t.Fatalf("unauthenticated uploads left files: %v", f)
	}
	// /healthz needs no token.
	if r := ts.requestAs("", "GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Errorf("healthz: %d", r.status)
	}
	// Both tokens work.
	ts.mustUpload(wasm, "", http.StatusCreated)
	r := ts.requestAs(other, "POST", "/v1/tools/ok_tool/call", "application/json", nil)
	if res := callResult(t, r); r.status != http.StatusOK || !res.OK || string(res.Result) != `{"ok":true}` {
		t.Errorf("call with the second token: %d %s", r.status, r.body)
	}
	// A wrong token does not run the tool either: the call answers 401
	// before anything else.
	r = ts.requestAs("wrong-token-0123456789", "POST", "/v1/tools/ok_tool/call", "application/json", nil)
	if r.status != http.StatusUnauthorized {
		t.Errorf("call with a wrong token: %d %s", r.status, r.body)
	}
}

func TestTokensAndListeners(t *testing.T) {
	t.Setenv("AGRUN_TEST_TOKENS", " tok-aaaaaaaaaaaaaaaa , ,tok-bbbbbbbbbbbbbbbb,")
	if got := server.TokensFromEnv("AGRUN_TEST_TOKENS"); !slices.Equal(got, []string{"tok-aaaaaaaaaaaaaaaa", "tok-bbbbbbbbbbbbbbbb"}) {
		t.Errorf("TokensFromEnv: %q", got)
	}
	if got := server.TokensFromEnv("AGRUN_TEST_UNSET_VARIABLE"); got != nil {
		t.Errorf("TokensFromEnv of an unset variable: %q", got)
	}

	rt := testrt.New(t, runtime.Config{})
	_, err := server.New(context.Background(), server.Options{Runtime: rt, Registry: registry.New(), Tokens: []string{"short"}, DataDir: t.TempDir()})
	if err == nil {
		t.Error("a token shorter than MinTokenLength was accepted")
	}

	// Without tokens, only loopback.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := server.CheckListener(ln, nil); !errors.Is(err, server.ErrNoTokens) {
		t.Errorf("CheckListener(0.0.0.0, no tokens) = %v", err)
	}
	if err := server.CheckListener(ln, []string{"tok-aaaaaaaaaaaaaaaa"}); err != nil {
		t.Errorf("CheckListener(0.0.0.0, tokens) = %v", err)
	}
	srv, err := server.New(context.Background(), server.Options{Runtime: rt, Registry: registry.New(), DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	if err := srv.Serve(context.Background(), ln); !errors.Is(err, server.ErrNoTokens) {
		t.Errorf("Serve on 0.0.0.0 without tokens = %v", err)
	}
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	if err := server.CheckListener(lo, nil); err != nil {
		t.Errorf("CheckListener(127.0.0.1, no tokens) = %v", err)
	}
}

func TestHostileUploads(t *testing.T) {
	op := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	if err := op.Register(operatorTool{}); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, setup{opts: server.Options{Registry: op, MaxUpload: 1 << 20, UploadsPerMinute: 100}})
	ok := testguest.WAT(t, "testdata/ok.wat")
	bomb := testguest.WAT(t, "testdata/tablebomb.wat")

	cases := []struct {
		name        string
		contentType string
		body        []byte
		status      int
		kind        server.Kind
	}{
		{"garbage", "application/wasm", []byte("MZ\x90\x00 this is not a module at all"), 400, server.KindMalformedModule},
		{"empty", "application/wasm", nil, 400, server.KindMalformedModule},
		{"truncated", "application/wasm", okTool(t, "cut")[:60], 400, server.KindMalformedModule},
		{"no manifest", "application/wasm", ok, 422, server.KindNoManifest},
		{"manifest not JSON", "application/wasm", withCustomSection(ok, "agrun.manifest", []byte("{name: evil")), 422, server.KindInvalidManifest},
		{"manifest bad name", "application/wasm", withCustomSection(ok, "agrun.manifest", []byte(`{"name":"../../etc/passwd","description":"x"}`)), 422, server.KindInvalidManifest},
		{"manifest bad schema", "application/wasm", withCustomSection(ok, "agrun.manifest", []byte(`{"name":"s","description":"x","parameters":{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}}`)), 422, server.KindInvalidManifest},
		{"table bomb", "application/wasm", pack(t, bomb, wasmtools.Manifest{Name: "bomb", Description: "grows its table forever"}), 422, server.KindModuleRefused},
		{"bad imports", "application/wasm", pack(t, testguest.WAT(t, "../runtime/testdata/wat/unknown.wat"), wasmtools.Manifest{Name: "imp", Description: "x"}), 422, server.KindModuleRefused},
		{"reserved name", "application/wasm", okTool(t, "srv__tool"), 422, server.KindInvalidName},
		{"operator's name", "application/wasm", okTool(t, "operator_tool"), 403, server.KindForbidden},
		{"oversize", "application/wasm", exampleTool(t, "word_count"), 413, server.KindBodyTooLarge},
		{"not wasm", "application/json", okTool(t, "json"), 415, server.KindUnsupportedMedia},
		{"no content type", "", okTool(t, "none"), 415, server.KindUnsupportedMedia},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ts.request("POST", "/v1/tools", c.contentType, c.body)
			if r.status != c.status || r.errorKind(t) != c.kind {
				t.Errorf("status %d kind %q, want %d %q: %s", r.status, r.errorKind(t), c.status, c.kind, r.body)
			}
		})
	}
	// An oversize body without Content-Length (chunked) is cut off too.
	req, _ := http.NewRequest("POST", ts.url+"/v1/tools", &slowReader{data: exampleTool(t, "word_count")})
	req.Header.Set("Content-Type", "application/wasm")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked oversize upload: %d", resp.StatusCode)
		}
	} // else: the server closed the connection mid-body, which is also a refusal
	if n := storedTools(t, ts.srv.DataDir()); len(n) != 0 {
		t.Errorf("refused uploads were stored: %v", n)
	}
	if f := moduleFiles(t, ts.srv.DataDir()); len(f) != 0 {
		t.Errorf("refused uploads left files: %v", f)
	}
	// The operator's tool cannot be deleted, and still works.
	if r := ts.request("DELETE", "/v1/tools/operator_tool", "", nil); r.status != http.StatusForbidden || r.errorKind(t) != server.KindForbidden {
		t.Errorf("delete operator tool: %d %s", r.status, r.body)
	}
	r := ts.call("operator_tool", `{}`)
	if res := callResult(t, r); !res.OK || string(res.Result) != `"operator"` {
		t.Errorf("operator tool: %d %s", r.status, r.body)
	}
	var list struct{ Tools []server.ToolInfo }
	ts.request("GET", "/v1/tools", "", nil).json(t, &list)
	if len(list.Tools) != 1 || list.Tools[0].Source != server.SourceConfig || list.Tools[0].Granted != nil {
		t.Errorf("list: %+v", list.Tools)
	}
}

// slowReader hides its length so the request is sent chunked.
type slowReader struct {
	data []byte
	off  int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 32<<10)], r.data[r.off:])
	r.off += n
	return n, nil
}

// operatorTool is a tool the operator configured (a Go function).
type operatorTool struct{}

func (operatorTool) Name() string                         { return "operator_tool" }
func (operatorTool) Description() string                  { return "the operator's own tool" }
func (operatorTool) Parameters() json.RawMessage          { return json.RawMessage(`{"type":"object"}`) }
func (operatorTool) Permissions() []permission.Permission { return nil }
func (operatorTool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`"operator"`), nil
}

func TestUploadAskingForNetworkGetsNone(t *testing.T) {
	ts := startServer(t, setup{})
	info := ts.mustUpload(exampleTool(t, "get_weather"), "", http.StatusCreated)
	if !slices.Equal(info.Declared, []string{"network"}) || len(info.Granted) != 0 || info.AllowedHosts != nil {
		t.Errorf("declared/granted: %+v", info)
	}
	if !hasNote(info.Notes, `"network", not granted`) {
		t.Errorf("notes: %q", info.Notes)
	}
	if !info.Runnable {
		t.Errorf("the policy allows network; the tool should be runnable: %+v", info)
	}
	// It runs, but its request is refused by the sandbox.
	r := ts.call("get_weather", weatherArgs("http://127.0.0.1:1"))
	res := callResult(t, r)
	if res.OK || res.Error.Kind != "permission_denied" || r.status != http.StatusForbidden {
		t.Errorf("network call: %d %s", r.status, r.body)
	}
}

// A tool declaring what the policy denies is stored but cannot run.
func TestUploadDeniedByPolicy(t *testing.T) {
	ts := startServer(t, setup{})
	wasm := pack(t, testguest.WAT(t, "testdata/ok.wat"), wasmtools.Manifest{Name: "sh", Description: "wants a shell", Permissions: []permission.Permission{permission.Shell}})
	info := ts.mustUpload(wasm, "", http.StatusCreated)
	if info.Runnable || !strings.Contains(info.Denied, "shell") || !hasNote(info.Notes, "cannot start programs") {
		t.Errorf("upload answer: %+v", info)
	}
	r := ts.call("sh", `{}`)
	if r.status != http.StatusForbidden || r.errorKind(t) != "permission_denied" {
		t.Errorf("call: %d %s", r.status, r.body)
	}
}

func TestUploadGrantFromConfig(t *testing.T) {
	weather := newBlockingWeather(t)
	weather.release()
	host := strings.TrimPrefix(weather.url, "http://")
	ts := startServer(t, setup{opts: server.Options{Uploads: wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true}}})
	info := ts.mustUpload(exampleTool(t, "get_weather"), "", http.StatusCreated)
	if !slices.Equal(info.Granted, []string{"network"}) || !slices.Equal(info.AllowedHosts, []string{host}) || len(info.Notes) != 0 {
		t.Errorf("granted: %+v", info)
	}
	r := ts.call("get_weather", weatherArgs(weather.url))
	if res := callResult(t, r); !res.OK || !strings.Contains(string(res.Result), `"temperature_c":21.5`) {
		t.Errorf("granted network call: %d %s", r.status, r.body)
	}
	// A host that is not granted is still refused: the guest is told, and
	// reports the refusal as its failure.
	r = ts.call("get_weather", weatherArgs("http://127.0.0.1:1"))
	if res := callResult(t, r); res.OK || !strings.Contains(res.Error.Message, "not in the allowed hosts") {
		t.Errorf("call to another host: %d %s", r.status, r.body)
	}
}

func TestReplaceDuringCall(t *testing.T) {
	weather := newBlockingWeather(t)
	host := strings.TrimPrefix(weather.url, "http://")
	ts := startServer(t, setup{opts: server.Options{MaxConcurrentCalls: 1,
		// The call in flight waits while v2 (10 MB) is compiled.
		Uploads: wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true, Limits: runtime.Limits{Timeout: 5 * time.Minute}}}})
	v1 := exampleTool(t, "get_weather")
	old := ts.mustUpload(v1, "", http.StatusCreated)

	// v2: the same code, a manifest without "api_base".
	m := mustInspect(t, v1).Manifest
	m.Version = "2.0.0"
	m.Parameters = json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{"latitude":{"type":"number"},"longitude":{"type":"number"}}}`)
	v2 := pack(t, v1, *m)

	done := make(chan response, 1)
	go func() { done <- ts.call("get_weather", weatherArgs(weather.url)) }()
	weather.waitArrived(t) // the call is in flight, inside the guest

	// The only call slot is taken.
	if r := ts.call("get_weather", weatherArgs(weather.url)); r.status != http.StatusTooManyRequests || r.errorKind(t) != server.KindBusy || r.header.Get("Retry-After") == "" {
		t.Errorf("second call: %d %s", r.status, r.body)
	}
	if r := ts.upload(v2, ""); r.status != http.StatusConflict || r.errorKind(t) != server.KindExists {
		t.Errorf("upload without replace: %d %s", r.status, r.body)
	}
	info := ts.mustUpload(v2, "?replace=true", http.StatusCreated)
	if !info.Replaced || info.Version != "2.0.0" || info.SHA256 == old.SHA256 {
		t.Errorf("replace answer: %+v", info)
	}
	weather.release()
	r := <-done
	if res := callResult(t, r); r.status != http.StatusOK || !res.OK || !strings.Contains(string(res.Result), `"temperature_c":21.5`) {
		t.Fatalf("the call in flight did not finish on the old version: %d %s", r.status, r.body)
	}
	// New calls use v2, whose schema has no api_base.
	r = ts.call("get_weather", weatherArgs(weather.url))
	if r.status != http.StatusBadRequest || r.errorKind(t) != "invalid_arguments" {
		t.Errorf("call after replace: %d %s", r.status, r.body)
	}
	var got server.ToolInfo
	ts.request("GET", "/v1/tools/get_weather", "", nil).json(t, &got)
	if got.SHA256 != info.SHA256 || got.Version != "2.0.0" {
		t.Errorf("after replace: %+v", got)
	}
	// The old module's file is gone; only v2's is stored.
	if f := moduleFiles(t, ts.srv.DataDir()); !slices.Equal(f, []string{info.SHA256 + ".wasm"}) {
		t.Errorf("module files: %v", f)
	}
}

func TestRestartKeepsTools(t *testing.T) {
	dir := t.TempDir()
	rt := testrt.New(t, runtime.Config{})
	ts := startServer(t, setup{dataDir: dir, rt: rt})
	wc := ts.mustUpload(exampleTool(t, "word_count"), "", http.StatusCreated)
	ts.mustUpload(okTool(t, "ok_a"), "", http.StatusCreated)
	ts.mustUpload(okTool(t, "ok_b"), "", http.StatusCreated)
	ts.mustUpload(okTool(t, "ok_gone"), "", http.StatusCreated)
	if r := ts.request("DELETE", "/v1/tools/ok_gone", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d", r.status)
	}
	ts.stop()

	// What a crash can leave: a temporary file, a module the index does
	// not name (stored, then the process died before the index was
	// written); and a module damaged on disk.
	mods := filepath.Join(dir, "modules")
	must(t, os.WriteFile(filepath.Join(mods, ".tmp-12345"), []byte("half a module"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, ".tmp-999"), []byte(`{"tools":`), 0o600))
	orphan := okTool(t, "orphan")
	must(t, os.WriteFile(filepath.Join(mods, hashHex(orphan)+".wasm"), orphan, 0o600))
	var okB server.ToolInfo
	for _, f := range moduleFiles(t, dir) {
		b, _ := os.ReadFile(filepath.Join(mods, f))
		if strings.Contains(string(b), `"ok_b"`) {
			okB.SHA256 = strings.TrimSuffix(f, ".wasm")
			b[len(b)-3] ^= 0xff // flip a byte of ok_b's module
			must(t, os.WriteFile(filepath.Join(mods, f), b, 0o600))
		}
	}

	ts2 := startServer(t, setup{dataDir: dir, rt: rt})
	var list struct{ Tools []server.ToolInfo }
	ts2.request("GET", "/v1/tools", "", nil).json(t, &list)
	var names []string
	for _, ti := range list.Tools {
		names = append(names, ti.Name)
		if ti.Name == "ok_b" && (ti.Error == "" || ti.Runnable) {
			t.Errorf("damaged tool listed as %+v", ti)
		}
		if ti.Name == "word_count" && (ti.SHA256 != wc.SHA256 || ti.Error != "") {
			t.Errorf("restored word_count: %+v", ti)
		}
	}
	if !slices.Equal(names, []string{"ok_a", "ok_b", "word_count"}) {
		t.Errorf("tools after restart: %v", names)
	}
	r := ts2.call("word_count", `{"text":"still here"}`)
	if res := callResult(t, r); !res.OK || !strings.Contains(string(res.Result), `"words":2`) {
		t.Errorf("call after restart: %d %s", r.status, r.body)
	}
	r = ts2.call("ok_b", `{}`)
	if r.status != http.StatusNotFound || !strings.Contains(string(r.body), "could not be restored") {
		t.Errorf("call to the damaged tool: %d %s", r.status, r.body)
	}
	files := moduleFiles(t, dir)
	if contains(files, ".tmp-12345") || contains(files, hashHex(orphan)+".wasm") {
		t.Errorf("crash leftovers not cleaned: %v", files)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-999")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary index not cleaned: %v", err)
	}
	if !contains(files, okB.SHA256+".wasm") {
		t.Errorf("the damaged module was removed (it should stay for the operator): %v", files)
	}
	// A damaged stored tool can be replaced by a good upload, or deleted.
	if info := ts2.mustUpload(okTool(t, "ok_b"), "?replace=true", http.StatusCreated); !info.Replaced {
		t.Errorf("replacing the damaged tool: %+v", info)
	}
	if r := ts2.call("ok_b", `{}`); !callResult(t, r).OK {
		t.Errorf("ok_b after replace: %d %s", r.status, r.body)
	}
	// The damaged file was rewritten (same name, same size, other bytes).
	b, err := os.ReadFile(filepath.Join(mods, okB.SHA256+".wasm"))
	if err != nil || hashHex(b) != okB.SHA256 {
		t.Errorf("the damaged module file was not repaired (%v)", err)
	}
}

func TestDataDirIsLocked(t *testing.T) {
	dir := t.TempDir()
	rt := testrt.New(t, runtime.Config{})
	opts := server.Options{Runtime: rt, Registry: registry.New(), DataDir: dir}
	a, err := server.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(context.Background(), opts); !errors.Is(err, server.ErrDataDirLocked) {
		t.Errorf("second server on the same data dir: %v", err)
	}
	a.Close(context.Background())
	b, err := server.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	b.Close(context.Background())
}

func TestUploadRateLimitPerToken(t *testing.T) {
	const a, b = "token-a-0123456789abcdef", "token-b-0123456789abcdef"
	ts := startServer(t, setup{opts: server.Options{Tokens: []string{a, b}, UploadsPerMinute: 2}})
	garbage := []byte("not a module")
	for i := 0; i < 2; i++ {
		if r := ts.requestAs(a, "POST", "/v1/tools", "application/wasm", garbage); r.status != http.StatusBadRequest {
			t.Fatalf("upload %d: %d %s", i, r.status, r.body)
		}
	}
	r := ts.requestAs(a, "POST", "/v1/tools", "application/wasm", okTool(t, "late"))
	if r.status != http.StatusTooManyRequests || r.errorKind(t) != server.KindRateLimited || r.header.Get("Retry-After") == "" {
		t.Errorf("third upload: %d %v %s", r.status, r.header, r.body)
	}
	// Another token has its own budget; calls are not rate limited.
	if r := ts.requestAs(b, "POST", "/v1/tools", "application/wasm", okTool(t, "other")); r.status != http.StatusCreated {
		t.Errorf("other token: %d %s", r.status, r.body)
	}
	for i := 0; i < 5; i++ {
		if r := ts.requestAs(a, "POST", "/v1/tools/other/call", "application/json", nil); r.status != http.StatusOK {
			t.Errorf("call %d: %d %s", i, r.status, r.body)
		}
	}
	if n := storedTools(t, ts.srv.DataDir()); !slices.Equal(n, []string{"other"}) {
		t.Errorf("stored: %v", n)
	}
}

func TestStoreLimits(t *testing.T) {
	ts := startServer(t, setup{opts: server.Options{MaxTools: 2}})
	ts.mustUpload(okTool(t, "one"), "", http.StatusCreated)
	ts.mustUpload(okTool(t, "two"), "", http.StatusCreated)
	if r := ts.upload(okTool(t, "three"), ""); r.status != http.StatusInsufficientStorage || r.errorKind(t) != server.KindTooManyTools {
		t.Errorf("third tool: %d %s", r.status, r.body)
	}
	// Replacing a stored tool does not add one.
	two := pack(t, testguest.WAT(t, "testdata/ok.wat"), wasmtools.Manifest{Name: "two", Version: "2", Description: "answers ok"})
	ts.mustUpload(two, "?replace=true", http.StatusCreated)

	small := okTool(t, "small")
	ts2 := startServer(t, setup{opts: server.Options{MaxStoreBytes: int64(len(small)) + 10}})
	ts2.mustUpload(small, "", http.StatusCreated)
	if r := ts2.upload(okTool(t, "other"), ""); r.status != http.StatusInsufficientStorage || r.errorKind(t) != server.KindTooManyTools {
		t.Errorf("over the byte budget: %d %s", r.status, r.body)
	}
}

func TestBodyLimitOnCalls(t *testing.T) {
	ts := startServer(t, setup{opts: server.Options{MaxBody: 1024, Loop: &loop.Config{Provider: testprovider.Chat(t, "http://127.0.0.1:1/v1")}}})
	ts.mustUpload(okTool(t, "ok_tool"), "", http.StatusCreated)
	big := `{"x":"` + strings.Repeat("a", 2000) + `"}`
	if r := ts.call("ok_tool", big); r.status != http.StatusRequestEntityTooLarge || r.errorKind(t) != server.KindBodyTooLarge {
		t.Errorf("big arguments: %d %s", r.status, r.body)
	}
	if r := ts.request("POST", "/v1/runs", "application/json", []byte(`{"prompt":"`+strings.Repeat("a", 2000)+`"}`)); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("big run: %d %s", r.status, r.body)
	}
}

// A call may last longer than the read and write timeouts: they bound the
// client's sending and reading, not the server's work.
func TestCallLongerThanTimeouts(t *testing.T) {
	weather := newBlockingWeather(t)
	host := strings.TrimPrefix(weather.url, "http://")
	// The tool is uploaded to a first server with the default timeouts
	// (its 5 MB body may take more than a second to arrive on a loaded
	// machine, under the race detector), then served by one with 1 s
	// timeouts from the same data directory.
	grant := wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true}
	dir := t.TempDir()
	first := startServer(t, setup{opts: server.Options{Uploads: grant}, dataDir: dir})
	first.mustUpload(exampleTool(t, "get_weather"), "", http.StatusCreated)
	first.stop()
	ts := startServer(t, setup{opts: server.Options{WriteTimeout: time.Second, ReadTimeout: time.Second, Uploads: grant},
		dataDir: dir, rt: first.rt})
	done := make(chan response, 1)
	go func() { done <- ts.call("get_weather", weatherArgs(weather.url)) }()
	weather.waitArrived(t)
	time.Sleep(1500 * time.Millisecond) // past both timeouts
	weather.release()
	r := <-done
	if res := callResult(t, r); r.status != http.StatusOK || !res.OK {
		t.Errorf("slow call: %d %s", r.status, r.body)
	}
}

// Slow clients cannot hold a connection: a request whose headers or body
// never finish is cut off by the read timeout; an upload cut off midway
// stores nothing.
func TestSlowAndVanishingClients(t *testing.T) {
	ts := startServer(t, setup{opts: server.Options{ReadTimeout: time.Second}})
	addr := strings.TrimPrefix(ts.url, "http://")
	wasm := okTool(t, "partial")
	for _, c := range []struct{ name, send string }{
		{"headers never end", "POST /v1/tools HTTP/1.1\r\nHost: x\r\nContent-Type: application/wasm\r\n"},
		{"body never ends", fmt.Sprintf("POST /v1/tools HTTP/1.1\r\nHost: x\r\nContent-Type: application/wasm\r\nContent-Length: %d\r\n\r\n%s", len(wasm), wasm[:len(wasm)/2])},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, c.send); err != nil {
				t.Fatal(err)
			}
			// The server closes the connection (maybe after an error
			// answer); a generous bound guards against hanging forever.
			conn.SetReadDeadline(time.Now().Add(60 * time.Second))
			_, err = io.Copy(io.Discard, conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server kept the connection of a stalled client open")
			}
		})
	}
	// A client that vanishes mid-upload.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/tools HTTP/1.1\r\nHost: x\r\nContent-Type: application/wasm\r\nContent-Length: %d\r\n\r\n", len(wasm))
	conn.Write(wasm[:len(wasm)-10])
	conn.Close()
	// The server still works, and stored nothing.
	if r := ts.request("GET", "/v1/tools", "", nil); r.status != http.StatusOK || strings.Contains(string(r.body), "partial") {
		t.Errorf("after a vanished upload: %d %s", r.status, r.body)
	}
	ts.mustUpload(okTool(t, "whole"), "", http.StatusCreated)
	if n := storedTools(t, ts.srv.DataDir()); !slices.Equal(n, []string{"whole"}) {
		t.Errorf("stored: %v", n)
	}
}

func TestGracefulShutdownLetsCallsFinish(t *testing.T) {
	weather := newBlockingWeather(t)
	host := strings.TrimPrefix(weather.url, "http://")
	ts := startServer(t, setup{opts: server.Options{Uploads: wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true}}})
	ts.mustUpload(exampleTool(t, "get_weather"), "", http.StatusCreated)
	done := make(chan response, 1)
	go func() { done <- ts.call("get_weather", weatherArgs(weather.url)) }()
	weather.waitArrived(t)

	stopped := make(chan struct{})
	go func() { ts.stop(); close(stopped) }()
	// New connections are refused once the listener is closed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener stayed open after shutdown began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-stopped:
		t.Fatal("Serve returned while a call was in flight")
	default:
	}
	weather.release()
	r := <-done
	if res := callResult(t, r); r.status != http.StatusOK || !res.OK {
		t.Errorf("the call in flight during shutdown: %d %s", r.status, r.body)
	}
	<-stopped
}

func TestShutdownDeadlineCancelsCalls(t *testing.T) {
	weather := newBlockingWeather(t) // never released
	host := strings.TrimPrefix(weather.url, "http://")
	ts := startServer(t, setup{opts: server.Options{
		ShutdownTimeout: 200 * time.Millisecond,
		Uploads:         wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true},
	}})
	ts.mustUpload(exampleTool(t, "get_weather"), "", http.StatusCreated)
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", ts.url+"/v1/tools/get_weather/call", strings.NewReader(weatherArgs(weather.url)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	weather.waitArrived(t)
	ts.stop() // returns after the deadline, having cancelled the call
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the call outlived the shutdown deadline")
	}
}

func TestConcurrentUploadsAndCalls(t *testing.T) {
	ts := startServer(t, setup{opts: server.Options{
		MaxConcurrentUploads: 64,
		MaxConcurrentCalls:   64, UploadsPerMinute: 1000,
	}})
	ts.mustUpload(exampleTool(t, "word_count"), "", http.StatusCreated)
	base := testguest.WAT(t, "testdata/ok.wat")
	// Two versions of a shared tool, replaced back and forth.
	shared := []wasmtools.Manifest{{Name: "shared", Version: "1", Description: "one"}, {Name: "shared", Version: "2", Description: "two"}}
	sharedWasm := [][]byte{pack(t, base, shared[0]), pack(t, base, shared[1])}
	ts.mustUpload(sharedWasm[0], "", http.StatusCreated)

	var names []string
	var tools [][]byte
	for i := 0; i < 8; i++ {
		names = append(names, "tool_"+string(rune('a'+i)))
		tools = append(tools, pack(t, base, wasmtools.Manifest{Name: names[i], Description: "ok"}))
	}
	var wg sync.WaitGroup
	errs := make(chan string, 256)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := names[i]
			wasm := tools[i]
			if r := ts.upload(wasm, ""); r.status != http.StatusCreated {
				errs <- "upload " + name + ": " + string(r.body)
				return
			}
			for j := 0; j < 3; j++ {
				if r := ts.call(name, `{}`); !r.ok() {
					errs <- "call " + name + ": " + string(r.body)
				}
				if r := ts.call("shared", `{}`); !r.ok() {
					errs <- "call shared: " + string(r.body)
				}
			}
			if r := ts.upload(sharedWasm[i%2], "?replace=true"); r.status != http.StatusCreated && r.status != http.StatusOK {
				errs <- "replace shared: " + string(r.body)
			}
			if i%2 == 0 {
				if r := ts.request("DELETE", "/v1/tools/"+name, "", nil); r.status != http.StatusNoContent {
					errs <- "delete " + name + ": " + string(r.body)
				}
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 3; j++ {
				if r := ts.call("word_count", `{"text":"a b"}`); !r.ok() {
					errs <- "word_count: " + string(r.body)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// The index, the registry and the files agree.
	want := []string{"shared", "tool_b", "tool_d", "tool_f", "tool_h", "word_count"}
	stored := storedTools(t, ts.srv.DataDir())
	slices.Sort(stored)
	if !slices.Equal(stored, want) {
		t.Errorf("index: %v, want %v", stored, want)
	}
	var list struct{ Tools []server.ToolInfo }
	ts.request("GET", "/v1/tools", "", nil).json(t, &list)
	var listed []string
	shas := map[string]bool{}
	for _, ti := range list.Tools {
		listed = append(listed, ti.Name)
		shas[ti.SHA256+".wasm"] = true
	}
	if !slices.Equal(listed, want) {
		t.Errorf("listed: %v, want %v", listed, want)
	}
	for _, f := range moduleFiles(t, ts.srv.DataDir()) {
		if !shas[f] {
			t.Errorf("module file %s belongs to no tool", f)
		}
	}
	if len(moduleFiles(t, ts.srv.DataDir())) != len(want) {
		t.Errorf("module files: %v", moduleFiles(t, ts.srv.DataDir()))
	}
}

func mustInspect(t *testing.T, wasm []byte) wasmtools.Info {
	t.Helper()
	in, err := wasmtools.Inspect(wasm)
	if err != nil || in.Manifest == nil {
		t.Fatalf("inspect: %v", err)
	}
	return in
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
