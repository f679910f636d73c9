// Package store is the control plane's durable state: JSON records in named
// buckets, plus the two cluster primitives control-plane replicas need (a
// leader lease and per-key locks). It has two backends behind one interface:
// an embedded bbolt file (Open, the default of `space serve`) and PostgreSQL
// (OpenPostgres, for several replicas on one database). Every write is
// committed before it returns, so what the API acknowledged survives a crash.
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	// ErrNotFound is returned for a missing record.
	ErrNotFound = errors.New("record not found")
	// ErrInvalid is returned for a record no backend can hold.
	ErrInvalid = errors.New("invalid record")
)

// SandboxBucket is the bucket of sandbox records, the control plane's state
// machine. PostgreSQL keeps it in its own table (sandboxes) with the
// record's "project", "state" and "node" fields as columns; every other
// bucket shares one generic table.
const SandboxBucket = "sandboxes"

// Store is an open state store. It is safe for concurrent use.
type Store interface {
	// Put stores v as JSON under bucket/key. The write is committed (and,
	// for bbolt, fsynced) before Put returns. Buckets and keys must be
	// non-empty UTF-8 without NUL bytes and v must hold no string with a
	// NUL, since PostgreSQL's text and jsonb cannot hold them; both
	// backends refuse them alike (ErrInvalid), so that code tested on one
	// works on the other.
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

	// Watch reports the keys of bucket that change (a Put or Delete by any
	// handle on the database, this one included) from when it returns
	// until ctx ends, when the channel is closed. Changes to one key may
	// be coalesced into one report, so a watcher reads the record again
	// rather than trusting an order. Resync ("") says that changes may
	// have been missed (PostgreSQL's notification connection was
	// re-established, or the watcher fell far behind): reload the bucket.
	Watch(ctx context.Context, bucket string) (<-chan string, error)
	// Shared reports whether other processes may write the database
	// (PostgreSQL): a cache of it is then only as fresh as its last
	// notification. bbolt is owned by one process, whose own writes are
	// all there are.
	Shared() bool

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

// encode marshals a record for Put and checks that every backend can hold
// it.
func encode(bucket, key string, v any) ([]byte, error) {
	for _, name := range []string{bucket, key} {
		if name == "" || strings.IndexByte(name, 0) >= 0 || !utf8.ValidString(name) {
			return nil, fmt.Errorf("put %q/%q: %w: buckets and keys must be non-empty UTF-8 without NUL bytes", bucket, key, ErrInvalid)
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	if hasNUL(data) {
		return nil, fmt.Errorf("put %s/%s: %w: a string in the record holds a NUL byte", bucket, key, ErrInvalid)
	}
	return data, nil
}

// hasNUL reports whether JSON text has the escape \u0000, the only way
// encoding/json writes a NUL; a backslash before it that is itself escaped
// (\\u0000, the text "\u0000") does not count.
func hasNUL(data []byte) bool {
	for i := 0; ; {
		j := bytes.Index(data[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		j += i
		backslashes := 0
		for k := j - 1; k >= 0 && data[k] == '\\'; k-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return true
		}
		i = j + 1
	}
}

// validKey reports whether a key can be stored at all; a Get or Delete of
// one that cannot finds nothing.
func validKey(bucket, key string) bool {
	return strings.IndexByte(bucket, 0) < 0 && strings.IndexByte(key, 0) < 0 &&
		utf8.ValidString(bucket) && utf8.ValidString(key)
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
