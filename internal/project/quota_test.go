package project

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/space-platform/space/internal/store"
)

func intp(v int) *int { return &v }

func TestScopeSeesOwnProjectOnly(t *testing.T) {
	a := In("a")
	if !a.Sees("a") || a.Sees("b") || a.Sees("") || a.Owner() != "a" {
		t.Fatalf("scope of a: %+v", a)
	}
	d := In("")
	if !d.Sees("") || !d.Sees(Default) || d.Sees("a") {
		t.Fatalf("default scope: %+v", d)
	}
	if !Everything.Sees("a") || !Everything.Sees("") {
		t.Fatal("Everything does not see everything")
	}
}

func TestOverridesLayerOnDefaultsAndPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defaults := Quota{MaxSandboxes: 10, MaxMemoryMB: 4096, MaxSnapshots: 20, CreatesPerSecond: 5, MaxTemplateDiskMB: 20480}
	q, _ := OpenQuotas(st, defaults)
	if got := q.Of("a"); got != defaults {
		t.Fatalf("quota without settings = %+v", got)
	}
	if _, err := q.Set("a", Override{MaxSandboxes: intp(2), MaxSnapshots: intp(0), MaxTemplateDiskMB: intp(512)}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Set("a", Override{MaxSandboxes: intp(-1)}); err == nil {
		t.Fatal("negative quota accepted")
	}
	if _, err := q.Set("a", Override{MaxTemplateDiskMB: intp(-1)}); err == nil {
		t.Fatal("negative template disk quota accepted")
	}
	if _, err := q.Set("A/b", Override{}); err == nil {
		t.Fatal("invalid project name accepted")
	}
	st.Close()
	st, _ = store.Open(path)
	defer st.Close()
	q, _ = OpenQuotas(st, defaults)
	want := Quota{MaxSandboxes: 2, MaxMemoryMB: 4096, MaxSnapshots: 0, CreatesPerSecond: 5, MaxTemplateDiskMB: 512}
	if got := q.Of("a"); got != want {
		t.Fatalf("quota after reopen = %+v, want %+v", got, want)
	}
	if got := q.Of("b"); got != defaults {
		t.Fatalf("another project's quota changed: %+v", got)
	}
	if ps := q.Projects(); len(ps) != 1 || ps[0] != "a" {
		t.Fatalf("Projects = %v", ps)
	}
}

func TestCreateRateWithFakeClock(t *testing.T) {
	q, _ := OpenQuotas(nil, Quota{CreatesPerSecond: 2})
	now := time.Unix(1000, 0)
	q.now = func() time.Time { return now }
	for i := 0; i < 2; i++ {
		if _, ok := q.AllowCreate("a", 1); !ok {
			t.Fatalf("create %d of the burst refused", i)
		}
	}
	wait, ok := q.AllowCreate("a", 1)
	if ok || wait <= 0 || wait > 500*time.Millisecond {
		t.Fatalf("third create in the same instant: ok=%v wait=%v; want refused, wait ≤ 0.5s", ok, wait)
	}
	if _, ok := q.AllowCreate("b", 1); !ok {
		t.Fatal("project b pays for project a's creates")
	}
	now = now.Add(wait)
	if _, ok := q.AllowCreate("a", 1); !ok {
		t.Fatal("create after the advertised wait refused")
	}
	// A branch of 5 needs a full bucket and leaves it in debt.
	now = now.Add(10 * time.Second)
	if _, ok := q.AllowCreate("a", 5); !ok {
		t.Fatal("a large branch with a full bucket refused")
	}
	if wait, ok := q.AllowCreate("a", 1); ok || wait < time.Second {
		t.Fatalf("after a 5-create branch at 2/s: ok=%v wait=%v; want refused for over a second", ok, wait)
	}
	// Unlimited projects are never refused.
	if _, err := q.Set("free", Override{CreatesPerSecond: new(float64)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, ok := q.AllowCreate("free", 1); !ok {
			t.Fatal("unlimited project refused")
		}
	}
}
