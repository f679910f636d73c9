package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxHelloBytes bounds what is read of a ClientHello (it may span
// records; post-quantum key shares make it a few kilobytes).
const maxHelloBytes = 64 << 10

var errNotTLS = errors.New("not a TLS handshake")

// readClientHello reads the TLS records holding the ClientHello from r
// and returns every byte read (to replay upstream) and the server name it
// asks for ("" if none).
func readClientHello(r io.Reader) (raw []byte, sni string, err error) {
	var hs []byte // handshake bytes gathered across records
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return raw, "", fmt.Errorf("read TLS record: %w", err)
		}
		raw = append(raw, hdr[:]...)
		if hdr[0] != 22 || hdr[1] != 3 {
			return raw, "", errNotTLS
		}
		n := int(binary.BigEndian.Uint16(hdr[3:5]))
		if n == 0 || n > 1<<14+2048 {
			return raw, "", fmt.Errorf("TLS record of %d bytes", n)
		}
		if len(raw)+n > maxHelloBytes {
			return raw, "", fmt.Errorf("ClientHello longer than %d bytes", maxHelloBytes)
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw, "", fmt.Errorf("read TLS record: %w", err)
		}
		hs = append(hs, raw[start:]...)
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 {
			return raw, "", fmt.Errorf("TLS handshake starts with message type %d, not a ClientHello", hs[0])
		}
		need := 4 + (int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3]))
		if need > maxHelloBytes {
			return raw, "", fmt.Errorf("ClientHello of %d bytes", need)
		}
		if len(hs) >= need {
			sni, err := parseClientHello(hs[4:need])
			return raw, sni, err
		}
	}
}

// parseClientHello extracts the host_name of the server_name extension
// from a ClientHello body.
func parseClientHello(b []byte) (string, error) {
	c := cursor{b: b}
	c.skip(2 + 32) // version, random
	c.skip(int(c.u8()))
	c.skip(int(c.u16()))
	c.skip(int(c.u8()))
	if c.err != nil {
		return "", c.err
	}
	if len(c.b) == 0 {
		return "", nil // no extensions
	}
	exts := cursor{b: c.bytes(int(c.u16()))}
	if c.err != nil {
		return "", c.err
	}
	for len(exts.b) > 0 && exts.err == nil {
		typ := exts.u16()
		body := cursor{b: exts.bytes(int(exts.u16()))}
		if exts.err != nil || typ != 0 {
			continue
		}
		list := cursor{b: body.bytes(int(body.u16()))}
		for len(list.b) > 0 && list.err == nil {
			kind := list.u8()
			name := list.bytes(int(list.u16()))
			if list.err == nil && kind == 0 {
				return checkSNI(string(name))
			}
		}
		if body.err != nil || list.err != nil {
			return "", errors.New("malformed server_name extension")
		}
		return "", nil
	}
	if exts.err != nil {
		return "", exts.err
	}
	return "", nil
}

// checkSNI refuses server names that are not plain host names, so that
// what the proxy judges is what it would resolve.
func checkSNI(name string) (string, error) {
	if name == "" || len(name) > 253 {
		return "", fmt.Errorf("server name of %d bytes", len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", fmt.Errorf("server name %q has a character not allowed in a host name", name)
		}
	}
	return canonicalName(name), nil
}

// cursor reads big-endian fields, remembering the first overrun.
type cursor struct {
	b   []byte
	err error
}

func (c *cursor) bytes(n int) []byte {
	if c.err != nil {
		return nil
	}
	if n > len(c.b) {
		c.err = errors.New("truncated ClientHello")
		return nil
	}
	out := c.b[:n]
	c.b = c.b[n:]
	return out
}

func (c *cursor) skip(n int) { c.bytes(n) }

func (c *cursor) u8() byte {
	if b := c.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (c *cursor) u16() uint16 {
	if b := c.bytes(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

// hostOnly takes the host out of an HTTP Host value ("name:port",
// "[v6]:port", "name"), canonical.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := splitHostPortLoose(hostport); err == nil {
		h = host
	}
	return canonicalName(strings.Trim(h, "[]"))
}

func splitHostPortLoose(s string) (string, string, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || strings.Contains(s[i:], "]") {
		return s, "", errors.New("no port")
	}
	if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		return s, "", errors.New("bare IPv6")
	}
	return s[:i], s[i+1:], nil
}
