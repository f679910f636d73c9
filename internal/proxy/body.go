package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// errBodyAfterHandler is what a transport reading the client's request
// body gets once the proxy has answered: the exchange is over.
var errBodyAfterHandler = errors.New("proxy: request body read after the response was sent")

// readWait bounds how long finish waits for a Read in flight to end on its
// own before cutting it short.
const readWait = time.Second

// guardedBody is a client's request body handed to a transport that may
// read it from its own goroutine after RoundTrip returned (an
// http.RoundTripper may, and the agent's HTTP/2 transport and
// http.Transport both do when the sandbox answers before reading the whole
// body). net/http forbids that once the handler returns: it reads the
// connection again (its discard of the body's rest, the next keep-alive
// request, a background read), and a Read of the old body in flight then,
// or one that reaches the body's end and so starts a background read
// then, panics with "invalid concurrent Body.Read call" (golang/go#46866,
// #40747). With full duplex on, net/http's own discard of an unfinished
// body after the handler does the same to the next request. So:
//   - an HTTP/1 answer that starts before the body was read to its end
//     says Connection: close (see closeUnfinished), and no next request
//     shares the connection;
//   - finish, before ServeHTTP returns, closes the guard: no Read starts
//     afterwards and none is in flight when it returns.
type guardedBody struct {
	body io.ReadCloser
	rc   *http.ResponseController
	// turn is held (filled) for each Read, so finish can wait for one in
	// flight, for a while.
	turn chan struct{}
	done atomic.Bool
	eof  atomic.Bool
}

// guardBody replaces r.Body with a guard and returns it with the writer to
// answer through; a nil guard when the request has no body.
func guardBody(w http.ResponseWriter, r *http.Request) (*guardedBody, http.ResponseWriter) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, w
	}
	g := &guardedBody{body: r.Body, rc: http.NewResponseController(w), turn: make(chan struct{}, 1)}
	r.Body = g
	if r.ProtoMajor != 1 {
		return g, w // HTTP/2 streams share no connection state of this kind
	}
	return g, &closeUnfinished{ResponseWriter: w, g: g}
}

func (g *guardedBody) Read(p []byte) (int, error) {
	if g.done.Load() {
		return 0, errBodyAfterHandler
	}
	g.turn <- struct{}{}
	defer func() { <-g.turn }()
	if g.done.Load() { // finish ran while this Read waited for its turn
		return 0, errBodyAfterHandler
	}
	n, err := g.body.Read(p)
	if err == io.EOF {
		g.eof.Store(true)
	}
	return n, err
}

// Close ends the transport's use of the body; the server closes the real
// one after the handler, as it always does.
func (g *guardedBody) Close() error {
	g.done.Store(true)
	return nil
}

// finish stops every later Read and waits for one in flight. One blocked
// on a client that stalls mid-body is cut short with a past read deadline
// after readWait; the connection is then beyond use, and is not reused,
// since its answer said Connection: close.
func (g *guardedBody) finish() {
	if g == nil {
		return
	}
	g.done.Store(true)
	wait := time.NewTimer(readWait)
	defer wait.Stop()
	select {
	case g.turn <- struct{}{}:
		<-g.turn
		return
	case <-wait.C:
	}
	if err := g.rc.SetReadDeadline(time.Unix(1, 0)); err != nil {
		// Hijacked (an upgrade): net/http no longer reads this
		// connection, so a late Read collides with nothing of its.
		return
	}
	g.turn <- struct{}{}
	<-g.turn
}

// closeUnfinished adds Connection: close to an answer that starts while
// the request body has not been read to its end.
type closeUnfinished struct {
	http.ResponseWriter
	g       *guardedBody
	started bool
}

func (c *closeUnfinished) start() {
	if c.started {
		return
	}
	c.started = true
	if !c.g.eof.Load() {
		c.Header().Set("Connection", "close")
	}
}

func (c *closeUnfinished) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		c.start()
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *closeUnfinished) Write(p []byte) (int, error) {
	c.start()
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController (flushes, hijacks, deadlines) reach
// the server's writer.
func (c *closeUnfinished) Unwrap() http.ResponseWriter { return c.ResponseWriter }
