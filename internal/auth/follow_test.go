package auth

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Two control-plane replicas on one PostgreSQL: a key created through
// one works on the other, and a key revoked through one stops working on
// the other and ends the requests that use it there.
func TestFollowSharesKeysBetweenReplicas(t *testing.T) {
	url := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() *Keys {
		st, err := store.OpenURL(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		k, err := Open(st)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a, b := open(), open()
	// Made before b follows: the follow's first load must find it.
	_, admin, err := a.Create("admin", project.Default, true)
	if err != nil {
		t.Fatal(err)
	}
	go b.Follow(ctx)
	eventually(t, "an admin key made before following", func() bool { _, err := b.Check(admin); return err == nil })

	key, secret, err := a.Create("agent", "team-a", false)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a key made on the other replica", func() bool {
		k, err := b.Check(secret)
		return err == nil && k.Project == "team-a" && !k.Admin
	})
	revoked, unwatch := b.Watch(key.ID)
	defer unwatch()
	if err := a.Revoke(key.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-revoked:
	case <-time.After(10 * time.Second):
		t.Fatal("a revoke on the other replica did not end the key's requests here")
	}
	if _, err := b.Check(secret); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("a key revoked on the other replica still works here: %v", err)
	}
	if _, err := b.Check(admin); err != nil {
		t.Fatalf("the other key stopped working: %v", err)
	}
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen after 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
