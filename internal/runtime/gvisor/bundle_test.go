package gvisor

import (
	"testing"

	"github.com/space-platform/space/internal/runtime"
)

// The limits read back from a bundle are those it was written with, so a
// node that adopts a sandbox counts what it was started under.
func TestLimitsRoundTrip(t *testing.T) {
	r := &Runtime{cfg: Config{StateDir: t.TempDir()}}
	want := runtime.Limits{VCPUs: 2, MemoryMB: 768, Pids: 512}
	if err := r.writeBundle(runtime.Spec{ID: "aaaaaaaaaaaaaaaaaaaa", Limits: want, RootfsPath: "/nonexistent"}); err != nil {
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
