package cluster

import (
	"errors"
	"strings"
	"testing"
)

// A request pinned to a node (its volumes live there) goes there even
// when another node is emptier, and is refused, naming the node, when
// that node cannot take it or is not schedulable.
func TestPlacePinnedToANode(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	mustRegister(t, r, "volumes", node(2048, 6))
	mustRegister(t, r, "empty", node(14000, 0))
	pinned := small
	pinned.Node = "volumes"
	for range 3 {
		if got := mustPlace(t, r, pinned); got != "volumes" {
			t.Fatalf("pinned request placed on %s", got)
		}
	}
	big := pinned
	big.MemoryMB = 8000
	_, err := r.Place(big)
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "on node volumes") {
		t.Fatalf("pinned request that does not fit: %v, want a refusal naming the node", err)
	}
	if _, err := r.Cordon("volumes"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Place(pinned); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("pinned to a cordoned node: %v, want a refusal", err)
	}
}
