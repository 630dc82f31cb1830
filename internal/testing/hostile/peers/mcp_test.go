package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/testing/leak"
	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestMCPServers: each misbehaving server costs its own calls a typed
// error, never the process, the registry or the other tools; closing the
// client leaves no goroutine, descriptor or process behind.
func TestMCPServers(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	for _, c := range []struct {
		name, server, tool string
		env                []string
		opts               mcp.ClientOptions
		want               registry.Kind
	}{
		{"crash mid-call", "crash", "crash", nil, mcp.ClientOptions{RestartBackoff: 10 * time.Millisecond}, registry.MCPError},
		{"hang", "hang", "hang", nil, mcp.ClientOptions{Timeout: 3 * time.Second}, registry.MCPTimeout},
		{"garbage on stdout", "garbage", "noisy", nil, mcp.ClientOptions{}, ""},
		{"giant message", "huge", "huge", nil, mcp.ClientOptions{RestartBackoff: 10 * time.Millisecond}, registry.MCPError},
		{"unknown response ids", "unknownid", "never", nil, mcp.ClientOptions{Timeout: 3 * time.Second}, registry.MCPTimeout},
		{"notification flood", "flood", "flood", []string{"FLOOD_N=5000"}, mcp.ClientOptions{}, ""},
		{"stderr flood", "stderrflood", "echo", []string{"STDERR_MB=16"}, mcp.ClientOptions{MaxStderrBytes: 16 << 10}, ""},
		{"server dies, grandchild holds stdout", "grandchild", "die", nil, mcp.ClientOptions{Timeout: 20 * time.Second}, registry.MCPError},
		{"isError with an injection", "evil", "fails", nil, mcp.ClientOptions{}, registry.ExecutionFailed},
		{"result full of escapes", "evil", "inject", nil, mcp.ClientOptions{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := hostile.McpServer(t, c.server)
			pidfile := filepath.Join(t.TempDir(), "pid")
			before := f.Snapshot(t)
			opts := c.opts
			opts.Logger = hostile.QuietLogger
			cl, err := mcp.NewClient(c.server, mcp.Stdio{Command: bin, Env: append([]string{"PIDFILE=" + pidfile}, c.env...)}, &opts)
			hostile.Must(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := cl.Connect(ctx); err != nil {
				t.Fatalf("Connect: %v", err)
			}
			if err := cl.Sync(f.Reg); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			args := json.RawMessage(`{}`)
			if c.tool == "echo" {
				args = json.RawMessage(`{"text":"ok"}`)
			}
			got := hostile.Inv(f.Reg.Invoke(ctx, mcp.ToolName(c.server, c.tool), args))
			if got.Err == nil {
				checkMCPOutput(t, got.Out)
			} else {
				var re *registry.Error
				if errors.As(got.Err, &re) {
					checkNoInvisible(t, re.Message())
				}
			}
			f.StillWorks(t)
			hostile.Must(t, cl.Close(ctx))
			for _, name := range f.Reg.List() {
				if strings.HasPrefix(name, c.server+"__") {
					f.Reg.Unregister(name)
				}
			}
			f.After(t, before, got, c.want)
			if b, err := os.ReadFile(pidfile); err == nil && c.server == "grandchild" {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				deadline := time.Now().Add(hostile.Settle)
				for pid > 0 && !leak.ProcessGone(pid) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if pid > 0 && !leak.ProcessGone(pid) {
					t.Errorf("the server's child %d outlived the client", pid)
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// checkMCPOutput is checkToolOutput for MCP results, which must also be
// free of C1 controls and invisible characters, inside JSON strings too.
func checkMCPOutput(t testing.TB, out []byte) {
	t.Helper()
	if !utf8.Valid(out) {
		t.Errorf("output is not valid UTF-8: %q", out)
	}
	if i := bytes.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' && r != '\r' }); i >= 0 {
		t.Errorf("output carries a raw control character at %d: %q", i, out)
	}
	checkNoInvisible(t, string(out))
}

// checkNoInvisible asserts that s, text from an MCP server on its way to
// the model, carries no C1 control, zero-width character, bidi override
// or tag character.
func checkNoInvisible(t testing.TB, s string) {
	t.Helper()
	for _, r := range s {
		if r >= 0x80 && r < 0xa0 || r >= 0x200b && r <= 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2060 && r <= 0x2064 || r == 0xfeff || r >= 0xe0000 && r <= 0xe007f {
			t.Errorf("text from the server keeps %U: %q", r, hostile.Truncate(s, 300))
			return
		}
	}
}

// TestMCPDescriptions: what a server says about its tools reaches the model
// capped and without invisible characters or escapes, and schemas that
// refer to files or URLs leave their tool out instead of being fetched.
func TestMCPDescriptions(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	bin := hostile.McpServer(t, "evil")
	before := f.Snapshot(t)
	cl, err := mcp.NewClient("evil", mcp.Stdio{Command: bin}, &mcp.ClientOptions{Logger: hostile.QuietLogger})
	hostile.Must(t, err)
	ctx := context.Background()
	hostile.Must(t, cl.Connect(ctx))
	hostile.Must(t, cl.Sync(f.Reg))
	names := f.Reg.List()
	for _, d := range f.Reg.Definitions() {
		if !strings.HasPrefix(d.Name, "evil__") {
			continue
		}
		hostile.CheckModelText(t, d.Description)
		if len(d.Description) > mcp.MaxDescriptionBytes {
			t.Errorf("%s: description is %d bytes; cap %d", d.Name, len(d.Description), mcp.MaxDescriptionBytes)
		}
		for _, r := range d.Description {
			if r >= 0x200b && r <= 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2060 && r <= 0x2064 || r == 0xfeff || r >= 0xe0000 && r <= 0xe007f {
				t.Errorf("%s: description keeps invisible character %U", d.Name, r)
			}
		}
	}
	for _, gone := range []string{"evil__fileref", "evil__urlref"} {
		for _, n := range names {
			if n == gone {
				t.Errorf("%s registered although its schema refers outside itself", gone)
			}
		}
	}
	hostile.Must(t, cl.Close(ctx))
	for _, n := range names {
		if strings.HasPrefix(n, "evil__") {
			f.Reg.Unregister(n)
		}
	}
	f.After(t, before, hostile.Outcome{}, "")
}

// TestMCPOverHTTP: a streamable-HTTP MCP endpoint that misbehaves at the
// HTTP level (never answers, answers garbage, an endless body, errors,
// redirects to a forbidden address) fails the connection with a typed
// error within the client's timeout and leaves nothing behind.
func TestMCPOverHTTP(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	metadata := hostile.NewPeer(t, nil) // stands for an address the client must not be sent to
	release := make(chan struct{})
	srv := hostile.NewPeer(t, func(w http.ResponseWriter, r *http.Request) {
		// Read the request, so that the server notices a client that goes.
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/garbage":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("\x1b[2J{not json at all"))
		case "/endless":
			w.Header().Set("Content-Type", "application/json")
			chunk := bytes.Repeat([]byte(`{"jsonrpc":"2.0",`), 4096)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/sse-flood":
			w.Header().Set("Content-Type", "text/event-stream")
			line := []byte("data: " + strings.Repeat("x", 1<<16) + "\n")
			for r.Context().Err() == nil {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		case "/error":
			http.Error(w, "\x1b]0;pwned\x07 internal error", http.StatusInternalServerError)
		case "/redirect":
			http.Redirect(w, r, metadata.URL+"/latest/meta-data/", http.StatusTemporaryRedirect)
		}
	})
	t.Cleanup(func() { close(release) })
	for _, path := range []string{"/hang", "/garbage", "/endless", "/sse-flood", "/error", "/redirect"} {
		t.Run(path, func(t *testing.T) {
			before := f.Snapshot(t)
			cl, err := mcp.NewClient("web", mcp.HTTP{URL: srv.URL + path}, &mcp.ClientOptions{Timeout: 2 * time.Second, Logger: hostile.QuietLogger, MaxMessageBytes: 1 << 20})
			hostile.Must(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = cl.Connect(ctx)
			if ctx.Err() != nil {
				t.Errorf("Connect did not give up within its timeout")
			}
			closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
			cl.Close(closeCtx)
			cancelClose()
			if err == nil {
				t.Errorf("Connect succeeded")
			}
			var re *registry.Error
			if !errors.As(err, &re) || re.Kind != registry.MCPError && re.Kind != registry.MCPTimeout {
				t.Errorf("Connect: %v (%T); want a *registry.Error of kind mcp_error or mcp_timeout", err, err)
			}
			if err != nil {
				// The error quotes what the server sent (garbage, error
				// pages): cleaned, like everything from a server.
				hostile.CheckModelText(t, err.Error())
				checkNoInvisible(t, err.Error())
			}
			f.After(t, before, hostile.Outcome{}, "")
		})
	}
	if n := metadata.Hits.Load(); n != 0 {
		t.Logf("the MCP client followed a redirect to another host (%d requests): MCP endpoints are the operator's choice, so this is by design", n)
	}
}

// TestMCPServeHTTP: `agrun mcp serve --http` (mcp.NewHTTPHandler over the
// registry) facing a hostile MCP client: oversize and garbage requests are
// refused without buffering them, and tool calls go through the same
// policy and validation as everywhere (duplicate keys, unknown tools, a
// guest that spins), while the honest tool keeps working.
func TestMCPServeHTTP(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	f.Hostile(t, "h", wasmtools.Grant{Limits: runtime.Limits{Timeout: hostile.CallTimeout}})
	srv := httptest.NewServer(mcp.NewHTTPHandler(f.Reg, &mcp.ServerOptions{Logger: hostile.QuietLogger}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{}}
	post := func(body io.Reader) int {
		req, _ := http.NewRequest("POST", srv.URL, body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name string
		body func() io.Reader
	}{
		{"256 MiB body", func() io.Reader { return io.LimitReader(zeros{}, 256<<20) }},
		{"garbage", func() io.Reader { return strings.NewReader("\x1b[2J{{{{") }},
		{"deep nesting", func() io.Reader {
			return strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `}`)
		}},
	} {
		t.Run("raw "+c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			if code := post(c.body()); code/100 == 2 {
				t.Errorf("answered %d", code)
			}
			client.CloseIdleConnections()
			f.After(t, before, hostile.Outcome{}, "")
		})
	}

	t.Run("hostile calls through a client", func(t *testing.T) {
		before := f.Snapshot(t)
		cl, err := mcp.NewClient("agrun", mcp.HTTP{URL: srv.URL}, &mcp.ClientOptions{Timeout: 10 * time.Second, Logger: hostile.QuietLogger})
		hostile.Must(t, err)
		ctx := context.Background()
		hostile.Must(t, cl.Connect(ctx))
		for _, c := range []struct {
			tool, args string
		}{
			{"h", `{"op":"emit","op":"spin"}`},
			{"h", `{"op":"spin"}`},
			{"nope", `{}`},
			{"word_count", `{"text":1}`},
		} {
			out, err := cl.CallTool(ctx, c.tool, json.RawMessage(c.args))
			if err == nil {
				t.Errorf("%s %s: succeeded: %s", c.tool, c.args, out)
				continue
			}
			hostile.CheckModelText(t, err.Error())
		}
		out, err := cl.CallTool(ctx, "word_count", json.RawMessage(hostile.WordCountArgs))
		if err != nil {
			t.Errorf("word_count through MCP: %v", err)
		} else {
			hostile.JSONEqual(t, out, hostile.WordCountResult)
		}
		hostile.Must(t, cl.Close(ctx))
		client.CloseIdleConnections()
		f.After(t, before, hostile.Outcome{}, "")
	})
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
