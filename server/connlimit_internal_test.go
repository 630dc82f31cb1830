package server

import (
	"net"
	"testing"
)

// TestClientIPKey: IPv4 clients are keyed by address, IPv6 ones by their
// /64, so that one host cannot take a share per address of its prefix.
func TestClientIPKey(t *testing.T) {
	for _, tt := range []struct{ addr, want string }{
		{"192.0.2.7:1234", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:1", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:1", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:1", "2001:db8:1:2::/64"},
		{"[::1]:80", "::/64"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := clientIP(a); got != tt.want {
			t.Errorf("clientIP(%s) = %s, want %s", tt.addr, got, tt.want)
		}
	}
}
