package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"
)

// startLimited serves a handler that answers 204 on a listener built by
// listenHTTP, as every listener of the server is.
func startLimited(t *testing.T, limits HTTPLimits) string {
	t.Helper()
	srv, ln, err := listenHTTP("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), limits)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// keepAlive opens a connection and completes one request on it, leaving
// it idle and open as an HTTP/1.1 client's pool would.
func keepAlive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := request(c, time.Now().Add(10*time.Second)); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// request sends one GET on c and reads its answer until deadline.
func request(c net.Conn, deadline time.Time) error {
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Close {
		return errors.New("unexpected answer: " + resp.Status)
	}
	return c.SetDeadline(time.Time{})
}

// closedByServer waits up to limit for the server to close c and reports
// how long that took.
func closedByServer(c net.Conn, limit time.Duration) (time.Duration, error) {
	began := time.Now()
	if err := c.SetReadDeadline(began.Add(limit)); err != nil {
		return 0, err
	}
	var b [1]byte
	_, err := c.Read(b[:])
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
		return time.Since(began), nil
	}
	if err == nil {
		return 0, errors.New("the server sent data on an idle connection")
	}
	return 0, err
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(entries)
}

// 2,000 idle keep-alive connections are closed by the idle timeout, and
// the process's file descriptors return to where they were.
func TestIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	const conns = 2000
	idle := 2 * time.Second
	addr := startLimited(t, HTTPLimits{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idle, MaxConnections: 4096})
	baseline := openFDs(t)

	type idleConn struct {
		net.Conn
		since time.Time // its request was answered
	}
	open := make([]idleConn, 0, conns)
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	began := time.Now()
	for i := 0; i < conns; i++ {
		open = append(open, idleConn{keepAlive(t, addr), time.Now()})
	}
	// Both ends are in this process; a few files of the baseline may have
	// been transient. On a loaded machine the first connections may reach
	// their timeout before the last are open.
	if opening := time.Since(began); opening >= idle/2 {
		t.Logf("opening took %s; not counting the files of open connections", opening)
	} else if n := openFDs(t); n < baseline+2*conns-16 {
		t.Fatalf("%d files open with %d connections (both ends in this process), %d before", n, conns, baseline)
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
		shortest = time.Hour
	)
	for _, c := range open {
		wg.Add(1)
		go func(c idleConn) {
			defer wg.Done()
			_, err := closedByServer(c, idle+20*time.Second)
			idleFor := time.Since(c.since)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, err)
			}
			shortest = min(shortest, idleFor)
			c.Close()
		}(c)
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d idle connections not closed by the server; first: %v", len(failures), conns, failures[0])
	}
	if shortest < idle*9/10 {
		t.Errorf("a connection was closed after %s idle, before the %s timeout", shortest, idle)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := openFDs(t)
		if n <= baseline {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d files open after the connections closed, %d before", n, baseline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A client that sends its headers too slowly (slowloris), or none at all,
// is cut off at the read-header timeout however it trickles them.
func TestSlowHeadersAreCutOff(t *testing.T) {
	timeout := time.Second
	addr := startLimited(t, HTTPLimits{ReadHeaderTimeout: timeout, IdleTimeout: time.Minute})
	for _, trickle := range []bool{true, false} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		if trickle {
			go func() {
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\n"); err != nil {
					return
				}
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					if _, err := io.WriteString(c, "X-Slow: y\r\n"); err != nil {
						return
					}
				}
			}()
		}
		took, err := closedByServer(c, timeout+5*time.Second)
		close(stop)
		c.Close()
		if err != nil {
			t.Fatalf("trickling %v: connection not closed: %v", trickle, err)
		}
		if took < timeout/2 || took > timeout+2*time.Second {
			t.Errorf("trickling %v: closed after %s, want about %s", trickle, took, timeout)
		}
	}
}

// Past MaxConnections a new connection is not served until one closes.
func TestConnectionsAreBounded(t *testing.T) {
	const limit = 3
	addr := startLimited(t, HTTPLimits{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxConnections: limit})
	held := make([]net.Conn, limit)
	for i := range held {
		held[i] = keepAlive(t, addr)
		defer held[i].Close()
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := request(extra, time.Now().Add(500*time.Millisecond)); err == nil {
		t.Fatalf("a connection past the limit of %d was served", limit)
	}
	// The request stays queued; once a held connection closes it is
	// answered.
	held[0].Close()
	if err := extra.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil {
		t.Fatalf("queued connection after one closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("queued connection: %s", resp.Status)
	}
}

func TestHTTPLimitsDefaults(t *testing.T) {
	got := HTTPLimits{MaxConnections: 7}.withDefaults()
	d := DefaultHTTPLimits()
	if got.ReadHeaderTimeout != d.ReadHeaderTimeout || got.IdleTimeout != d.IdleTimeout || got.MaxConnections != 7 {
		t.Fatalf("withDefaults: %+v", got)
	}
	if DefaultConfig().HTTP != d {
		t.Fatalf("DefaultConfig().HTTP = %+v, want %+v", DefaultConfig().HTTP, d)
	}
}
