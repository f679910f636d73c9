package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

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
	return conn, nil
}
