package server

import (
	"net"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// Defaults of LimitListener.
const (
	// DefaultMaxConnections bounds the connections open at once. Each
	// costs a file descriptor, a goroutine and its buffers (about 10 KiB
	// idle) until ReadHeaderTimeout or IdleTimeout closes it.
	DefaultMaxConnections = 512
	// DefaultMaxConnectionsPerClient bounds the connections one client
	// address holds at once: a browser opens at most 6 per host, an
	// HTTP/1.1 client pool a few dozen.
	DefaultMaxConnectionsPerClient = 64
)

// busyResponse is written to a connection over its client's share before
// it is closed, so that the client sees why instead of a reset.
const busyResponse = "HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 89\r\n\r\n" +
	`{"error":{"kind":"busy","message":"too many connections from this address; retry later"}}`

// LimitListener bounds the connections accepted from ln: at most total at
// once (Accept waits for one to close: golang.org/x/net/netutil's
// LimitListener, so further clients queue in the kernel's backlog) and at
// most perClient at once from one remote IP address (a connection over
// that share is answered 503 and closed at once, so one client cannot take
// every slot). Zero or negative values mean the defaults. Behind a reverse
// proxy every connection comes from the proxy's address: raise perClient
// to total there.
//
// Serve applies it with Options.MaxConnections and
// MaxConnectionsPerClient; `agrun mcp serve --http` applies it too.
func LimitListener(ln net.Listener, total, perClient int) net.Listener {
	if total <= 0 {
		total = DefaultMaxConnections
	}
	if perClient <= 0 {
		perClient = DefaultMaxConnectionsPerClient
	}
	perClient = min(perClient, total)
	return &clientLimitListener{Listener: netutil.LimitListener(ln, total), per: perClient, open: map[string]int{}}
}

type clientLimitListener struct {
	net.Listener
	per  int
	mu   sync.Mutex
	open map[string]int // by remote IP
}

func (l *clientLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientIP(c.RemoteAddr())
		l.mu.Lock()
		if l.open[key] >= l.per {
			l.mu.Unlock()
			go refuseConn(c)
			continue
		}
		l.open[key]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[key]--; l.open[key] <= 0 {
				delete(l.open, key)
			}
		}}, nil
	}
}

// refuseConn answers 503 (without reading the request: a client that
// does not read its answer is cut off after a second) and closes c.
func refuseConn(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	c.Write([]byte(busyResponse))
}

// clientIP is the key of a's share: its IPv4 address, or the /64 of its
// IPv6 address (one host commonly holds a whole /64, so a key per address
// would give it as many shares as it likes).
func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip4 := ta.IP.To4(); ip4 != nil {
			return ip4.String()
		}
		if len(ta.IP) == net.IPv6len {
			return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
		}
		return ta.IP.String()
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// countedConn gives its slot back once, on the first Close.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// Close gives the client's share back before closing the connection:
// closing it frees its slot of the total, and the connection accepted
// next (from the same client, say) must not find the share still taken.
func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
