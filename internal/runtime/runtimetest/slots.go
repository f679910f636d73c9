package runtimetest

import (
	"testing"

	"github.com/space-platform/space/internal/network"
)

// Slots opens a directory of network namespaces under dir for one case,
// closed when the case ends, and returns it with a Harness.Slot making
// slots in it, each destroyed when the test that made it ends.
func Slots(t *testing.T, dir string) (*network.Namespaces, func(t *testing.T, id string) *network.Slot) {
	t.Helper()
	slots, err := network.OpenNamespaces(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := slots.Close(); err != nil {
			t.Errorf("close the namespace directory: %v", err)
		}
	})
	return slots, func(t *testing.T, id string) *network.Slot {
		s, err := slots.Create(id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Destroy(); err != nil {
				t.Errorf("destroy slot %s: %v", id, err)
			}
		})
		return s
	}
}
