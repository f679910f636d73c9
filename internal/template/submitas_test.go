package template

import (
	"context"
	"errors"
	"testing"
)

// Two projects building one recipe share its rootfs under two catalog
// names; deleting one name keeps the rootfs for the other.
func TestSubmitAsSharesOneRootfsAcrossNames(t *testing.T) {
	e := newTestEnv(t)
	r := mustParse(t, "from: minimal\nenv: {SHARED: \"1\"}\n")
	a, err := e.m.SubmitAs("team-a/py", "py", r, Source{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Wait(context.Background(), "team-a/py"); err != nil {
		t.Fatal(err)
	}
	b, err := e.m.SubmitAs("team-b/py", "py", r, Source{})
	if err != nil || b.ID != a.ID || b.State != StateReady {
		t.Fatalf("second project's submit of the same recipe: %+v, %v (first id %s)", b, err, a.ID)
	}
	if _, err := e.m.SubmitAs("team-a/x", "bad/name", r, Source{}); err == nil {
		t.Fatal("a name with '/' accepted")
	}
	if names := e.m.Names(); names["team-a/py"] != a.ID || names["team-b/py"] != a.ID || names["py"] != "" {
		t.Fatalf("catalog names %v", names)
	}
	if err := e.m.Delete("team-a/py", nil); err != nil {
		t.Fatal(err)
	}
	got, err := e.m.Get("team-b/py")
	if err != nil || !e.pool.Exists(got.RootfsVolume) {
		t.Fatalf("the other project's template after the first name's delete: %+v, %v", got, err)
	}
	if _, err := e.m.Get("team-a/py"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted name still resolves: %v", err)
	}
	if err := e.m.Delete("team-b/py", nil); err != nil {
		t.Fatal(err)
	}
	if e.pool.Exists(got.RootfsVolume) {
		t.Fatal("rootfs survived the delete of its last name")
	}
}
