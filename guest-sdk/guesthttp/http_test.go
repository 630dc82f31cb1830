package guesthttp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// fakeHost emulates the host side of agrun.http_request/http_response as
// ABI.md specifies it: it records the request document and holds a pending
// response until it is fetched into a buffer large enough.
type fakeHost struct {
	gotReq  []byte
	answer  func(req wireRequest) any // the pending document, or an int32 code
	pending []byte
	fetches int
}

func (f *fakeHost) httpRequest(req []byte) int32 {
	f.gotReq = append([]byte(nil), req...)
	var w wireRequest
	if err := json.Unmarshal(req, &w); err != nil {
		f.pending = []byte(`{"error":{"code":"bad_request","message":"request is not JSON"}}`)
		return int32(len(f.pending))
	}
	switch a := f.answer(w).(type) {
	case int32:
		return a
	case string:
		f.pending = []byte(a)
	default:
		b, _ := json.Marshal(a)
		f.pending = b
	}
	return int32(len(f.pending))
}

func (f *fakeHost) httpResponse(buf []byte) int32 {
	f.fetches++
	if f.pending == nil {
		return codeNoPending
	}
	if len(buf) < len(f.pending) {
		return codeSmallBuffer
	}
	n := copy(buf, f.pending)
	f.pending = nil
	return int32(n)
}

func client(h host) *http.Client { return &http.Client{Transport: Transport{host: h}} }

func TestRoundTripGET(t *testing.T) {
	f := &fakeHost{answer: func(w wireRequest) any {
		return map[string]any{
			"status":  200,
			"headers": map[string][]string{"Content-Type": {"application/json"}, "X-Two": {"a", "b"}},
			"body":    base64.StdEncoding.EncodeToString([]byte(`{"ok":true}`)),
		}
	}}
	req, _ := http.NewRequest("GET", "https://api.example.com/v1/x?y=1&z=%20", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := client(f).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Status != "200 OK" || string(body) != `{"ok":true}` {
		t.Fatalf("got %d %q %q", resp.StatusCode, resp.Status, body)
	}
	if got := resp.Header.Values("X-Two"); len(got) != 2 || got[1] != "b" || resp.Header.Get("content-type") != "application/json" {
		t.Fatalf("headers: %v", resp.Header)
	}
	if resp.ContentLength != int64(len(body)) {
		t.Fatalf("content length %d", resp.ContentLength)
	}
	// The request document, field by field, as the ABI fixes it.
	var doc map[string]any
	if err := json.Unmarshal(f.gotReq, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["method"] != "GET" || doc["url"] != "https://api.example.com/v1/x?y=1&z=%20" {
		t.Fatalf("request doc %s", f.gotReq)
	}
	if _, ok := doc["body"]; ok {
		t.Fatalf("GET without body sent a body: %s", f.gotReq)
	}
	if h := doc["headers"].(map[string]any)["Accept"].([]any); len(h) != 1 || h[0] != "application/json" {
		t.Fatalf("headers in request doc: %s", f.gotReq)
	}
	if f.fetches != 1 {
		t.Fatalf("http_response called %d times, want 1", f.fetches)
	}
}

func TestRoundTripPOSTBody(t *testing.T) {
	payload := "binary \x00\xff and text"
	f := &fakeHost{answer: func(w wireRequest) any {
		b, err := base64.StdEncoding.DecodeString(w.Body)
		if err != nil || string(b) != payload || w.Method != "POST" {
			return map[string]any{"status": 400, "body": ""}
		}
		return map[string]any{"status": 201, "body": base64.StdEncoding.EncodeToString([]byte("created"))}
	}}
	resp, err := client(f).Post("http://127.0.0.1:8080/notes", "text/plain", strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || string(b) != "created" {
		t.Fatalf("got %d %q; request %s", resp.StatusCode, b, f.gotReq)
	}
}

func TestRoundTripErrors(t *testing.T) {
	hostErr := func(code, msg string) func(wireRequest) any {
		return func(wireRequest) any {
			return map[string]any{"error": map[string]string{"code": code, "message": msg}}
		}
	}
	tests := []struct {
		name     string
		answer   func(wireRequest) any
		want     error
		contains string
	}{
		{"not granted", hostErr("not_granted", "network was not granted"), ErrNotGranted, "agrun: network not granted by the host"},
		{"forbidden", hostErr("forbidden", `host "evil.example" is not in the allowed hosts`), ErrForbidden, `evil.example`},
		{"bad request", hostErr("bad_request", "x"), ErrBadRequest, "malformed request"},
		{"too many", hostErr("too_many_requests", "16 per call"), ErrTooManyRequests, "too many requests"},
		{"too large", hostErr("too_large", "over 4 MiB"), ErrTooLarge, "response too large"},
		{"network", hostErr("network", "connection refused"), ErrNetwork, "connection refused"},
		{"timeout", hostErr("timeout", "deadline"), ErrTimeout, "timed out"},
		{"request too large code", func(wireRequest) any { return int32(codeTooLarge) }, ErrRequestTooLarge, "larger than 1 MiB"},
		{"efault", func(wireRequest) any { return int32(codeFault) }, ErrHostABI, "EFAULT"},
		{"zero length", func(wireRequest) any { return int32(0) }, ErrHostABI, "0 bytes"},
		{"malformed document", func(wireRequest) any { return "not json" }, ErrHostABI, "malformed response"},
		{"bad status", func(wireRequest) any { return map[string]any{"status": 42} }, ErrHostABI, "status 42"},
		{"bad base64", func(wireRequest) any { return map[string]any{"status": 200, "body": "!!"} }, ErrHostABI, "base64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeHost{answer: tc.answer}
			_, err := client(f).Get("https://api.example.com/")
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err %q does not mention %q", err, tc.contains)
			}
		})
	}
}

func TestHTTPErrorTimeout(t *testing.T) {
	f := &fakeHost{answer: func(wireRequest) any {
		return map[string]any{"error": map[string]string{"code": "timeout"}}
	}}
	_, err := client(f).Get("https://api.example.com/")
	var te interface{ Timeout() bool }
	if !errors.As(err, &te) || !te.Timeout() {
		t.Fatalf("timeout error %v does not report Timeout()", err)
	}
	var he *Error
	if !errors.As(err, &he) || he.Code != "timeout" || he.Error() != ErrTimeout.Error() {
		t.Fatalf("got %#v", he)
	}
	unknown := &Error{Code: "weird", Message: "m"}
	if unknown.Error() != "agrun: http request failed (weird): m" || errors.Is(unknown, ErrNetwork) {
		t.Fatalf("unknown code: %v", unknown)
	}
}

func TestRequestTooLargeNeverReachesHost(t *testing.T) {
	f := &fakeHost{answer: func(wireRequest) any { t.Fatal("host called"); return nil }}
	_, err := client(f).Post("https://api.example.com/", "application/octet-stream", strings.NewReader(strings.Repeat("x", MaxRequestBytes)))
	if !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("err = %v", err)
	}
}

func TestCancelledContextNeverReachesHost(t *testing.T) {
	f := &fakeHost{answer: func(wireRequest) any { t.Fatal("host called"); return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://api.example.com/", nil)
	if _, err := client(f).Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// TestHostBuildHasNoHost: outside wasip1 the real host is a stub whose
// answer is a clear error, not a crash.
func TestHostBuildHasNoHost(t *testing.T) {
	_, err := Client().Get("https://api.example.com/")
	if !errors.Is(err, ErrNoHost) {
		t.Fatalf("err = %v, want ErrNoHost", err)
	}
}
