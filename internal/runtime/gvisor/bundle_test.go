package gvisor

import (
	"errors"
	"testing"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/runtime"
)

// The limits read back from a bundle are those it was written with, so a
// node that adopts a sandbox counts what it was started under.
func TestLimitsRoundTrip(t *testing.T) {
	r := &Runtime{cfg: Config{StateDir: t.TempDir()}}
	want := runtime.Limits{VCPUs: 2, MemoryMB: 768, Pids: 512}
	if err := r.writeBundle(bundleSpec("aaaaaaaaaaaaaaaaaaaa", runtime.RootfsDir, want)); err != nil {
		t.Fatal(err)
	}
	got, err := r.Limits("aaaaaaaaaaaaaaaaaaaa")
	if err != nil || got != want {
		t.Fatalf("limits %+v, %v; want %+v", got, err, want)
	}
	if _, err := r.Limits("bbbbbbbbbbbbbbbbbbbb"); err == nil {
		t.Fatal("limits of a sandbox without a bundle")
	}
}

// gVisor boots from a host directory only; a block image (a VM's root) is
// refused before anything is written.
func TestBlockRootfsIsRefused(t *testing.T) {
	r := &Runtime{cfg: Config{StateDir: t.TempDir()}}
	for _, kind := range []runtime.RootfsKind{runtime.RootfsBlock, ""} {
		err := r.writeBundle(bundleSpec("cccccccccccccccccccc", kind, runtime.Limits{}))
		if !errors.Is(err, runtime.ErrUnsupported) {
			t.Errorf("rootfs of kind %q: %v; want ErrUnsupported", kind, err)
		}
	}
	if _, err := r.Limits("cccccccccccccccccccc"); err == nil {
		t.Fatal("a refused spec left a bundle")
	}
}

func bundleSpec(id string, kind runtime.RootfsKind, l runtime.Limits) runtime.Spec {
	return runtime.Spec{
		ID: id, Limits: l, Rootfs: runtime.Rootfs{Kind: kind, Path: "/nonexistent"},
		Network: &network.Slot{}, Agent: "/nonexistent/space-agent",
	}
}
