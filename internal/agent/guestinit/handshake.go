package guestinit

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"
)

// The agent channel is one byte stream that outlives its host side: the
// node closes it and dials again after a checkpoint, a restore or its own
// restart, while the guest's end (a virtio-serial port) stays open. Bytes
// of an old connection may still be in flight either way, and the guest
// may not yet have noticed that the host went away. So every connection
// starts with a handshake the host drives:
//
//	host:  SPACE-HELLO <nonce>\n   (repeated until answered)
//	guest: SPACE-READY <nonce>\n
//	host:  SPACE-GO <nonce>\n
//
// after which both sides speak HTTP/2. Each side discards whatever
// precedes the line it waits for, and the nonce is fresh per dial, so
// stale bytes can neither be mistaken for the handshake nor reach the new
// connection's HTTP/2 session. A guest session still serving the old
// connection eats a HELLO as a protocol error and ends; the repeat reaches
// the new session.
const (
	helloPrefix = "SPACE-HELLO "
	readyPrefix = "SPACE-READY "
	goPrefix    = "SPACE-GO "
)

// helloInterval is how often the host repeats HELLO.
const helloInterval = 200 * time.Millisecond

// ClientHandshake runs the host's side on a freshly dialed conn and
// returns the conn to speak HTTP/2 on.
func ClientHandshake(conn net.Conn, deadline time.Time) (net.Conn, error) {
	nonceBytes := make([]byte, 12)
	if _, err := rand.Read(nonceBytes); err != nil {
		return nil, err
	}
	nonce := hex.EncodeToString(nonceBytes)
	want := []byte(readyPrefix + nonce + "\n")
	var got []byte
	buf := make([]byte, 4096)
	for {
		if time.Now().After(deadline) {
			return nil, errors.New("agent channel handshake: no answer from the guest")
		}
		if _, err := conn.Write([]byte(helloPrefix + nonce + "\n")); err != nil {
			return nil, fmt.Errorf("agent channel handshake: %w", err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(helloInterval))
		for {
			n, err := conn.Read(buf)
			got = append(got, buf[:n]...)
			if i := bytes.Index(got, want); i >= 0 {
				_ = conn.SetReadDeadline(time.Time{})
				if _, err := conn.Write([]byte(goPrefix + nonce + "\n")); err != nil {
					return nil, fmt.Errorf("agent channel handshake: %w", err)
				}
				return &prefixConn{Conn: conn, pre: got[i+len(want):]}, nil
			}
			if len(got) > 1<<20 { // junk only; keep the tail a READY may start in
				got = append([]byte(nil), got[len(got)-len(want):]...)
			}
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break // resend HELLO
				}
				return nil, fmt.Errorf("agent channel handshake: %w", err)
			}
		}
	}
}

// prefixConn is a conn whose first reads return bytes already read.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
