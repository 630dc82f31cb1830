package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/testing/syncbuf"
)

// TestMCPServeStdioMalformed drives `agrun mcp serve` (the built binary)
// over its stdin and stdout as a hostile MCP client would: every kind of
// malformed line gets a JSON-RPC error, the process does not exit, and the
// honest call after each one is answered.
func TestMCPServeStdioMalformed(t *testing.T) {
	e := hostile.NewCLIEnv(t, "", "")
	cmd := exec.Command(hostile.AgrunBinary(t), "-c", e.Config, "mcp", "serve")
	cmd.Env = os.Environ()
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	hostile.Must(t, err)
	stdout, err := cmd.StdoutPipe()
	hostile.Must(t, err)
	hostile.Must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	exited := make(chan struct{})
	replies := make(chan string)
	go func() {
		defer close(replies)
		br := bufio.NewReader(stdout)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			replies <- line
		}
	}()
	send := func(line string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { _, err := io.WriteString(stdin, line+"\n"); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("writing to agrun: %v (stderr: %s)", err, hostile.Truncate(stderr.String(), 2000))
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("agrun stopped reading its stdin")
		}
	}
	type reply struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	next := func() (reply, string) {
		t.Helper()
		select {
		case line, ok := <-replies:
			if !ok {
				t.Fatalf("agrun closed its stdout (exited: %v); stderr: %s", cmd.ProcessState, hostile.Truncate(stderr.String(), 2000))
			}
			var r reply
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("stdout line is not JSON: %q", hostile.Truncate(line, 300))
			}
			hostile.CheckTerminalSafe(t, "reply", []byte(strings.TrimSuffix(line, "\n")))
			return r, line
		case <-time.After(2 * time.Minute):
			t.Fatalf("no reply; stderr: %s", hostile.Truncate(stderr.String(), 2000))
		}
		return reply{}, ""
	}

	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"hostile","version":"1"}}}`)
	if r, line := next(); r.Error != nil {
		t.Fatalf("initialize: %s", line)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, c := range []struct {
		name, line string
		code       int
	}{
		{"terminal escapes", "\x1b]0;pwned\x07\x1b[2J", -32700},
		{"depth 10000", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), -32700},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"tools/list"}`, -32600},
		{"1e400 id", `{"jsonrpc":"2.0","id":1e400,"method":"tools/list"}`, -32600},
		{"no jsonrpc", `{"id":1,"method":"tools/list"}`, -32600},
		{"bare number", `42`, -32600},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, -32600},
		{"20 MiB line", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"pad":"` + strings.Repeat("A", 20<<20) + `"}}`, -32600},
	} {
		send(c.line)
		if r, line := next(); r.Error == nil || r.Error.Code != c.code {
			t.Errorf("%s: reply %s, want error %d", c.name, hostile.Truncate(line, 300), c.code)
		}
		id := 100 + i
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"word_count","arguments":%s}}`, id, hostile.WordCountArgs))
		if r, line := next(); string(r.ID) != fmt.Sprint(id) || r.Error != nil || len(r.Result) == 0 || strings.Contains(string(r.Result), `"isError":true`) {
			t.Errorf("%s: the call after it: %s", c.name, hostile.Truncate(line, 300))
		}
	}
	if s := stderr.String(); strings.Contains(s, "pwned") || strings.Contains(s, "AAAAAAAA") {
		t.Errorf("the log quotes the input: %s", hostile.Truncate(s, 1000))
	}
	stdin.Close()
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit %d at the end of stdin; stderr: %s", code, hostile.Truncate(stderr.String(), 2000))
		}
	case <-time.After(time.Minute):
		t.Error("agrun mcp serve did not exit at the end of stdin")
	}
}

// TestMCPServeHTTPListener: `agrun mcp serve --http` follows `agrun
// serve`'s listener policy. A non-loopback address without tokens is
// refused (exit 2, naming [serve] tokens_env); with tokens, a request
// without the bearer token or with a wrong one gets 401, and the right
// one is served.
func TestMCPServeHTTPListener(t *testing.T) {
	e := hostile.NewCLIEnv(t, "", "")
	for _, c := range []struct{ name, tokens string }{
		{"no tokens", ""},
		{"short token", "short"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(hostile.AgrunBinary(t), "-c", e.Config, "mcp", "serve", "--http", "0.0.0.0:0")
			cmd.Env = append(os.Environ(), "AGRUN_TOKENS="+c.tokens)
			var stderr syncbuf.Buffer
			cmd.Stderr = &stderr
			hostile.Must(t, cmd.Start())
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				<-done
				t.Fatalf("agrun mcp serve --http 0.0.0.0:0 with AGRUN_TOKENS=%q is serving; stderr: %s", c.tokens, hostile.Truncate(stderr.String(), 1000))
			}
			if code := cmd.ProcessState.ExitCode(); code != 2 {
				t.Errorf("exit %d, want 2; stderr: %s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), "AGRUN_TOKENS") && !strings.Contains(stderr.String(), "tokens_env") {
				t.Errorf("stderr does not name the fix: %s", stderr.String())
			}
		})
	}

	const token = "hostile-test-token-0123456789"
	url := startMCPHTTP(t, e, "0.0.0.0:0", "other-token-abcdefghijkl, "+token)
	client := &http.Client{Timeout: 30 * time.Second}
	post := func(auth string) (int, string) {
		t.Helper()
		return postInitialize(t, client, url, "", auth)
	}
	for _, auth := range []string{"", "Bearer", "Bearer wrong-token-0123456789", "Basic " + token, "Bearer " + token + "x", "Bearer " + token[:len(token)-1]} {
		if code, body := post(auth); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d (%s), want 401", auth, code, hostile.Truncate(body, 200))
		}
	}
	if code, body := post("Bearer " + token); code != http.StatusOK || !strings.Contains(body, `"serverInfo"`) {
		t.Errorf("the right token: status %d: %s", code, hostile.Truncate(body, 300))
	}
}

// startMCPHTTP starts `agrun mcp serve --http addr` with $AGRUN_TOKENS set
// to tokens and returns its endpoint on 127.0.0.1.
func startMCPHTTP(t *testing.T, e *hostile.CLIEnv, addr, tokens string, flags ...string) string {
	t.Helper()
	cmd := exec.Command(hostile.AgrunBinary(t), append([]string{"-c", e.Config, "mcp", "serve", "--http", addr}, flags...)...)
	cmd.Env = append(os.Environ(), "AGRUN_TOKENS="+tokens)
	pr, pw := io.Pipe()
	var stderr syncbuf.Buffer
	cmd.Stderr = io.MultiWriter(&stderr, pw)
	hostile.Must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); pw.Close() })
	portc := make(chan string, 1)
	go func() { // the port it chose, from its "MCP server on" line
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "MCP server on http://"); ok {
				hostPort, _, _ := strings.Cut(rest, "/")
				_, port, _ := net.SplitHostPort(hostPort)
				portc <- port
				break
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case port := <-portc:
		return "http://127.0.0.1:" + port + "/mcp"
	case <-time.After(2 * time.Minute):
		t.Fatalf("agrun mcp serve --http did not say where it listens: %s", stderr.String())
	}
	return ""
}

// postInitialize POSTs an initialize request with the given Host (empty:
// the URL's) and Authorization (empty: none).
func postInitialize(t *testing.T, client *http.Client, url, host, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"hostile","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if host != "" {
		req.Host = host
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// TestMCPServeHTTPLoopback: on loopback `agrun mcp serve --http` needs no
// token, as before, and still refuses a foreign Host (DNS rebinding).
func TestMCPServeHTTPLoopback(t *testing.T) {
	e := hostile.NewCLIEnv(t, "", "")
	url := startMCPHTTP(t, e, "127.0.0.1:0", "")
	client := &http.Client{Timeout: 30 * time.Second}
	if code, body := postInitialize(t, client, url, "", ""); code != http.StatusOK {
		t.Errorf("loopback without a token: status %d: %s", code, hostile.Truncate(body, 300))
	}
	if code, body := postInitialize(t, client, url, "attacker.example", ""); code != http.StatusForbidden {
		t.Errorf("foreign Host: status %d (%s), want 403", code, hostile.Truncate(body, 300))
	}
}

// TestMCPServeHTTPSessionCap: one client opening sessions without end
// through the built binary gets 429 past the per-client cap (16) instead
// of growing the server by a session each, and its open sessions still
// work.
func TestMCPServeHTTPSessionCap(t *testing.T) {
	e := hostile.NewCLIEnv(t, "", "")
	url := startMCPHTTP(t, e, "127.0.0.1:0", "")
	client := &http.Client{Timeout: 30 * time.Second}
	opened, refused := 0, 0
	for i := 0; i < 40; i++ {
		switch code, body := postInitialize(t, client, url, "", ""); code {
		case http.StatusOK:
			opened++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("initialize %d: status %d: %s", i, code, hostile.Truncate(body, 300))
		}
	}
	if opened != 16 || refused != 24 {
		t.Errorf("40 initialize requests from one address: %d sessions opened, %d refused; want 16 and 24", opened, refused)
	}

	// The caps are the operator's: --max-sessions-per-client.
	url = startMCPHTTP(t, e, "127.0.0.1:0", "", "--max-sessions-per-client", "3", "--max-sessions", "100")
	opened = 0
	for i := 0; i < 5; i++ {
		if code, _ := postInitialize(t, client, url, "", ""); code == http.StatusOK {
			opened++
		}
	}
	if opened != 3 {
		t.Errorf("--max-sessions-per-client 3: %d of 5 sessions opened, want 3", opened)
	}
}
