package hostpath

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"strings"
	"testing"
)

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

func TestPathlessDropsFileAndSocketPaths(t *testing.T) {
	_, err := os.Open("/var/lib/space/nothing")
	if got := Pathless(err); strings.Contains(got.Error(), "/var/lib/space") || !errors.Is(got, fs.ErrNotExist) {
		t.Errorf("file error %v became %v", err, got)
	}
	_, err = net.Dial("unix", "/var/lib/space/none.sock")
	if got := Pathless(err); strings.Contains(got.Error(), "/var/lib/space") || !strings.Contains(got.Error(), "connect") {
		t.Errorf("socket error %v became %v", err, got)
	}
	other := errors.New("no path here")
	if Pathless(other) != other {
		t.Error("an error without a path changed")
	}
}
