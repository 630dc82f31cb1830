package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// nasty is text a hostile server sends: terminal escapes (CSI, OSC title,
// OSC 8 link), a C1 CSI, bidi overrides, zero-width and tag characters,
// a BOM and invalid UTF-8.
const nasty = "a\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://evil.example\x1b\\b\x1b]8;;\x1b\\ \u009b31m" +
	"\u202eevil\u202c \u200b\u200c\u200d\u2060\ufeff\U000E0049 \xff\xfe\r\x00z\n\tend"

// nastyCleaned is nasty as the client gives it to the model (the server's
// JSON encoder turned each invalid byte into U+FFFD).
const nastyCleaned = "a[2J]0;pwned]8;;http://evil.example\\b]8;;\\ 31mevil  \uFFFD\uFFFDz\n\tend"

// dirty reports the first rune a model or a terminal must not get: a
// control character other than newline and tab, or an invisible one.
func dirty(s string) (rune, bool) {
	for _, r := range s {
		if textsafe.IsUnsafe(r) {
			return r, true
		}
	}
	return 0, false
}

func checkClean(t *testing.T, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%s is not valid UTF-8: %q", what, s)
	}
	if r, bad := dirty(s); bad {
		t.Errorf("%s keeps %U: %q", what, r, s)
	}
}

// evilClient connects to an in-memory server whose tools answer with
// nasty text: as content, as structuredContent and as an isError result.
func evilClient(t *testing.T) *Client {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "evil", Version: "1"}, nil)
	obj := map[string]any{"type": "object"}
	s.AddTool(&sdk.Tool{Name: "text", InputSchema: obj}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: nasty}, &sdk.TextContent{Text: "line2"}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "structured", InputSchema: obj}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{StructuredContent: map[string]any{
			"k" + nasty: []any{nasty, 1.5, true, nil, map[string]any{"inner": nasty}},
			"n":         12345678901,
		}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "fails", InputSchema: obj}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "error: " + nasty + strings.Repeat("x", 10<<10)}}}, nil
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	c, err := NewClient("evil", SDKTransport{New: func() sdk.Transport { return ct }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// Text results reach the model without controls (C0 and C1) or invisible
// characters; newlines and tabs stay.
func TestTextResultIsSanitized(t *testing.T) {
	c := evilClient(t)
	out, err := c.CallTool(context.Background(), "text", nil)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("result %s is not a JSON string: %v", out, err)
	}
	checkClean(t, "text result", s)
	if want := nastyCleaned + "\nline2"; s != want {
		t.Errorf("text result = %q\nwant          %q", s, want)
	}
}

// Every string in structuredContent, keys included, is cleaned; numbers
// and the other values are kept, and the document stays valid JSON.
func TestStructuredResultIsSanitized(t *testing.T) {
	c := evilClient(t)
	out, err := c.CallTool(context.Background(), "structured", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) {
		t.Fatalf("result is not valid JSON: %s", out)
	}
	checkClean(t, "structured result", string(out))
	var v map[string]any
	d := json.NewDecoder(strings.NewReader(string(out)))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	clean := nastyCleaned
	arr, ok := v["k"+clean].([]any)
	if !ok || len(arr) != 5 {
		t.Fatalf("result %s lacks the cleaned key with its 5 values", out)
	}
	if arr[0] != clean || arr[1] != json.Number("1.5") || arr[2] != true || arr[3] != nil {
		t.Errorf("values = %#v", arr)
	}
	if m, ok := arr[4].(map[string]any); !ok || m["inner"] != clean {
		t.Errorf("nested object = %#v", arr[4])
	}
	if v["n"] != json.Number("12345678901") {
		t.Errorf("n = %#v; want 12345678901", v["n"])
	}
}

func TestCleanJSONKeyCollision(t *testing.T) {
	for range 20 { // map order must not decide which value stays
		out, err := textsafe.CleanJSON([]byte(`{"a\u200b":2,"a":1,"b":[" \u202e"]}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != `{"a":1,"b":[" "]}` {
			t.Fatalf("cleanJSON = %s", out)
		}
	}
	if _, err := textsafe.CleanJSON([]byte(`{`)); err == nil {
		t.Error("cleanJSON accepted invalid JSON")
	}
}

// The text of an isError result becomes the execution_failed message
// cleaned and capped.
func TestErrorResultIsSanitized(t *testing.T) {
	c := evilClient(t)
	_, err := c.CallTool(context.Background(), "fails", nil)
	e := require.Kind(t, err, registry.ExecutionFailed)
	checkClean(t, "isError message", e.Message())
	if !strings.HasPrefix(e.Message(), "error: a[2J") {
		t.Errorf("message = %.80q", e.Message())
	}
	if len(e.Message()) > MaxErrorTextBytes || !strings.HasSuffix(e.Message(), "…") {
		t.Errorf("message is %d bytes (cap %d), ends %q", len(e.Message()), MaxErrorTextBytes, e.Message()[len(e.Message())-10:])
	}
}

// A server that answers the handshake with garbage fails Connect with an
// error that does not quote the raw bytes (ESC, C1, bidi) but still says
// what went wrong, and errors.As still finds the cause.
func TestConnectErrorIsSanitized(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("\x1b[2J\u009b31m\u202e{not json at all"))
	}))
	defer srv.Close()
	c, err := NewClient("web", HTTP{URL: srv.URL}, &ClientOptions{Timeout: 5 * time.Second, MaxRestarts: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = c.Connect(context.Background())
	e := require.Kind(t, err, registry.MCPError)
	checkClean(t, "Connect error", err.Error())
	checkClean(t, "Connect message", e.Message())
	if !strings.Contains(e.Message(), "not json at all") {
		t.Errorf("message %q does not say what the server sent", e.Message())
	}
	var ce *textsafe.Error
	if !errors.As(err, &ce) || ce.Unwrap() == nil {
		t.Errorf("the cause is not reachable through errors.As: %#v", err)
	}
}

func TestCleanError(t *testing.T) {
	if cleanError(nil) != nil {
		t.Error("cleanError(nil) != nil")
	}
	re := registry.Errorf(registry.MCPError, "x", "y")
	if cleanError(re) != error(re) {
		t.Error("a *registry.Error was wrapped")
	}
	cause := errors.New("bad \x1b[31m" + strings.Repeat("z", 3*maxErrorText))
	err := cleanError(cause)
	if !errors.Is(err, cause) {
		t.Error("errors.Is lost the cause")
	}
	if cleanError(err) != err {
		t.Error("a cleaned error was wrapped again")
	}
	checkClean(t, "cleanError", err.Error())
	if len(err.Error()) > maxErrorText {
		t.Errorf("message is %d bytes; cap %d", len(err.Error()), maxErrorText)
	}
}

// agrun mcp serve cleans what it serves: a tool's JSON string result whose
// escapes decode to control characters, a structured result with escaped
// invisible characters, and an error message built from a tool's text. The
// client here is the SDK's own, which cleans nothing.
func TestServedTextIsSanitized(t *testing.T) {
	reg := registry.New()
	tools := map[string]func() (json.RawMessage, error){
		"esc": func() (json.RawMessage, error) { return json.RawMessage(`"\u001b[31mred\u009b2J\u202e"`), nil },
		"obj": func() (json.RawMessage, error) { return json.RawMessage(`{"k\u200b":"\u001b]0;t\u0007v"}`), nil },
		"fail": func() (json.RawMessage, error) {
			return nil, registry.Errorf(registry.ExecutionFailed, "fail", "trap\x1b]0;pwned\x07 \u009b31m%s", strings.Repeat("f", 3*MaxErrorTextBytes))
		},
	}
	for name, run := range tools {
		if err := reg.Register(fakeTool{name: name, run: func(context.Context, json.RawMessage) (json.RawMessage, error) { return run() }}); err != nil {
			t.Fatal(err)
		}
	}
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := NewServer(reg, nil).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "raw", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string) *sdk.CallToolResult {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	text := func(res *sdk.CallToolResult) string {
		var parts []string
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				parts = append(parts, tc.Text)
			}
		}
		return strings.Join(parts, "\n")
	}
	if got := text(call("esc")); got != "[31mred2J" {
		t.Errorf("esc served %q", got)
	}
	res := call("obj")
	checkClean(t, "obj text", text(res))
	b, _ := json.Marshal(res.StructuredContent)
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil || m["k"] != "]0;tv" {
		t.Errorf("obj structuredContent %s (%v)", b, err)
	}
	res = call("fail")
	got := text(res)
	if !res.IsError || !strings.HasPrefix(got, "error (execution_failed): trap]0;pwned 31m") {
		t.Errorf("fail served %v %q", res.IsError, textsafe.Truncate(got, 100))
	}
	checkClean(t, "fail text", got)
	if len(got) > MaxErrorTextBytes+64 {
		t.Errorf("error text is %d bytes", len(got))
	}
}
