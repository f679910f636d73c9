package publicnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestIsPublic(t *testing.T) {
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.0", "198.17.255.255", "198.20.0.0", "223.255.255.255", "2606:4700::1111", "::ffff:8.8.8.8"} {
		if !IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("%s: not public", s)
		}
	}
	for _, s := range []string{
		"0.1.2.3", "127.0.0.1", "169.254.169.254", "224.0.0.1", "240.0.0.1", "255.255.255.255",
		"10.0.0.1", "100.64.0.1", "172.31.0.1", "192.0.0.9", "192.168.0.1", "198.18.0.1", "198.19.255.255",
		"::", "::1", "fd00::1", "fe80::1", "ff02::1", "::ffff:127.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1", "2001::1", "2001:db8::1",
	} {
		if IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("%s: public", s)
		}
	}
}

type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// The dialer connects to a name's public addresses only, by address, and
// fails every other way with the one error.
func TestDialerDialsOnlyPublicAddresses(t *testing.T) {
	var dialled []string
	d := Dialer{
		Resolver: fakeResolver{
			"mixed.example":   {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("8.8.8.8")},
			"private.example": {netip.MustParseAddr("100.64.1.1"), netip.MustParseAddr("::1")},
		},
		Dial: func(_ context.Context, _, address string) (net.Conn, error) {
			dialled = append(dialled, address)
			return nil, errors.New("connection refused")
		},
	}
	for _, addr := range []string{"mixed.example:443", "private.example:443", "missing.example:443", "10.0.0.1:22", "no-port"} {
		if _, err := d.DialContext(context.Background(), "tcp", addr); err != ErrUnreachable {
			t.Errorf("%s: %v, want ErrUnreachable", addr, err)
		}
	}
	if len(dialled) != 1 || dialled[0] != "8.8.8.8:443" {
		t.Errorf("dialled %v, want only 8.8.8.8:443", dialled)
	}
}
