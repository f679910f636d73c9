package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/space-platform/space/internal/network"
)

// RoundTrip sends req to the agent exactly as it is: unlike Do, it does not
// add the sandbox's access token. The host proxy forwards client (E2B SDK)
// traffic this way, so the agent itself decides whether the token the client
// presented is right, as envd does. req.URL must be an http URL; its host is
// ignored (every request goes over the sandbox's own channel).
func (a *AgentConn) RoundTrip(req *http.Request) (*http.Response, error) {
	return a.transport.RoundTrip(req)
}

// DialPort opens a TCP connection to port inside the sandbox, from its
// gateway namespace (the same path the agent channel takes), so that the
// host proxy can reach services the sandbox's processes listen on.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dial sandbox %s: port %d out of range", s.ID, port)
	}
	conn, err := s.node.cfg.Namespaces.Slot(s.ID).DialContext(ctx, "tcp", net.JoinHostPort(network.SandboxAddr, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("dial sandbox %s port %d: %w", s.ID, port, err)
	}
	return s.trackPortConn(conn), nil
}

// portConn is a DialPort connection, closed by the node when the sandbox
// stops or suspends.
type portConn struct {
	net.Conn
	sb   *Sandbox
	once sync.Once
}

func (c *portConn) Close() error {
	c.once.Do(func() {
		c.sb.mu.Lock()
		delete(c.sb.portConns, c)
		c.sb.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *Sandbox) trackPortConn(conn net.Conn) net.Conn {
	c := &portConn{Conn: conn, sb: s}
	s.mu.Lock()
	if s.portConns == nil {
		s.portConns = make(map[*portConn]struct{})
	}
	s.portConns[c] = struct{}{}
	s.mu.Unlock()
	return c
}

// closePortConns closes the connections DialPort made. Once the
// sandbox's network stack is gone (killed, suspended) a connection into it
// sees neither data nor a reset: without this, a proxied request in
// flight (a code-interpreter execution streaming its output) would hang
// until TCP gives up, minutes later, instead of failing at once.
func (s *Sandbox) closePortConns() {
	s.mu.Lock()
	conns := make([]*portConn, 0, len(s.portConns))
	for c := range s.portConns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
