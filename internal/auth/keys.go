// Package auth owns API keys: minting them, checking them on every request
// and revoking them. Keys are stored only as SHA-256 hashes; the key itself
// is shown once, when it is created. Every key belongs to a project; admin
// keys also see every other project.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/store"
)

const bucket = "api_keys"

// ErrInvalidKey is returned for a key that does not exist or was revoked.
var ErrInvalidKey = errors.New("invalid API key")

// ErrLastAdmin refuses to revoke the only admin key: nothing could mint
// another over the API (`space serve --reset-admin-key` can, on the host).
var ErrLastAdmin = errors.New("the last admin key cannot be revoked")

// Key is a stored API key (never the key itself).
type Key struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Prefix string `json:"prefix"`
	Hash   string `json:"hash"`
	Admin  bool   `json:"admin"`
	// Project is the key's project; keys stored before projects existed
	// load as project.Default.
	Project   string    `json:"project,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Scope is what requests with the key see: its project, or everything
// for an admin key.
func (k Key) Scope() project.Scope {
	return project.Scope{Project: project.Of(k.Project), All: k.Admin}
}

// Keys is the key registry, cached in memory for the request path.
type Keys struct {
	st     store.Store
	mu     sync.RWMutex
	byHash map[string]Key
	// revoked holds, per key id, the channels closed when it is revoked,
	// so that long requests (attach streams) end with their key.
	watchers map[string]map[chan struct{}]struct{}
}

// Open loads the registry.
func Open(st store.Store) (*Keys, error) {
	k := &Keys{st: st, watchers: map[string]map[chan struct{}]struct{}{}}
	if err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

func hashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Create mints a key of project proj ("" is project.Default). The secret
// has E2B's format (e2b_ and 40 hex digits) so that E2B SDKs accept it
// unchanged.
func (k *Keys) Create(name, proj string, admin bool) (Key, string, error) {
	raw := make([]byte, 20)
	if _, err := rand.Read(raw); err != nil {
		return Key{}, "", err
	}
	secret := "e2b_" + hex.EncodeToString(raw)
	key, err := k.add(name, proj, admin, secret)
	return key, secret, err
}

// ErrKeyFormat: a secret given to Import is not e2b_ and 40 hex digits.
var ErrKeyFormat = errors.New("an API key is e2b_ followed by 40 lowercase hex digits")

// Import stores a key whose secret the operator chose, for an installer
// that generates the first admin key itself (a Helm chart's Secret). The
// secret must have the format Create mints.
func (k *Keys) Import(name, proj string, admin bool, secret string) (Key, error) {
	digits, ok := strings.CutPrefix(secret, "e2b_")
	if _, err := hex.DecodeString(digits); !ok || err != nil || len(digits) != 40 || strings.ToLower(digits) != digits {
		return Key{}, ErrKeyFormat
	}
	if _, err := k.Check(secret); err == nil {
		return Key{}, errors.New("this API key exists already")
	}
	return k.add(name, proj, admin, secret)
}

func (k *Keys) add(name, proj string, admin bool, secret string) (Key, error) {
	proj = project.Of(proj)
	if err := project.ValidName(proj); err != nil {
		return Key{}, err
	}
	idRaw := make([]byte, 6)
	_, _ = rand.Read(idRaw)
	key := Key{
		ID:        "key_" + hex.EncodeToString(idRaw),
		Name:      name,
		Prefix:    secret[:10],
		Hash:      hashKey(secret),
		Admin:     admin,
		Project:   proj,
		CreatedAt: time.Now().UTC(),
	}
	if err := k.st.Put(bucket, key.ID, key); err != nil {
		return Key{}, fmt.Errorf("store API key: %w", err)
	}
	k.mu.Lock()
	k.byHash[key.Hash] = key
	k.mu.Unlock()
	return key, nil
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

// Revoke deletes a key by id and ends the requests that use it (see
// Watch). The last admin key is refused with ErrLastAdmin.
func (k *Keys) Revoke(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for h, key := range k.byHash {
		if key.ID == id {
			if key.Admin && k.admins() == 1 {
				return fmt.Errorf("revoke %s: %w; create another admin key first", id, ErrLastAdmin)
			}
			if err := k.st.Delete(bucket, id); err != nil {
				return fmt.Errorf("revoke %s: %w", id, err)
			}
			delete(k.byHash, h)
			k.revoked(id)
			return nil
		}
	}
	return fmt.Errorf("key %s: %w", id, store.ErrNotFound)
}

// admins counts admin keys. k.mu is held.
func (k *Keys) admins() int {
	n := 0
	for _, key := range k.byHash {
		if key.Admin {
			n++
		}
	}
	return n
}

// Watch returns a channel closed when key id is revoked, and a function
// that stops watching (call it when the request ends). A key revoked
// already gets a closed channel.
func (k *Keys) Watch(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	k.mu.Lock()
	defer k.mu.Unlock()
	live := false
	for _, key := range k.byHash {
		if key.ID == id {
			live = true
			break
		}
	}
	if !live {
		close(ch)
		return ch, func() {}
	}
	if k.watchers[id] == nil {
		k.watchers[id] = map[chan struct{}]struct{}{}
	}
	k.watchers[id][ch] = struct{}{}
	return ch, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		delete(k.watchers[id], ch)
		if len(k.watchers[id]) == 0 {
			delete(k.watchers, id)
		}
	}
}

// Empty reports whether no key exists yet (first start).
func (k *Keys) Empty() bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.byHash) == 0
}

// Follow keeps the keys in step with what other processes write to a
// shared store (another control-plane replica creating or revoking a key)
// until ctx ends: a key made there works here, and one revoked there stops
// working here and ends the requests that use it, as Revoke does. It
// returns at once on a store no one else writes.
func (k *Keys) Follow(ctx context.Context) {
	store.Follow(ctx, k.st, bucket, func() { _ = k.reload() }, k.refresh, nil)
}

// reload replaces the keys with the store's (all of them, at Open).
func (k *Keys) reload() error {
	all, err := store.All[Key](k.st, bucket)
	if err != nil {
		return fmt.Errorf("load API keys: %w", err)
	}
	byHash := make(map[string]Key, len(all))
	live := map[string]bool{}
	for _, key := range all {
		key.Project = project.Of(key.Project)
		byHash[key.Hash] = key
		live[key.ID] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.byHash = byHash
	for id := range k.watchers {
		if !live[id] {
			k.revoked(id)
		}
	}
	return nil
}

// refresh reads key id again after a change to it.
func (k *Keys) refresh(id string) {
	var key Key
	err := k.st.Get(bucket, id, &key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return // the next change or resync reads it again
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for h, old := range k.byHash {
		if old.ID == id {
			delete(k.byHash, h)
		}
	}
	if err == nil {
		key.Project = project.Of(key.Project)
		k.byHash[key.Hash] = key
		return
	}
	k.revoked(id)
}

// revoked ends the requests of key id. k.mu is held.
func (k *Keys) revoked(id string) {
	for ch := range k.watchers[id] {
		close(ch)
	}
	delete(k.watchers, id)
}
