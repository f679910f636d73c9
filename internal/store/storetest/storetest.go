// Package storetest is the test suite every store backend passes, so that
// the control plane behaves the same on bbolt and on PostgreSQL.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-platform/space/internal/store"
)

// Backend is a store implementation under test.
type Backend struct {
	// NewDB makes a fresh, empty database and returns the function that
	// opens a handle on it. The suite closes the handles it opens.
	NewDB func(t *testing.T) (open func() (store.Store, error))
	// Replicas says that two handles may be open on one database at once,
	// as two control-plane replicas. A single-process store (bbolt) says
	// false: its one handle then stands in for both replicas.
	Replicas bool
}

type rec struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

// Run runs the suite against b.
func Run(t *testing.T, b Backend) {
	open := func(t *testing.T, opener func() (store.Store, error)) store.Store {
		t.Helper()
		s, err := opener()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	fresh := func(t *testing.T) store.Store { return open(t, b.NewDB(t)) }
	// replicas returns two handles on one database.
	replicas := func(t *testing.T) (store.Store, store.Store) {
		opener := b.NewDB(t)
		first := open(t, opener)
		if !b.Replicas {
			return first, first
		}
		return first, open(t, opener)
	}

	t.Run("PutGetOverwriteDelete", func(t *testing.T) {
		s := fresh(t)
		for _, bucket := range []string{"things", store.SandboxBucket} {
			if err := s.Put(bucket, "a", rec{"alpha", 1}); err != nil {
				t.Fatal(err)
			}
			if err := s.Put(bucket, "a", rec{"alpha", 2}); err != nil {
				t.Fatal(err)
			}
			var got rec
			if err := s.Get(bucket, "a", &got); err != nil || got != (rec{"alpha", 2}) {
				t.Fatalf("%s: Get after overwrite = %+v, %v", bucket, got, err)
			}
			if err := s.Delete(bucket, "a"); err != nil {
				t.Fatal(err)
			}
			if err := s.Get(bucket, "a", &got); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s: Get after Delete: err = %v, want ErrNotFound", bucket, err)
			}
			if err := s.Delete(bucket, "a"); err != nil {
				t.Fatalf("%s: deleting a missing key: %v", bucket, err)
			}
		}
	})

	t.Run("Missing", func(t *testing.T) {
		s := fresh(t)
		var got rec
		if err := s.Get("nobucket", "x", &got); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing bucket: err = %v, want ErrNotFound", err)
		}
		if err := s.Put("things", "a", rec{"alpha", 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Get("things", "b", &got); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing key: err = %v, want ErrNotFound", err)
		}
		if err := s.Get(store.SandboxBucket, "a", &got); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a key of another bucket: err = %v, want ErrNotFound", err)
		}
		all, err := store.All[rec](s, "nobucket")
		if err != nil || len(all) != 0 {
			t.Fatalf("All of a missing bucket = %v, %v", all, err)
		}
	})

	t.Run("RefusesWhatABackendCannotHold", func(t *testing.T) {
		s := fresh(t)
		for _, c := range []struct {
			bucket, key string
			v           any
		}{
			{"things", "\x00check", rec{"x", 0}},
			{"things", "bad\xff", rec{"x", 0}},
			{"things", "", rec{"x", 0}},
			{"", "a", rec{"x", 0}},
			{"things", "a", rec{"nul\x00inside", 0}},
			{store.SandboxBucket, "sb-1", map[string]string{"reason": "\x00"}},
		} {
			if err := s.Put(c.bucket, c.key, c.v); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("Put(%q, %q, %v): err = %v, want ErrInvalid", c.bucket, c.key, c.v, err)
			}
		}
		var got rec
		if err := s.Get("things", "\x00check", &got); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get of a NUL key: err = %v, want ErrNotFound", err)
		}
		if err := s.Delete("things", "\x00check"); err != nil {
			t.Errorf("Delete of a NUL key: %v", err)
		}
		// The text \u0000 (a backslash, not a NUL) is fine.
		for _, name := range []string{`\u0000`, `\\\u0000`, "ü"} {
			if err := s.Put("things", "a", rec{name, 0}); err != nil {
				t.Fatalf("Put of %q: %v", name, err)
			}
			if err := s.Get("things", "a", &got); err != nil || got.Name != name {
				t.Fatalf("Get of %q = %+v, %v", name, got, err)
			}
		}
	})

	t.Run("EachOrderAndAll", func(t *testing.T) {
		s := fresh(t)
		// Byte order, not a locale's: upper case before lower, "a-" before "a0".
		keys := []string{"b", "a0", "B", "a-", "a", "sb-10", "sb-9", "é"}
		for _, bucket := range []string{"things", store.SandboxBucket} {
			for i, k := range keys {
				if err := s.Put(bucket, k, rec{k, i}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Put("other", "zz", rec{"other", 0}); err != nil {
				t.Fatal(err)
			}
			var got []string
			err := s.Each(bucket, func(key string, data []byte) error {
				got = append(got, key)
				return nil
			})
			want := []string{"B", "a", "a-", "a0", "b", "sb-10", "sb-9", "é"}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: Each keys = %v, %v; want %v", bucket, got, err, want)
			}
			all, err := store.All[rec](s, bucket)
			if err != nil || len(all) != len(keys) || all[0].Name != "B" || all[7].Name != "é" {
				t.Fatalf("%s: All = %+v, %v", bucket, all, err)
			}
			stop := errors.New("stop")
			n := 0
			if err := s.Each(bucket, func(string, []byte) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
				t.Fatalf("%s: Each did not stop at fn's error: n=%d err=%v", bucket, n, err)
			}
		}
	})

	t.Run("SurvivesReopen", func(t *testing.T) {
		opener := b.NewDB(t)
		s, err := opener()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put("things", "a", rec{"alpha", 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(store.SandboxBucket, "sb-1", map[string]any{"id": "sb-1", "state": "running"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, opener)
		var got rec
		if err := s.Get("things", "a", &got); err != nil || got.Name != "alpha" {
			t.Fatalf("Get after reopen = %+v, %v", got, err)
		}
		var sb map[string]any
		if err := s.Get(store.SandboxBucket, "sb-1", &sb); err != nil || sb["state"] != "running" {
			t.Fatalf("sandbox after reopen = %v, %v", sb, err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		a, b := replicas(t)
		const workers, each = 8, 20
		parallel(t, workers, func(w int) error {
			s := a
			if w%2 == 1 {
				s = b
			}
			for i := range each {
				key := fmt.Sprintf("w%d-%02d", w, i)
				if err := s.Put("things", key, rec{key, i}); err != nil {
					return err
				}
				var got rec
				if err := s.Get("things", key, &got); err != nil || got.N != i {
					return fmt.Errorf("read own write %s = %+v, %v", key, got, err)
				}
				// Everyone overwrites one shared key too.
				if err := s.Put("things", "shared", rec{key, i}); err != nil {
					return err
				}
			}
			return nil
		})
		all, err := store.All[rec](b, "things")
		if err != nil || len(all) != workers*each+1 {
			t.Fatalf("All after concurrent puts: %d records, %v; want %d", len(all), err, workers*each+1)
		}
	})

	t.Run("Lease", func(t *testing.T) {
		ctx := context.Background()
		a, b := replicas(t)
		const ttl = 400 * time.Millisecond
		if ok, err := a.TryLead(ctx, "loops", "replica-a", ttl); err != nil || !ok {
			t.Fatalf("first TryLead = %v, %v; want acquired", ok, err)
		}
		if ok, err := b.TryLead(ctx, "loops", "replica-b", ttl); err != nil || ok {
			t.Fatalf("TryLead by another holder while held = %v, %v; want refused", ok, err)
		}
		if ok, err := b.TryLead(ctx, "other-lease", "replica-b", ttl); err != nil || !ok {
			t.Fatalf("TryLead of another lease = %v, %v; want acquired", ok, err)
		}
		// Renewing keeps it past the first ttl.
		for range 3 {
			time.Sleep(ttl / 3)
			if ok, err := a.TryLead(ctx, "loops", "replica-a", ttl); err != nil || !ok {
				t.Fatalf("renew = %v, %v; want kept", ok, err)
			}
			if ok, _ := b.TryLead(ctx, "loops", "replica-b", ttl); ok {
				t.Fatal("another holder took a lease that was being renewed")
			}
		}
		// The holder stops renewing (it died): another takes over within ttl.
		start := time.Now()
		for {
			ok, err := b.TryLead(ctx, "loops", "replica-b", ttl)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				break
			}
			if time.Since(start) > ttl+time.Second {
				t.Fatalf("lease not taken over %s after its holder stopped renewing (ttl %s)", time.Since(start), ttl)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ok, _ := a.TryLead(ctx, "loops", "replica-a", ttl); ok {
			t.Fatal("the old holder got the lease back from the new one")
		}
		// Resigning hands it over at once; resigning a lease one does not
		// hold changes nothing.
		if err := a.Resign(ctx, "loops", "replica-a"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := a.TryLead(ctx, "loops", "replica-a", ttl); ok {
			t.Fatal("a Resign by a non-holder released the lease")
		}
		if err := b.Resign(ctx, "loops", "replica-b"); err != nil {
			t.Fatal(err)
		}
		if ok, err := a.TryLead(ctx, "loops", "replica-a", ttl); err != nil || !ok {
			t.Fatalf("TryLead after the holder resigned = %v, %v; want acquired", ok, err)
		}
		if _, err := a.TryLead(ctx, "loops", "replica-a", 0); err == nil {
			t.Fatal("TryLead with ttl 0 succeeded")
		}
	})

	t.Run("Lock", func(t *testing.T) {
		ctx := context.Background()
		a, b := replicas(t)
		// Mutual exclusion: workers on both handles increment a counter
		// with a read-modify-write under the lock; a lost update means two
		// held it at once.
		var inside atomic.Int32
		var overlap atomic.Bool
		const workers, each = 6, 10
		if err := a.Put("things", "counter", rec{"counter", 0}); err != nil {
			t.Fatal(err)
		}
		parallel(t, workers, func(w int) error {
			s := a
			if w%2 == 1 {
				s = b
			}
			for range each {
				unlock, err := s.Lock(ctx, "sb-1")
				if err != nil {
					return err
				}
				if inside.Add(1) > 1 {
					overlap.Store(true)
				}
				var c rec
				err = s.Get("things", "counter", &c)
				if err == nil {
					c.N++
					err = s.Put("things", "counter", c)
				}
				inside.Add(-1)
				unlock()
				unlock() // a second unlock is harmless
				if err != nil {
					return err
				}
			}
			return nil
		})
		var c rec
		if err := a.Get("things", "counter", &c); err != nil || c.N != workers*each || overlap.Load() {
			t.Fatalf("counter = %d (want %d), two holders at once: %v, err %v", c.N, workers*each, overlap.Load(), err)
		}

		// Another key is not held up by a held one.
		unlock, err := a.Lock(ctx, "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		other, err := b.Lock(ctx, "sb-2")
		if err != nil {
			t.Fatal(err)
		}
		other()
		// A waiter gives up when its context ends.
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if _, err := b.Lock(short, "sb-1"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held key with a short context: err = %v, want deadline exceeded", err)
		}
		unlock()
		// ... and the key is free afterwards.
		again, err := b.Lock(ctx, "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		again()
	})

	t.Run("Watch", func(t *testing.T) {
		a, b2 := replicas(t)
		if a.Shared() != b.Replicas {
			t.Fatalf("Shared() = %v for a backend whose Replicas is %v", a.Shared(), b.Replicas)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sandboxes, err := a.Watch(ctx, store.SandboxBucket)
		if err != nil {
			t.Fatal(err)
		}
		things, err := a.Watch(ctx, "things")
		if err != nil {
			t.Fatal(err)
		}
		// next returns the next key reported, skipping resyncs.
		next := func(ch <-chan string) string {
			t.Helper()
			for {
				select {
				case k, ok := <-ch:
					if !ok {
						t.Fatal("watch channel closed early")
					}
					if k != store.Resync {
						return k
					}
				case <-time.After(10 * time.Second):
					t.Fatal("no change reported within 10s")
				}
			}
		}
		// Another replica's writes and deletes, and this handle's own.
		if err := b2.Put(store.SandboxBucket, "sb-1", rec{"x", 1}); err != nil {
			t.Fatal(err)
		}
		if k := next(sandboxes); k != "sb-1" {
			t.Fatalf("watch reported %q after a Put of sb-1", k)
		}
		if err := b2.Put("things", "a/b", rec{"y", 1}); err != nil {
			t.Fatal(err)
		}
		if k := next(things); k != "a/b" {
			t.Fatalf("watch of things reported %q after a Put of a/b", k)
		}
		if err := b2.Delete(store.SandboxBucket, "sb-1"); err != nil {
			t.Fatal(err)
		}
		if k := next(sandboxes); k != "sb-1" {
			t.Fatalf("watch reported %q after a Delete of sb-1", k)
		}
		if err := a.Put(store.SandboxBucket, "sb-2", rec{"z", 1}); err != nil {
			t.Fatal(err)
		}
		// The write to things above was not reported on the sandboxes
		// watch: the next report there is sb-2.
		if k := next(sandboxes); k != "sb-2" {
			t.Fatalf("watch reported %q after a Put of sb-2", k)
		}
		cancel()
		for range sandboxes {
		}
	})

	if b.Replicas {
		t.Run("LockReleasedWhenHolderCloses", func(t *testing.T) {
			ctx := context.Background()
			opener := b.NewDB(t)
			a, err := opener()
			if err != nil {
				t.Fatal(err)
			}
			other := open(t, opener)
			if _, err := a.Lock(ctx, "sb-1"); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				unlock, err := other.Lock(ctx, "sb-1")
				if err == nil {
					unlock()
				}
				got <- err
			}()
			select {
			case err := <-got:
				t.Fatalf("Lock of a key another replica holds returned (%v)", err)
			case <-time.After(200 * time.Millisecond):
			}
			a.Close() // the holder goes away without unlocking
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a lock stayed held after its holder's store closed")
			}
		})
	}
}

// parallel runs fn(0) ... fn(n-1) at once and fails t with their errors.
func parallel(t *testing.T, n int, fn func(worker int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(w); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}
