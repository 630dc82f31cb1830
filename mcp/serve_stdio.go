package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// Bounds on one message a client sends to the server.
const (
	// DefaultMaxRequestBytes caps one client message (a stdio line, an
	// HTTP request body) unless ServerOptions.MaxRequestBytes says
	// otherwise: 4 MiB, the SDK's own HTTP default.
	DefaultMaxRequestBytes = 4 << 20
	// MaxRequestDepth is how deeply arrays and objects may nest in one
	// client message over stdio.
	MaxRequestDepth = 64
)

// maxLoggedBadLines is how many malformed lines ServeStdio logs; later
// ones are answered but not logged, so a flood cannot fill the log.
const maxLoggedBadLines = 20

// ServeStdio serves reg (see NewServer) to one client speaking
// newline-delimited JSON-RPC: requests are read from r, answers written to
// w (for `agrun mcp serve`, os.Stdin and os.Stdout). It returns when r
// ends, when ctx is done, or when writing to w fails.
//
// Unlike the SDK's StdioTransport, which ends the session on the first
// line it cannot decode, ServeStdio answers a malformed line itself and
// reads on: a line that is not JSON, or nests deeper than
// MaxRequestDepth, gets a -32700 Parse error with id null; one that is
// JSON but not a valid request (no "jsonrpc":"2.0", a method that is not
// a string, an id that is not a string or an integer within ±2^53, a null
// id on a request, a bare value, a batch: MCP has no batches since
// 2025-06-18) gets a -32600 Invalid Request carrying the id when it could
// be read, else null. A line longer than ServerOptions.MaxRequestBytes is
// skipped without being kept in memory and answered -32600. A malformed
// response (a message with "result" or "error" but no usable id) is
// dropped: answering it could start an endless exchange of errors. Error
// messages are fixed texts that never quote the input.
func ServeStdio(ctx context.Context, reg *registry.Registry, r io.Reader, w io.Writer, opts *ServerOptions) error {
	var o ServerOptions
	if opts != nil {
		o = *opts
	}
	o.transport = "pipe"
	srv := NewServer(reg, &o)
	t := &lineTransport{r: r, w: w, max: o.maxRequestBytes(), log: o.logger()}
	return srv.Run(ctx, t)
}

// lineTransport is an sdk.Transport over a newline-delimited stream that
// answers malformed lines itself (see ServeStdio).
type lineTransport struct {
	r   io.Reader
	w   io.Writer
	max int
	log *slog.Logger
}

// Connect starts reading; it is called once, by sdk.Server.Connect.
func (t *lineTransport) Connect(context.Context) (sdk.Connection, error) {
	c := &lineConn{t: t, incoming: make(chan lineMsg), closed: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// lineConn is the connection of a lineTransport. Read is called by one
// goroutine at a time; Write and Close are safe for concurrent use.
type lineConn struct {
	t        *lineTransport
	incoming chan lineMsg

	writeMu sync.Mutex // one message at a time on w

	closeOnce sync.Once
	closed    chan struct{}
	bad       int // malformed lines seen, for the log cap; readLoop only
}

type lineMsg struct {
	msg jsonrpc.Message
	err error
}

// SessionID is empty: a stream carries one session.
func (c *lineConn) SessionID() string { return "" }

// Read returns the next valid message, io.EOF at the end of the input.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-c.incoming:
		return m.msg, m.err
	case <-c.closed:
		return nil, io.EOF
	}
}

// Write sends msg as one line.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encoding a message: %w", err)
	}
	return c.writeLine(data)
}

func (c *lineConn) writeLine(data []byte) error {
	select {
	case <-c.closed:
		return sdk.ErrConnectionClosed
	default:
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err := c.t.w.Write(append(data, '\n'))
	return err
}

// Close stops the connection; it closes the input if it is an io.Closer
// (which unblocks a read in progress where the platform allows).
func (c *lineConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		if rc, ok := c.t.r.(io.Closer); ok {
			err = rc.Close()
		}
	})
	return err
}

// readLoop reads lines until the input ends, passing valid messages to
// Read and answering the others.
func (c *lineConn) readLoop() {
	br := bufio.NewReaderSize(c.t.r, 64<<10)
	for {
		line, tooLong, rerr := readLine(br, c.t.max)
		if tooLong || len(bytes.TrimSpace(line)) > 0 {
			msg, reply, why := checkLine(line, tooLong, c.t.max)
			if why != "" {
				c.logBad(why)
			}
			if reply != nil {
				if err := c.writeLine(reply); err != nil {
					c.deliver(lineMsg{err: fmt.Errorf("answering a malformed message: %w", err)})
					return
				}
			}
			if msg != nil && !c.deliver(lineMsg{msg: msg}) {
				return
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				rerr = fmt.Errorf("reading the input: %w", rerr)
			}
			c.deliver(lineMsg{err: rerr})
			return
		}
	}
}

// deliver hands m to Read; false if the connection closed first.
func (c *lineConn) deliver(m lineMsg) bool {
	select {
	case c.incoming <- m:
		return true
	case <-c.closed:
		return false
	}
}

func (c *lineConn) logBad(why string) {
	c.bad++
	switch {
	case c.bad <= maxLoggedBadLines:
		c.t.log.Warn("malformed message from an MCP client", "problem", why)
	case c.bad == maxLoggedBadLines+1:
		c.t.log.Warn("more malformed messages from the MCP client; not logging them")
	}
}

// readLine reads one line without its line ending. A line longer than max
// bytes is read to its end but not kept: tooLong is true and line nil. err
// is the read error that ended the input (io.EOF), after the last line.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+2 { // +2: "\r\n" is not counted
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > max {
			tooLong, line = true, nil
		}
		return line, tooLong, err
	}
}

// JSON-RPC 2.0 error codes of the answers agrun writes itself.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeServerError    = -32000 // the first of the implementation-defined codes
)

// maxExactID is the largest integer id the SDK gives back unchanged (it
// decodes ids as float64).
const maxExactID = 1 << 53

// checkLine judges one line: a message to pass on, or an error reply (and,
// for either, why it was malformed, for the log). A nil msg and nil reply
// means the line is dropped.
func checkLine(line []byte, tooLong bool, max int) (msg jsonrpc.Message, reply []byte, why string) {
	if tooLong {
		why = "message longer than " + strconv.Itoa(max) + " bytes"
		return nil, errorReply(nil, codeInvalidRequest, "Invalid Request: "+why), why
	}
	if nestedDeeper(line, MaxRequestDepth) {
		why = "nested deeper than " + strconv.Itoa(MaxRequestDepth)
		return nil, errorReply(nil, codeParseError, "Parse error: "+why), why
	}
	if !json.Valid(line) {
		return nil, errorReply(nil, codeParseError, "Parse error: not JSON"), "not JSON"
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil || fields == nil {
		why = "not a JSON object"
		if b := bytes.TrimSpace(line); b[0] == '[' {
			why = "a batch (MCP has no batches)"
		}
		return nil, errorReply(nil, codeInvalidRequest, "Invalid Request: "+why), why
	}
	idRaw, hasID := fields["id"]
	id, idOK := checkID(idRaw)
	_, hasResult := fields["result"]
	_, hasError := fields["error"]
	method, hasMethod := fields["method"]
	if !hasMethod && (hasResult || hasError) {
		// A response to one of our requests: never answered, whatever is
		// wrong with it.
		if !idOK || string(id) == "null" || string(fields["jsonrpc"]) != `"2.0"` {
			return nil, nil, "malformed response (dropped)"
		}
	} else {
		var replyID json.RawMessage
		if idOK {
			replyID = id
		}
		invalid := func(why string) (jsonrpc.Message, []byte, string) {
			return nil, errorReply(replyID, codeInvalidRequest, "Invalid Request: "+why), why
		}
		switch {
		case string(fields["jsonrpc"]) != `"2.0"`:
			return invalid(`"jsonrpc" must be "2.0"`)
		case hasID && !idOK:
			return invalid("id must be a string or an integer within ±2^53")
		case !hasMethod:
			return invalid("neither a request nor a response")
		case len(method) == 0 || method[0] != '"':
			return invalid("method must be a string")
		case hasID && string(id) == "null":
			return invalid("a request's id must not be null")
		}
	}
	m, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		// Everything the SDK's decoder refuses was caught above; this is
		// a guard, so that nothing it refuses can end the session.
		if hasMethod {
			return nil, errorReply(nil, codeInvalidRequest, "Invalid Request: undecodable message"), "undecodable message"
		}
		return nil, nil, "undecodable response (dropped)"
	}
	return m, nil, ""
}

// checkID returns the id as it should be echoed, and whether it is one
// (a string, null, or an integer the SDK keeps exact).
func checkID(raw json.RawMessage) (json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, false
	}
	switch raw[0] {
	case '"':
		return raw, true
	case 'n':
		return raw, true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > maxExactID {
			return nil, false
		}
		if f == maxExactID || f == -maxExactID {
			// 2^53+1 parses as 2^53; only the exact text is accepted.
			if s := strconv.FormatInt(int64(f), 10); string(raw) != s {
				return nil, false
			}
		}
		return raw, true
	}
	return nil, false
}

// nestedDeeper reports whether arrays and objects in b nest deeper than
// max (strings are skipped; b need not be valid JSON).
func nestedDeeper(b []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > max {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

// errorReply is a JSON-RPC error response; a nil id is sent as null.
func errorReply(id json.RawMessage, code int, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", id, jsonrpc.Error{Code: int64(code), Message: message}})
	return b
}
