// Package store is the control plane's durable state: an embedded bbolt
// database of JSON records in named buckets. Every write is committed (and
// fsynced) before it returns, so what the API acknowledged survives a crash.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrNotFound is returned for a missing record.
var ErrNotFound = errors.New("record not found")

// Store is an open database.
type Store struct {
	db *bolt.DB
}

// Open opens (creating if needed) the database at path.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Put stores v as JSON under bucket/key.
func (s *Store) Put(bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), data)
	})
}

// Get decodes bucket/key into v.
func (s *Store) Get(bucket, key string, v any) error {
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

// Delete removes bucket/key; a missing key is not an error.
func (s *Store) Delete(bucket, key string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.Delete([]byte(key))
	})
}

// Each calls fn with every key and raw JSON value of bucket, in key order.
func (s *Store) Each(bucket string, fn func(key string, data []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error { return fn(string(k), v) })
	})
}

// All decodes every record of bucket into a slice.
func All[T any](s *Store, bucket string) ([]T, error) {
	var out []T
	err := s.Each(bucket, func(key string, data []byte) error {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("decode %s/%s: %w", bucket, key, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}
