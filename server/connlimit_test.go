package server_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/server"
)

// rawConn is one client connection kept open (keep-alive) across requests.
type rawConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, r: bufio.NewReader(c)}
}

// get sends GET path and reads the answer, waiting at most wait.
func (rc *rawConn) get(path string, wait time.Duration) (*http.Response, string, error) {
	rc.c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(rc.c, "GET "+path+" HTTP/1.1\r\nHost: "+rc.c.RemoteAddr().String()+"\r\n\r\n"); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(rc.r, nil)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), err
}

// TestConnectionsPerClientCapped: one client address holds at most its
// share of connections; one more is answered 503 "busy" and closed, and a
// slot freed by a closed connection is usable again.
func TestConnectionsPerClientCapped(t *testing.T) {
	ts := startServer(t, setup{opts: server.Options{MaxConnectionsPerClient: 3}})
	addr := strings.TrimPrefix(ts.url, "http://")
	var held []*rawConn
	for i := range 3 {
		rc := dialRaw(t, addr)
		resp, _, err := rc.get("/v1/tools", 10*time.Second)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("connection %d: %v %v", i, resp, err)
		}
		held = append(held, rc)
	}
	extra := dialRaw(t, addr)
	resp, body, err := extra.get("/v1/tools", 10*time.Second)
	if err != nil {
		t.Fatalf("4th connection: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"kind":"busy"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("4th connection: %d %q, want 503 busy with Retry-After", resp.StatusCode, body)
	}
	// The refused connection is closed by the server.
	extra.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.r.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("refused connection still open: %v", err)
	}

	held[0].c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rc := dialRaw(t, addr)
		resp, _, err := rc.get("/v1/tools", 10*time.Second)
		if err == nil && resp.StatusCode == 200 {
			break
		}
		rc.c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no slot after closing a connection: %v %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConnectionsTotalWaits: past the total, Accept waits: a new
// connection is served only once another closes (it is not refused).
func TestConnectionsTotalWaits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go hs.Serve(server.LimitListener(ln, 2, 10)) // perClient above total: capped to it
	t.Cleanup(func() { hs.Close() })
	addr := ln.Addr().String()
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, rc := range []*rawConn{a, b} {
		if resp, _, err := rc.get("/", 10*time.Second); err != nil || resp.StatusCode != 200 {
			t.Fatalf("held connection: %v %v", resp, err)
		}
	}
	third := dialRaw(t, addr) // the kernel completes the handshake; agrun has not accepted it
	if _, _, err := third.get("/", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("third connection answered while two are open: %v", err)
	}
	a.c.Close()
	third.c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(third.r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("third connection after one closed: %v %v", resp, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isReset(err error) bool {
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && strings.Contains(err.Error(), "reset")
}
