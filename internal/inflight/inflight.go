// Package inflight bounds how many things of one kind (requests, uploads)
// each API key has in flight at once, across every API that takes the
// key: one key cannot hold the server's connections, goroutines or disk
// for uploads away from the others.
package inflight

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
)

// Limiter counts one kind of thing in flight per key. Counting is an
// atomic add on the key's counter: no lock is held across what is counted.
type Limiter struct {
	max  int64
	what string
	// counts maps key IDs to *atomic.Int64. A key's counter stays once
	// made (keys are few and long-lived), so Enter and Leave of a key
	// always meet the same counter.
	counts sync.Map
}

// New returns a Limiter admitting bound things (a plural noun: "requests")
// per key at once. A bound below 1 admits one.
func New(bound int, what string) *Limiter {
	return &Limiter{max: int64(max(bound, 1)), what: what}
}

// Max is the bound per key.
func (l *Limiter) Max() int { return int(l.max) }

// Enter counts one in for key, or reports false when key is at the bound.
// Each true must be matched by one Leave.
func (l *Limiter) Enter(key string) bool {
	c := l.counter(key)
	if c.Add(1) > l.max {
		c.Add(-1)
		return false
	}
	return true
}

// Leave counts one out for key.
func (l *Limiter) Leave(key string) {
	l.counter(key).Add(-1)
}

// InFlight is how many key has in flight now.
func (l *Limiter) InFlight(key string) int {
	return int(l.counter(key).Load())
}

// Refusal is the message of a 429 for a key at the bound.
func (l *Limiter) Refusal() string {
	return fmt.Sprintf("this API key has %d %s in flight, the most allowed; wait for some to finish", l.max, l.what)
}

// Admit is Enter for an HTTP request: when key is at the bound it answers
// 429 with Retry-After: 1 and the APIs' JSON error {"code", "message"},
// and reports false.
func (l *Limiter) Admit(w http.ResponseWriter, key string) bool {
	if l.Enter(key) {
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{http.StatusTooManyRequests, l.Refusal()})
	return false
}

func (l *Limiter) counter(key string) *atomic.Int64 {
	if c, ok := l.counts.Load(key); ok {
		return c.(*atomic.Int64)
	}
	c, _ := l.counts.LoadOrStore(key, new(atomic.Int64))
	return c.(*atomic.Int64)
}
