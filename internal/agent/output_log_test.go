package agent

import (
	"testing"
	"time"
)

func TestOutputLogRingDropsOldestWithoutReaders(t *testing.T) {
	l := newOutputLog(10, time.Second)
	l.append(outputStdout, []byte("0123456789"))
	l.append(outputStderr, []byte("abcd"))
	r, start := l.attach(0)
	if start != 4 {
		t.Fatalf("start %d, want 4 (oldest held)", start)
	}
	b := r.next()
	var got string
	for _, c := range b.chunks {
		got += string(c.data)
	}
	if got != "456789abcd" || b.chunks[1].kind != outputStderr {
		t.Errorf("replay %q %+v", got, b.chunks)
	}
	if _, pos := l.attach(-1); pos != 14 {
		t.Errorf("live attach at %d, want 14", pos)
	}
	if _, pos := l.attach(99); pos != 14 {
		t.Errorf("future offset clamps to %d, want 14", pos)
	}
}

func TestOutputLogBackpressureWaitsForReader(t *testing.T) {
	l := newOutputLog(10, 10*time.Second)
	r, _ := l.attach(0)
	l.append(outputStdout, []byte("12345678"))
	appended := make(chan struct{})
	go func() { l.append(outputStdout, []byte("abcdefgh")); close(appended) }()
	select {
	case <-appended:
		t.Fatal("append did not wait for the lagging reader")
	case <-time.After(100 * time.Millisecond):
	}
	b := r.next()
	r.advance(b.chunks[len(b.chunks)-1].end())
	select {
	case <-appended:
	case <-time.After(5 * time.Second):
		t.Fatal("append still blocked after the reader caught up")
	}
	b = r.next()
	if len(b.chunks) != 1 || string(b.chunks[0].data) != "abcdefgh" {
		t.Errorf("reader lost bytes: %+v", b)
	}
}

func TestOutputLogCutsOffStuckReader(t *testing.T) {
	l := newOutputLog(4, 50*time.Millisecond)
	r, _ := l.attach(0)
	l.append(outputStdout, []byte("1234"))
	done := make(chan struct{})
	go func() { l.append(outputStdout, []byte("5678")); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a stuck reader blocked the process forever")
	}
	if !r.next().overrun {
		t.Error("stuck reader was not told it overran")
	}
	l.close()
	r2, _ := l.attach(0)
	if b := r2.next(); len(b.chunks) != 1 || string(b.chunks[0].data) != "5678" {
		t.Errorf("ring content %+v", b)
	}
	r2.advance(8)
	if !r2.next().done {
		t.Error("closed, drained log should report done")
	}
}
