package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMapHostnameReplacesItsOwnLineOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte("127.0.0.1\tlocalhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second"} {
		if err := mapHostname(path, name); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(path)
	got := string(data)
	if !strings.Contains(got, "127.0.0.1\tlocalhost\n") || !strings.Contains(got, "\tsecond ") || strings.Contains(got, "first") {
		t.Fatalf("hosts after two identities:\n%s", got)
	}
}
