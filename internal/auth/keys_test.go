package auth

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/project"
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
	key, secret, err := keys.Create("ci", "", true)
	if _, _, err := keys.Create("spare", "", true); err != nil { // the last admin key cannot be revoked
		t.Fatal(err)
	}
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

func openKeys(t *testing.T) (*Keys, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys, err := Open(st)
	if err != nil {
		t.Fatal(err)
	}
	return keys, path
}

func TestKeysBelongToProjects(t *testing.T) {
	keys, _ := openKeys(t)
	plain, _, err := keys.Create("plain", "", false)
	if err != nil || plain.Project != project.Default {
		t.Fatalf("key without a project = %+v, %v; want project %s", plain, err, project.Default)
	}
	a, secret, err := keys.Create("a", "team-a", false)
	if err != nil || a.Project != "team-a" {
		t.Fatalf("Create in team-a = %+v, %v", a, err)
	}
	got, _ := keys.Check(secret)
	if s := got.Scope(); s.All || !s.Sees("team-a") || s.Sees("team-b") || s.Sees("") {
		t.Fatalf("scope of a team-a key = %+v", s)
	}
	admin, _, _ := keys.Create("root", "", true)
	if s := admin.Scope(); !s.All || !s.Sees("team-b") || s.Owner() != project.Default {
		t.Fatalf("scope of an admin key = %+v", s)
	}
	for _, bad := range []string{"Team", "a/b", "-x", strings.Repeat("x", 64)} {
		if _, _, err := keys.Create("bad", bad, false); !errors.Is(err, project.ErrInvalid) {
			t.Errorf("project %q accepted: %v", bad, err)
		}
	}
}

// Keys stored before projects existed have no project field: they load
// as project default.
func TestStoredKeyWithoutProjectLoadsAsDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, _ := store.Open(path)
	if err := st.Put(bucket, "key_old", map[string]any{"id": "key_old", "name": "old", "hash": hashKey("e2b_old"), "admin": false}); err != nil {
		t.Fatal(err)
	}
	keys, err := Open(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := keys.Check("e2b_old")
	if err != nil || got.Project != project.Default {
		t.Fatalf("old key = %+v, %v", got, err)
	}
	st.Close()
}

func TestLastAdminCannotBeRevoked(t *testing.T) {
	keys, _ := openKeys(t)
	first, _, _ := keys.Create("admin", "", true)
	user, _, _ := keys.Create("user", "p", false)
	if err := keys.Revoke(first.ID); !errors.Is(err, ErrLastAdmin) {
		t.Fatalf("revoking the only admin key: %v, want ErrLastAdmin", err)
	}
	second, _, _ := keys.Create("admin2", "", true)
	if err := keys.Revoke(first.ID); err != nil {
		t.Fatalf("revoking one of two admin keys: %v", err)
	}
	if err := keys.Revoke(second.ID); !errors.Is(err, ErrLastAdmin) {
		t.Fatalf("revoking the remaining admin key: %v", err)
	}
	if err := keys.Revoke(user.ID); err != nil {
		t.Fatalf("revoking a project key: %v", err)
	}
}

func TestWatchEndsWithRevoke(t *testing.T) {
	keys, _ := openKeys(t)
	_, _, _ = keys.Create("admin", "", true)
	k, _, _ := keys.Create("user", "p", false)
	other, _, _ := keys.Create("other", "p", false)
	revoked, stop := keys.Watch(k.ID)
	defer stop()
	untouched, stopOther := keys.Watch(other.ID)
	defer stopOther()
	if err := keys.Revoke(k.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-revoked:
	case <-time.After(time.Second):
		t.Fatal("watch of a revoked key did not end")
	}
	select {
	case <-untouched:
		t.Fatal("revoking one key ended the watch of another")
	default:
	}
	if gone, _ := keys.Watch(k.ID); gone == nil {
		t.Fatal("nil channel")
	} else {
		select {
		case <-gone:
		default:
			t.Fatal("watching a key revoked already does not end at once")
		}
	}
}
