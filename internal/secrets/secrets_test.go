package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/space-platform/space/internal/store"
)

// openTemp opens a store and a secret store with a fresh key in a temp dir.
func openTemp(t *testing.T) (*Store, store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := LoadOrCreateKey(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(st, key)
	if err != nil {
		t.Fatal(err)
	}
	return s, st, dir
}

func TestSecretsAreEncryptedAtRest(t *testing.T) {
	s, st, dir := openTemp(t)
	plaintext := []byte("sk-live-plaintext-must-not-hit-disk-7f3a9c")
	if _, created, err := s.Set("API_TOKEN", plaintext); err != nil || !created {
		t.Fatalf("Set: created=%v err=%v", created, err)
	}
	got, err := s.Get("API_TOKEN")
	if err != nil || !bytes.Equal(got, plaintext) {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(db, []byte("API_TOKEN")) {
		t.Fatal("the database does not even hold the secret's name: the test looks in the wrong file")
	}
	if bytes.Contains(db, plaintext) {
		t.Fatal("state.db holds the secret's plaintext")
	}
}

func TestSecretsReplaceListDelete(t *testing.T) {
	s, _, _ := openTemp(t)
	if _, _, err := s.Set("A", []byte("one")); err != nil {
		t.Fatal(err)
	}
	first, _ := s.List()
	_, created, err := s.Set("A", []byte("two"))
	if err != nil || created {
		t.Fatalf("replace: created=%v err=%v", created, err)
	}
	if v, _ := s.Get("A"); string(v) != "two" {
		t.Fatalf("after replace Get = %q", v)
	}
	if _, _, err := s.Set("_b9", []byte("x")); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "A" || list[1].Name != "_b9" {
		t.Fatalf("List = %+v", list)
	}
	if !list[0].CreatedAt.Equal(first[0].CreatedAt) || list[0].UpdatedAt.Before(list[0].CreatedAt) {
		t.Errorf("replace changed created_at or updated_at went back: before %+v, after %+v", first[0], list[0])
	}
	if err := s.Delete("A"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after delete: %v", err)
	}
	if err := s.Delete("A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if s.Exists("A") || !s.Exists("_b9") {
		t.Fatal("Exists disagrees with the store")
	}
}

func TestSecretsRejectBadInput(t *testing.T) {
	s, _, _ := openTemp(t)
	for _, name := range []string{"", "1abc", "sp ace", "a$b", strings.Repeat("a", 65), "\x00key-check", checkKey} {
		if _, _, err := s.Set(name, []byte("v")); !errors.Is(err, ErrInvalid) {
			t.Errorf("Set(%q): %v, want ErrInvalid", name, err)
		}
	}
	if _, _, err := s.Set(strings.Repeat("a", 64), []byte("v")); err != nil {
		t.Errorf("64-character name refused: %v", err)
	}
	if _, _, err := s.Set("EMPTY", nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty value: %v", err)
	}
	if _, _, err := s.Set("BIG", make([]byte, MaxValueBytes+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("oversized value: %v", err)
	}
	if _, _, err := s.Set("MAX", bytes.Repeat([]byte("x"), MaxValueBytes)); err != nil {
		t.Errorf("value of exactly the limit refused: %v", err)
	}
}

func TestSecretsWrongKeyIsRefused(t *testing.T) {
	s, st, _ := openTemp(t)
	if _, _, err := s.Set("TOKEN", []byte("value")); err != nil {
		t.Fatal(err)
	}
	other := bytes.Repeat([]byte{7}, KeySize)
	_, err := Open(st, other)
	if !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open with another key: %v, want ErrWrongKey", err)
	}
	if !strings.Contains(err.Error(), "does not match") {
		t.Errorf("unclear error: %v", err)
	}
}

func TestSecretsKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "secrets.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 || info.Size() != KeySize {
		t.Fatalf("key file mode %v size %d", info.Mode().Perm(), info.Size())
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("reload: %v, same=%v", err, bytes.Equal(k1, k2))
	}
	hexPath := filepath.Join(dir, "hex.key")
	if err := os.WriteFile(hexPath, []byte(strings.Repeat("ab", KeySize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := LoadOrCreateKey(hexPath); err != nil || k[0] != 0xab {
		t.Fatalf("hex key: %x, %v", k, err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("tooshort"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(short); err == nil || !strings.Contains(err.Error(), "must hold 32 bytes") {
		t.Fatalf("short key: %v", err)
	}
	if err := os.Chmod(hexPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(hexPath); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("world-readable key: %v", err)
	}
}

// A sealed value copied to another name does not decrypt: the name is
// bound into the ciphertext.
func TestSecretsNameIsBound(t *testing.T) {
	s, st, _ := openTemp(t)
	if _, _, err := s.Set("A", []byte("value-of-a")); err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := st.Get(bucket, "A", &rec); err != nil {
		t.Fatal(err)
	}
	rec.Name = "B"
	if err := st.Put(bucket, "B", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("B"); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("moved ciphertext decrypted: %v", err)
	}
}

// A state.db from before the PostgreSQL store kept its key check under a
// NUL-prefixed key; Open still checks the key against it, then moves it.
func TestSecretsMoveTheLegacyKeyCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	key, err := LoadOrCreateKey(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := Open(openBolt(t, filepath.Join(dir, "scratch.db")), key)
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := json.Marshal(sealer.seal(legacyCheckKey, []byte(checkText), time.Now().UTC()))
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		return b.Put([]byte(legacyCheckKey), legacy)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	st := openBolt(t, path)
	wrong := bytes.Repeat([]byte{7}, KeySize)
	if _, err := Open(st, wrong); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open with another key against the legacy check: err = %v, want ErrWrongKey", err)
	}
	if _, err := Open(st, key); err != nil {
		t.Fatal(err)
	}
	var check record
	if err := st.Get(bucket, checkKey, &check); err != nil {
		t.Fatalf("key check not moved: %v", err)
	}
	if err := st.Get(bucket, legacyCheckKey, &check); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("legacy key check left behind: %v", err)
	}
	if _, err := Open(st, wrong); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open with another key after the move: err = %v, want ErrWrongKey", err)
	}
}

func openBolt(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Versions count the values a secret had; metadata is kept when a value
// is replaced without it, replaced when given, and bounded.
func TestSecretVersionsAndMetadata(t *testing.T) {
	s, _, _ := openTemp(t)
	info, created, err := s.Put("p1/openai-api-key", []byte("v1"), map[string]string{"team": "a"})
	if err != nil || !created || info.Version != 1 || info.Metadata["team"] != "a" {
		t.Fatalf("Put: %+v created=%v err=%v", info, created, err)
	}
	info, created, err = s.Set("p1/openai-api-key", []byte("v2"))
	if err != nil || created || info.Version != 2 || info.Metadata["team"] != "a" {
		t.Fatalf("Set: %+v created=%v err=%v, want version 2 with the metadata kept", info, created, err)
	}
	info, _, err = s.Put("p1/openai-api-key", []byte("v3"), map[string]string{"team": "b"})
	if err != nil || info.Version != 3 || info.Metadata["team"] != "b" {
		t.Fatalf("Put with metadata: %+v err=%v", info, err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Version != 3 || list[0].Metadata["team"] != "b" {
		t.Fatalf("List: %+v err=%v", list, err)
	}
	if v, err := s.Get("p1/openai-api-key"); err != nil || string(v) != "v3" {
		t.Fatalf("Get: %q %v", v, err)
	}
	big := map[string]string{}
	for i := range MaxMetadataEntries + 1 {
		big[fmt.Sprint(i)] = "x"
	}
	for _, m := range []map[string]string{big, {"": "x"}, {"k": strings.Repeat("x", MaxMetadataValBytes+1)}} {
		if _, _, err := s.Put("p1/other", []byte("v"), m); !errors.Is(err, ErrInvalid) {
			t.Errorf("metadata of %d entries accepted: %v", len(m), err)
		}
	}
}
