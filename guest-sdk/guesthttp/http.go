package guesthttp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Limits of one request, as ABI.md fixes them.
const (
	// MaxRequestBytes caps the JSON request handed to the host, body
	// included (base64 grows a body by a third).
	MaxRequestBytes = 1 << 20
	// maxResponseBytes bounds the buffer the guest allocates for a pending
	// response: the host caps bodies at 4 MiB, which base64 and headers
	// grow to well under this.
	maxResponseBytes = 16 << 20
)

// Sentinel errors of HTTP requests made through [Client]. Errors returned
// by the client wrap an *[Error] (or, for ErrNoHost and the ABI's
// negative codes, the sentinel itself) and match these with errors.Is.
var (
	// ErrNotGranted: the host did not grant network to this tool (the
	// manifest does not declare "network", or the operator configured no
	// allowed hosts). The whole call ends as permission_denied.
	ErrNotGranted = errors.New("agrun: network not granted by the host")
	// ErrForbidden: the host refused the scheme, host name or address.
	ErrForbidden = errors.New("agrun: request forbidden by the host")
	// ErrBadRequest: the host could not understand the request.
	ErrBadRequest = errors.New("agrun: malformed request")
	// ErrTooManyRequests: the call used up its requests (16 per call).
	ErrTooManyRequests = errors.New("agrun: too many requests in one call")
	// ErrTooLarge: the response body was over the host's cap (4 MiB).
	ErrTooLarge = errors.New("agrun: response too large")
	// ErrNetwork: DNS, connect, TLS or read failure.
	ErrNetwork = errors.New("agrun: network error")
	// ErrTimeout: the call's deadline ended the request.
	ErrTimeout = errors.New("agrun: request timed out")
	// ErrRequestTooLarge: the request (body included) is over
	// MaxRequestBytes.
	ErrRequestTooLarge = errors.New("agrun: request larger than 1 MiB")
	// ErrHostABI: the host answered outside the ABI (a bad pointer, a
	// missing or malformed pending response). It means a bug, in the host
	// or in this package.
	ErrHostABI = errors.New("agrun: host function broke the ABI")
	// ErrNoHost: the program is not running as a wasip1 module under agrun
	// (for example, a tool's unit test built for the host's GOOS).
	ErrNoHost = errors.New("agrun: host functions exist only in a GOOS=wasip1 build run by agrun")
)

// codeErrors maps the ABI's error codes (pending responses of the form
// {"error":{"code":...}}) to sentinels.
var codeErrors = map[string]error{
	"not_granted":       ErrNotGranted,
	"forbidden":         ErrForbidden,
	"bad_request":       ErrBadRequest,
	"too_many_requests": ErrTooManyRequests,
	"too_large":         ErrTooLarge,
	"network":           ErrNetwork,
	"timeout":           ErrTimeout,
}

// Error is a request the host refused or could not complete: its Code is
// one of the ABI's error codes ("not_granted", "forbidden", "bad_request",
// "too_many_requests", "too_large", "network", "timeout") and its Message
// the host's explanation. It matches the sentinel of its code with
// errors.Is (an unknown code matches none).
type Error struct {
	Code    string
	Message string
}

// Error returns the sentinel's text followed by the host's message.
func (e *Error) Error() string {
	base := "agrun: http request failed (" + e.Code + ")"
	if s, ok := codeErrors[e.Code]; ok {
		base = s.Error()
	}
	if e.Message == "" {
		return base
	}
	return base + ": " + e.Message
}

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	s, ok := codeErrors[e.Code]
	return ok && s == target
}

// Timeout reports whether the request timed out, so that net/http and
// net.Error users see it as a timeout.
func (e *Error) Timeout() bool { return e.Code == "timeout" }

// Client returns an *http.Client whose requests go through the host
// function agrun.http_request: the host performs them, to the hosts the
// operator allowed, and hands back the whole response. Redirects are
// followed by the host. Requests are synchronous and bounded by the call's
// deadline, not by the request's context (which is only checked before the
// request is sent). The client is safe for concurrent use, but the host
// performs one request at a time.
func Client() *http.Client {
	return &http.Client{Transport: Transport{}}
}

// Transport is the http.RoundTripper behind [Client]. The zero value is
// ready to use.
type Transport struct {
	host host // nil: the real host functions
}

// host is the ABI's view of the host functions, replaced in tests.
type host interface {
	httpRequest(req []byte) int32
	httpResponse(buf []byte) int32
}

// The ABI's negative return codes.
const (
	codeFault        = -1
	codeNoPending    = -2
	codeSmallBuffer  = -3
	codeTooLarge     = -4
	codeNoHostOnHost = -1000 // not in the ABI: the host-GOOS stub's answer
)

// wireRequest is the request document of agrun.http_request.
type wireRequest struct {
	Method  string              `json:"method"`
	URL     string              `json:"url"`
	Headers map[string][]string `json:"headers,omitempty"`
	Body    string              `json:"body,omitempty"` // base64
}

// wireResponse is the pending response document: either a response or an
// error.
type wireResponse struct {
	Status  int                 `json:"status"`
	Headers map[string][]string `json:"headers"`
	Body    string              `json:"body"` // base64
	Error   *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// RoundTrip implements http.RoundTripper by calling agrun.http_request and
// agrun.http_response. Errors match the package's sentinels.
func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	doc, err := encodeRequest(req)
	if err != nil {
		return nil, err
	}
	h := t.host
	if h == nil {
		h = realHost{}
	}
	data, err := exchange(h, doc)
	if err != nil {
		return nil, err
	}
	return decodeResponse(req, data)
}

// encodeRequest renders req as the ABI's request JSON.
func encodeRequest(req *http.Request) ([]byte, error) {
	if req.URL == nil {
		return nil, fmt.Errorf("%w: request has no URL", ErrBadRequest)
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	w := wireRequest{Method: method, URL: req.URL.String()}
	if len(req.Header) > 0 {
		w.Headers = map[string][]string(req.Header.Clone())
	}
	if req.Host != "" && req.Host != req.URL.Host {
		return nil, fmt.Errorf("%w: a Host header different from the URL's host is not supported", ErrBadRequest)
	}
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(io.LimitReader(req.Body, MaxRequestBytes+1))
		if err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
		if len(body) > MaxRequestBytes {
			return nil, ErrRequestTooLarge
		}
		w.Body = base64.StdEncoding.EncodeToString(body)
	}
	doc, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if len(doc) > MaxRequestBytes {
		return nil, ErrRequestTooLarge
	}
	return doc, nil
}

// exchange performs the two host calls: http_request with doc, then
// http_response into a buffer of the announced length.
func exchange(h host, doc []byte) ([]byte, error) {
	n := h.httpRequest(doc)
	switch {
	case n == codeNoHostOnHost:
		return nil, ErrNoHost
	case n == codeTooLarge:
		return nil, ErrRequestTooLarge
	case n < 0:
		return nil, fmt.Errorf("%w: http_request returned %s", ErrHostABI, codeName(n))
	case n == 0 || n > maxResponseBytes:
		return nil, fmt.Errorf("%w: http_request announced a response of %d bytes", ErrHostABI, n)
	}
	buf := make([]byte, n)
	m := h.httpResponse(buf)
	if m < 0 || m > n {
		return nil, fmt.Errorf("%w: http_response returned %s", ErrHostABI, codeName(m))
	}
	return buf[:m], nil
}

func codeName(n int32) string {
	switch n {
	case codeFault:
		return "-1 (EFAULT)"
	case codeNoPending:
		return "-2 (no pending response)"
	case codeSmallBuffer:
		return "-3 (buffer too small)"
	case codeTooLarge:
		return "-4 (request too large)"
	}
	return strconv.Itoa(int(n))
}

// decodeResponse turns the pending response document into an
// *http.Response or an *Error.
func decodeResponse(req *http.Request, data []byte) (*http.Response, error) {
	var w wireResponse
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: malformed response document: %v", ErrHostABI, err)
	}
	if w.Error != nil {
		return nil, &Error{Code: w.Error.Code, Message: w.Error.Message}
	}
	if w.Status < 100 || w.Status > 999 {
		return nil, fmt.Errorf("%w: response status %d", ErrHostABI, w.Status)
	}
	body, err := base64.StdEncoding.DecodeString(w.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: response body is not base64: %v", ErrHostABI, err)
	}
	header := http.Header{}
	for k, vs := range w.Headers {
		for _, v := range vs {
			header.Add(k, v)
		}
	}
	status := strconv.Itoa(w.Status)
	if text := http.StatusText(w.Status); text != "" {
		status += " " + text
	}
	return &http.Response{
		Status:        status,
		StatusCode:    w.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}
