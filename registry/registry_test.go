package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// fnTool is a Tool made of a function, counting its executions.
type fnTool struct {
	name   string
	schema string
	perms  []permission.Permission
	fn     func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
	calls  atomic.Int64
}

func (f *fnTool) Name() string                         { return f.name }
func (f *fnTool) Description() string                  { return "test tool " + f.name }
func (f *fnTool) Parameters() json.RawMessage          { return json.RawMessage(f.schema) }
func (f *fnTool) Permissions() []permission.Permission { return f.perms }
func (f *fnTool) Execute(ctx context.Context, a json.RawMessage) (json.RawMessage, error) {
	f.calls.Add(1)
	if f.fn == nil {
		return a, nil
	}
	return f.fn(ctx, a)
}

const citySchema = `{"type":"object","properties":{"city":{"type":"string","minLength":1},"days":{"type":"integer","minimum":1,"maximum":16}},"required":["city"],"additionalProperties":false}`

func echo(name string) *fnTool { return &fnTool{name: name, schema: `{"type":"object"}`} }

func TestRegisterDuplicate(t *testing.T) {
	r := registry.New()
	if err := r.Register(echo("a")); err != nil {
		t.Fatal(err)
	}
	err := r.Register(echo("a"))
	if !errors.Is(err, registry.ErrDuplicate) {
		t.Fatalf("second Register = %v, want ErrDuplicate", err)
	}
	if r.Len() != 1 {
		t.Fatalf("Len = %d", r.Len())
	}
}

func TestRegisterInvalidName(t *testing.T) {
	r := registry.New()
	for _, n := range []string{"", "has space", "dot.name", "ümlaut", strings.Repeat("x", 65), "a/b", "semi;colon"} {
		if err := r.Register(echo(n)); !errors.Is(err, registry.ErrInvalidName) {
			t.Errorf("Register(%q) = %v, want ErrInvalidName", n, err)
		}
	}
	for _, n := range []string{"a", "A-b_9", strings.Repeat("x", 64)} {
		if err := r.Register(echo(n)); err != nil {
			t.Errorf("Register(%q) = %v", n, err)
		}
	}
	if err := r.Register(nil); err == nil {
		t.Error("Register(nil) succeeded")
	}
}

func TestRegisterInvalidSchema(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.json")
	if err := os.WriteFile(secret, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, schema := range map[string]string{
		"not json":           `{"type":`,
		"not an object":      `["type","object"]`,
		"type not object":    `{"type":"string"}`,
		"no type":            `{"properties":{}}`,
		"does not compile":   `{"type":"object","properties":{"a":{"type":"no-such-type"}}}`,
		"bad regexp":         `{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`,
		"too large":          `{"type":"object","description":"` + strings.Repeat("x", 64<<10) + `"}`,
		"duplicate keys":     `{"type":"object","type":"object"}`,
		"ref to file":        `{"type":"object","properties":{"a":{"$ref":"file://` + secret + `"}}}`,
		"ref to http":        `{"type":"object","properties":{"a":{"$ref":"http://127.0.0.1:1/schema.json"}}}`,
		"ref relative":       `{"type":"object","properties":{"a":{"$ref":"secret.json"}}}`,
		"ref to missing def": `{"type":"object","properties":{"a":{"$ref":"#/$defs/none"}}}`,
		"unknown $schema":    `{"$schema":"http://127.0.0.1:1/meta","type":"object"}`,
		"deep nesting":       `{"type":"object","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := registry.New()
			err := r.Register(&fnTool{name: "t", schema: schema})
			if !errors.Is(err, registry.ErrInvalidSchema) {
				t.Fatalf("Register = %v, want ErrInvalidSchema", err)
			}
			if _, ok := r.Get("t"); ok {
				t.Fatal("tool registered despite the error")
			}
		})
	}
	// A reference inside the schema itself is fine.
	ok := `{"type":"object","$defs":{"c":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/c"}}}`
	if err := registry.New().Register(&fnTool{name: "t", schema: ok}); err != nil {
		t.Fatalf("local $ref refused: %v", err)
	}
}

func TestLookupInEmptyRegistry(t *testing.T) {
	r := registry.New()
	if _, ok := r.Get("nothing"); ok {
		t.Fatal("Get found a tool in an empty registry")
	}
	if got := r.List(); len(got) != 0 {
		t.Fatalf("List = %v", got)
	}
	inv := r.Invoke(context.Background(), "nothing", nil)
	if !errors.Is(inv.Err, registry.ErrNotFound) || registry.KindOf(inv.Err) != registry.NotFound {
		t.Fatalf("Invoke = %v, want not_found", inv.Err)
	}
	if _, ok := r.Unregister("nothing"); ok {
		t.Fatal("Unregister found a tool")
	}
}

func TestRegisterLookupListDefinitionsUnregister(t *testing.T) {
	r := registry.New()
	tools := []registry.Tool{echo("c_tool"), &fnTool{name: "a_tool", schema: citySchema}, echo("b_tool")}
	if err := r.RegisterAll(tools); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.List(), ","); got != "a_tool,b_tool,c_tool" {
		t.Fatalf("List = %s", got)
	}
	defs := r.Definitions()
	if len(defs) != 3 || defs[0].Name != "a_tool" || defs[0].Description != "test tool a_tool" || string(defs[0].Parameters) != citySchema {
		t.Fatalf("Definitions = %+v", defs)
	}
	for _, tl := range tools {
		got, ok := r.Get(tl.Name())
		if !ok || got != tl {
			t.Fatalf("Get(%s) = %v, %v", tl.Name(), got, ok)
		}
		inv := r.Invoke(context.Background(), tl.Name(), json.RawMessage(`{"city":"Paris"}`))
		if inv.Err != nil || string(inv.Output) != `{"city":"Paris"}` {
			t.Fatalf("Invoke(%s) = %s, %v", tl.Name(), inv.Output, inv.Err)
		}
	}
	if old, ok := r.Unregister("b_tool"); !ok || old != tools[2] {
		t.Fatal("Unregister")
	}
	if got := strings.Join(r.List(), ","); got != "a_tool,c_tool" {
		t.Fatalf("List after Unregister = %s", got)
	}
	// RegisterAll stops at the first failure and says which.
	err := r.RegisterAll([]registry.Tool{echo("d_tool"), echo("a_tool"), echo("e_tool")})
	if !errors.Is(err, registry.ErrDuplicate) || !strings.Contains(err.Error(), "a_tool") {
		t.Fatalf("RegisterAll = %v", err)
	}
	if _, ok := r.Get("d_tool"); !ok {
		t.Fatal("tools before the failure should stay registered")
	}
	if _, ok := r.Get("e_tool"); ok {
		t.Fatal("tools after the failure should not be registered")
	}
}

func TestSingleCall(t *testing.T) {
	tool := &fnTool{name: "get_weather", schema: citySchema, perms: []permission.Permission{permission.Network},
		fn: func(_ context.Context, a json.RawMessage) (json.RawMessage, error) {
			var in struct{ City string }
			if err := json.Unmarshal(a, &in); err != nil {
				return nil, err
			}
			return json.RawMessage(fmt.Sprintf(`{"city":%q,"temperature":22}`, in.City)), nil
		}}
	r := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	if err := r.Register(tool); err != nil {
		t.Fatal(err)
	}
	inv := r.Invoke(context.Background(), "get_weather", json.RawMessage(`{"city":"Beijing"}`))
	if inv.Err != nil || string(inv.Output) != `{"city":"Beijing","temperature":22}` {
		t.Fatalf("Invoke = %s, %v", inv.Output, inv.Err)
	}
	if inv.Tool != "get_weather" || string(inv.Input) != `{"city":"Beijing"}` || inv.Duration <= 0 {
		t.Fatalf("Invocation = %+v", inv)
	}
}

func TestToolFailure(t *testing.T) {
	r := registry.New()
	plain := &fnTool{name: "plain", schema: `{"type":"object"}`, fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("disk on fire")
	}}
	typed := &fnTool{name: "typed", schema: `{"type":"object"}`, fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, registry.Errorf(registry.Timeout, "", "took too long")
	}}
	panicky := &fnTool{name: "panicky", schema: `{"type":"object"}`, fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		var m map[string]int
		//lint:ignore SA5000 the nil map write is the point: a real runtime panic
		m["x"] = 1
		return nil, nil
	}}
	if err := r.RegisterAll([]registry.Tool{plain, typed, panicky}); err != nil {
		t.Fatal(err)
	}
	inv := r.Invoke(context.Background(), "plain", nil)
	var re *registry.Error
	if !errors.As(inv.Err, &re) || re.Kind != registry.Other || re.Tool != "plain" || re.Message() != "disk on fire" {
		t.Fatalf("plain error = %#v", inv.Err)
	}
	inv = r.Invoke(context.Background(), "typed", nil)
	if !errors.Is(inv.Err, registry.ErrTimeout) || !errors.As(inv.Err, &re) || re.Tool != "typed" {
		t.Fatalf("typed error = %v", inv.Err)
	}
	if inv.Err.Error() != `tool "typed": timeout: took too long` {
		t.Fatalf("Error() = %q", inv.Err.Error())
	}
	inv = r.Invoke(context.Background(), "panicky", nil)
	if !errors.Is(inv.Err, registry.ErrExecutionFailed) || !strings.Contains(inv.Err.Error(), "tool panicked") {
		t.Fatalf("panic error = %v", inv.Err)
	}
	// The registry still works after a panic.
	if inv := r.Invoke(context.Background(), "plain", nil); registry.KindOf(inv.Err) != registry.Other {
		t.Fatal("registry broken after a panic")
	}
}

func TestNotExecutedAfterDenial(t *testing.T) {
	rm := &fnTool{name: "rm", schema: `{"type":"object"}`, perms: []permission.Permission{permission.Delete}}
	fsTool := &fnTool{name: "read_file", schema: `{"type":"object"}`, perms: []permission.Permission{permission.Filesystem, permission.Read}}
	r := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	if err := r.RegisterAll([]registry.Tool{rm, fsTool}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rm", "read_file"} {
		inv := r.Invoke(context.Background(), name, json.RawMessage(`{}`))
		if !errors.Is(inv.Err, registry.ErrPermissionDenied) || !errors.Is(inv.Err, permission.ErrDenied) {
			t.Fatalf("%s: %v, want permission_denied", name, inv.Err)
		}
		if err := r.Allowed(name); !errors.Is(err, registry.ErrPermissionDenied) {
			t.Fatalf("Allowed(%s) = %v", name, err)
		}
	}
	if rm.calls.Load() != 0 || fsTool.calls.Load() != 0 {
		t.Fatalf("denied tools executed: rm %d, read_file %d", rm.calls.Load(), fsTool.calls.Load())
	}
	// Once allowed, read_file runs.
	cfg := permission.DefaultConfig()
	cfg.Allowed = append(cfg.Allowed, permission.Filesystem)
	r2 := registry.New(registry.WithPermissionChecker(permission.NewChecker(cfg)))
	if err := r2.Register(fsTool); err != nil {
		t.Fatal(err)
	}
	if inv := r2.Invoke(context.Background(), "read_file", nil); inv.Err != nil || fsTool.calls.Load() != 1 {
		t.Fatalf("allowed call: %v, calls %d", inv.Err, fsTool.calls.Load())
	}
}

func TestArgumentHardening(t *testing.T) {
	tool := &fnTool{name: "get_weather", schema: citySchema}
	numTool := &fnTool{name: "num", schema: `{"type":"object","properties":{"n":{"type":"number","minimum":0,"maximum":10,"multipleOf":0.5}}}`}
	r := registry.New(registry.WithMaxArgsBytes(4096))
	if err := r.RegisterAll([]registry.Tool{tool, numTool}); err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200)
	for _, tc := range []struct {
		name, tool, args, want string
	}{
		{"not json", "get_weather", `{"city":`, "not JSON"},
		{"garbage", "get_weather", `hello`, "not JSON"},
		{"trailing data", "get_weather", `{"city":"a"} {}`, "after the value"},
		{"array", "get_weather", `["Paris"]`, "must be a JSON object, got an array"},
		{"string", "get_weather", `"Paris"`, "must be a JSON object, got a string"},
		{"null", "get_weather", `null`, "must be a JSON object, got null"},
		{"too large", "get_weather", `{"city":"` + strings.Repeat("x", 5000) + `"}`, "arguments too large"},
		{"deep nesting", "num", deep, "nesting deeper than 128"},
		{"duplicate keys", "get_weather", `{"city":"a","city":"b"}`, `/: duplicate key "city"`},
		{"nested duplicate keys", "num", `{"x":{"k":1,"k":2}}`, `/x: duplicate key "k"`},
		{"huge exponent", "num", `{"n":1e10000000}`, "/n: number 1e10000000 out of range"},
		{"huge exponent, negative", "num", `{"n":-1e-10000000}`, "out of range"},
		{"huge integer", "num", `{"n":` + strings.Repeat("9", 3000) + `}`, "/n: number too long"},
		{"huge exponent in array", "num", `{"x":[1,2,3e999999999999]}`, "/x/2: number"},
		{"missing required", "get_weather", `{}`, "/city: missing"},
		{"invalid UTF-8", "get_weather", "{\"city\":\"\xff\"}", "not valid UTF-8"},
		{"wrong type", "get_weather", `{"city":42}`, "/city: got number, want string"},
		{"below minimum", "get_weather", `{"city":"a","days":0}`, "/days:"},
		{"additional property", "get_weather", `{"city":"a","extra":1}`, "/:"},
		{"not multiple", "num", `{"n":0.3}`, "/n:"},
		{"above maximum", "num", `{"n":11}`, "/n:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tool.calls.Load() + numTool.calls.Load()
			inv := r.Invoke(context.Background(), tc.tool, json.RawMessage(tc.args))
			if !errors.Is(inv.Err, registry.ErrInvalidArguments) {
				t.Fatalf("Invoke = %v, want invalid_arguments", inv.Err)
			}
			if !strings.Contains(inv.Err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", inv.Err, tc.want)
			}
			if tool.calls.Load()+numTool.calls.Load() != before {
				t.Fatal("tool executed after invalid arguments")
			}
		})
	}
	// Accepted: empty args mean {}, big but sane numbers, exact numbers.
	for _, args := range []string{"", "  ", `{"n":1e300}`, `{"n":5}`, `{"n":0.5}`, `{"n":-0}`} {
		inv := r.Invoke(context.Background(), "num", json.RawMessage(args))
		if args == `{"n":1e300}` {
			if !errors.Is(inv.Err, registry.ErrInvalidArguments) || !strings.Contains(inv.Err.Error(), "/n:") {
				t.Errorf("1e300 > maximum: %v", inv.Err)
			}
			continue
		}
		if inv.Err != nil {
			t.Errorf("args %q: %v", args, inv.Err)
		}
	}
	if inv := r.Invoke(context.Background(), "num", nil); inv.Err != nil || string(inv.Output) != "{}" {
		t.Fatalf("nil args: %s, %v (want the tool to receive {})", inv.Output, inv.Err)
	}
}

func TestInvokeAllOrderAndParallelism(t *testing.T) {
	// n tools that each wait until all n have started: they can only finish
	// if InvokeAll runs them at the same time.
	const n = 4
	var started sync.WaitGroup
	started.Add(n)
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	r := registry.New(registry.WithMaxParallel(n))
	var calls []registry.Call
	for i := range n {
		name := fmt.Sprintf("t%d", i)
		if err := r.Register(&fnTool{name: name, schema: `{"type":"object"}`, fn: func(ctx context.Context, a json.RawMessage) (json.RawMessage, error) {
			started.Done()
			select {
			case <-allStarted:
				return json.RawMessage(fmt.Sprintf(`{"from":%q}`, name)), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}); err != nil {
			t.Fatal(err)
		}
		// Reverse order: results must come back in call order anyway.
		calls = append([]registry.Call{{ID: fmt.Sprintf("call_%d", i), Name: name}}, calls...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	invs := r.InvokeAll(ctx, calls)
	if len(invs) != n {
		t.Fatalf("got %d invocations", len(invs))
	}
	for i, inv := range invs {
		if inv.Err != nil {
			t.Fatalf("call %d: %v (tools did not run in parallel)", i, inv.Err)
		}
		if inv.ID != calls[i].ID || inv.Tool != calls[i].Name || string(inv.Output) != fmt.Sprintf(`{"from":%q}`, calls[i].Name) {
			t.Fatalf("invocation %d = %+v, want call %+v", i, inv, calls[i])
		}
	}
}

func TestInvokeAllBoundedParallelism(t *testing.T) {
	var cur, peak atomic.Int64
	release := make(chan struct{})
	r := registry.New(registry.WithMaxParallel(2))
	if err := r.Register(&fnTool{name: "slow", schema: `{"type":"object"}`, fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		c := cur.Add(1)
		for {
			p := peak.Load()
			if c <= p || peak.CompareAndSwap(p, c) {
				break
			}
		}
		<-release
		cur.Add(-1)
		return json.RawMessage(`1`), nil
	}}); err != nil {
		t.Fatal(err)
	}
	calls := make([]registry.Call, 6)
	for i := range calls {
		calls[i] = registry.Call{Name: "slow"}
	}
	done := make(chan []registry.Invocation)
	go func() { done <- r.InvokeAll(context.Background(), calls) }()
	for range 2 * len(calls) { // let the dispatcher try to start more than 2
		time.Sleep(time.Millisecond)
	}
	close(release)
	invs := <-done
	for _, inv := range invs {
		if inv.Err != nil {
			t.Fatal(inv.Err)
		}
	}
	if p := peak.Load(); p > 2 || p < 1 {
		t.Fatalf("peak concurrency %d, want at most 2", p)
	}
}

func TestInvokeAllCancellation(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	r := registry.New(registry.WithMaxParallel(1))
	stubborn := &fnTool{name: "stubborn", schema: `{"type":"object"}`, fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		<-block // ignores ctx on purpose
		return json.RawMessage(`1`), nil
	}}
	polite := &fnTool{name: "polite", schema: `{"type":"object"}`, fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	if err := r.RegisterAll([]registry.Tool{stubborn, polite}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []registry.Invocation)
	go func() {
		done <- r.InvokeAll(ctx, []registry.Call{{ID: "1", Name: "stubborn"}, {ID: "2", Name: "polite"}, {ID: "3", Name: "polite"}})
	}()
	for stubborn.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	var invs []registry.Invocation
	select {
	case invs = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("InvokeAll did not return after cancellation")
	}
	for i, inv := range invs {
		if !errors.Is(inv.Err, registry.ErrCancelled) || !errors.Is(inv.Err, context.Canceled) {
			t.Fatalf("call %d: %v, want cancelled", i, inv.Err)
		}
		if inv.ID != fmt.Sprint(i+1) {
			t.Fatalf("order: %d has ID %s", i, inv.ID)
		}
	}
	if polite.calls.Load() != 0 {
		t.Fatalf("calls queued behind the limit were started after cancellation: %d", polite.calls.Load())
	}
	// Invoke with a dead context does not run the tool.
	if inv := r.Invoke(ctx, "polite", nil); !errors.Is(inv.Err, registry.ErrCancelled) || polite.calls.Load() != 0 {
		t.Fatalf("Invoke on cancelled ctx: %v", inv.Err)
	}
}

func TestReplaceIsAtomicForCallsInFlight(t *testing.T) {
	r := registry.New()
	entered := make(chan struct{})
	release := make(chan struct{})
	v1 := &fnTool{name: "t", schema: `{"type":"object"}`, fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		close(entered)
		<-release
		return json.RawMessage(`"v1"`), nil
	}}
	v2 := &fnTool{name: "t", schema: `{"type":"object"}`, fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`"v2"`), nil
	}}
	if err := r.Register(v1); err != nil {
		t.Fatal(err)
	}
	res := make(chan registry.Invocation)
	go func() { res <- r.Invoke(context.Background(), "t", nil) }()
	<-entered
	old, err := r.Replace(v2)
	if err != nil || old != v1 {
		t.Fatalf("Replace = %v, %v", old, err)
	}
	if inv := r.Invoke(context.Background(), "t", nil); string(inv.Output) != `"v2"` {
		t.Fatalf("new call got %s", inv.Output)
	}
	close(release)
	if inv := <-res; string(inv.Output) != `"v1"` {
		t.Fatalf("call in flight got %s, want v1", inv.Output)
	}
}

func TestConcurrentRegisterAndInvoke(t *testing.T) {
	r := registry.New()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := range 50 {
				name := fmt.Sprintf("t%d_%d", i, j)
				_ = r.Register(echo(name))
				r.Invoke(context.Background(), name, json.RawMessage(`{"i":1}`))
				r.Unregister(name)
			}
		}()
		go func() {
			defer wg.Done()
			for range 50 {
				_ = r.List()
				_ = r.Definitions()
			}
		}()
	}
	wg.Wait()
	if r.Len() != 0 {
		t.Fatalf("Len = %d", r.Len())
	}
}

func TestErrorHelpers(t *testing.T) {
	if registry.KindOf(nil) != "" || registry.KindOf(errors.New("x")) != registry.Other {
		t.Fatal("KindOf plain")
	}
	if registry.KindOf(context.DeadlineExceeded) != registry.Timeout || registry.KindOf(fmt.Errorf("w: %w", context.Canceled)) != registry.Cancelled {
		t.Fatal("KindOf context errors")
	}
	e := registry.NewError(registry.IO, "t", errors.New("disk"))
	if again := registry.NewError(registry.Other, "u", e); again != e {
		t.Fatal("NewError should keep an existing *Error")
	}
	if errors.Is(e, registry.ErrTimeout) || !errors.Is(e, registry.ErrIO) {
		t.Fatal("Is against sentinels")
	}
	anon := registry.Errorf(registry.Timeout, "", "slow")
	if got := registry.AsError("named", anon); got.Tool != "named" || anon.Tool != "" {
		t.Fatal("AsError should fill the tool name on a copy")
	}
}

// TestInvokeEachReportsAsCallsFinish: done sees a call as soon as it ends,
// while the others still run (the slow tool waits for the fast one's
// report; reporting only at the end would never release it).
func TestInvokeEachReportsAsCallsFinish(t *testing.T) {
	release := make(chan struct{})
	slow := &fnTool{name: "slow", schema: `{"type":"object"}`, fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		select {
		case <-release:
			return json.RawMessage(`"slow"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	fast := &fnTool{name: "fast", schema: `{"type":"object"}`, fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`"fast"`), nil
	}}
	r := registry.New()
	if err := r.RegisterAll([]registry.Tool{slow, fast}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var order []int
	invs := r.InvokeEach(ctx, []registry.Call{{ID: "a", Name: "slow"}, {ID: "b", Name: "fast"}}, func(i int, inv registry.Invocation) {
		order = append(order, i)
		if inv.Tool == "fast" {
			close(release)
		}
	})
	if len(order) != 2 || order[0] != 1 || order[1] != 0 {
		t.Fatalf("reported in order %v, want [1 0]", order)
	}
	if string(invs[0].Output) != `"slow"` || string(invs[1].Output) != `"fast"` {
		t.Fatalf("results %+v", invs)
	}
}

// brokenTool is a tool whose module failed to load.
type brokenTool struct{ *fnTool }

func (b brokenTool) Unavailable() error {
	return registry.Errorf(registry.ModuleRefused, b.name, "the tool failed to load: no such file")
}

// TestDefinitionsOnlyCallable: the model is offered only tools it could
// call; a denied or unavailable tool is still listed, and calling it fails
// with its reason (unavailable first, before the policy and the schema).
func TestDefinitionsOnlyCallable(t *testing.T) {
	r := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	ok := echo("ok")
	shell := &fnTool{name: "shell", schema: `{"type":"object"}`, perms: []permission.Permission{permission.Shell}}
	broken := brokenTool{&fnTool{name: "broken", schema: `{"type":"object","required":["x"]}`, perms: []permission.Permission{permission.Shell}}}
	if err := r.RegisterAll([]registry.Tool{ok, shell, broken}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range r.Definitions() {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, ","); got != "ok" {
		t.Fatalf("Definitions = %s, want ok", got)
	}
	if got := strings.Join(r.List(), ","); got != "broken,ok,shell" {
		t.Fatalf("List = %s", got)
	}
	if err := r.Invoke(context.Background(), "broken", json.RawMessage(`{}`)).Err; registry.KindOf(err) != registry.ModuleRefused || !errors.Is(err, registry.ErrModuleRefused) {
		t.Fatalf("calling a broken tool: %v", err)
	}
	if err := r.Allowed("broken"); registry.KindOf(err) != registry.ModuleRefused {
		t.Fatalf("Allowed(broken) = %v", err)
	}
	if err := r.Invoke(context.Background(), "shell", nil).Err; registry.KindOf(err) != registry.PermissionDenied {
		t.Fatalf("calling a denied tool: %v", err)
	}
	if broken.calls.Load() != 0 {
		t.Fatal("the unavailable tool ran")
	}
}

// TestCallContext: a Call's Context is the one its tool runs in (a
// value it carries reaches the tool), and the end of InvokeEach's
// context still ends the call even when that Context does not derive
// from it.
func TestCallContext(t *testing.T) {
	type key struct{}
	got, ended := make(chan string, 1), make(chan struct{})
	r := registry.New()
	waits := &fnTool{name: "waits", schema: `{"type":"object"}`, fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		v, _ := ctx.Value(key{}).(string)
		got <- v
		<-ctx.Done()
		close(ended)
		return nil, ctx.Err()
	}}
	if err := r.Register(waits); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	own := context.WithValue(context.Background(), key{}, "mine") // not derived from ctx
	done := make(chan []registry.Invocation)
	go func() { done <- r.InvokeAll(ctx, []registry.Call{{ID: "1", Name: "waits", Context: own}}) }()
	if v := <-got; v != "mine" {
		t.Fatalf("the tool saw %q, not its Call's context", v)
	}
	cancel()
	select {
	case invs := <-done:
		if !errors.Is(invs[0].Err, registry.ErrCancelled) {
			t.Fatalf("%v, want cancelled", invs[0].Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("InvokeAll did not return")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the tool's context did not end with InvokeAll's: it would run on")
	}
}
