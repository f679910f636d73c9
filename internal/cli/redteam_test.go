package cli

import "testing"

// --only server, or --name of server checks alone, picks the server
// section; mixing it with the sandbox battery is a usage error.
func TestServerSelected(t *testing.T) {
	for _, c := range []struct {
		only    string
		names   []string
		want    bool
		wantErr bool
	}{
		{"", nil, false, false},
		{"network", nil, false, false},
		{"server", nil, true, false},
		{"", []string{"session listing"}, true, false},
		{"server", []string{"gzip-bomb template upload", "session flood"}, true, false},
		{"server", []string{"fork bomb"}, false, true},
		{"resources", []string{"session listing"}, false, true},
		{"", []string{"session listing", "fork bomb"}, false, true},
		{"", []string{"fork bomb"}, false, false},
	} {
		got, err := serverSelected(c.only, c.names)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("serverSelected(%q, %q) = %v, %v; want %v, error %v", c.only, c.names, got, err, c.want, c.wantErr)
		}
	}
}
