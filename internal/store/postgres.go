package store

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are the PostgreSQL schema, applied in order of their version
// (the number their name starts with); a version, once released, never
// changes.
//
//go:embed migrations/*.sql
var migrations embed.FS

const (
	// opTimeout bounds one record operation, whose methods take no context:
	// a database that stopped answering fails requests instead of hanging
	// them.
	opTimeout = 30 * time.Second
	// migrationLock is the advisory lock (bigint key space) that
	// serializes migrations between replicas starting together.
	migrationLock = 0x73706163652d6d // "space-m"
	// lockSpace is the first key of the per-key advisory locks (int4 pair
	// key space, which never collides with the bigint one).
	lockSpace = 0x73706163 // "spac"
	// defaultMaxConns sizes the pool when the URL does not
	// (pool_max_conns); half of it may hold per-key locks, one per sandbox
	// operation in progress (a start holds one until the sandbox runs).
	defaultMaxConns = 32
)

// pgStore is the PostgreSQL backend.
type pgStore struct {
	pool *pgxpool.Pool
	// local serializes a key's lockers within this process before they
	// take a connection each to wait on the advisory lock.
	local keyLocks
	// lockConns bounds the connections that held locks occupy, so that
	// record operations (which lock holders make) always find one.
	lockConns chan struct{}

	mu   sync.Mutex
	held map[*heldLock]bool // for Close, which ends their sessions

	// watchers are fed by one listening connection, started by the first
	// Watch and ended by Close (stop).
	watchers
	listenOnce sync.Once
	listening  chan struct{} // closed once LISTEN first succeeded
	stop       context.CancelFunc
	stopped    chan struct{}
}

// OpenPostgres connects to the PostgreSQL database url names and brings
// its schema up to date. Several processes may open one database at once:
// migrations run under an advisory lock, in one transaction each open.
func OpenPostgres(ctx context.Context, url string) (Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open state: postgres URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	where := fmt.Sprintf("postgres %s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", where, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open state %s: %w", where, err)
	}
	return &pgStore{pool: pool, lockConns: make(chan struct{}, max(1, cfg.MaxConns/2)),
		listening: make(chan struct{}), stop: func() {}}, nil
}

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "migrations/"), ".sql")
		num, _, _ := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with its version number", f)
		}
		body, err := migrations.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// migrate applies the migrations the database lacks, all in one
// transaction under a transaction-scoped advisory lock: a second replica
// starting at the same moment waits, then finds them applied.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := loadMigrations()
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return err
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, m := range all {
		if applied[m.version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return tx.Commit(ctx)
}

// Close ends the sessions of locks still held (the pool's Close would wait
// for them), then closes the pool.
func (s *pgStore) Close() error {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for h := range held {
		h.release(false)
	}
	s.mu.Lock()
	stop, stopped := s.stop, s.stopped
	s.mu.Unlock()
	stop()
	if stopped != nil {
		<-stopped
	}
	s.pool.Close()
	return nil
}

func (s *pgStore) Put(bucket, key string, v any) error {
	data, err := encode(bucket, key, v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if bucket == SandboxBucket {
		// The columns are copied from the record so that they can never
		// disagree with it.
		_, err = s.pool.Exec(ctx, `
			INSERT INTO sandboxes (id, project, state, node, record, updated_at)
			VALUES ($1, coalesce($2::jsonb->>'project', ''), coalesce($2::jsonb->>'state', ''),
			        coalesce($2::jsonb->>'node', ''), $2::jsonb, now())
			ON CONFLICT (id) DO UPDATE SET project = excluded.project, state = excluded.state,
			        node = excluded.node, record = excluded.record, updated_at = excluded.updated_at`,
			key, string(data))
	} else {
		_, err = s.pool.Exec(ctx, `
			INSERT INTO records (bucket, key, value) VALUES ($1, $2, $3::jsonb)
			ON CONFLICT (bucket, key) DO UPDATE SET value = excluded.value`,
			bucket, key, string(data))
	}
	if err != nil {
		return fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	return nil
}

func (s *pgStore) Get(bucket, key string, v any) error {
	if !validKey(bucket, key) {
		return fmt.Errorf("%q/%q: %w", bucket, key, ErrNotFound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var data []byte
	var err error
	if bucket == SandboxBucket {
		err = s.pool.QueryRow(ctx, `SELECT record FROM sandboxes WHERE id = $1`, key).Scan(&data)
	} else {
		err = s.pool.QueryRow(ctx, `SELECT value FROM records WHERE bucket = $1 AND key = $2`, bucket, key).Scan(&data)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s/%s: %w", bucket, key, ErrNotFound)
	case err != nil:
		return fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	return json.Unmarshal(data, v)
}

func (s *pgStore) Delete(bucket, key string) error {
	if !validKey(bucket, key) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var err error
	if bucket == SandboxBucket {
		_, err = s.pool.Exec(ctx, `DELETE FROM sandboxes WHERE id = $1`, key)
	} else {
		_, err = s.pool.Exec(ctx, `DELETE FROM records WHERE bucket = $1 AND key = $2`, bucket, key)
	}
	if err != nil {
		return fmt.Errorf("delete %s/%s: %w", bucket, key, err)
	}
	return nil
}

// Each reads the whole bucket before calling fn, so that a slow fn holds
// no connection.
func (s *pgStore) Each(bucket string, fn func(key string, data []byte) error) error {
	if !validKey(bucket, "k") {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var rows pgx.Rows
	var err error
	if bucket == SandboxBucket {
		rows, err = s.pool.Query(ctx, `SELECT id, record FROM sandboxes ORDER BY id`)
	} else {
		rows, err = s.pool.Query(ctx, `SELECT key, value FROM records WHERE bucket = $1 ORDER BY key`, bucket)
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", bucket, err)
	}
	type kv struct {
		key  string
		data []byte
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv, error) {
		var e kv
		err := r.Scan(&e.key, &e.data)
		return e, err
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", bucket, err)
	}
	for _, e := range all {
		if err := fn(e.key, e.data); err != nil {
			return err
		}
	}
	return nil
}

// TryLead takes the lease when it is free, expired or already holder's,
// in one statement, timed by the database's clock.
func (s *pgStore) TryLead(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if err := checkLease(name, holder, ttl); err != nil {
		return false, err
	}
	var got string
	err := s.pool.QueryRow(ctx, `
		INSERT INTO leases (name, holder, expires_at)
		VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR leases.expires_at <= clock_timestamp()
		RETURNING holder`, name, holder, ttl.Microseconds()).Scan(&got)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("lease %s: %w", name, err)
	}
	return true, nil
}

func (s *pgStore) Resign(ctx context.Context, name, holder string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder); err != nil {
		return fmt.Errorf("resign lease %s: %w", name, err)
	}
	return nil
}

// Lock takes the key's lock in this process first, then a connection of
// its own, on which it waits for the session advisory lock of the key's
// hash. Keys whose hashes collide only wait for each other needlessly.
func (s *pgStore) Lock(ctx context.Context, key string) (func(), error) {
	unlockLocal, err := s.local.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	select {
	case s.lockConns <- struct{}{}:
	case <-ctx.Done():
		unlockLocal()
		return nil, fmt.Errorf("lock %s: %w", key, ctx.Err())
	}
	fail := func(err error) (func(), error) {
		<-s.lockConns
		unlockLocal()
		return nil, fmt.Errorf("lock %s: %w", key, err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, int32(lockSpace), key); err != nil {
		// The lock may have been granted just as ctx ended: ending the
		// session is the sure way to release it.
		conn.Hijack().Close(context.Background())
		return fail(err)
	}
	h := &heldLock{conn: conn, key: key, done: func() {
		<-s.lockConns
		unlockLocal()
	}}
	s.mu.Lock()
	if s.held == nil {
		s.held = map[*heldLock]bool{}
	}
	s.held[h] = true
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.held, h)
		s.mu.Unlock()
		h.release(true)
	}, nil
}

// heldLock is an advisory lock held on a connection taken from the pool.
type heldLock struct {
	once sync.Once
	conn *pgxpool.Conn
	key  string
	done func()
}

// release unlocks and returns the connection to the pool, or with
// unlock false (and whenever unlocking fails) ends its session, which
// releases the lock as well.
func (h *heldLock) release(unlock bool) {
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if unlock {
			_, err := h.conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, int32(lockSpace), h.key)
			unlock = err == nil
		}
		if unlock {
			h.conn.Release()
		} else {
			h.conn.Hijack().Close(ctx)
		}
		h.done()
	})
}

// notifyChannel is the NOTIFY channel migration 0003's triggers write to.
const notifyChannel = "space_changes"

func (s *pgStore) Shared() bool { return true }

// Watch returns once this handle listens for changes, so that every write
// committed afterwards is reported.
func (s *pgStore) Watch(ctx context.Context, bucket string) (<-chan string, error) {
	s.listenOnce.Do(func() {
		lctx, cancel := context.WithCancel(context.Background())
		s.mu.Lock()
		s.stop, s.stopped = cancel, make(chan struct{})
		s.mu.Unlock()
		go s.listen(lctx)
	})
	ch := s.watch(ctx, bucket)
	select {
	case <-s.listening:
		return ch, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("watch %s: %w", bucket, ctx.Err())
	}
}

// listen holds a connection of its own in LISTEN until ctx ends,
// reconnecting after a failure; each (re)connection tells the watchers to
// resync, as notifications sent meanwhile were lost.
func (s *pgStore) listen(ctx context.Context) {
	defer close(s.stopped)
	first := true
	for ctx.Err() == nil {
		err := s.listenOnceConn(ctx, &first)
		if ctx.Err() != nil {
			return
		}
		_ = err // the next attempt reports nothing either: watchers resync when it succeeds
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *pgStore) listenOnceConn(ctx context.Context, first *bool) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	if *first {
		*first = false
		close(s.listening)
	} else {
		s.notify("", Resync)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		bucket, key, _ := strings.Cut(n.Payload, "/")
		s.notify(bucket, key)
	}
}
