package inflight

import (
	"strings"
	"sync"
	"testing"
)

func TestLimiterBoundsEachKey(t *testing.T) {
	l := New(2, "uploads")
	if !l.Enter("a") || !l.Enter("a") {
		t.Fatal("within the bound refused")
	}
	if l.Enter("a") {
		t.Fatal("third of a key with a bound of 2 admitted")
	}
	if !l.Enter("b") {
		t.Fatal("another key pays for key a's")
	}
	l.Leave("a")
	if !l.Enter("a") {
		t.Fatal("one after one ended refused")
	}
	if got := l.InFlight("a"); got != 2 {
		t.Fatalf("a has %d in flight, want 2", got)
	}
	if msg := l.Refusal(); !strings.Contains(msg, "2 uploads in flight") {
		t.Errorf("refusal %q", msg)
	}
}

// Under contention exactly the bound gets in, and every Leave returns its
// place.
func TestLimiterConcurrent(t *testing.T) {
	l := New(10, "requests")
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.Enter("k") {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 10 || l.InFlight("k") != 10 {
		t.Fatalf("admitted %d, in flight %d, want 10", admitted, l.InFlight("k"))
	}
	for i := 0; i < 10; i++ {
		l.Leave("k")
	}
	if l.InFlight("k") != 0 {
		t.Fatalf("in flight %d after every leave", l.InFlight("k"))
	}
}
