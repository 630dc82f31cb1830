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
		if dropRune(r) {
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
		out, err := cleanJSON([]byte(`{"a\u200b":2,"a":1,"b":[" \u202e"]}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != `{"a":1,"b":[" "]}` {
			t.Fatalf("cleanJSON = %s", out)
		}
	}
	if _, err := cleanJSON([]byte(`{`)); err == nil {
		t.Error("cleanJSON accepted invalid JSON")
	}
}

// The text of an isError result becomes the execution_failed message
// cleaned and capped.
func TestErrorResultIsSanitized(t *testing.T) {
	c := evilClient(t)
	_, err := c.CallTool(context.Background(), "fails", nil)
	e := wantKind(t, err, registry.ExecutionFailed)
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
	c, err := NewClient("web", HTTP{URL: srv.URL}, &Options{Timeout: 5 * time.Second, MaxRestarts: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = c.Connect(context.Background())
	e := wantKind(t, err, registry.MCPError)
	checkClean(t, "Connect error", err.Error())
	checkClean(t, "Connect message", e.Message())
	if !strings.Contains(e.Message(), "not json at all") {
		t.Errorf("message %q does not say what the server sent", e.Message())
	}
	var ce *cleanErr
	if !errors.As(err, &ce) || ce.err == nil {
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
		t.Error("a cleanErr was wrapped again")
	}
	checkClean(t, "cleanError", err.Error())
	if len(err.Error()) > maxErrorText {
		t.Errorf("message is %d bytes; cap %d", len(err.Error()), maxErrorText)
	}
}
