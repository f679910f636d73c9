package e2b

import (
	"encoding/json"
	"slices"
	"testing"
)

// network.httpsPorts (e2b 2.51) reaches space's https_ports; a value that
// is not a list of numbers is refused before anything is created.
func TestCreateHTTPSPorts(t *testing.T) {
	var req newSandbox
	if err := json.Unmarshal([]byte(`{"templateID":"base","network":{"httpsPorts":[8443,3000]}}`), &req); err != nil {
		t.Fatal(err)
	}
	if msg := req.unsupported(); msg != "" {
		t.Fatalf("refused: %s", msg)
	}
	out, msg := req.request()
	if msg != "" || out.Network == nil || !slices.Equal(out.Network.HTTPSPorts, []int{8443, 3000}) {
		t.Fatalf("network %+v (%s), want https_ports [8443 3000]", out.Network, msg)
	}
	// Alone it changes nothing else: the internet stays open.
	if out.Network.AllowInternet != nil && !*out.Network.AllowInternet {
		t.Errorf("httpsPorts closed the internet: %+v", out.Network)
	}
	for _, bad := range []string{`{"httpsPorts":"443"}`, `{"httpsPorts":[1.5]}`, `{"httpsPorts":{"a":1}}`} {
		var req newSandbox
		if err := json.Unmarshal([]byte(`{"templateID":"base","network":`+bad+`}`), &req); err != nil {
			t.Fatal(err)
		}
		if msg := req.unsupported(); msg == "" {
			t.Errorf("network %s accepted", bad)
		}
	}
}
