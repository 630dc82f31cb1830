// Package wire is what the loop's provider adapters (loop/chat,
// loop/responses, loop/anthropic, loop/gemini) share around their SDKs:
// an HTTP client that records each attempt's response and bounds what a
// provider can make it read, the classification of an SDK's failure into
// the loop's errors, error bodies in every shape providers send, a byte
// budget for a reply, and the conversions every adapter needs.
//
// The SDKs fall short in the same places, which is why this exists: they
// read error bodies whole (genai: io.ReadAll of whatever the server
// sends), keep no response headers on their errors (genai), buffer a
// stream line of up to 256 MiB (genai), and concatenate streamed strings
// with += (anthropic-sdk-go's Message.Accumulate: quadratic in the
// number of deltas). The recording transport bounds every body; the
// adapters assemble replies themselves with builders and a Budget.
package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
)

// maxErrorBody bounds how much of an error body is read for its message.
const maxErrorBody = 64 << 10

// maxMessage bounds a provider's error message as the loop keeps it.
const maxMessage = 2048

// defaultClient is shared by every provider without an HTTP client of its
// own, so that Cycles reuse connections. It bounds the wait for response
// headers (10 minutes), not bodies (the loop's idle timeout does).
var defaultClient = sync.OnceValue(func() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		return &http.Client{Transport: t}
	}
	return &http.Client{Transport: http.DefaultTransport}
})

// Client returns c (the shared default client if nil) with its transport
// wrapped to record, for the attempt a context carries (Start), the
// response's status and headers and the start of an error body, and to
// bound what is read of a body.
func Client(c *http.Client) *http.Client {
	if c == nil {
		c = defaultClient()
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	cc := *c
	cc.Transport = &recorder{next: next}
	return &cc
}

// Recording is what the transport saw of one attempt.
type Recording struct {
	mu     sync.Mutex
	status int
	header http.Header
	body   []byte // the start of an error body
	limit  int64  // the most a body may carry
}

type recordingKey struct{}

// Start returns ctx carrying a new Recording for one attempt whose
// bodies may carry at most limit bytes (0: 1 GiB).
func Start(ctx context.Context, limit int) (context.Context, *Recording) {
	rec := &Recording{limit: int64(limit)}
	if rec.limit <= 0 {
		rec.limit = 1 << 30
	}
	return context.WithValue(ctx, recordingKey{}, rec), rec
}

// Status is the HTTP status of the attempt's response, 0 if none came.
func (r *Recording) Status() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Header is the attempt's response header (nil if none came).
func (r *Recording) Header() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.header
}

// Body is the start of the attempt's error body (at most 64 KiB).
func (r *Recording) Body() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body
}

type recorder struct{ next http.RoundTripper }

func (t *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	rec, _ := req.Context().Value(recordingKey{}).(*Recording)
	if err != nil || rec == nil {
		return res, err
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.status, rec.header = res.StatusCode, res.Header.Clone()
	if res.StatusCode >= 400 {
		body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		res.Body.Close()
		rec.body = body
		res.Body = io.NopCloser(bytes.NewReader(body))
		res.ContentLength = int64(len(body))
		return res, nil
	}
	sse := strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream")
	res.Body = &guardedBody{rc: res.Body, left: rec.limit, sse: sse}
	return res, nil
}

// The bounds of a body's JSON, checked as it is read, before an SDK
// decodes it: an SDK turns JSON into values (genai into map[string]any,
// anthropic-sdk-go a tool's input into any) that cost up to a hundred
// times their bytes when the JSON is a long array of small values.
const (
	// MaxEventBytes bounds one event of a stream (a tool call's
	// arguments come whole in one Gemini chunk; the registry takes at
	// most 1 MiB of arguments anyway).
	MaxEventBytes = 4 << 20
	// MaxEventValues bounds the JSON values (counted as the structural
	// characters { [ , : outside strings) of one event of a stream, and
	// MaxBodyValues those of a whole (non-streamed) body.
	MaxEventValues = 1 << 16
	MaxBodyValues  = 1 << 20
)

// ErrBodyTooLarge is the read error of a body past its attempt's limit,
// or of one event or body whose JSON has more values than they may.
var ErrBodyTooLarge = errors.New("the provider's response is larger than the reply limit")

// guardedBody counts what is read of a 2xx body: its bytes against the
// attempt's limit, and, with a state machine over the JSON it carries,
// the bytes and values of each stream event (a blank line ends one) or of
// the whole body.
type guardedBody struct {
	rc   io.ReadCloser
	left int64
	sse  bool

	eventBytes, values int
	inString, escaped  bool
	newline            bool // the last byte was a newline (SSE: a second one ends the event)
	err                error
}

func (b *guardedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left <= 0 {
		b.err = ErrBodyTooLarge
		return 0, b.err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if e := b.scan(p[:n]); e != nil {
		b.err = e
		return 0, e
	}
	return n, err
}

// scan updates the counts over p.
func (b *guardedBody) scan(p []byte) error {
	maxValues, what := MaxBodyValues, "reply"
	if b.sse {
		maxValues, what = MaxEventValues, "stream event"
	}
	for _, c := range p {
		if b.sse {
			if c == '\n' && b.newline {
				b.eventBytes, b.values, b.inString, b.escaped = 0, 0, false, false
			}
			b.newline = c == '\n'
			b.eventBytes++
			if b.eventBytes > MaxEventBytes {
				return fmt.Errorf("%w: a stream event of more than %d bytes", ErrBodyTooLarge, MaxEventBytes)
			}
		}
		switch {
		case b.escaped:
			b.escaped = false
		case b.inString:
			switch c {
			case '\\':
				b.escaped = true
			case '"', '\n':
				b.inString = false // a newline ends a broken string: SSE framing goes on
			}
		case c == '"':
			b.inString = true
		case c == '{' || c == '[' || c == ',' || c == ':':
			b.values++
			if b.values > maxValues {
				return fmt.Errorf("%w: more than %d JSON values in one %s", ErrBodyTooLarge, maxValues, what)
			}
		}
	}
	return nil
}

func (b *guardedBody) Close() error { return b.rc.Close() }

// BodyLimit is the wire bytes an attempt may read for a reply of at most
// maxReply bytes: the events' JSON around the text costs several times
// the text itself.
func BodyLimit(maxReply int) int {
	if maxReply <= 0 {
		return 0
	}
	return 4*maxReply + 1<<20
}

// Error turns an SDK's failure of an attempt into the loop's errors:
// the context's error when it ended; an *loop.APIError (with the
// provider's message, parsed from the recorded body, and the response
// header) for an HTTP error status; loop.ErrBadResponse for a body that
// was too large or not JSON; else a *loop.TransportError.
func Error(ctx context.Context, rec *Recording, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("request: %w", ctx.Err())
	}
	if s := rec.Status(); s >= 400 {
		e := &loop.APIError{StatusCode: s, Header: rec.Header(), Err: Cause(err)}
		e.Type, e.Code, e.Message = ParseErrorBody(rec.Body())
		if e.Message == "" {
			e.Message = http.StatusText(s)
		}
		return e
	}
	err = Cause(err)
	if errors.Is(err, ErrBodyTooLarge) || IsDecodeError(err) {
		return fmt.Errorf("%w: %w", loop.ErrBadResponse, err)
	}
	return &loop.TransportError{Err: err, Status: rec.Status()}
}

// IsDecodeError reports whether err is JSON that could not be decoded.
func IsDecodeError(err error) bool {
	var se *json.SyntaxError
	var ute *json.UnmarshalTypeError
	return errors.As(err, &se) || errors.As(err, &ute)
}

// maxCause bounds an SDK error's text as the loop keeps it.
const maxCause = 512

// Cause is err with its text cleaned and cut (an SDK's error may quote a
// whole chunk or body the provider sent), still unwrapping to err.
func Cause(err error) error {
	if err == nil {
		return nil
	}
	var c *cause
	if errors.As(err, &c) {
		return err
	}
	return &cause{err: err, text: textsafe.Clean(err.Error(), maxCause)}
}

type cause struct {
	err  error
	text string
}

func (c *cause) Error() string { return c.text }
func (c *cause) Unwrap() error { return c.err }

// ParseErrorBody finds the type, code and message in the error bodies
// providers send: {"error":{"message","type","code"}} (OpenAI and most
// others), {"type":"error","error":{"type","message"}} (Anthropic),
// {"error":{"code":400,"message","status"}} (Google: status is the
// type), {"error":"..."} (Ollama), {"message":...} (vLLM),
// {"detail":...}; anything else is its text, shortened. Everything is
// cleaned (textsafe) and capped.
func ParseErrorBody(body []byte) (typ, code, msg string) {
	typ, code, msg = parseErrorBody(body)
	return textsafe.Clean(typ, 200), textsafe.Clean(code, 200), textsafe.Clean(msg, maxMessage)
}

func parseErrorBody(body []byte) (typ, code, msg string) {
	var v map[string]json.RawMessage
	if json.Unmarshal(body, &v) == nil {
		if raw, ok := v["error"]; ok {
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) == nil {
				typ = jsonText(obj["type"])
				if typ == "" {
					typ = jsonText(obj["status"])
				}
				return typ, jsonText(obj["code"]), firstText(obj["message"], raw)
			}
			return "", "", jsonText(raw)
		}
		if raw, ok := v["message"]; ok {
			return jsonText(v["type"]), jsonText(v["code"]), jsonText(raw)
		}
		if raw, ok := v["detail"]; ok {
			return "", "", jsonText(raw)
		}
	}
	return "", "", textsafe.Truncate(strings.TrimSpace(string(body)), 512)
}

func firstText(raws ...json.RawMessage) string {
	for _, r := range raws {
		if s := jsonText(r); s != "" {
			return s
		}
	}
	return ""
}

// jsonText is a JSON string's value, or any other JSON value's text.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return textsafe.Truncate(string(raw), 512)
}

// StreamError is the *loop.APIError of an error event inside a stream
// (StatusCode 0), from the event's JSON.
func StreamError(data []byte, cause error) *loop.APIError {
	typ, code, msg := ParseErrorBody(data)
	return &loop.APIError{Type: typ, Code: code, Message: msg, Err: Cause(cause)}
}

// Budget counts what a reply makes an adapter hold against
// Request.MaxReplyBytes.
type Budget struct {
	Max  int // 0: no bound
	used int
}

// errReplyTooLarge is returned (wrapped in loop.ErrBadResponse) past a
// Budget.
var errReplyTooLarge = errors.New("reply too large")

// Charge adds n bytes (and, with event, loop.EventCost for one streamed
// event); it fails once the total passes Max.
func (b *Budget) Charge(n int, event bool) error {
	b.used += n
	if event {
		b.used += loop.EventCost
	}
	if b.Max > 0 && b.used > b.Max {
		return fmt.Errorf("%w: %w: more than %d bytes", loop.ErrBadResponse, errReplyTooLarge, b.Max)
	}
	return nil
}

// ToolSchema is a tool's parameters as a JSON object for an SDK's
// parameters field: {"type":"object"} when they are not one.
func ToolSchema(params json.RawMessage) map[string]any {
	var schema map[string]any
	if err := json.Unmarshal(params, &schema); err != nil || schema == nil {
		schema = map[string]any{"type": "object"}
	}
	return schema
}

// Object is a JSON object's fields (for a tool call's arguments, which
// the loop has made valid JSON): {} when they are not an object.
func Object(args string) map[string]any {
	d := json.NewDecoder(strings.NewReader(args))
	d.UseNumber() // large integers stay exact
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return map[string]any{}
	}
	return m
}

// BaseURL checks and returns a base URL, def when empty.
func BaseURL(s, def string) (string, error) {
	if s == "" {
		s = def
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("base URL %q is not an http(s) URL", s)
	}
	if u.User != nil {
		return "", fmt.Errorf("base URL %q carries credentials: give the key as the API key instead", u.Redacted())
	}
	return strings.TrimRight(s, "/"), nil
}

// ProviderName is gen_ai.provider.name for an OpenAI-compatible
// endpoint: the well-known value for a known host, else def.
func ProviderName(baseURL, def string) string {
	u, err := url.Parse(baseURL)
	if err != nil {
		return def
	}
	host := strings.ToLower(u.Hostname())
	for suffix, name := range knownHosts {
		if host == suffix || strings.HasSuffix(host, "."+suffix) {
			return name
		}
	}
	return def
}

var knownHosts = map[string]string{
	"openai.com":                        "openai",
	"deepseek.com":                      "deepseek",
	"groq.com":                          "groq",
	"mistral.ai":                        "mistral_ai",
	"x.ai":                              "x_ai",
	"perplexity.ai":                     "perplexity",
	"anthropic.com":                     "anthropic",
	"generativelanguage.googleapis.com": "gcp.gemini",
	"openai.azure.com":                  "azure.ai.openai",
}
