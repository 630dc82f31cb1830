package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// Parameters schemas written to make validation exponential (issue 14,
// item 1). Validation runs in the host before the sandbox: before the fix
// anyOf at depth 26 with a failing value passed 1 GiB RSS in seconds and
// allOf at depth 40 with a valid value never finished.

// chainSchema is properties.x -> $defs d0, each di a kw of two $refs to
// d(i+1), the last {"type":"string"}: 1.7 KiB for 26 levels.
func chainSchema(kw string, n int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"x":{"$ref":"#/$defs/d0"}},"$defs":{`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `"d%d":{"%s":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, kw, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, n)
	return json.RawMessage(b.String())
}

// levelBomb costs a few visits per value but doubles them at each level
// of the arguments (both halves of the allOf descend into "a", even for a valid value); nestedA is its
// bomb. It passes registration: the run-time budget stops it.
const levelBomb = `{"type":"object","allOf":[{"properties":{"a":{"$ref":"#"}}},{"properties":{"a":{"$ref":"#"}}}]}`

func nestedA(depth int) string {
	return strings.Repeat(`{"a":`, depth) + `{}` + strings.Repeat(`}`, depth)
}

// withParameters is the attacker guest with a manifest carrying schema,
// written as raw bytes: Pack would refuse it.
func withParameters(t testing.TB, name string, schema json.RawMessage) []byte {
	t.Helper()
	m, err := json.Marshal(map[string]any{"name": name, "description": "a costly schema", "parameters": schema})
	hostile.Must(t, err)
	return hostile.WithSection(hostile.HostileWasm(t), "agrun.manifest", m)
}

// schemaTool is a registry.Tool with the given schema, counting its runs.
type schemaTool struct {
	name   string
	schema json.RawMessage
	runs   int
}

func (s *schemaTool) Name() string                         { return s.name }
func (s *schemaTool) Description() string                  { return "a costly schema" }
func (s *schemaTool) Parameters() json.RawMessage          { return s.schema }
func (s *schemaTool) Permissions() []permission.Permission { return nil }
func (s *schemaTool) Execute(context.Context, json.RawMessage) (json.RawMessage, error) {
	s.runs++
	return json.RawMessage(`"ran"`), nil
}

// checkCostRefusal asserts err is the refusal of a too costly schema.
func checkCostRefusal(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, registry.ErrInvalidSchema) {
		t.Fatalf("err = %v, want ErrInvalidSchema", err)
	}
	if want := fmt.Sprintf("more than %d subschemas", registry.MaxSchemaCost); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the cost (%q)", err, want)
	}
	hostile.CheckModelText(t, err.Error())
}

// TestSchemaBombs: the schemas are refused when a tool is loaded
// or registered, naming the cost; a chain under the cap validates at once;
// a schema whose cost grows with the arguments' depth is stopped by the
// run-time budget before the tool runs. The host keeps its memory bound.
func TestSchemaBombs(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	ctx := context.Background()
	for _, c := range []struct {
		kw string
		n  int
	}{{"anyOf", 26}, {"allOf", 40}} {
		t.Run(fmt.Sprintf("%s %d", c.kw, c.n), func(t *testing.T) {
			before := f.Snapshot(t)
			schema := chainSchema(c.kw, c.n)
			_, err := wasmtools.Load(ctx, f.Rt, withParameters(t, "bomb", schema), wasmtools.Grant{})
			checkCostRefusal(t, err)
			tool := &schemaTool{name: "bomb", schema: schema}
			checkCostRefusal(t, f.Reg.Register(tool))
			if _, ok := f.Reg.Get("bomb"); ok {
				t.Error("the tool was registered")
			}
			f.After(t, before, hostile.Outcome{}, "")
		})
	}
	t.Run("under the cap", func(t *testing.T) {
		before := f.Snapshot(t)
		f.Register(t, f.Load(t, withParameters(t, "chain", chainSchema("anyOf", 11)), wasmtools.Grant{Limits: runtime.Limits{Timeout: 5 * time.Second}}))
		defer f.Reg.Unregister("chain")
		// A failing value walks every path: invalid_arguments, the guest never runs.
		got := hostile.Inv(f.Reg.Invoke(ctx, "chain", json.RawMessage(`{"x":1}`)))
		if got.Err != nil && strings.Contains(got.Err.Error(), registry.ErrValidationBudget.Error()) {
			t.Errorf("a value under the cap hit the budget: %v", got.Err)
		}
		f.After(t, before, got, registry.InvalidArguments)
		// A valid value passes and the guest runs.
		args := hostile.Emit(t, `{"ok":true}`, "", 0)
		args["x"] = "s"
		got = hostile.Inv(f.Reg.Invoke(ctx, "chain", hostile.ArgsJSON(t, args)))
		f.After(t, before, got, "")
	})
	t.Run("cost grows with the arguments", func(t *testing.T) {
		before := f.Snapshot(t)
		f.Register(t, f.Load(t, withParameters(t, "levels", json.RawMessage(levelBomb)), wasmtools.Grant{}))
		defer f.Reg.Unregister("levels")
		tool := &schemaTool{name: "levels_go", schema: json.RawMessage(levelBomb)}
		f.Register(t, tool)
		defer f.Reg.Unregister("levels_go")
		for _, name := range []string{"levels", "levels_go"} {
			got := hostile.Inv(f.Reg.Invoke(ctx, name, json.RawMessage(nestedA(60))))
			if !errors.Is(got.Err, registry.ErrValidationBudget) {
				t.Errorf("%s: %v, want the validation budget", name, got.Err)
			}
			f.After(t, before, got, registry.InvalidArguments)
		}
		if tool.runs != 0 {
			t.Error("the tool ran")
		}
	})
}

// TestSchemaBombsMCP: an MCP server's tools take the same path: the
// client leaves out the tools whose schema is refused, and a call of one
// whose cost grows with the arguments is stopped before it reaches the
// server.
func TestSchemaBombsMCP(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	bin := hostile.McpServer(t, "schemabomb")
	before := f.Snapshot(t)
	cl, err := mcp.NewClient("bombs", mcp.Stdio{Command: bin}, &mcp.ClientOptions{Logger: hostile.QuietLogger})
	hostile.Must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hostile.Must(t, cl.Connect(ctx))
	hostile.Must(t, cl.Sync(f.Reg))
	for _, name := range []string{"anyof", "allof"} {
		if _, ok := f.Reg.Get(mcp.ToolName("bombs", name)); ok {
			t.Errorf("tool %s was registered", name)
		}
	}
	got := hostile.Inv(f.Reg.Invoke(ctx, mcp.ToolName("bombs", "fine"), json.RawMessage(`{"x":"s"}`)))
	hostile.CheckKind(t, got.Err, "")
	got = hostile.Inv(f.Reg.Invoke(ctx, mcp.ToolName("bombs", "levels"), json.RawMessage(nestedA(60))))
	if !errors.Is(got.Err, registry.ErrValidationBudget) {
		t.Errorf("levels: %v, want the validation budget", got.Err)
	}
	hostile.Must(t, cl.Close(ctx))
	for _, name := range f.Reg.List() {
		if strings.HasPrefix(name, "bombs__") {
			f.Reg.Unregister(name)
		}
	}
	f.After(t, before, got, registry.InvalidArguments)
}

// TestSchemaBombsServe: through `agrun serve` (the built binary), which
// grants uploads nothing and needs no grant to take one: the issue's
// uploads are refused with a 4xx naming the cost, and a call of an upload
// whose cost grows with the arguments is answered — invalid_arguments —
// well within call_timeout, leaving the server serving.
func TestSchemaBombsServe(t *testing.T) {
	base := startSchemaServe(t)
	client := &http.Client{Timeout: time.Minute}
	type answer struct {
		OK    bool `json:"ok"`
		Error struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
	}
	post := func(path, ctype string, body []byte) (int, answer) {
		t.Helper()
		resp, err := client.Post(base+path, ctype, strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		hostile.CheckTerminalSafe(t, "POST "+path+" answer", raw)
		var a answer
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("POST %s: answer is not JSON: %q", path, hostile.Truncate(string(raw), 300))
		}
		return resp.StatusCode, a
	}
	for _, c := range []struct {
		kw string
		n  int
	}{{"anyOf", 26}, {"allOf", 40}} {
		code, a := post("/v1/tools", "application/wasm", withParameters(t, "bomb", chainSchema(c.kw, c.n)))
		if code/100 != 4 || a.OK || a.Error.Kind != "invalid_manifest" || !strings.Contains(a.Error.Message, fmt.Sprintf("more than %d subschemas", registry.MaxSchemaCost)) {
			t.Errorf("upload %s %d: %d %+v; want a 4xx invalid_manifest naming the cost", c.kw, c.n, code, a)
		}
	}
	if code, a := post("/v1/tools", "application/wasm", withParameters(t, "levels", json.RawMessage(levelBomb))); code/100 != 2 {
		t.Fatalf("upload levels: %d %+v", code, a)
	}
	done := make(chan answer, 1)
	go func() {
		_, a := post("/v1/tools/levels/call", "application/json", []byte(nestedA(60)))
		done <- a
	}()
	select {
	case a := <-done:
		if a.OK || a.Error.Kind != "invalid_arguments" || !strings.Contains(a.Error.Message, "validation budget") {
			t.Errorf("call levels: %+v; want invalid_arguments naming the validation budget", a)
		}
	case <-time.After(30 * time.Second): // call_timeout is 60s; before the fix: never
		t.Fatal("the call was not answered")
	}
	if code, a := post("/v1/tools/word_count/call", "application/json", []byte(hostile.WordCountArgs)); code != 200 || !a.OK {
		t.Errorf("word_count after the attacks: %d %+v", code, a)
	}
}

// startSchemaServe starts `agrun serve` on a free loopback port with a call
// timeout of 60s and returns its base URL; the process is killed at the
// end of the test.
func startSchemaServe(t *testing.T) string {
	t.Helper()
	e := hostile.NewCLIEnv(t, "", fmt.Sprintf(`
[serve]
data_dir = %q
call_timeout = "60s"
`, filepath.Join(t.TempDir(), "serve")))
	base, _ := startServe(t, e, nil)
	return base
}
