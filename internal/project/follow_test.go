package project

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// A quota set through one replica applies on the other.
func TestFollowSharesQuotasBetweenReplicas(t *testing.T) {
	url := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() *Quotas {
		st, err := store.OpenURL(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		q, err := OpenQuotas(st, Quota{MaxSandboxes: 100})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	a, b := open(), open()
	go b.Follow(ctx)
	three := 3
	if _, err := a.Set("team-a", Override{MaxSandboxes: &three}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.Of("team-a").MaxSandboxes != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the other replica's quota of team-a: %+v, want max_sandboxes 3", b.Of("team-a"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.Of("team-b").MaxSandboxes != 100 {
		t.Fatalf("another project's quota changed: %+v", b.Of("team-b"))
	}
}
