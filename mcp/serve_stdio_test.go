package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
)

// stdioPeer is a client of ServeStdio over real pipes, speaking raw lines.
type stdioPeer struct {
	t       *testing.T
	in      *io.PipeWriter // the server's stdin
	out     *bufio.Reader  // the server's stdout
	ended   chan struct{}  // closed when ServeStdio returns
	err     error          // what it returned, once ended is closed
	replies chan string
}

// startStdio runs ServeStdio over pipes and initializes the session.
func startStdio(t *testing.T, opts *ServerOptions) *stdioPeer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &stdioPeer{t: t, in: inW, out: bufio.NewReader(outR), ended: make(chan struct{}), replies: make(chan string)}
	if opts == nil {
		opts = &ServerOptions{}
	}
	if opts.Logger == nil {
		opts.Logger, _ = newLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		p.err = ServeStdio(ctx, serverRegistry(), inR, outW, opts)
		outW.Close()
		close(p.ended)
	}()
	go func() { // every line the server writes, in order
		defer close(p.replies)
		for {
			line, err := p.out.ReadString('\n')
			if err != nil {
				return
			}
			p.replies <- line
		}
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		select {
		case <-p.ended:
		case <-time.After(30 * time.Second):
			t.Error("ServeStdio did not return after its input closed")
		}
	})
	p.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if r := p.reply(); r.Error != nil {
		t.Fatalf("initialize: %s", r.raw)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return p
}

// send writes one line (a newline is added); it fails the test if the
// server stops reading.
func (p *stdioPeer) send(line string) {
	p.t.Helper()
	sent := make(chan error, 1)
	go func() {
		_, err := io.WriteString(p.in, line+"\n")
		sent <- err
	}()
	select {
	case err := <-sent:
		if err != nil {
			p.t.Fatalf("writing to the server: %v", err)
		}
	case <-p.ended:
		p.t.Fatalf("the server ended (%v) while reading a line", p.err)
	case <-time.After(60 * time.Second):
		p.t.Fatal("the server stopped reading its input")
	}
}

// gone reports whether ServeStdio has returned.
func (p *stdioPeer) gone() bool {
	select {
	case <-p.ended:
		return true
	default:
		return false
	}
}

type rpcReply struct {
	raw    string
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	HasID bool `json:"-"`
}

// reply reads the next line the server writes.
func (p *stdioPeer) reply() rpcReply {
	p.t.Helper()
	select {
	case line, ok := <-p.replies:
		if !ok {
			<-p.ended
			p.t.Fatalf("the server closed its output (ServeStdio returned %v)", p.err)
		}
		var r rpcReply
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			p.t.Fatalf("reply is not JSON: %q", line)
		}
		var keys map[string]json.RawMessage
		json.Unmarshal([]byte(line), &keys)
		_, r.HasID = keys["id"]
		r.raw = strings.TrimSpace(line)
		return r
	case <-time.After(60 * time.Second):
		p.t.Fatal("no reply from the server")
	}
	return rpcReply{}
}

// TestServeStdioMalformed: every malformed line gets its JSON-RPC 2.0
// error (-32700 for what is not JSON, -32600 for what is not a valid
// request, with the id when it could be read), the error text never
// quotes the input, and the session goes on: the next tools/list is
// answered.
func TestServeStdioMalformed(t *testing.T) {
	p := startStdio(t, nil)
	for i, c := range []struct {
		name, line string
		code       int
		id         string // the id the error must carry
	}{
		{"not JSON", "\x1b[2J hello {{{", -32700, "null"},
		{"broken JSON", `{"jsonrpc":"2.0","id":7,"method":"tools/list"`, -32700, "null"},
		{"trailing data", `{"jsonrpc":"2.0","id":7,"method":"tools/list"} {}`, -32700, "null"},
		{"depth 10000", `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, -32700, "null"},
		{"depth 10000 objects", strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000), -32700, "null"},
		{"object id", `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, -32600, "null"},
		{"array id", `{"jsonrpc":"2.0","id":[1],"method":"tools/list"}`, -32600, "null"},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"tools/list"}`, -32600, "null"},
		{"1e400 id", `{"jsonrpc":"2.0","id":1e400,"method":"tools/list"}`, -32600, "null"},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`, -32600, "null"},
		{"id past 2^53", `{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/list"}`, -32600, "null"},
		{"null id request", `{"jsonrpc":"2.0","id":null,"method":"tools/list"}`, -32600, "null"},
		{"no jsonrpc", `{"id":8,"method":"tools/list"}`, -32600, "8"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":"s","method":"tools/list"}`, -32600, `"s"`},
		{"jsonrpc not a string", `{"jsonrpc":2,"id":9,"method":"tools/list"}`, -32600, "9"},
		{"method not a string", `{"jsonrpc":"2.0","id":10,"method":5}`, -32600, "10"},
		{"neither request nor response", `{"jsonrpc":"2.0","id":11}`, -32600, "11"},
		{"bare number", `1`, -32600, "null"},
		{"bare string", `"tools/list"`, -32600, "null"},
		{"null", `null`, -32600, "null"},
		{"batch array", `[{"jsonrpc":"2.0","id":12,"method":"tools/list"}]`, -32600, "null"},
		{"empty batch", `[]`, -32600, "null"},
		{"20 MiB line", `{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"count","arguments":{"text":"` + strings.Repeat("a ", 10<<20) + `"}}}`, -32600, "null"},
	} {
		ok := t.Run(c.name, func(t *testing.T) {
			p.t = t
			p.send(c.line)
			r := p.reply()
			if r.Error == nil || r.Error.Code != c.code {
				t.Errorf("reply %s, want error %d", textsafe.Truncate(r.raw, 300), c.code)
			}
			if !r.HasID || string(r.ID) != c.id {
				t.Errorf("reply id %s (present: %v), want %s", r.ID, r.HasID, c.id)
			}
			if r.Error != nil && (len(r.Error.Message) > 200 || strings.ContainsAny(r.Error.Message, "\x1b{[")) {
				t.Errorf("error message quotes the input: %q", textsafe.Truncate(r.Error.Message, 300))
			}
			id := 100 + i
			p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id))
			r = p.reply()
			if string(r.ID) != fmt.Sprint(id) || r.Error != nil || !strings.Contains(string(r.Result), `"count"`) {
				t.Errorf("tools/list after it: %s", textsafe.Truncate(r.raw, 300))
			}
		})
		if !ok && p.gone() {
			t.Fatalf("the session ended after %s", c.name)
		}
	}
}

// TestServeStdioValidShapes: what is valid passes through unchanged (a
// string id, CRLF line ends, blank lines, odd params the SDK answers
// itself), and responses that cannot be matched are dropped without an
// answer (answering a response could start an endless exchange of errors)
// while the session goes on.
func TestServeStdioValidShapes(t *testing.T) {
	p := startStdio(t, nil)
	p.send(`{"jsonrpc":"2.0","id":"abc","method":"tools/list"}` + "\r")
	if r := p.reply(); string(r.ID) != `"abc"` || r.Error != nil {
		t.Errorf("string id: %s", r.raw)
	}
	p.send("")
	p.send("   \t")
	p.send(`{"jsonrpc":"2.0","id":9007199254740992,"method":"tools/list"}`)
	if r := p.reply(); string(r.ID) != "9007199254740992" || r.Error != nil {
		t.Errorf("id 2^53: %s", textsafe.Truncate(r.raw, 200))
	}
	p.send(`{"jsonrpc":"2.0","id":-3,"method":"tools/call","params":5}`)
	if r := p.reply(); string(r.ID) != "-3" || r.Error == nil {
		t.Errorf("params 5: %s", r.raw)
	}
	p.send(`{"jsonrpc":"2.0","id":4,"method":"no/such/method"}`)
	if r := p.reply(); string(r.ID) != "4" || r.Error == nil || r.Error.Code != -32601 {
		t.Errorf("unknown method: %s", r.raw)
	}
	for _, dropped := range []string{
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`,
		`{"jsonrpc":"2.0","id":{"x":1},"result":{}}`,
		`{"id":77,"result":{}}`,
		`{"jsonrpc":"2.0","id":77,"result":{}}`, // no such request of ours
		`{"jsonrpc":"2.0","method":"notifications/whatever"}`,
	} {
		p.send(dropped)
	}
	p.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"count","arguments":{"text":"a b c"}}}`)
	if r := p.reply(); string(r.ID) != "5" || !strings.Contains(string(r.Result), `"words":3`) {
		t.Errorf("the first reply after the dropped messages is %s, want the answer to id 5", r.raw)
	}
}

// TestServeStdioLineCap: the cap is ServerOptions.MaxRequestBytes; a line
// at the cap passes, one byte more is refused, and ServeStdio ends
// cleanly when its input does.
func TestServeStdioLineCap(t *testing.T) {
	const max = 4096
	p := startStdio(t, &ServerOptions{MaxRequestBytes: max})
	req := func(id int, pad int) string {
		head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{"x":"`, id)
		return head + strings.Repeat("x", pad-len(head)-3) + `"}}`
	}
	p.send(req(1, max))
	if r := p.reply(); string(r.ID) != "1" || r.Error != nil {
		t.Errorf("a line of exactly %d bytes: %s", max, textsafe.Truncate(r.raw, 200))
	}
	p.send(req(2, max+1))
	if r := p.reply(); string(r.ID) != "null" || r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "4096") {
		t.Errorf("a line of %d bytes: %s", max+1, textsafe.Truncate(r.raw, 200))
	}
	p.in.Close()
	select {
	case <-p.ended:
		if p.err != nil {
			t.Errorf("ServeStdio at the end of its input: %v", p.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ServeStdio did not return at the end of its input")
	}
}
