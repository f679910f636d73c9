package gateway

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/network"
)

// clientHello captures the first flight of a real TLS client asking for
// serverName ("" sends no SNI).
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		cfg := &tls.Config{ServerName: serverName, InsecureSkipVerify: true}
		_ = tls.Client(b, cfg).Handshake()
		b.Close()
	}()
	var hdr [5]byte
	if _, err := a.Read(hdr[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	n := 0
	for n < len(body) {
		k, err := a.Read(body[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return append(hdr[:], body...)
}

func TestReadClientHelloFindsServerName(t *testing.T) {
	hello := clientHello(t, "Allowed.Test")
	raw, sni, err := readClientHello(bytes.NewReader(append(hello, "after"...)))
	if err != nil || sni != "allowed.test" {
		t.Fatalf("sni %q, err %v", sni, err)
	}
	if !bytes.Equal(raw, hello) {
		t.Fatal("the bytes to replay are not exactly the ClientHello read")
	}
}

func TestReadClientHelloWithoutServerName(t *testing.T) {
	_, sni, err := readClientHello(bytes.NewReader(clientHello(t, "")))
	if err != nil || sni != "" {
		t.Fatalf("sni %q, err %v", sni, err)
	}
}

// A ClientHello split over several records (legal, and a way to hide the
// name from a proxy that reads one record) is put back together.
func TestReadClientHelloAcrossRecords(t *testing.T) {
	hello := clientHello(t, "allowed.test")
	body := hello[5:]
	var split []byte
	for len(body) > 0 {
		n := min(len(body), 7)
		split = append(split, 22, 3, 1, 0, byte(n))
		split = append(split, body[:n]...)
		body = body[n:]
	}
	raw, sni, err := readClientHello(bytes.NewReader(split))
	if err != nil || sni != "allowed.test" || !bytes.Equal(raw, split) {
		t.Fatalf("sni %q, err %v, raw complete %v", sni, err, bytes.Equal(raw, split))
	}
}

func TestReadClientHelloRefusesBadInput(t *testing.T) {
	hello := clientHello(t, "allowed.test")
	huge := []byte{22, 3, 1, 0x40, 0x00, 1, 0x7f, 0xff, 0xff}
	huge = append(huge, make([]byte, 0x4000-4)...)
	withName := func(name string) []byte {
		// Replace the name in a real hello by one of the same length.
		return bytes.Replace(hello, []byte("allowed.test"), []byte(name), 1)
	}
	for name, in := range map[string][]byte{
		"empty":             {},
		"http":              []byte("GET / HTTP/1.1\r\n\r\n"),
		"truncated record":  hello[:len(hello)-10],
		"truncated header":  hello[:3],
		"oversized hello":   huge,
		"not a ClientHello": {22, 3, 1, 0, 4, 2, 0, 0, 0},
		"zero-length":       {22, 3, 1, 0, 0},
		"bad name":          withName("allowed\x00test"),
		"name with slash":   withName("allowed/test"),
	} {
		_, sni, err := readClientHello(bytes.NewReader(in))
		if err == nil {
			t.Errorf("%s: accepted, sni %q", name, sni)
		}
	}
	if _, _, err := readClientHello(bytes.NewReader([]byte("GET / HTTP/1.1\r\n"))); !errors.Is(err, errNotTLS) {
		t.Errorf("plain HTTP: want errNotTLS, got %v", err)
	}
}

// Lengths inside the hello that point past its end must not be trusted.
func TestParseClientHelloTruncatedFields(t *testing.T) {
	hello := clientHello(t, "allowed.test")
	body := hello[5+4:]
	for cut := 0; cut < len(body); cut++ {
		// Must not panic; either an error or no name.
		if sni, err := parseClientHello(body[:cut]); err == nil && sni != "" && !strings.HasPrefix("allowed.test", sni) {
			t.Fatalf("cut at %d: sni %q", cut, sni)
		}
	}
}

func TestHostOnly(t *testing.T) {
	for in, want := range map[string]string{
		"Allowed.Test":       "allowed.test",
		"allowed.test:8080":  "allowed.test",
		"allowed.test.":      "allowed.test",
		"192.0.2.10:80":      "192.0.2.10",
		"[2001:db8::1]:443":  "2001:db8::1",
		"":                   "",
		"allowed.test:80:80": "allowed.test:80:80", // not a name: nothing resolves it
	} {
		if got := hostOnly(in); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestJudgeName(t *testing.T) {
	allowList := network.Policy{AllowDomains: []string{"allowed.test", "*.cdn.test"}, DenyDomains: []string{"bad.cdn.test"}}
	open := network.Policy{AllowInternet: true, DenyDomains: []string{"denied.test", "*.denied.test"}}
	for _, c := range []struct {
		p    network.Policy
		name string
		want nameVerdict
	}{
		{allowList, "allowed.test", nameAllowed},
		{allowList, "sub.allowed.test", nameNotAllowed}, // exact rules are exact
		{allowList, "x.cdn.test", nameAllowed},
		{allowList, "a.b.cdn.test", nameAllowed},
		{allowList, "cdn.test", nameNotAllowed}, // a wildcard does not cover its domain
		{allowList, "evilcdn.test", nameNotAllowed},
		{allowList, "bad.cdn.test", nameDenied}, // deny wins over allow
		{allowList, "other.test", nameNotAllowed},
		{open, "other.test", nameAllowed},
		{open, "denied.test", nameDenied},
		{open, "www.denied.test", nameDenied},
		{open, "notdenied.test", nameAllowed},
		{network.Policy{Offline: true, AllowInternet: true}, "other.test", nameNotAllowed},
	} {
		if got := judgeName(c.p, c.name); got != c.want {
			t.Errorf("%+v %s: got %d, want %d", c.p, c.name, got, c.want)
		}
	}
}

func TestParseDomain(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM":    "example.com",
		"*.example.com.": "*.example.com",
		"a_b.example":    "a_b.example",
		"*.test":         "*.test", // a whole top-level domain, e.g. to deny it
	} {
		if got, err := network.ParseDomain(in); err != nil || got != want {
			t.Errorf("ParseDomain(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "*", "*.", "**.com", "a.*.com", "ex*ample.com", "-a.com", "a-.com", "a..com",
		strings.Repeat("a", 64) + ".com", strings.Repeat("abcdefgh.", 30) + "com", "1.2.3.4", "a.123", "exa mple.com"} {
		if got, err := network.ParseDomain(bad); err == nil {
			t.Errorf("ParseDomain(%q) accepted as %q", bad, got)
		}
	}
}
