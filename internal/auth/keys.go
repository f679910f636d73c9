// Package auth owns API keys: minting them, checking them on every request
// and revoking them. Keys are stored only as SHA-256 hashes; the key itself
// is shown once, when it is created.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/space-platform/space/internal/store"
)

const bucket = "api_keys"

// ErrInvalidKey is returned for a key that does not exist or was revoked.
var ErrInvalidKey = errors.New("invalid API key")

// Key is a stored API key (never the key itself).
type Key struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Prefix    string    `json:"prefix"`
	Hash      string    `json:"hash"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
}

// Keys is the key registry, cached in memory for the request path.
type Keys struct {
	st     *store.Store
	mu     sync.RWMutex
	byHash map[string]Key
}

// Open loads the registry.
func Open(st *store.Store) (*Keys, error) {
	all, err := store.All[Key](st, bucket)
	if err != nil {
		return nil, fmt.Errorf("load API keys: %w", err)
	}
	k := &Keys{st: st, byHash: map[string]Key{}}
	for _, key := range all {
		k.byHash[key.Hash] = key
	}
	return k, nil
}

func hashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Create mints a key. The secret has E2B's format (e2b_ and 40 hex digits)
// so that E2B SDKs accept it unchanged.
func (k *Keys) Create(name string, admin bool) (Key, string, error) {
	raw := make([]byte, 20)
	if _, err := rand.Read(raw); err != nil {
		return Key{}, "", err
	}
	secret := "e2b_" + hex.EncodeToString(raw)
	idRaw := make([]byte, 6)
	_, _ = rand.Read(idRaw)
	key := Key{
		ID:        "key_" + hex.EncodeToString(idRaw),
		Name:      name,
		Prefix:    secret[:10],
		Hash:      hashKey(secret),
		Admin:     admin,
		CreatedAt: time.Now().UTC(),
	}
	if err := k.st.Put(bucket, key.ID, key); err != nil {
		return Key{}, "", fmt.Errorf("store API key: %w", err)
	}
	k.mu.Lock()
	k.byHash[key.Hash] = key
	k.mu.Unlock()
	return key, secret, nil
}

// Check returns the key a secret belongs to.
func (k *Keys) Check(secret string) (Key, error) {
	if secret == "" {
		return Key{}, ErrInvalidKey
	}
	h := hashKey(secret)
	k.mu.RLock()
	key, ok := k.byHash[h]
	k.mu.RUnlock()
	if !ok || subtle.ConstantTimeCompare([]byte(key.Hash), []byte(h)) != 1 {
		return Key{}, ErrInvalidKey
	}
	return key, nil
}

// List returns every key.
func (k *Keys) List() []Key {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]Key, 0, len(k.byHash))
	for _, key := range k.byHash {
		out = append(out, key)
	}
	return out
}

// Revoke deletes a key by id.
func (k *Keys) Revoke(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for h, key := range k.byHash {
		if key.ID == id {
			if err := k.st.Delete(bucket, id); err != nil {
				return fmt.Errorf("revoke %s: %w", id, err)
			}
			delete(k.byHash, h)
			return nil
		}
	}
	return fmt.Errorf("key %s: %w", id, store.ErrNotFound)
}

// Empty reports whether no key exists yet (first start).
func (k *Keys) Empty() bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.byHash) == 0
}
