package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
)

// memShared is a SharedStore in memory, for several Servers of one test
// (cmd/agrun's adapter over the cluster stores is tested end to end with
// S3 there). fail makes every method fail, as an unreachable store does.
type memShared struct {
	mu      sync.Mutex
	modules map[string][]byte
	tools   map[string]server.StoredTool
	fail    atomic.Bool
	hang    atomic.Bool  // Tool and Tools wait for their context
	reads   atomic.Int64 // Tool calls
}

func newMemShared() *memShared {
	return &memShared{modules: map[string][]byte{}, tools: map[string]server.StoredTool{}}
}

var errDown = errors.New("store unreachable")

func (m *memShared) PutModule(_ context.Context, wasm []byte) (string, error) {
	if m.fail.Load() {
		return "", errDown
	}
	sum := sha256.Sum256(wasm)
	d := hex.EncodeToString(sum[:])
	m.mu.Lock()
	defer m.mu.Unlock()
	m.modules[d] = append([]byte(nil), wasm...)
	return d, nil
}

func (m *memShared) Module(_ context.Context, sha string) ([]byte, error) {
	if m.fail.Load() {
		return nil, errDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.modules[sha]
	if !ok {
		return nil, fmt.Errorf("module %s: not stored", sha)
	}
	return b, nil
}

func (m *memShared) PutTool(_ context.Context, name string, t server.StoredTool) error {
	if m.fail.Load() {
		return errDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tools[name] = t
	return nil
}

func (m *memShared) Tool(ctx context.Context, name string) (server.StoredTool, error) {
	m.reads.Add(1)
	if m.hang.Load() {
		<-ctx.Done()
		return server.StoredTool{}, ctx.Err()
	}
	if m.fail.Load() {
		return server.StoredTool{}, errDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tools[name]
	if !ok {
		return t, fmt.Errorf("%w: %s", server.ErrNoStoredTool, name)
	}
	return t, nil
}

func (m *memShared) Tools(ctx context.Context) (map[string]server.StoredTool, error) {
	if m.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if m.fail.Load() {
		return nil, errDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]server.StoredTool, len(m.tools))
	for k, v := range m.tools {
		out[k] = v
	}
	return out, nil
}

func (m *memShared) DeleteTool(_ context.Context, name string) error {
	if m.fail.Load() {
		return errDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tools[name]; !ok {
		return fmt.Errorf("%w: %s", server.ErrNoStoredTool, name)
	}
	delete(m.tools, name)
	return nil
}

// replicas starts n Servers sharing store, each with its own runtime,
// all given the same data directory (cluster mode must not lock it).
func replicas(t *testing.T, n int, store server.SharedStore, opts server.Options) ([]*testServer, string) {
	t.Helper()
	dir := t.TempDir()
	var out []*testServer
	for range n {
		o := opts
		o.SharedStore = store
		out = append(out, startServer(t, setup{opts: o, dataDir: dir, rt: testrt.New(t, runtime.Config{})}))
	}
	return out, dir
}

func listNames(t *testing.T, ts *testServer) map[string]server.ToolInfo {
	t.Helper()
	r := ts.request("GET", "/v1/tools", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var list struct{ Tools []server.ToolInfo }
	r.json(t, &list)
	out := map[string]server.ToolInfo{}
	for _, ti := range list.Tools {
		out[ti.Name] = ti
	}
	return out
}

// TestSharedStoreReplicas: two Servers on one SharedStore see each
// other's uploads, replacements and deletions at their next request,
// and neither touches (or locks) the data directory.
func TestSharedStoreReplicas(t *testing.T) {
	store := newMemShared()
	rs, dir := replicas(t, 2, store, server.Options{})
	a, b := rs[0], rs[1]
	wc := exampleTool(t, "word_count")

	info := a.mustUpload(wc, "", http.StatusCreated)
	if info.SHA256 != hashHex(wc) || info.Size != int64(len(wc)) || info.Uploaded == nil {
		t.Errorf("upload answer: %+v", info)
	}
	if got := store.tools["word_count"]; got.SHA256 != hashHex(wc) {
		t.Errorf("the shared record after the upload: %+v", got)
	}

	// B lists and calls what A uploaded.
	got := listNames(t, b)
	if ti, ok := got["word_count"]; !ok || ti.Source != server.SourceUpload || ti.SHA256 != hashHex(wc) || ti.Size != int64(len(wc)) {
		t.Fatalf("B's list after A's upload: %+v", got)
	}
	r := b.call("word_count", `{"text":"one two three"}`)
	res := callResult(t, r)
	var counts struct{ Words int }
	if r.status != http.StatusOK || !res.OK || json.Unmarshal(res.Result, &counts) != nil || counts.Words != 3 {
		t.Fatalf("call through B: %d %s", r.status, r.body)
	}
	r = b.request("GET", "/v1/tools/word_count", "", nil)
	var one server.ToolInfo
	r.json(t, &one)
	if r.status != http.StatusOK || one.SHA256 != hashHex(wc) || len(one.Parameters) == 0 {
		t.Errorf("get through B: %d %s", r.status, r.body)
	}
	// The same module through B: unchanged; another without replace: exists.
	if again := b.mustUpload(wc, "", http.StatusOK); !again.Unchanged {
		t.Errorf("re-upload through B: %+v", again)
	}
	other := okTool(t, "word_count")
	if r := b.upload(other, ""); r.status != http.StatusConflict || r.errorKind(t) != server.KindExists {
		t.Errorf("upload of another module under the name without replace: %d %s", r.status, r.body)
	}

	// Replace through B; A answers with the new module at its next call.
	if info := b.mustUpload(other, "?replace=true", http.StatusCreated); !info.Replaced || info.SHA256 != hashHex(other) {
		t.Errorf("replace through B: %+v", info)
	}
	r = a.call("word_count", `{"text":"x"}`)
	if res := callResult(t, r); r.status != http.StatusOK || !res.OK || string(res.Result) != `{"ok":true}` {
		t.Fatalf("call through A after B replaced the tool: %d %s", r.status, r.body)
	}

	// Delete through A; B answers 404 at once.
	if r := a.request("DELETE", "/v1/tools/word_count", "", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete through A: %d %s", r.status, r.body)
	}
	if r := b.call("word_count", `{"text":"x"}`); r.status != http.StatusNotFound || r.errorKind(t) != "not_found" {
		t.Errorf("call through B after A deleted: %d %s", r.status, r.body)
	}
	if r := b.request("GET", "/v1/tools/word_count", "", nil); r.status != http.StatusNotFound {
		t.Errorf("get through B after delete: %d %s", r.status, r.body)
	}
	if r := b.request("DELETE", "/v1/tools/word_count", "", nil); r.status != http.StatusNotFound || r.errorKind(t) != "not_found" {
		t.Errorf("second delete through B: %d %s", r.status, r.body)
	}
	if got := listNames(t, a); len(got) != 0 {
		t.Errorf("A's list after delete: %+v", got)
	}

	// Nothing was written to the data directory: no lock, no index.
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Errorf("the data directory in cluster mode holds %v (%v)", ents, err)
	}
	if a.srv.DataDir() != "" {
		t.Errorf("DataDir() in cluster mode = %q, want \"\"", a.srv.DataDir())
	}
}

// TestSharedStoreRecordReadPerCall: every call reads its tool's record
// (no cache), and a module is compiled once per replica: a second
// replica's upload is seen on the very next call.
func TestSharedStoreRecordReadPerCall(t *testing.T) {
	store := newMemShared()
	rs, _ := replicas(t, 2, store, server.Options{})
	a, b := rs[0], rs[1]
	a.mustUpload(okTool(t, "ping"), "", http.StatusCreated)
	before := store.reads.Load()
	for range 3 {
		if r := b.call("ping", `{}`); !r.ok() {
			t.Fatalf("call: %d %s", r.status, r.body)
		}
	}
	if n := store.reads.Load() - before; n != 3 {
		t.Errorf("3 calls read the record %d times, want 3", n)
	}
	b.mustUpload(exampleTool(t, "word_count"), "", http.StatusCreated)
	if r := a.call("word_count", `{"text":"a b"}`); !r.ok() || !strings.Contains(string(r.body), `"words":2`) {
		t.Errorf("A's first call of B's upload: %d %s", r.status, r.body)
	}
}

// TestSharedStoreLimitsAndErrors: the limits count every replica's
// uploads; operator tools stay protected; a store that fails answers
// 502 internal without touching the tools; a record whose module does
// not load is listed with its error and called not_found; runs are 501.
func TestSharedStoreLimitsAndErrors(t *testing.T) {
	store := newMemShared()
	rs, _ := replicas(t, 2, store, server.Options{MaxTools: 2})
	a, b := rs[0], rs[1]
	a.mustUpload(okTool(t, "one"), "", http.StatusCreated)
	b.mustUpload(okTool(t, "two"), "", http.StatusCreated)
	if r := a.upload(okTool(t, "three"), ""); r.status != http.StatusInsufficientStorage || r.errorKind(t) != server.KindTooManyTools {
		t.Errorf("a third tool through A when B stored the second: %d %s", r.status, r.body)
	}

	if r := a.request("POST", "/v1/runs", "application/json", []byte(`{"prompt":"hi"}`)); r.status != http.StatusNotImplemented || r.errorKind(t) != server.KindNotSupported {
		t.Errorf("POST /v1/runs in cluster mode: %d %s", r.status, r.body)
	}
	if r := a.request("GET", "/v1/runs/x", "", nil); r.status != http.StatusNotImplemented || r.errorKind(t) != server.KindNotSupported {
		t.Errorf("GET /v1/runs/x in cluster mode: %d %s", r.status, r.body)
	}

	store.fail.Store(true)
	for _, r := range []response{a.call("one", `{}`), a.request("GET", "/v1/tools", "", nil), a.upload(okTool(t, "four"), ""), a.request("DELETE", "/v1/tools/one", "", nil)} {
		if r.status != http.StatusBadGateway || r.errorKind(t) != server.KindInternal || !strings.Contains(string(r.body), "shared tool store") {
			t.Errorf("with the store down: %d %s", r.status, r.body)
		}
	}
	store.fail.Store(false)
	if r := a.call("one", `{}`); !r.ok() {
		t.Errorf("call once the store is back: %d %s", r.status, r.body)
	}

	// A record naming a module that is another tool's.
	store.mu.Lock()
	store.tools["liar"] = store.tools["one"]
	store.mu.Unlock()
	if r := b.call("liar", `{}`); r.status != http.StatusNotFound || !strings.Contains(string(r.body), `named \"one\"`) {
		t.Errorf("call of a record whose module is named otherwise: %d %s", r.status, r.body)
	}
	if ti := listNames(t, b)["liar"]; !strings.Contains(ti.Error, `named "one"`) {
		t.Errorf("list entry of the broken record: %+v", ti)
	}
	// A record naming a module the store does not have.
	store.mu.Lock()
	store.tools["ghost"] = server.StoredTool{SHA256: strings.Repeat("0", 64), Size: 1}
	store.mu.Unlock()
	if r := a.call("ghost", `{}`); r.status != http.StatusBadGateway || r.errorKind(t) != server.KindInternal || !strings.Contains(string(r.body), "not stored") {
		t.Errorf("call of a record without its module: %d %s", r.status, r.body)
	}
	// A record replaced by one whose module does not load: the module
	// the replica ran before under the name does not answer any more.
	if r := a.call("one", `{}`); !r.ok() {
		t.Fatalf("call of one: %d %s", r.status, r.body)
	}
	store.mu.Lock()
	store.tools["one"] = store.tools["two"]
	store.mu.Unlock()
	for range 2 { // the second from the memory of the failure
		if r := a.call("one", `{}`); r.status != http.StatusNotFound || !strings.Contains(string(r.body), `named \"two\"`) {
			t.Errorf("call of one once its record names two's module: %d %s", r.status, r.body)
		}
	}
}

// TestSharedStoreOperatorTools: an upload may not take an operator
// tool's name, nor delete it, in cluster mode as on one machine; a name
// stored through a replica without that tool stays the operator's tool
// on the replica that has it.
func TestSharedStoreOperatorTools(t *testing.T) {
	rs, _ := replicas(t, 2, newMemShared(), server.Options{})
	a, other := rs[0], rs[1]
	must(t, a.reg.Register(operatorTool{}))
	other.mustUpload(okTool(t, "operator_tool"), "", http.StatusCreated)
	if r := other.call("operator_tool", `{}`); !r.ok() || !strings.Contains(string(r.body), `{"ok":true}`) {
		t.Errorf("the upload through the replica without the operator tool: %d %s", r.status, r.body)
	}
	if ti := listNames(t, a)["operator_tool"]; ti.Source != server.SourceConfig || ti.Error != "" {
		t.Errorf("the operator's replica lists %+v, want its own tool", ti)
	}
	if r := a.call("operator_tool", `{}`); !r.ok() || !strings.Contains(string(r.body), `"operator"`) {
		t.Errorf("the operator's replica calls: %d %s", r.status, r.body)
	}
	must(t, other.request("DELETE", "/v1/tools/operator_tool", "", nil).errIfNot(http.StatusNoContent))
	if r := a.upload(okTool(t, "operator_tool"), ""); r.status != http.StatusForbidden || r.errorKind(t) != server.KindForbidden {
		t.Errorf("upload over an operator tool: %d %s", r.status, r.body)
	}
	if r := a.request("DELETE", "/v1/tools/operator_tool", "", nil); r.status != http.StatusForbidden {
		t.Errorf("delete of an operator tool: %d %s", r.status, r.body)
	}
	if r := a.call("operator_tool", `{}`); !r.ok() {
		t.Errorf("call of the operator tool: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(a.srv.DataDir(), "lock")); err == nil {
		t.Error("a lock file in cluster mode")
	}
}

// errIfNot returns an error unless r has status.
func (r response) errIfNot(status int) error {
	if r.status != status {
		return fmt.Errorf("status %d, want %d: %s", r.status, status, r.body)
	}
	return nil
}

// TestSharedStoreHangs: a store that does not answer holds a request for
// call_timeout at most, then it is 503 unavailable.
func TestSharedStoreHangs(t *testing.T) {
	store := newMemShared()
	rs, _ := replicas(t, 1, store, server.Options{CallTimeout: 300 * time.Millisecond})
	a := rs[0]
	a.mustUpload(okTool(t, "ping"), "", http.StatusCreated)
	store.hang.Store(true)
	for _, req := range []func() response{
		func() response { return a.call("ping", `{}`) },
		func() response { return a.request("GET", "/v1/tools", "", nil) },
		func() response { return a.request("GET", "/v1/tools/ping", "", nil) },
		func() response { return a.upload(okTool(t, "pong"), "") },
	} {
		start := time.Now()
		r := req()
		if r.status != http.StatusServiceUnavailable || r.errorKind(t) != server.KindUnavailable || time.Since(start) > 10*time.Second {
			t.Errorf("with the store hanging: %d %s after %v", r.status, r.body, time.Since(start))
		}
	}
}
