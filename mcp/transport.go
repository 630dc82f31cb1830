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
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Transport says how to reach a server: [Stdio], [HTTP] or [SDKTransport].
// A Client opens a new connection through it at Connect and after every
// failure it recovers from.
type Transport interface {
	open(ctx context.Context, cfg *linkConfig) (*link, error)
}

// Stdio runs the server as a child process and speaks newline-delimited
// JSON-RPC over its stdin and stdout.
//
// The process is started in its own process group. When the Client closes
// the connection (or gives up on it), it closes the server's stdin, waits a
// little for it to exit, then signals the whole group (SIGTERM, then
// SIGKILL), so helpers the server spawned do not outlive it. A descendant
// that moves itself to another process group or session escapes this.
type Stdio struct {
	Command string   // program to run; looked up in PATH if it has no slash
	Args    []string // arguments, without the program name
	// Env holds "KEY=VALUE" entries added to the server's environment
	// (later entries win). The server does not inherit agrun's whole
	// environment, which may hold API keys: only the variables named in
	// InheritedEnv are passed on from it.
	Env []string
	Dir string // working directory; empty means the current one
}

// InheritedEnv names the variables of agrun's environment a stdio server
// inherits: what programs need to find themselves and their home, and the
// locale. Anything else (API keys above all) must be given in Stdio.Env.
var InheritedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE",
	"TMPDIR", "TZ", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
	"SYSTEMROOT", "APPDATA", "LOCALAPPDATA", "USERPROFILE", "TEMP", "TMP",
}

func inheritedEnv() []string {
	var env []string
	for _, k := range InheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// HTTP reaches a server over the streamable HTTP transport.
type HTTP struct {
	URL     string            // the MCP endpoint, e.g. http://127.0.0.1:8080/mcp
	Headers map[string]string // added to every request (e.g. Authorization)
	// OAuth, if set, authorizes the requests with OAuth 2.1 as MCP's
	// authorization specification says (see OAuth).
	OAuth *OAuth
}

// SDKTransport wraps transports of the SDK (for instance one side of
// sdk.NewInMemoryTransports) or of your own. New is called for every
// connection the Client opens; a transport that can connect only once (as
// in-memory ones) makes restarts fail with an mcp_error.
type SDKTransport struct {
	New func() sdk.Transport
}

// linkConfig is what a transport needs from the Client's options.
type linkConfig struct {
	server     string
	maxMessage int
	maxStderr  int
	timeout    time.Duration
	log        *slog.Logger
}

// link is one open connection: an SDK transport to connect the session
// over, and how to end what stands behind it.
type link struct {
	transport sdk.Transport
	// cause reports why the connection broke, when the link knows better
	// than the SDK's error (exit status, oversized message); may be nil.
	cause func() error
	// stop ends the peer after the session was closed; may be nil.
	stop func(ctx context.Context) error
}

func (t SDKTransport) open(ctx context.Context, cfg *linkConfig) (*link, error) {
	if t.New == nil {
		return nil, errors.New("SDKTransport.New is nil")
	}
	tr := t.New()
	if tr == nil {
		return nil, errors.New("SDKTransport.New returned nil")
	}
	return &link{transport: tr}, nil
}

func (h HTTP) open(ctx context.Context, cfg *linkConfig) (*link, error) {
	if h.URL == "" {
		return nil, errors.New("HTTP.URL is empty")
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	rt := &httpLimits{base: base, headers: maps.Clone(h.Headers), max: int64(cfg.maxMessage)}
	if u, err := url.Parse(h.URL); err == nil {
		rt.origin = u.Scheme + "://" + u.Host
	}
	tr := &sdk.StreamableClientTransport{
		Endpoint:     h.URL,
		HTTPClient:   &http.Client{Transport: rt},
		MaxEventSize: cfg.maxMessage,
	}
	cause := rt.unauthorized
	if h.OAuth != nil {
		oh, err := h.OAuth.handlerFor(h.URL)
		if err != nil {
			return nil, err
		}
		tr.OAuthHandler = oh
		cause = oh.failure
	}
	return &link{
		transport: tr,
		cause:     cause,
		stop:      func(context.Context) error { base.CloseIdleConnections(); return nil },
	}, nil
}

// httpLimits adds the configured headers to every request and caps the
// body of JSON answers (the SDK reads them whole; SSE events are capped by
// StreamableClientTransport.MaxEventSize).
type httpLimits struct {
	base    http.RoundTripper
	headers map[string]string
	max     int64
	origin  string       // the endpoint's scheme://host: the headers go there only
	denied  atomic.Int32 // the last 401 or 403 status answered, 0 after a success
}

// ErrUnauthorized is wrapped by the error of a connection the server
// refused with 401 Unauthorized or 403 Forbidden when the transport has no
// OAuth: the server wants credentials (OAuth, or a token in a header).
var ErrUnauthorized = errors.New("the server requires authorization")

// unauthorized is the cause of a failure after the server refused the
// credentials (or their absence).
func (h *httpLimits) unauthorized() error {
	switch code := h.denied.Load(); code {
	case 0:
		return nil
	default:
		return fmt.Errorf("%w: it answered %d %s (configure OAuth, or send a token in a header)", ErrUnauthorized, code, http.StatusText(int(code)))
	}
}

func (h *httpLimits) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 && req.URL.Scheme+"://"+req.URL.Host == h.origin {
		// Not on a redirect to another origin: the configured headers
		// (a token from headers_env) are the endpoint's.
		req = req.Clone(req.Context())
		for k, v := range h.headers {
			req.Header.Set(k, v)
		}
	}
	resp, err := h.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		h.denied.Store(int32(resp.StatusCode))
	default:
		if resp.StatusCode < 300 {
			h.denied.Store(0)
		}
	}
	if ct := resp.Header.Get("Content-Type"); !bytes.HasPrefix([]byte(ct), []byte("text/event-stream")) {
		resp.Body = &limitedBody{rc: resp.Body, left: h.max}
	}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, &tooLargeError{}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// tooLargeError: the server sent one message over the cap.
type tooLargeError struct{ max int }

func (e *tooLargeError) Error() string {
	if e.max > 0 {
		return fmt.Sprintf("server sent a message larger than the %d-byte cap", e.max)
	}
	return "server sent a message larger than the cap"
}

// Grace periods of a stdio server's shutdown: after its stdin is closed,
// after SIGTERM, and the longest wait for the process to go after SIGKILL.
const (
	stdinGrace = 2 * time.Second
	termGrace  = 2 * time.Second
	killWait   = 5 * time.Second
)

func (s Stdio) open(ctx context.Context, cfg *linkConfig) (_ *link, err error) {
	if s.Command == "" {
		return nil, errors.New("Stdio.Command is empty")
	}
	var files []*os.File
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.Command, s.Args...)
	cmd.Env = append(inheritedEnv(), s.Env...)
	cmd.Dir = s.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The child has its ends; keep ours only.
	inR.Close()
	outW.Close()
	errW.Close()

	p := &process{cmd: cmd, stdin: inW, stdout: outR, exited: make(chan struct{}), log: cfg.log, server: cfg.server}
	go p.wait()
	go drainStderr(errR, cfg.log, cfg.server, cfg.maxStderr)
	filter := newLineFilter(outR, cfg.maxMessage, cfg.log, cfg.server)
	p.filter = filter
	return &link{
		transport: &sdk.IOTransport{
			Reader:        filter,
			Writer:        &deadlineWriter{f: inW, timeout: cfg.timeout},
			MaxLineLength: cfg.maxMessage + 2, // the filter enforces the cap itself
		},
		cause: p.cause,
		stop:  p.stop,
	}, nil
}

// process is a running stdio server.
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	filter *lineFilter
	log    *slog.Logger
	server string

	exited  chan struct{} // closed once cmd.Wait returned
	waitErr error         // cmd.Wait's result, set before exited is closed

	stopOnce sync.Once
	stopErr  error
}

func (p *process) wait() {
	p.waitErr = p.cmd.Wait()
	close(p.exited)
	// Fail pending calls now, even if a descendant keeps stdout open.
	p.stdout.Close()
}

// cause says why the connection broke: an oversized message, or the
// process's exit.
func (p *process) cause() error {
	if err := p.filter.failure(); err != nil {
		return err
	}
	exited := p.exited
	if p.filter.ended() {
		// stdout ended: the process is most likely on its way out; give
		// it a moment so the error can say how it ended.
		t := time.NewTimer(exitWait)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
		}
	}
	select {
	case <-exited:
		if p.waitErr != nil {
			return fmt.Errorf("server process exited: %w", p.waitErr)
		}
		return errors.New("server process exited")
	default:
		return nil
	}
}

// exitWait is how long cause waits for the process to exit once its
// stdout ended.
const exitWait = 2 * time.Second

// stop ends the server and everything in its process group: close stdin,
// wait stdinGrace for the process to exit, SIGTERM the group, wait
// termGrace, SIGKILL the group. A done ctx skips the waiting. Once the
// leader is gone, the rest of the group is sent SIGTERM and, after a short
// wait, SIGKILL. The process's exit status is logged, not returned: a
// server that exits when its stdin closes shut down normally whatever its
// status. stop returns an error only if the process could not be ended.
func (p *process) stop(ctx context.Context) error {
	p.stopOnce.Do(func() { p.stopErr = p.doStop(ctx) })
	return p.stopErr
}

func (p *process) doStop(ctx context.Context) error {
	p.stdin.Close()
	waitFor := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-p.exited:
			return true
		case <-t.C:
		case <-ctx.Done():
		}
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	}
	pid := p.cmd.Process.Pid
	if !waitFor(stdinGrace) {
		signalGroup(pid, sigTerm)
		if !waitFor(termGrace) {
			signalGroup(pid, sigKill)
			t := time.NewTimer(killWait)
			defer t.Stop()
			select {
			case <-p.exited:
			case <-t.C:
				return fmt.Errorf("server process %d did not exit after SIGKILL", pid)
			}
		}
	}
	endGroup(ctx, pid)
	if p.waitErr != nil {
		p.log.Debug("MCP server process ended", "server", p.server, "pid", pid, "status", p.waitErr.Error())
	}
	return nil
}

// deadlineWriter bounds each write to the server's stdin, so a server that
// stops reading cannot block a call forever.
type deadlineWriter struct {
	f       *os.File
	timeout time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		_ = w.f.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	return w.f.Write(p)
}

func (w *deadlineWriter) Close() error { return w.f.Close() }

// lineFilter sits between a server's stdout and the SDK's decoder. It
// passes through lines that are valid JSON, logs and drops everything else
// (servers that print banners or debug output to stdout keep working), and
// fails the connection with a *tooLargeError when one line exceeds the cap.
type lineFilter struct {
	src    *os.File
	br     *bufio.Reader
	max    int
	log    *slog.Logger
	server string

	pending []byte // the rest of the current line, not yet read
	line    []byte // buffer reused across lines
	dropped int    // non-JSON lines dropped so far

	mu  sync.Mutex
	err error // set once the cap was exceeded
	eof bool  // reading stdout failed (EOF or closed)
}

// maxLoggedDrops bounds how many dropped lines are logged per connection.
const maxLoggedDrops = 20

func newLineFilter(src *os.File, max int, log *slog.Logger, server string) *lineFilter {
	return &lineFilter{src: src, br: bufio.NewReaderSize(src, 64<<10), max: max, log: log, server: server}
}

func (f *lineFilter) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// ended reports whether reading stdout failed: end of file, or closed.
func (f *lineFilter) ended() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.eof
}

func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		line, err := f.next()
		if err != nil {
			f.mu.Lock()
			f.eof = true
			f.mu.Unlock()
			return 0, err
		}
		f.pending = line
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// next returns the next line that is valid JSON, with its newline.
func (f *lineFilter) next() ([]byte, error) {
	for {
		if cap(f.line) > 1<<20 {
			f.line = nil // do not keep a huge buffer for the connection's lifetime
		}
		f.line = f.line[:0]
		for {
			chunk, err := f.br.ReadSlice('\n')
			if len(f.line)+len(chunk) > f.max+2 { // +2 for "\r\n"
				e := &tooLargeError{max: f.max}
				f.mu.Lock()
				f.err = e
				f.mu.Unlock()
				return nil, e
			}
			f.line = append(f.line, chunk...)
			if err == nil {
				break
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if len(f.line) > 0 && err == io.EOF {
				f.line = append(f.line, '\n')
				break
			}
			return nil, err
		}
		trimmed := bytes.TrimSpace(f.line)
		if len(trimmed) == 0 {
			continue
		}
		if (trimmed[0] == '{' || trimmed[0] == '[') && json.Valid(trimmed) {
			return f.line, nil
		}
		f.dropped++
		if f.dropped <= maxLoggedDrops {
			f.log.Warn("MCP server wrote a non-JSON line to stdout; ignored", "server", f.server,
				"line", SanitizeText(string(trimmed), 200))
		} else if f.dropped == maxLoggedDrops+1 {
			f.log.Warn("MCP server keeps writing non-JSON lines to stdout; no longer logging them", "server", f.server)
		}
	}
}

func (f *lineFilter) Close() error { return f.src.Close() }

// drainStderr reads a server's stderr to the end, logging each line (cut
// to 1 KiB) until max bytes were logged; then it logs one notice and
// discards the rest, still reading so the server never blocks on a full
// pipe.
func drainStderr(r *os.File, log *slog.Logger, server string, max int) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 4<<10)
	logged := 0
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if logged < max {
				text := SanitizeText(string(bytes.TrimRight(line, "\r\n")), 1<<10)
				logged += len(line)
				log.Info("MCP server stderr", "server", server, "line", text)
				if logged >= max {
					log.Warn("MCP server stderr over the cap; discarding the rest", "server", server, "cap", max)
				}
			}
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
