package nettest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// ServeSource answers every TCP connection to addr, in the named namespace,
// with size zero bytes and then closes it: a download for bandwidth tests
// that any client (nc) can take.
func ServeSource(t testing.TB, namespace, addr string, size int64) {
	t.Helper()
	serveEach(ListenIn(t, namespace, addr), func(c net.Conn) {
		defer c.Close()
		_, _ = io.CopyN(c, zeros{}, size)
	})
}

// serveEach runs handle on its own goroutine for every connection l
// accepts, until l is closed.
func serveEach(l net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
}

// ServeSink reads up to size bytes from every TCP connection to addr, in
// the named namespace, answers with the number it read, in decimal, and
// closes the connection: an upload for bandwidth tests whose client need
// not close its side first.
func ServeSink(t testing.TB, namespace, addr string, size int64) {
	t.Helper()
	serveEach(ListenIn(t, namespace, addr), func(c net.Conn) {
		defer c.Close()
		n, _ := io.CopyN(io.Discard, c, size)
		_, _ = io.WriteString(c, strconv.FormatInt(n, 10))
	})
}

// Holder accepts TCP connections and keeps them open until their client
// closes them or Release is called, counting them: the far end for tests
// of connection limits.
type Holder struct {
	mu       sync.Mutex
	conns    map[net.Conn]bool
	accepted int
}

// Hold starts a Holder on addr in the named namespace; it is released when
// the test ends.
func Hold(t testing.TB, namespace, addr string) *Holder {
	t.Helper()
	h := &Holder{conns: map[net.Conn]bool{}}
	l := ListenIn(t, namespace, addr)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns[c] = true
			h.accepted++
			h.mu.Unlock()
			go func() {
				_, _ = io.Copy(io.Discard, c)
				h.mu.Lock()
				delete(h.conns, c)
				h.mu.Unlock()
				c.Close()
			}()
		}
	}()
	t.Cleanup(h.Release)
	return h
}

// Open is the number of connections held now.
func (h *Holder) Open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// Accepted is the number of connections accepted so far.
func (h *Holder) Accepted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.accepted
}

// Release closes every connection held.
func (h *Holder) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		c.Close()
		delete(h.conns, c)
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
