package proxy

import (
	"net/http/httptest"
	"testing"
)

// Routing follows E2B's proxy: headers on localhost, IPs and
// sandbox.<domain>; <port>-<id>.<domain> otherwise.
func TestRoute(t *testing.T) {
	p := New(Config{Domain: "sbx.example.com"})
	for _, c := range []struct {
		host, id, port string
		want           target
		wantErr        bool
	}{
		{host: "127.0.0.1:3001", id: "abc123", port: "49999", want: target{"abc123", 49999}},
		{host: "localhost", id: "abc123", want: target{"abc123", EnvdPort}},
		{host: "[::1]:3001", id: "abc123", port: "8080", want: target{"abc123", 8080}},
		{host: "sandbox.sbx.example.com", id: "abc123", port: "49983", want: target{"abc123", EnvdPort}},
		{host: "49983-abc123.sbx.example.com", want: target{"abc123", EnvdPort}},
		{host: "8080-abc123.SBX.example.com:443", want: target{"abc123", 8080}},
		// Host routing wins over headers when the host names a sandbox.
		{host: "3000-xyz789.sbx.example.com", id: "abc123", port: "49983", want: target{"xyz789", 3000}},
		// Another domain: only the headers can route it.
		{host: "49983-abc123.other.test", id: "abc123", port: "49983", want: target{"abc123", EnvdPort}},
		{host: "49983-abc123.other.test", wantErr: true},
		{host: "localhost", wantErr: true},
		{host: "localhost", id: "ABC-1", wantErr: true},
		{host: "localhost", id: "abc123", port: "70000", wantErr: true},
		{host: "x-abc123.sbx.example.com", wantErr: true},
	} {
		r := httptest.NewRequest("GET", "/health", nil)
		r.Host = c.host
		if c.id != "" {
			r.Header.Set(headerSandboxID, c.id)
		}
		if c.port != "" {
			r.Header.Set(headerSandboxPort, c.port)
		}
		got, err := p.route(r)
		if (err != nil) != c.wantErr || (err == nil && got != c.want) {
			t.Errorf("host %q id %q port %q: got %+v, %v; want %+v (error %v)", c.host, c.id, c.port, got, err, c.want, c.wantErr)
		}
	}
}
