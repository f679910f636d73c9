package gateway

import (
	"context"
	"net"
)

// Interceptor terminates TLS for hosts with credential rules (internal/credentials implements it).
type Interceptor interface {
	// Intercepts reports whether sandboxID's TLS connections to host are terminated by the gateway.
	Intercepts(sandboxID, host string) bool
	// Serve handles one sandbox connection to host; conn replays the ClientHello already read.
	// dial connects upstream through the gateway's checks (the address is host:port).
	Serve(ctx context.Context, sandboxID, host string, conn net.Conn, dial func(ctx context.Context, network, addr string) (net.Conn, error)) error
}
