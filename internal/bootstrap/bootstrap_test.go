package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/store"
)

// The first replica makes the cluster's egress CA and seals it in the
// bootstrap record; later loads get the same CA, a record from before the
// CA gets one (kept from then on), and the record's CA does not open
// with another token.
func TestBootstrapKeepsTheEgressCA(t *testing.T) {
	st, keys := keyStore(t, t.TempDir())
	ctx := context.Background()
	adminKey := filepath.Join(t.TempDir(), "admin.key")
	first, err := Load(ctx, st, keys, "token-a", adminKey, "", Seed{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(ctx, st, keys, "token-a", adminKey, "", Seed{})
	if err != nil {
		t.Fatal(err)
	}
	if first.EgressCA == nil || again.EgressCA.Fingerprint() != first.EgressCA.Fingerprint() {
		t.Fatalf("egress CAs %v and %v, want one, kept", first.EgressCA, again.EgressCA)
	}
	var rec sealedRecord
	if err := st.Get(recordBucket, recordKey, &rec); err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := first.EgressCA.KeyPEM()
	if bytes.Contains(rec.EgressCAKey, keyPEM[30:60]) || bytes.Contains(rec.EgressCACert, first.EgressCA.CertPEM()[30:60]) {
		t.Fatal("the record holds the CA in the clear")
	}
	if _, err := Load(ctx, st, keys, "token-b", adminKey, "", Seed{}); err == nil {
		t.Fatal("another token opened the record")
	}
	rec.EgressCAKey, rec.EgressCACert = nil, nil
	if err := st.Put(recordBucket, recordKey, rec); err != nil {
		t.Fatal(err)
	}
	upgraded, err := Load(ctx, st, keys, "token-a", adminKey, "", Seed{})
	if err != nil || upgraded.EgressCA == nil || upgraded.AdminKey != first.AdminKey {
		t.Fatalf("a record without a CA: %+v, %v", upgraded, err)
	}
	later, err := Load(ctx, st, keys, "token-a", adminKey, "", Seed{})
	if err != nil || later.EgressCA.Fingerprint() != upgraded.EgressCA.Fingerprint() {
		t.Fatalf("the CA added to an old record is not kept: %v", err)
	}
}

// A seeded egress CA (serve's <data-dir>/ca) becomes a new record's and
// stays; a record that exists keeps its own.
func TestBootstrapTakesASeededEgressCA(t *testing.T) {
	st, keys := keyStore(t, t.TempDir())
	seed, err := credentials.NewCA("seed")
	if err != nil {
		t.Fatal(err)
	}
	other, err := credentials.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	adminKey := filepath.Join(t.TempDir(), "admin.key")
	for i, ca := range []*credentials.CA{seed, other} {
		b, err := Load(ctx, st, keys, "token", adminKey, "", Seed{EgressCA: ca})
		if err != nil {
			t.Fatal(err)
		}
		if b.EgressCA.Fingerprint() != seed.Fingerprint() {
			t.Fatalf("load %d: the egress CA is not the seeded one the record was made with", i)
		}
	}
}

// An admin key the installer chose is the first admin key of an empty
// store (it works, the record keeps it, it is not reported as minted); a store that has one already ignores a new choice,
// and a malformed choice is refused.
func TestBootstrapWithAGivenAdminKey(t *testing.T) {
	ctx := context.Background()
	newStore := func() (store.Store, *auth.Keys) { return keyStore(t, t.TempDir()) }
	given := "e2b_" + strings.Repeat("ab12", 10)
	st, keys := newStore()
	path := filepath.Join(t.TempDir(), "admin.key")
	b, err := Load(ctx, st, keys, "token", path, given, Seed{})
	if err != nil {
		t.Fatal(err)
	}
	if b.AdminKey != given || b.Created {
		t.Fatalf("bootstrap with a given key: admin %q, created %v", b.AdminKey, b.Created)
	}
	if k, err := keys.Check(given); err != nil || !k.Admin {
		t.Fatalf("the given key does not work as an admin key: %+v, %v", k, err)
	}
	other := "e2b_" + strings.Repeat("cd34", 10)
	again, err := Load(ctx, st, keys, "token", path, other, Seed{})
	if err != nil || again.AdminKey != given {
		t.Fatalf("a second bootstrap with another key: %q, %v; want the first kept", again.AdminKey, err)
	}
	if _, err := keys.Check(other); err == nil {
		t.Fatal("a later choice of admin key was added to a bootstrapped store")
	}
	for _, bad := range []string{"e2b_short", "e2b_" + strings.Repeat("AB12", 10), strings.Repeat("ab12", 11), "e2b_" + strings.Repeat("zz12", 10)} {
		st, keys := newStore()
		if _, err := Load(ctx, st, keys, "token", filepath.Join(t.TempDir(), "admin.key"), bad, Seed{}); !errors.Is(err, auth.ErrKeyFormat) {
			t.Errorf("given admin key %q: %v, want ErrKeyFormat", bad, err)
		}
	}
}

// keyStore is a store in dir (state.db, closed when t ends) and its keys.
func keyStore(t *testing.T, dir string) (store.Store, *auth.Keys) {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys, err := auth.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	return st, keys
}
