package node

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Calls for one id never overlap; calls for other ids do not wait; the
// table forgets ids nobody holds.
func TestIDLocks(t *testing.T) {
	var l idLocks
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.lock("a")()
			if n := inside.Add(1); n > most.Load() {
				most.Store(n)
			}
			inside.Add(-1)
		}()
	}
	unlockA := l.lock("a")
	done := make(chan struct{})
	go func() { l.lock("b")(); close(done) }()
	<-done // "b" is not held up by "a"
	unlockA()
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d calls for one id ran at once", most.Load())
	}
	if len(l.locks) != 0 {
		t.Fatalf("%d locks left with no holder", len(l.locks))
	}
}
