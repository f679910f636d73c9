package cluster

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
)

// node returns the Info of a node of 8 vCPUs and 16 GiB holding template
// "tpl", with memFree MiB free and vcpus committed.
func node(memFree, vcpus int) nodeapi.Info {
	return nodeapi.Info{VCPUs: 8, MemoryMB: 16384, DiskMB: 100000, DiskFreeMB: 50000,
		MemoryFreeMB: memFree, VCPUsCommitted: vcpus, Templates: []string{"tpl"}}
}

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }

func placementRegistry(t *testing.T, c *clock, pc PlacementConfig) *Registry {
	if pc.Rand == nil {
		pc.Rand = seeded(1)
	}
	return newTestRegistry(t, newMemStore(), c, func(cfg *Config) { cfg.Placement = pc })
}

func mustPlace(t *testing.T, r *Registry, req PlaceRequest) string {
	t.Helper()
	id, err := r.Place(req)
	if err != nil {
		t.Fatalf("place %s: %v", req, err)
	}
	return id
}

var small = PlaceRequest{Template: "tpl", VCPUs: 1, MemoryMB: 512, DiskMB: 1024}

func TestPlacePrefersFreeMemoryAndLowCommitment(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	mustRegister(t, r, "full", node(2048, 2))
	mustRegister(t, r, "empty", node(14000, 2))
	if got := mustPlace(t, r, small); got != "empty" {
		t.Fatalf("placed on %s, want the node with more free memory", got)
	}

	r = placementRegistry(t, c, PlacementConfig{})
	mustRegister(t, r, "busy", node(8000, 8))
	mustRegister(t, r, "idle", node(8000, 1))
	if got := mustPlace(t, r, small); got != "idle" {
		t.Fatalf("placed on %s, want the node with fewer vCPUs committed", got)
	}
}

func TestPlaceOnlyOnSchedulableNodesHoldingTheTemplate(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	mustRegister(t, r, "cordoned", node(16000, 0))
	mustRegister(t, r, "draining", node(16000, 0))
	mustRegister(t, r, "silent", node(16000, 0))
	other := node(16000, 0)
	other.Templates = []string{"other"}
	mustRegister(t, r, "other", other)
	warmOnly := node(16000, 0)
	warmOnly.Templates, warmOnly.TemplateImages = nil, []string{"tpl"}
	mustRegister(t, r, "warm-only", warmOnly)
	if _, err := r.Cordon("cordoned"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Drain("draining"); err != nil {
		t.Fatal(err)
	}
	c.advance(10 * time.Second)
	for _, id := range []string{"cordoned", "draining", "other", "warm-only"} {
		if err := r.Heartbeat(id, mustGet(t, r, id).Info); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(10 * time.Second) // "silent" is past the bound now
	mustState(t, r, "silent", Unreachable)
	for range 5 {
		if got := mustPlace(t, r, small); got != "warm-only" {
			t.Fatalf("placed on %s, the only ready node holding the template is warm-only", got)
		}
	}
	// No template: any ready node.
	if got := mustPlace(t, r, PlaceRequest{VCPUs: 1, MemoryMB: 64}); got != "other" {
		t.Fatalf("template-less request placed on %s, want the emptier ready node", got)
	}
}

func mustGet(t *testing.T, r *Registry, id string) Node {
	t.Helper()
	n, err := r.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A pooled sandbox ready for the request wins over an emptier node, as
// long as the pool has one left that this registry did not hand out.
func TestPlacePrefersAReadyPooledSandbox(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	pooled := node(2000, 7)
	pooled.Pools = map[string]nodeapi.PoolStatus{"tpl": {Size: 2, Ready: 1}}
	mustRegister(t, r, "pooled", pooled)
	mustRegister(t, r, "empty", node(16000, 0))

	req := small
	req.Pooled = true
	if got := mustPlace(t, r, req); got != "pooled" {
		t.Fatalf("placed on %s, want the node with a pooled sandbox ready", got)
	}
	if got := mustPlace(t, r, req); got != "empty" {
		t.Fatalf("second placement on %s: the one pooled sandbox was already taken", got)
	}
	// Limits that are not the pool's do not take a pooled sandbox.
	c.advance(DefaultSettle)
	if err := r.Heartbeat("pooled", pooled); err != nil {
		t.Fatal(err)
	}
	if got := mustPlace(t, r, small); got != "empty" {
		t.Fatalf("non-pooled request placed on %s", got)
	}
}

func TestPlacePrefersAWarmTemplateImageWhenLoadIsClose(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	warm := node(12000, 2)
	warm.TemplateImages = []string{"tpl"}
	mustRegister(t, r, "warm", warm)
	mustRegister(t, r, "cold", node(13000, 2))
	if got := mustPlace(t, r, small); got != "warm" {
		t.Fatalf("placed on %s, want the warm node when load is close", got)
	}

	r = placementRegistry(t, c, PlacementConfig{})
	warm = node(2000, 8)
	warm.TemplateImages = []string{"tpl"}
	mustRegister(t, r, "warm", warm)
	mustRegister(t, r, "cold", node(16000, 0))
	if got := mustPlace(t, r, small); got != "cold" {
		t.Fatalf("placed on %s: a warm image must not pile creates onto a loaded node", got)
	}
}

// A burst between two heartbeats spreads over equal nodes, because each
// placement is reserved until a heartbeat counts it.
func TestPlaceReservesUntilHeartbeatsCountIt(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	mustRegister(t, r, "a", node(8192, 0))
	mustRegister(t, r, "b", node(8192, 0))
	req := PlaceRequest{Template: "tpl", VCPUs: 2, MemoryMB: 2048}
	counts := map[string]int{}
	for range 4 {
		counts[mustPlace(t, r, req)]++
	}
	if counts["a"] != 2 || counts["b"] != 2 {
		t.Fatalf("burst of 4 placed %v, want 2 on each node", counts)
	}
	// Full now: 4096 MiB free each, both reserved.
	if _, err := r.Place(PlaceRequest{Template: "tpl", VCPUs: 1, MemoryMB: 4097}); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("place past the reservations: %v", err)
	}
	// A heartbeat too soon after the placements does not settle them...
	c.advance(DefaultSettle / 2)
	if err := r.Heartbeat("a", node(8192, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Place(PlaceRequest{Template: "tpl", VCPUs: 1, MemoryMB: 4097}); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("a heartbeat sent before the creates settled dropped their reservations: %v", err)
	}
	// ...one after it does: its figures are trusted again.
	c.advance(DefaultSettle)
	if err := r.Heartbeat("a", node(8192, 0)); err != nil {
		t.Fatal(err)
	}
	if got := mustPlace(t, r, PlaceRequest{Template: "tpl", VCPUs: 1, MemoryMB: 4097}); got != "a" {
		t.Fatalf("placed on %s after a's heartbeat settled its reservations", got)
	}
}

// Best of k draws k candidates with the injected random source and takes
// the better of them, not the best of all.
func TestPlaceBestOfK(t *testing.T) {
	c := newClock()
	ids := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	for seed := uint64(0); seed < 20; seed++ {
		r := placementRegistry(t, c, PlacementConfig{Rand: seeded(seed)})
		for i, id := range ids {
			mustRegister(t, r, id, node(1000+1000*i, 0)) // n5 is the emptiest
		}
		drawn := seeded(seed).Perm(len(ids))[:2]
		want := ids[max(drawn[0], drawn[1])]
		if got := mustPlace(t, r, small); got != want {
			t.Fatalf("seed %d: placed on %s, want %s, the better of the drawn %v", seed, got, want, drawn)
		}
	}
	// k as large as the cluster compares every node.
	r := placementRegistry(t, c, PlacementConfig{Choices: len(ids)})
	for i, id := range ids {
		mustRegister(t, r, id, node(1000+1000*i, 0))
	}
	if got := mustPlace(t, r, small); got != "n5" {
		t.Fatalf("best of all placed on %s", got)
	}
}

func TestPlaceMemoryOvercommitBound(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{MemoryOvercommit: 2})
	info := node(16000, 0)
	info.MemoryCommittedMB = 32768 - 512 // room for exactly one more small one
	mustRegister(t, r, "n1", info)
	mustPlace(t, r, small)
	var capErr *CapacityError
	if _, err := r.Place(small); !errors.As(err, &capErr) || capErr.FreeMemoryMB != 0 {
		t.Fatalf("place past the commitment bound: %v", err)
	}
}

func TestPlaceRefusalNamesTheClusterFigures(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	req := PlaceRequest{Template: "tpl", VCPUs: 2, MemoryMB: 4096, DiskMB: 1024}
	if _, err := r.Place(req); err == nil || err.Error() != "no node can fit 2 vCPUs / 4096 MiB of memory / 1024 MiB of disk of template tpl: no node has joined the cluster" {
		t.Fatalf("empty cluster: %v", err)
	}
	mustRegister(t, r, "a", node(1024, 0))
	small := node(800, 0)
	small.VCPUs, small.DiskFreeMB = 1, 2048
	mustRegister(t, r, "b", small)
	mustRegister(t, r, "c", node(16000, 0))
	if _, err := r.Cordon("c"); err != nil {
		t.Fatal(err)
	}
	_, err := r.Place(req)
	want := "no node can fit 2 vCPUs / 4096 MiB of memory / 1024 MiB of disk of template tpl: 3 nodes, largest free memory 1024 MiB, most vCPUs 8, largest free disk 50000 MiB, 1 cordoned"
	if !errors.Is(err, ErrNoCapacity) || err.Error() != want {
		t.Fatalf("refusal:\n got %v\nwant %s", err, want)
	}

	req.Template = "missing"
	_, err = r.Place(req)
	if err == nil || err.Error() != "no node can fit 2 vCPUs / 4096 MiB of memory / 1024 MiB of disk of template missing: 3 nodes, none of the 2 ready holds the template, 1 cordoned" {
		t.Fatalf("no node holds the template: %v", err)
	}

	c.advance(time.Minute)
	_, err = r.Place(req)
	if err == nil || err.Error() != "no node can fit 2 vCPUs / 4096 MiB of memory / 1024 MiB of disk of template missing: 3 nodes, none ready, 3 unreachable" {
		t.Fatalf("no node ready: %v", err)
	}
}

// A node its heartbeat says is empty but that was just given a sandbox is
// not removed without force.
func TestRemoveCountsPlacements(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	mustRegister(t, r, "n1", node(16000, 0))
	mustPlace(t, r, small)
	if _, _, err := r.Remove("n1", false); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "1 sandboxes") {
		t.Fatalf("remove of a node with a placement in flight: %v", err)
	}
}

// Placements at once from many goroutines neither race nor lose a
// reservation: the burst spreads evenly over equal nodes.
func TestPlaceConcurrently(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{Choices: 4})
	for _, id := range []string{"a", "b", "c", "d"} {
		mustRegister(t, r, id, node(16384, 0))
	}
	var wg sync.WaitGroup
	placed := make(chan string, 40)
	for range 40 {
		wg.Go(func() {
			id, err := r.Place(PlaceRequest{Template: "tpl", VCPUs: 1, MemoryMB: 256})
			if err != nil {
				t.Error(err)
			}
			placed <- id
		})
	}
	wg.Wait()
	close(placed)
	counts := map[string]int{}
	for id := range placed {
		counts[id]++
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if counts[id] != 10 {
			t.Fatalf("40 placements over 4 equal nodes: %v, want 10 each", counts)
		}
	}
}

// A sandbox of a backend goes only to a node that reports it; a node that
// reports none runs gVisor alone.
func TestPlaceOnlyOnNodesWithTheRuntime(t *testing.T) {
	c := newClock()
	r := placementRegistry(t, c, PlacementConfig{})
	old := node(16000, 0) // from before nodes reported runtimes
	mustRegister(t, r, "old", old)
	vm := node(8000, 4)
	vm.Runtimes = map[string]string{"gvisor": "gvisor", "microvm": "microvm-kvm"}
	mustRegister(t, r, "vm", vm)
	req := small
	req.Runtime = "microvm"
	for i := 0; i < 5; i++ {
		if got := mustPlace(t, r, req); got != "vm" {
			t.Fatalf("a microvm sandbox placed on %s, which has no microvm runtime", got)
		}
	}
	req.Runtime = "gvisor"
	if got := mustPlace(t, r, req); got != "old" {
		t.Fatalf("a gvisor sandbox placed on %s, want the node with more free memory (both run gvisor)", got)
	}

	r = placementRegistry(t, c, PlacementConfig{})
	mustRegister(t, r, "old", old)
	req.Runtime = "microvm"
	_, err := r.Place(req)
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "on the microvm runtime") {
		t.Fatalf("a microvm sandbox on a cluster without the runtime: %v; want a refusal naming it", err)
	}
}
