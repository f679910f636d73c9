package server

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// HTTPLimits bound what clients can hold open on each of the server's
// listeners (the API, the E2B API, the sandbox proxy), so that idle or
// slow clients cannot exhaust its file descriptors. There is deliberately
// no read or write timeout: attach streams, process output and archive
// uploads last as long as they need to.
type HTTPLimits struct {
	// ReadHeaderTimeout is how long a client has to send a request's
	// headers once it has started one; a slowloris client that trickles
	// them is cut off.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that carries no request
	// for this long.
	IdleTimeout time.Duration
	// MaxConnections bounds the connections open at once on each
	// listener (0: unlimited). Past it, new connections wait in the
	// kernel's accept queue until one closes.
	MaxConnections int
}

// DefaultHTTPLimits are the limits of `space serve` unless told otherwise.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxConnections: 4096}
}

// withDefaults fills unset timeouts: a listener never goes without them.
func (l HTTPLimits) withDefaults() HTTPLimits {
	d := DefaultHTTPLimits()
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	return l
}

// listenHTTP opens addr for h under limits: the listener admits at most
// MaxConnections connections at once, and the server applies the
// timeouts. Every listener of the server is built here.
func listenHTTP(addr string, h http.Handler, limits HTTPLimits) (*http.Server, net.Listener, error) {
	limits = limits.withDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if limits.MaxConnections > 0 {
		ln = netutil.LimitListener(ln, limits.MaxConnections)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: limits.ReadHeaderTimeout, IdleTimeout: limits.IdleTimeout}
	return srv, ln, nil
}
