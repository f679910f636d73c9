// Package secrets keeps operator secrets (API tokens and the like) in the
// state store, encrypted with AES-256-GCM under a key that lives outside
// it, so a copy of state.db alone reveals no secret. The gateway reads them
// to inject credentials into sandbox traffic; nothing here ever hands a
// value to a sandbox or an API response.
//
// Every secret belongs to a project. The store addresses a secret by its
// reference (Ref): the bare name for project "default" (so secrets stored
// before projects existed keep their records), "<project>/<name>" for
// any other project.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
)

const (
	bucket = "secrets"
	// checkKey is the record that proves the key at start: a known text
	// encrypted under the key that encrypted everything else. No secret
	// reference starts with "-".
	checkKey = "-key-check"
	// legacyCheckKey is where stores made before PostgreSQL (which cannot
	// hold a NUL) kept it; Open moves it to checkKey.
	legacyCheckKey = "\x00key-check"
	checkText      = "space secrets key check"
	// KeySize is the length of the encryption key (AES-256).
	KeySize = 32
	// MaxValueBytes bounds one secret's value.
	MaxValueBytes = 64 << 10
)

// Errors callers branch on; returned wrapped.
var (
	ErrNotFound = errors.New("secret not found")
	ErrInvalid  = errors.New("invalid secret")
	// ErrWrongKey means the key cannot decrypt what is stored: the key
	// file was replaced or belongs to another installation.
	ErrWrongKey = errors.New("the secrets key does not match the stored secrets")
)

// namePattern allows '-' after the first character: E2B's secret names
// ("openai-api-key") use it, and it reads unambiguously in `${NAME}`.
var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// MaxMetadata bounds a secret's metadata: entries, key and value bytes,
// and bytes in all (E2B's limits).
const (
	MaxMetadataEntries  = 32
	MaxMetadataKeyBytes = 128
	MaxMetadataValBytes = 1024
	MaxMetadataBytes    = 8192
)

// HTTPStatus is what an API answers for an error of the store: 400 for
// ErrInvalid, 404 for ErrNotFound, 500 for anything else. The errors'
// messages name secrets, never values.
func HTTPStatus(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return 400
	case errors.Is(err, ErrNotFound):
		return 404
	}
	return 500
}

// ValidName checks a secret name: a letter or underscore, then up to 63
// letters, digits, underscores or hyphens, so it reads the same in
// `${NAME}`.
func ValidName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%w: name %q must match [A-Za-z_][A-Za-z0-9_-]* and be at most 64 characters", ErrInvalid, name)
	}
	return nil
}

// Ref is the store's reference of secret name of project p.
func Ref(p, name string) string {
	if project.Of(p) == project.Default {
		return name
	}
	return p + "/" + name
}

// parseRef splits a reference into project and name and validates both.
func parseRef(ref string) (proj, name string, err error) {
	proj, name = project.Default, ref
	if p, n, ok := strings.Cut(ref, "/"); ok {
		if err := project.ValidName(p); err != nil {
			return "", "", fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		proj, name = p, n
	}
	return proj, name, ValidName(name)
}

// Info describes a stored secret without its value.
type Info struct {
	Project   string
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Version counts the values the secret has had (1 for a new one).
	Version int
	// Metadata is the caller's description of the secret (never the
	// value); nil when it has none.
	Metadata map[string]string
}

// record is a secret as persisted: the sealed value and what describes it.
type record struct {
	Name      string    `json:"name"`
	Nonce     []byte    `json:"nonce"`
	Sealed    []byte    `json:"sealed"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Version is 0 in records from before versions were counted: 1.
	Version  int               `json:"version,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (r record) info(proj, name string) Info {
	return Info{Project: proj, Name: name, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Version: max(r.Version, 1), Metadata: r.Metadata}
}

// CheckMetadata validates a secret's metadata against the Max* limits.
func CheckMetadata(m map[string]string) error {
	if len(m) > MaxMetadataEntries {
		return fmt.Errorf("%w: metadata holds %d entries, at most %d are allowed", ErrInvalid, len(m), MaxMetadataEntries)
	}
	total := 0
	for k, v := range m {
		switch {
		case k == "":
			return fmt.Errorf("%w: metadata keys must not be empty", ErrInvalid)
		case len(k) > MaxMetadataKeyBytes:
			return fmt.Errorf("%w: metadata key of %d bytes, at most %d are allowed", ErrInvalid, len(k), MaxMetadataKeyBytes)
		case len(v) > MaxMetadataValBytes:
			return fmt.Errorf("%w: metadata value of %q has %d bytes, at most %d are allowed", ErrInvalid, k, len(v), MaxMetadataValBytes)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata holds %d bytes, at most %d are allowed", ErrInvalid, total, MaxMetadataBytes)
	}
	return nil
}

// Store is the encrypted secret store. It is safe for concurrent use.
type Store struct {
	st   store.Store
	aead cipher.AEAD
	// mu makes Set's "created or replaced" answer exact.
	mu sync.Mutex
}

// Open uses key to read and write secrets in st. It fails with ErrWrongKey
// when st holds secrets sealed under another key.
func Open(st store.Store, key []byte) (*Store, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets key: want %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	s := &Store{st: st, aead: aead}
	var check record
	err = st.Get(bucket, checkKey, &check)
	legacy := false
	if errors.Is(err, store.ErrNotFound) {
		err = st.Get(bucket, legacyCheckKey, &check)
		legacy = err == nil
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		if err := st.Put(bucket, checkKey, s.seal(checkKey, []byte(checkText), time.Now().UTC())); err != nil {
			return nil, fmt.Errorf("secrets: record key check: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("secrets: read key check: %w", err)
	default:
		if got, err := s.open(check); err != nil || string(got) != checkText {
			return nil, ErrWrongKey
		}
		if legacy {
			if err := st.Put(bucket, checkKey, s.seal(checkKey, []byte(checkText), check.CreatedAt)); err != nil {
				return nil, fmt.Errorf("secrets: move key check: %w", err)
			}
			if err := st.Delete(bucket, legacyCheckKey); err != nil {
				return nil, fmt.Errorf("secrets: move key check: %w", err)
			}
		}
	}
	return s, nil
}

// seal encrypts value with a fresh nonce; the name is associated data, so
// a sealed value moved to another name does not decrypt.
func (s *Store) seal(name string, value []byte, now time.Time) record {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Sprintf("secrets: random nonce: %v", err)) // crypto/rand does not fail on Linux
	}
	return record{Name: name, Nonce: nonce, Sealed: s.aead.Seal(nil, nonce, value, []byte(name)), CreatedAt: now, UpdatedAt: now}
}

func (s *Store) open(r record) ([]byte, error) {
	if len(r.Nonce) != s.aead.NonceSize() {
		return nil, ErrWrongKey
	}
	v, err := s.aead.Open(nil, r.Nonce, r.Sealed, []byte(r.Name))
	if err != nil {
		return nil, ErrWrongKey
	}
	return v, nil
}

// Set stores value under ref (see Ref), replacing any value it had and
// keeping its metadata; created says whether the secret is new.
func (s *Store) Set(ref string, value []byte) (info Info, created bool, err error) {
	return s.Put(ref, value, nil)
}

// Put is Set that also replaces the secret's metadata, unless metadata is
// nil (then a replaced secret keeps what it had).
func (s *Store) Put(ref string, value []byte, metadata map[string]string) (info Info, created bool, err error) {
	proj, name, err := parseRef(ref)
	if err != nil {
		return Info{}, false, err
	}
	if len(value) == 0 || len(value) > MaxValueBytes {
		return Info{}, false, fmt.Errorf("%w: the value of %s must be 1 to %d bytes, got %d", ErrInvalid, name, MaxValueBytes, len(value))
	}
	if err := CheckMetadata(metadata); err != nil {
		return Info{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UTC()
	// The reference is the associated data: a record copied to another
	// project's key does not decrypt.
	rec := s.seal(ref, value, now)
	rec.Version, rec.Metadata = 1, metadata
	var old record
	switch err := s.st.Get(bucket, ref, &old); {
	case errors.Is(err, store.ErrNotFound):
		created = true
	case err != nil:
		return Info{}, false, fmt.Errorf("read secret %s: %w", name, err)
	default:
		rec.CreatedAt = old.CreatedAt
		rec.Version = max(old.Version, 1) + 1
		if metadata == nil {
			rec.Metadata = old.Metadata
		}
	}
	if len(rec.Metadata) == 0 {
		rec.Metadata = nil
	}
	if err := s.st.Put(bucket, ref, rec); err != nil {
		return Info{}, false, fmt.Errorf("store secret %s: %w", name, err)
	}
	return rec.info(proj, name), created, nil
}

// Get returns the value of the secret ref.
func (s *Store) Get(ref string) ([]byte, error) {
	_, name, err := parseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", ref, ErrNotFound)
	}
	var rec record
	if err := s.st.Get(bucket, ref, &rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("secret %s: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("read secret %s: %w", name, err)
	}
	v, err := s.open(rec)
	if err != nil {
		return nil, fmt.Errorf("decrypt secret %s: %w", name, err)
	}
	return v, nil
}

// Exists reports whether the secret ref is stored.
func (s *Store) Exists(ref string) bool {
	if _, _, err := parseRef(ref); err != nil {
		return false
	}
	var rec record
	return s.st.Get(bucket, ref, &rec) == nil
}

// List returns every secret's project, name and times, by project and name.
func (s *Store) List() ([]Info, error) {
	recs, err := store.All[record](s.st, bucket)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	out := []Info{}
	for _, r := range recs {
		if r.Name == checkKey {
			continue
		}
		proj, name, err := parseRef(r.Name)
		if err != nil {
			continue
		}
		out = append(out, r.info(proj, name))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Project != out[j].Project {
			return out[i].Project < out[j].Project
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// Delete removes the secret ref.
func (s *Store) Delete(ref string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.Exists(ref) {
		_, name, _ := parseRef(ref)
		return fmt.Errorf("secret %s: %w", name, ErrNotFound)
	}
	if err := s.st.Delete(bucket, ref); err != nil {
		return fmt.Errorf("delete secret %s: %w", ref, err)
	}
	return nil
}

// LoadOrCreateKey reads the key file at path, creating it (32 random bytes,
// mode 0600) if it does not exist. The file holds the key raw or as 64 hex
// digits, so an operator can write one with `openssl rand -hex 32`.
func LoadOrCreateKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read secrets key: %w", err)
	}
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key %s is readable by others (mode %v); make it 0600", path, info.Mode().Perm())
	}
	if len(data) == KeySize {
		return data, nil
	}
	if key, err := hex.DecodeString(strings.TrimSpace(string(data))); err == nil && len(key) == KeySize {
		return key, nil
	}
	return nil, fmt.Errorf("secrets key %s must hold %d bytes (raw, or %d hex digits), it holds %d bytes", path, KeySize, 2*KeySize, len(data))
}

func createKey(path string) ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate secrets key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create secrets key: %w", err)
	}
	// O_EXCL: two servers starting at once must not each write a key.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create secrets key: %w", err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("write secrets key: %w", err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("write secrets key: %w", err)
	}
	return key, nil
}
