//go:build unix

package hostile

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Peer is a local HTTP server that counts the requests reaching it.
type Peer struct {
	*httptest.Server
	Hits atomic.Int32
	Host string // 127.0.0.1:port
	Port string
}

// NewPeer starts an HTTP server on loopback for the test: h answers
// (nil: an empty 200), each request counted in Hits.
func NewPeer(t *testing.T, h http.HandlerFunc) *Peer {
	t.Helper()
	p := &Peer{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Hits.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		w.Write([]byte("PEER-REACHED"))
	}))
	t.Cleanup(p.Close)
	p.Host = strings.TrimPrefix(p.URL, "http://")
	_, p.Port, _ = net.SplitHostPort(p.Host)
	return p
}
