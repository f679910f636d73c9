package auth

import (
	"errors"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/space-platform/space/internal/store"
)

func TestCreateCheckRevokeSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := Open(st)
	if err != nil {
		t.Fatal(err)
	}
	if !keys.Empty() {
		t.Fatal("new registry not empty")
	}
	key, secret, err := keys.Create("ci", true)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(secret) {
		t.Fatalf("secret %q is not in E2B's key format", secret)
	}
	st.Close()

	st, _ = store.Open(path)
	defer st.Close()
	keys, _ = Open(st)
	got, err := keys.Check(secret)
	if err != nil || got.ID != key.ID || !got.Admin {
		t.Fatalf("Check after reopen = %+v, %v", got, err)
	}
	if _, err := keys.Check(secret + "0"); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("wrong secret accepted: %v", err)
	}
	if err := keys.Revoke(key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Check(secret); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("revoked key accepted: %v", err)
	}
	if err := keys.Revoke(key.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
}
