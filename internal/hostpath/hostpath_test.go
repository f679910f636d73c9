package hostpath

import "testing"

func TestHiderReplacesWholeDirectoriesOnly(t *testing.T) {
	h := New("/var/lib/space")
	for in, want := range map[string]string{
		"open /var/lib/space/volumes/x: gone":         "open <host>/volumes/x: gone",
		"/var/lib/space":                              "<host>",
		`"/var/lib/space" and /var/lib/space/a`:       `"<host>" and <host>/a`,
		"/var/lib/spacex/y stays":                     "/var/lib/spacex/y stays",
		"/var/lib/space-2 stays, /var/lib/space goes": "/var/lib/space-2 stays, <host> goes",
		"nothing here":                                "nothing here",
	} {
		if got := h.String(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
	var none *Hider
	if got := none.String("/var/lib/space/x"); got != "/var/lib/space/x" {
		t.Errorf("nil Hider rewrote: %q", got)
	}
}
