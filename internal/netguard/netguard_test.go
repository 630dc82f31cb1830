package netguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestForbidden(t *testing.T) {
	for _, tt := range []struct {
		ip        string
		forbidden bool
	}{
		{"127.0.0.1", true}, {"127.8.9.10", true}, {"::1", true},
		{"10.1.2.3", true}, {"172.16.0.1", true}, {"192.168.1.1", true},
		{"169.254.169.254", true}, {"fe80::1", true}, {"fd00:ec2::254", true}, {"fc00::1", true},
		{"100.64.0.1", true}, {"100.100.100.200", true},
		{"0.0.0.0", true}, {"::", true}, {"224.0.0.1", true}, {"ff02::1", true}, {"255.255.255.255", true},
		{"::ffff:127.0.0.1", true}, {"::ffff:169.254.169.254", true}, {"::127.0.0.1", true},
		{"64:ff9b::a9fe:a9fe", true}, {"2002:7f00:1::", true},
		{"8.8.8.8", false}, {"1.1.1.1", false}, {"2606:4700:4700::1111", false},
		{"::ffff:8.8.8.8", false}, {"64:ff9b::808:808", false},
	} {
		got := Forbidden(netip.MustParseAddr(tt.ip)) != ""
		if got != tt.forbidden {
			t.Errorf("Forbidden(%s) = %v, want %v", tt.ip, got, tt.forbidden)
		}
	}
}

// TestDialer: a host resolving to a forbidden address is refused before
// any connection, unless AllowPrivate; the address checked is the one
// dialled.
func TestDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var d Dialer
	_, err = d.DialContext(context.Background(), "tcp", ln.Addr().String())
	var ge *Error
	if !errors.As(err, &ge) || ge.Why != "loopback" {
		t.Fatalf("dialling loopback: %v, want a *netguard.Error (loopback)", err)
	}
	_, err = d.DialContext(context.Background(), "tcp", "localhost:"+ln.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):])
	if !errors.As(err, &ge) {
		t.Fatalf("dialling a name that resolves to loopback: %v, want refused", err)
	}
	d.AllowPrivate = true
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("AllowPrivate: %v", err)
	}
	c.Close()
	if got := (&Error{Host: "h", Addr: netip.MustParseAddr("10.0.0.1"), Why: "private"}).Error(); got != `host "h" resolves to 10.0.0.1, a private address` {
		t.Errorf("message %q", got)
	}
}
