package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// keyLocks are per-key locks within one process. A waiter can give up
// when its context ends, which a sync.Mutex would not allow.
type keyLocks struct {
	mu   sync.Mutex
	held map[string]*keyLock
}

type keyLock struct {
	token chan struct{} // holds one value while the lock is held
	refs  int           // holders and waiters; the entry goes at zero
}

func (l *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	if l.held == nil {
		l.held = map[string]*keyLock{}
	}
	k := l.held[key]
	if k == nil {
		k = &keyLock{token: make(chan struct{}, 1)}
		l.held[key] = k
	}
	k.refs++
	l.mu.Unlock()

	select {
	case k.token <- struct{}{}:
	case <-ctx.Done():
		l.drop(key, k)
		return nil, fmt.Errorf("lock %s: %w", key, ctx.Err())
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-k.token
			l.drop(key, k)
		})
	}, nil
}

func (l *keyLocks) drop(key string, k *keyLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.refs--; k.refs == 0 {
		delete(l.held, key)
	}
}

// leases are leader leases within one process, timed by the monotonic
// clock.
type leases struct {
	mu  sync.Mutex
	all map[string]lease
}

type lease struct {
	holder  string
	expires time.Time
}

func (l *leases) tryLead(name, holder string, ttl time.Duration) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.all[name]; ok && cur.holder != holder && now.Before(cur.expires) {
		return false
	}
	if l.all == nil {
		l.all = map[string]lease{}
	}
	l.all[name] = lease{holder: holder, expires: now.Add(ttl)}
	return true
}

func (l *leases) resign(name, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.all[name].holder == holder {
		delete(l.all, name)
	}
}
