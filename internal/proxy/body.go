package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errBodyAfterHandler is what a transport reading the client's request
// body gets once the proxy has answered: the exchange is over.
var errBodyAfterHandler = errors.New("proxy: request body read after the response was sent")

// guardedBody is a client's request body handed to a transport that may
// read it from its own goroutine after RoundTrip returned (an
// http.RoundTripper may, and the agent's HTTP/2 transport and
// http.Transport both do when the sandbox answers before reading the whole
// body). net/http forbids that: once the handler returns, the server reads
// the connection again (the next keep-alive request, or its background
// read), and a Read of the old body in flight then, or one that reaches
// its end and starts the background read then, panics with "invalid
// concurrent Body.Read call" (golang/go#46866, #40747). finish, called
// before ServeHTTP returns, closes the guard: no Read starts afterwards
// and none is in flight when it returns.
type guardedBody struct {
	body io.ReadCloser
	rc   *http.ResponseController
	// mu is held for each Read, so finish can wait for one in flight.
	mu   sync.Mutex
	done atomic.Bool
}

// guardBody replaces r.Body with a guard and returns it; nil when the
// request has no body to guard.
func guardBody(w http.ResponseWriter, r *http.Request) *guardedBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	g := &guardedBody{body: r.Body, rc: http.NewResponseController(w)}
	r.Body = g
	return g
}

func (g *guardedBody) Read(p []byte) (int, error) {
	if g.done.Load() {
		return 0, errBodyAfterHandler
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done.Load() { // finish ran while this Read waited for the lock
		return 0, errBodyAfterHandler
	}
	return g.body.Read(p)
}

// Close ends the transport's use of the body; the server closes the real
// one after the handler, as it always does.
func (g *guardedBody) Close() error {
	g.done.Store(true)
	return nil
}

// Bounds of the drain in finish: as much as net/http itself would discard
// after a handler, and not for long.
const (
	maxDrain  = 256 << 10
	drainTime = time.Second
)

// finish stops every later Read, waits for one in flight, and drains what
// the client still sends, bounded, so that the handler returns with the
// body either at its end or beyond use. Both are needed: net/http panics
// too when a full-duplex handler leaves a small body unread, since its own
// discard after the handler reaches the end and starts a background read
// the next request's read collides with (the panic's other half). A Read
// blocked on a client that sends slowly is cut short with a past read
// deadline, and so is a body longer or slower than the drain's bounds: a
// connection whose body was not read to its end is not reused.
func (g *guardedBody) finish() {
	if g == nil {
		return
	}
	g.done.Store(true)
	if !g.mu.TryLock() {
		if err := g.rc.SetReadDeadline(time.Unix(1, 0)); err != nil {
			// Hijacked (an upgrade): net/http no longer reads this
			// connection, so a late Read collides with nothing of its.
			return
		}
		g.mu.Lock() // the Read in flight failed; the body is beyond use
		g.mu.Unlock()
		return
	}
	defer g.mu.Unlock()
	if err := g.rc.SetReadDeadline(time.Now().Add(drainTime)); err != nil {
		return
	}
	n, err := io.CopyN(io.Discard, g.body, maxDrain+1)
	if err == io.EOF && n <= maxDrain {
		_ = g.rc.SetReadDeadline(time.Time{}) // at its end: the connection stays
		return
	}
	_ = g.rc.SetReadDeadline(time.Unix(1, 0))
}
