package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

func names(ts []registry.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name())
	}
	return out
}

func TestBasicToolsAndResults(t *testing.T) {
	c := stdioClient(t, "basic", nil, nil)
	want := []string{"basic__add", "basic__add_tool", "basic__echo", "basic__fail", "basic__getenv", "basic__hostile_desc", "basic__media", "basic__remove_tool", "basic__sleep"}
	if got := names(c.Tools()); !slices.Equal(got, want) {
		t.Fatalf("Tools() = %v, want %v", got, want)
	}
	ctx := context.Background()

	out, err := c.CallTool(ctx, "echo", json.RawMessage(`{"text":"héllo"}`))
	if err != nil || string(out) != `"héllo"` {
		t.Fatalf("echo = %s, %v", out, err)
	}
	out, err = c.CallTool(ctx, "add", json.RawMessage(`{"a":2,"b":3.5}`))
	if err != nil || string(out) != `{"sum":5.5}` {
		t.Fatalf("add = %s, %v; want structuredContent {\"sum\":5.5}", out, err)
	}
	out, err = c.CallTool(ctx, "media", nil)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	if err := json.Unmarshal(out, &text); err != nil {
		t.Fatalf("media result %s is not a JSON string", out)
	}
	for _, w := range []string{"here", "[image: image/png, 300000 bytes]", "[audio: audio/wav, 1234 bytes]", "file:///tmp/report.txt", "embedded text"} {
		if !strings.Contains(text, w) {
			t.Errorf("media result %q lacks %q", text, w)
		}
	}
	if len(out) > 1000 {
		t.Errorf("media result is %d bytes: media data leaked into the result", len(out))
	}
	_, err = c.CallTool(ctx, "fail", nil)
	if e := require.Kind(t, err, registry.ExecutionFailed); e.Message() != "disk on fire" || e.Tool != "basic__fail" {
		t.Errorf("fail: message %q tool %q", e.Message(), e.Tool)
	}
	_, err = c.CallTool(ctx, "no_such_tool", nil)
	require.Kind(t, err, registry.MCPError)
	_, err = c.CallTool(ctx, "echo", json.RawMessage(`[1]`))
	require.Kind(t, err, registry.InvalidArguments)
}

// A stdio server sees the variables it was given and a few basic ones,
// not agrun's secrets.
func TestServerEnvironment(t *testing.T) {
	t.Setenv("AGRUN_TEST_SECRET", "sk-do-not-leak")
	c := stdioClient(t, "basic", []string{"GIVEN=yes"}, nil)
	for name, want := range map[string]string{
		"AGRUN_TEST_SECRET": `"AGRUN_TEST_SECRET="`,
		"GIVEN":             `"GIVEN=yes"`,
		"PATH":              `"PATH=` + os.Getenv("PATH") + `"`,
	} {
		out, err := c.CallTool(context.Background(), "getenv", json.RawMessage(`{"name":"`+name+`"}`))
		if err != nil || string(out) != want {
			t.Errorf("getenv %s = %s, %v; want %s", name, out, err, want)
		}
	}
}

func TestHostileDescriptionIsSanitized(t *testing.T) {
	c := stdioClient(t, "basic", nil, nil)
	var d string
	for _, tl := range c.Tools() {
		if tl.Name() == "basic__hostile_desc" {
			d = tl.Description()
		}
	}
	if !strings.HasPrefix(d, "Reads files.evil") {
		t.Errorf("description starts %q", d[:min(40, len(d))])
	}
	if len(d) > MaxDescriptionBytes {
		t.Errorf("description is %d bytes, cap %d", len(d), MaxDescriptionBytes)
	}
	for _, bad := range []string{"\u200b", "\u202e", "\u202c", "\x1b", "\U000E0041"} {
		if strings.Contains(d, bad) {
			t.Errorf("description still contains %q", bad)
		}
	}
	if !strings.HasSuffix(d, "…") {
		t.Errorf("cut description does not end in an ellipsis")
	}
}

func TestRegistryIntegration(t *testing.T) {
	deny := permission.NewChecker(permission.Config{Denied: []permission.Permission{permission.Shell}, AllowUnspecified: true})
	for _, tc := range []struct {
		perm permission.Permission
		want registry.Kind
	}{
		{permission.Read, ""},
		{permission.Shell, registry.PermissionDenied},
	} {
		t.Run(tc.perm.String(), func(t *testing.T) {
			c := stdioClient(t, "basic", nil, &ClientOptions{Permissions: []permission.Permission{tc.perm}})
			reg := registry.New(registry.WithPermissionChecker(deny))
			if err := c.Sync(reg); err != nil {
				t.Fatal(err)
			}
			inv := reg.Invoke(context.Background(), "basic__echo", json.RawMessage(`{"text":"via registry"}`))
			if tc.want == "" {
				if inv.Err != nil || string(inv.Output) != `"via registry"` {
					t.Fatalf("Invoke = %s, %v", inv.Output, inv.Err)
				}
				// What agrun sees of the call: the bytes each way.
				if a := inv.Audit; a == nil || a.Source != "mcp" || a.BytesIn != int64(len(`{"text":"via registry"}`)) || a.BytesOut != int64(len(`"via registry"`)) {
					t.Fatalf("audit %+v", a)
				}
				// The server's schema is enforced by the registry.
				inv = reg.Invoke(context.Background(), "basic__echo", json.RawMessage(`{"text":5}`))
				require.Kind(t, inv.Err, registry.InvalidArguments)
				return
			}
			require.Kind(t, inv.Err, tc.want)
		})
	}
}

func TestPagination(t *testing.T) {
	c := stdioClient(t, "basic", []string{"PAGESIZE=2"}, nil)
	if n := len(c.Tools()); n != 9 {
		t.Fatalf("got %d tools over pages of 2, want 9: %v", n, names(c.Tools()))
	}
}

func TestNameCollisionIsAnError(t *testing.T) {
	c := newStdioClient(t, "basic", []string{"COLLIDE=1"}, nil)
	err := c.Connect(context.Background())
	e := require.Kind(t, err, registry.MCPError)
	if !strings.Contains(e.Message(), `"x.y"`) || !strings.Contains(e.Message(), `"x_y"`) {
		t.Errorf("error %q does not name both tools", e.Message())
	}
	// The failed Connect left no half-connected client behind.
	_, err = c.CallTool(context.Background(), "echo", nil)
	require.Kind(t, err, registry.MCPNotInitialized)
}

// Many goroutines share one Client (run with -race).
func TestConcurrentCalls(t *testing.T) {
	c := stdioClient(t, "basic", nil, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%10 == 0 {
				if _, err := c.ListTools(ctx); err != nil {
					errs <- err
				}
				return
			}
			want := fmt.Sprintf(`"call %d"`, i)
			out, err := c.CallTool(ctx, "echo", json.RawMessage(fmt.Sprintf(`{"text":"call %d"}`, i)))
			if err != nil || string(out) != want {
				errs <- fmt.Errorf("call %d = %s, %v", i, out, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestListChangedKeepsRegistryInSync(t *testing.T) {
	c := stdioClient(t, "basic", nil, nil)
	reg := registry.New()
	if err := c.Sync(reg); err != nil {
		t.Fatal(err)
	}
	// A foreign tool must survive every update.
	if err := reg.Register(fakeTool{name: "local"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.CallTool(ctx, "add_tool", json.RawMessage(`{"name":"fresh"}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "basic__fresh in the registry", func() bool { _, ok := reg.Get("basic__fresh"); return ok })
	inv := reg.Invoke(ctx, "basic__fresh", nil)
	if inv.Err != nil || string(inv.Output) != `"I am new"` {
		t.Fatalf("fresh = %s, %v", inv.Output, inv.Err)
	}
	if _, err := c.CallTool(ctx, "remove_tool", json.RawMessage(`{"name":"fresh"}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "basic__fresh to leave the registry", func() bool { _, ok := reg.Get("basic__fresh"); return !ok })
	if _, ok := reg.Get("local"); !ok {
		t.Error("a tool not owned by the client was removed")
	}
	if _, ok := reg.Get("basic__echo"); !ok {
		t.Error("basic__echo vanished")
	}
}

func TestSyncRefusesTakenName(t *testing.T) {
	c := stdioClient(t, "basic", nil, nil)
	reg := registry.New()
	if err := reg.Register(fakeTool{name: "basic__sleep"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(reg); err == nil {
		t.Fatal("Sync succeeded over a taken name")
	}
	if got := reg.List(); !slices.Equal(got, []string{"basic__sleep"}) {
		t.Errorf("after a failed Sync the registry holds %v", got)
	}
}

func TestNotConnectedAndClosed(t *testing.T) {
	c := newStdioClient(t, "basic", nil, nil)
	_, err := c.CallTool(context.Background(), "echo", nil)
	require.Kind(t, err, registry.MCPNotInitialized)
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err = c.CallTool(context.Background(), "echo", nil)
	require.Kind(t, err, registry.MCPNotInitialized)
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// fakeTool is a minimal registry tool for tests.
type fakeTool struct {
	name   string
	schema string
	perms  []permission.Permission
	run    func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

func (f fakeTool) Name() string        { return f.name }
func (f fakeTool) Description() string { return "fake tool " + f.name }
func (f fakeTool) Parameters() json.RawMessage {
	if f.schema == "" {
		return json.RawMessage(`{"type":"object"}`)
	}
	return json.RawMessage(f.schema)
}
func (f fakeTool) Permissions() []permission.Permission { return f.perms }
func (f fakeTool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	if f.run == nil {
		return json.RawMessage(`"ok"`), nil
	}
	return f.run(ctx, args)
}
