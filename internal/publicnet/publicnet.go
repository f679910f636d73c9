// Package publicnet is the one classification of which addresses are
// public: sandbox egress (internal/network) blocks what it calls reserved
// or internal, and the server's own outbound fetches (registry pulls) dial
// only what it calls public, through Dialer. Keeping both on one list is
// what stops a recipe from making the server reach what a sandbox cannot.
package publicnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
)

// ReservedIPv4 are destinations no policy or operator can open: this
// network, loopback, link-local (cloud metadata lives at 169.254.169.254),
// multicast and the reserved block with the limited broadcast address.
var ReservedIPv4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// InternalIPv4 are ranges that are not on the public internet but where
// an operator's own services often live, so an operator may open parts of
// them: RFC 1918, shared address space (carrier-grade NAT), the IETF
// protocol assignments and the benchmarking block. (The documentation
// blocks stay public: nothing routes them, and tests use them as the
// internet.)
var InternalIPv4 = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
}

// globalIPv6 is where public IPv6 unicast lives; nonPublicIPv6 are the
// parts of it that are not public or that embed an IPv4 address the
// IPv4 lists would have to judge (6to4, Teredo).
var (
	globalIPv6    = netip.MustParsePrefix("2000::/3")
	nonPublicIPv6 = []netip.Prefix{
		netip.MustParsePrefix("2001::/23"),     // IETF protocol assignments, Teredo
		netip.MustParsePrefix("2001:db8::/32"), // documentation
		netip.MustParsePrefix("2002::/16"),     // 6to4
		netip.MustParsePrefix("3fff::/20"),     // documentation
	}
)

// IsPublic reports whether a is an address on the public internet: an
// IPv4 address in neither ReservedIPv4 nor InternalIPv4, or a global
// unicast IPv6 address. IPv4-mapped IPv6 addresses are judged as IPv4.
func IsPublic(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is4() {
		return !Contains(ReservedIPv4, a) && !Contains(InternalIPv4, a)
	}
	if !a.Is6() || a.Zone() != "" {
		return false
	}
	return globalIPv6.Contains(a) && !Contains(nonPublicIPv6, a)
}

// Contains reports whether any of ps contains a.
func Contains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ErrUnreachable is Dialer's one answer for every destination it did not
// connect to, whether refused as not public, unresolvable or not
// answering: a caller who chooses the destination learns nothing about
// what the server can see beyond that it did not connect.
var ErrUnreachable = errors.New("the address is not public or did not answer")

// Resolver looks up a name's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer connects only to public addresses. It resolves the name itself
// and dials the addresses it judged, never the name, so a name that
// resolves to a public address when checked and to a private one when
// dialled (DNS rebinding) cannot get through.
type Dialer struct {
	// Resolver resolves names; nil: net.DefaultResolver.
	Resolver Resolver
	// Dial connects to one "ip:port"; nil: a net.Dialer's DialContext.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// DialContext connects to the first public address of address's host that
// answers, or fails with ErrUnreachable. It is an http.Transport's
// DialContext.
func (d Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, ErrUnreachable
	}
	addrs, err := d.lookup(ctx, host)
	if err != nil {
		return nil, ErrUnreachable
	}
	dial := d.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	for _, a := range addrs {
		if !IsPublic(a) {
			continue
		}
		conn, err := dial(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, ErrUnreachable
}

func (d Dialer) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	r := d.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	return r.LookupNetIP(ctx, "ip", host)
}
