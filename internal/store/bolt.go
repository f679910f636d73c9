package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// boltStore is the embedded backend: one bbolt file, owned by one process
// (bbolt locks the file), so its lease and locks live in memory.
type boltStore struct {
	db *bolt.DB
	keyLocks
	leases
	watchers
}

// Open opens (creating if needed) the bbolt database at path.
func Open(path string) (Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) Close() error { return s.db.Close() }

func (s *boltStore) Put(bucket, key string, v any) error {
	data, err := encode(bucket, key, v)
	if err != nil {
		return err
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), data)
	}); err != nil {
		return err
	}
	s.notify(bucket, key)
	return nil
}

func (s *boltStore) Get(bucket, key string, v any) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return fmt.Errorf("%s/%s: %w", bucket, key, ErrNotFound)
		}
		data := b.Get([]byte(key))
		if data == nil {
			return fmt.Errorf("%s/%s: %w", bucket, key, ErrNotFound)
		}
		return json.Unmarshal(data, v)
	})
}

func (s *boltStore) Delete(bucket, key string) error {
	if err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.Delete([]byte(key))
	}); err != nil {
		return err
	}
	s.notify(bucket, key)
	return nil
}

// Watch fans out this handle's own writes: bbolt has no other writer.
func (s *boltStore) Watch(ctx context.Context, bucket string) (<-chan string, error) {
	return s.watch(ctx, bucket), nil
}

func (s *boltStore) Shared() bool { return false }

func (s *boltStore) Each(bucket string, fn func(key string, data []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error { return fn(string(k), v) })
	})
}

func (s *boltStore) Lock(ctx context.Context, key string) (func(), error) {
	return s.keyLocks.lock(ctx, key)
}

func (s *boltStore) TryLead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if err := checkLease(name, holder, ttl); err != nil {
		return false, err
	}
	return s.leases.tryLead(name, holder, ttl), nil
}

func (s *boltStore) Resign(ctx context.Context, name, holder string) error {
	s.leases.resign(name, holder)
	return nil
}

func checkLease(name, holder string, ttl time.Duration) error {
	switch {
	case name == "" || holder == "":
		return errors.New("lease: name and holder must not be empty")
	case ttl <= 0:
		return fmt.Errorf("lease %s: ttl must be positive, got %s", name, ttl)
	}
	return nil
}
