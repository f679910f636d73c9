package e2e

import (
	"errors"
	"io"
	"net"
	"net/url"
	"testing"
	"time"
)

// The main API cuts off a client that trickles its request headers
// (slowloris) at the read-header timeout; the listener limits themselves
// are tested in internal/server.
func TestAPICutsOffSlowHeaders(t *testing.T) {
	requireServer(t)
	inParallelGroup(t)
	u, err := url.Parse(env.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	timeout := env.cfg.HTTP.ReadHeaderTimeout
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	began := time.Now()
	go func() {
		if _, err := io.WriteString(c, "GET /v1/sandboxes HTTP/1.1\r\nHost: api\r\n"); err != nil {
			return
		}
		for range time.Tick(500 * time.Millisecond) {
			if _, err := io.WriteString(c, "X-Slow: y\r\n"); err != nil {
				return
			}
		}
	}()
	if err := c.SetReadDeadline(began.Add(timeout + 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	_, err = c.Read(b[:])
	var op *net.OpError
	if err == nil || errors.As(err, &op) && op.Timeout() {
		t.Fatalf("slow client still connected after %s: %v", time.Since(began), err)
	}
	if took := time.Since(began); took < timeout/2 || took > timeout+3*time.Second {
		t.Errorf("slow client cut off after %s, want about %s", took, timeout)
	}
}
