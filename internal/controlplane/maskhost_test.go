package controlplane

import "testing"

// A mask is a host[:port] with ${PORT}; anything that could split the
// header or the request is refused.
func TestMaskRequestHost(t *testing.T) {
	for _, ok := range []string{"", "localhost:${PORT}", "${PORT}-app.internal", "[::1]:${PORT}", "example.com"} {
		if err := checkMaskHost(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"a b", "a\r\nX: y", "a/b", "host:${PORT}:1", "${HOST}", "a:123456", string(make([]byte, 300))} {
		if err := checkMaskHost(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s := Sandbox{Traffic: &Traffic{MaskHost: "localhost:${PORT}"}}
	if got := s.RequestHost(8080); got != "localhost:8080" {
		t.Errorf("RequestHost: %q", got)
	}
	if got := (Sandbox{}).RequestHost(8080); got != "" {
		t.Errorf("no mask: %q", got)
	}
}
