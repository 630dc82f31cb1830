// Package netguard is the one definition of the addresses agrun refuses
// to reach on behalf of an untrusted party (a tool's http_request, an MCP
// server's authorization metadata, a registry's redirect): loopback,
// private, link-local and other non-public ranges, so that a guest or a
// server cannot make agrun talk to the machine it runs on, its network
// or a cloud metadata service (SSRF). Forbidden says why an address is
// refused; Dialer resolves a host, refuses it if any of its addresses is
// forbidden, and dials the address it checked (no second lookup for DNS
// rebinding to exploit). Standard library only: a ground-floor leaf.
package netguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// Address ranges refused, beyond what netip's
// predicates (loopback, private, link-local, multicast, unspecified) cover.
var forbiddenPrefixes = []struct {
	p   netip.Prefix
	why string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\""},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"}, // also Alibaba's metadata 100.100.100.200
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // includes 255.255.255.255
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
}

// Prefixes that embed an IPv4 address, which is checked in turn.
var embeddingPrefixes = []struct {
	p   netip.Prefix
	off int // byte offset of the IPv4 address
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12},   // NAT64
	{netip.MustParsePrefix("64:ff9b:1::/48"), 12}, // local NAT64
	{netip.MustParsePrefix("2002::/16"), 2},       // 6to4
}

// Forbidden returns why ip may not be dialled on an untrusted party's
// behalf (loopback, private, link-local — the cloud metadata address —,
// multicast, reserved, documentation, or one of those embedded in a
// NAT64 or 6to4 address), or "" if it may.
func Forbidden(ip netip.Addr) string {
	ip = ip.Unmap() // IPv4-mapped IPv6 is checked as IPv4
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private" // RFC 1918 and unique-local fc00::/7 (incl. fd00:ec2::254)
	case ip.IsLinkLocalUnicast():
		return "link-local" // incl. the metadata address 169.254.169.254
	case ip.IsMulticast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, f := range forbiddenPrefixes {
		if f.p.Contains(ip) {
			return f.why
		}
	}
	if ip.Is6() {
		b := ip.As16()
		if ip.Zone() != "" || b[0] == 0xfe && b[1]&0xc0 == 0xc0 {
			return "site-local"
		}
		for _, e := range embeddingPrefixes {
			if e.p.Contains(ip) {
				v4 := netip.AddrFrom4([4]byte(b[e.off : e.off+4]))
				if why := Forbidden(v4); why != "" {
					return why + " (embedded in " + e.p.String() + ")"
				}
			}
		}
	}
	return ""
}

// Error is a dial refused because the host resolves to a forbidden
// address.
type Error struct {
	Host string     // as asked for
	Addr netip.Addr // the address refused
	Why  string     // Forbidden's reason
}

// Error implements error: `host "x" resolves to 10.0.0.1, a private address`.
func (e *Error) Error() string {
	return fmt.Sprintf("host %q resolves to %s, a %s address", e.Host, e.Addr, e.Why)
}

// Dialer dials only public addresses: its DialContext resolves the host
// (an IP literal as itself), fails with an *Error if any address is
// Forbidden, and dials the checked addresses in turn. Use it as an
// http.Transport's DialContext.
type Dialer struct {
	net.Dialer
	// Resolver resolves host names; nil: net.DefaultResolver.
	Resolver *net.Resolver
	// AllowPrivate dials forbidden addresses too (the operator's choice,
	// such as a tool's allow_private): the host is still resolved once and
	// the address resolved is the one dialled.
	AllowPrivate bool
}

// DialContext implements the signature of net.Dialer.DialContext.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		r := d.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		if ips, err = r.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, err
		}
	}
	for _, ip := range ips {
		if why := Forbidden(ip); why != "" && !d.AllowPrivate {
			return nil, &Error{Host: host, Addr: ip, Why: why}
		}
	}
	var firstErr error
	for _, ip := range ips {
		conn, err := d.Dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("no address for %q", host)
	}
	return nil, firstErr
}
