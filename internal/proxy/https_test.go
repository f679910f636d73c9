package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// tlsSandbox is a running sandbox whose every port is one HTTPS service
// with a self-signed certificate.
type tlsSandbox struct {
	nodeapi.Sandbox
	addr string
}

func (s tlsSandbox) ID() string { return "tls1" }

func (s tlsSandbox) DialPort(ctx context.Context, _ int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", s.addr)
}

type httpsControlPlane struct {
	sb    nodeapi.Sandbox
	ports []int
}

func (c httpsControlPlane) Running(context.Context, string) (nodeapi.Sandbox, error) {
	return c.sb, nil
}

func (c httpsControlPlane) Get(_ project.Scope, id string) (controlplane.Sandbox, error) {
	return controlplane.Sandbox{ID: id, State: apiv1.StateRunning, Traffic: &controlplane.Traffic{HTTPSPorts: c.ports}}, nil
}

func (c httpsControlPlane) List(project.Scope, controlplane.Filter) []controlplane.Sandbox {
	return nil
}

// A port the sandbox declared HTTPS (E2B's httpsPorts) is reached over
// TLS, its self-signed certificate accepted; any other port stays plain
// HTTP, which such a service refuses.
func TestHTTPSPorts(t *testing.T) {
	svc := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tls "+r.Host+" "+r.URL.Path)
	}))
	defer svc.Close()
	p := New(Config{ControlPlane: httpsControlPlane{sb: tlsSandbox{addr: svc.Listener.Addr().String()}, ports: []int{3000}}})
	defer p.Close()
	get := func(port string) (int, string) {
		r := httptest.NewRequest(http.MethodGet, "/hello", nil)
		r.Host = "localhost"
		r.Header.Set(headerSandboxID, "tls1")
		r.Header.Set(headerSandboxPort, port)
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := get("3000"); code != http.StatusOK || body != "tls localhost /hello" {
		t.Errorf("https port: %d %q, want 200 from the TLS service", code, body)
	}
	if code, body := get("3001"); code != http.StatusBadRequest || !strings.Contains(body, "HTTPS server") {
		t.Errorf("plain port to a TLS service: %d %q, want its 400", code, body)
	}
}
