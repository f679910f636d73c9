package controlplane

import (
	"slices"
	"testing"
)

// https_ports: real ports, never envd's, bounded; kept sorted without
// repeats, and asked of the sandbox by port.
func TestHTTPSPorts(t *testing.T) {
	for _, bad := range [][]int{{0}, {65536}, {-1}, {agentPort}, make([]int, maxHTTPSPorts+1)} {
		if err := checkHTTPSPorts(bad); err == nil {
			t.Errorf("https_ports %v accepted", bad[:min(len(bad), 3)])
		}
	}
	if err := checkHTTPSPorts([]int{443, 8443, 443}); err != nil {
		t.Fatal(err)
	}
	got := sortedPorts([]int{8443, 443, 8443})
	if !slices.Equal(got, []int{443, 8443}) {
		t.Fatalf("sorted %v", got)
	}
	s := Sandbox{Traffic: &Traffic{HTTPSPorts: got}}
	if !s.ServesHTTPS(8443) || s.ServesHTTPS(80) || (Sandbox{}).ServesHTTPS(443) {
		t.Error("ServesHTTPS answers wrongly")
	}
}
