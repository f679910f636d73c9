package sandboxid

import "testing"

func TestNewIsValidAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 10000; i++ {
		id := New()
		if !Valid(id) {
			t.Fatalf("New() = %q is not valid", id)
		}
		if seen[id] {
			t.Fatalf("New() repeated %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "abc", "ABCDEFGHIJKLMNOPQRST", "abcdefghij-lmnopqrst", "abcdefghijklmnopqrstu"} {
		if Valid(bad) {
			t.Errorf("Valid(%q) = true", bad)
		}
	}
}
