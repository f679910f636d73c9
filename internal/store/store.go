// Package store is the control plane's durable state: JSON records in named
// buckets, plus the two cluster primitives control-plane replicas need (a
// leader lease and per-key locks). It has two backends behind one interface:
// an embedded bbolt file (Open, the default of `space serve`) and PostgreSQL
// (OpenPostgres, for several replicas on one database). Every write is
// committed before it returns, so what the API acknowledged survives a crash.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotFound is returned for a missing record.
var ErrNotFound = errors.New("record not found")

// SandboxBucket is the bucket of sandbox records, the control plane's state
// machine. PostgreSQL keeps it in its own table (sandboxes) with the
// record's "project", "state" and "node" fields as columns; every other
// bucket shares one generic table.
const SandboxBucket = "sandboxes"

// Store is an open state store. It is safe for concurrent use.
type Store interface {
	// Put stores v as JSON under bucket/key. The write is committed (and,
	// for bbolt, fsynced) before Put returns.
	Put(bucket, key string, v any) error
	// Get decodes bucket/key into v; a missing record (or bucket) is an
	// error wrapping ErrNotFound.
	Get(bucket, key string, v any) error
	// Delete removes bucket/key; a missing key is not an error.
	Delete(bucket, key string) error
	// Each calls fn with every key and raw JSON value of bucket, in
	// ascending byte order of the keys. fn must not write to the store
	// (bbolt holds a read transaction while it runs).
	Each(bucket string, fn func(key string, data []byte) error) error

	// TryLead acquires or renews the lease name for holder until ttl from
	// now and reports whether holder has it. It is false, without error,
	// while another holder's lease has not expired. A leader calls it again
	// well within ttl (a third of it, say) and must stop acting as leader
	// once ttl has passed since the start of its last successful call: by
	// then another replica may have taken over. PostgreSQL measures expiry
	// with the database's clock, so replicas' clocks need not agree; bbolt
	// is one process and keeps leases in memory.
	TryLead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// Resign gives up holder's lease name at once, so that another replica
	// need not wait for it to expire; it is a no-op if holder does not hold
	// it.
	Resign(ctx context.Context, name, holder string) error
	// Lock blocks until the caller holds the lock named key, or ctx ends,
	// and returns the function that releases it (safe to call more than
	// once). Locks of one key exclude each other across every handle on the
	// same database: across replicas for PostgreSQL (a session advisory
	// lock, held on a connection of its own, released too if that
	// connection or the process dies), within the process for bbolt.
	// Locks are not reentrant: locking a key twice without unlocking
	// deadlocks.
	Lock(ctx context.Context, key string) (unlock func(), err error)

	// Close releases the store; locks still held are released.
	Close() error
}

// OpenURL opens the store s names: a postgres:// or postgresql:// URL
// (any connection string pgx accepts in URL form) opens PostgreSQL,
// anything else without a scheme is the path of a bbolt file.
func OpenURL(ctx context.Context, s string) (Store, error) {
	scheme, _, hasScheme := strings.Cut(s, "://")
	switch {
	case s == "":
		return nil, errors.New("open state: no store given")
	case hasScheme && (scheme == "postgres" || scheme == "postgresql"):
		return OpenPostgres(ctx, s)
	case hasScheme:
		return nil, fmt.Errorf("open state: unsupported store %s:// (want postgres:// or a file path)", scheme)
	}
	return Open(s)
}

// All decodes every record of bucket into a slice, in key order.
func All[T any](s Store, bucket string) ([]T, error) {
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
