package node

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkJournalAppendFollow is the journal's throughput: 64 MiB
// appended in 32 KiB chunks (the size of the agent's reads) while one
// reader follows from offset 0, with the memory tail alone (8 MiB, the
// default) and with a 1 MiB tail that spills; then the same 64 MiB read
// back by a reader that attaches after the process ended, from the spill.
func BenchmarkJournalAppendFollow(b *testing.B) {
	const total, chunk = 64 << 20, 32 << 10
	data := make([]byte, chunk)
	for i := range data {
		data[i] = byte(i)
	}
	quiet := slog.New(slog.DiscardHandler)
	memory := func(*testing.B) *Journal {
		return newJournal(JournalConfig{Memory: 8 << 20, ReaderTimeout: time.Minute, Logger: quiet})
	}
	spilling := func(b *testing.B) *Journal {
		n := spillNode(b.TempDir(), 1<<20, 256<<20, time.Minute)
		n.log = quiet
		return newJournal(n.journalConfig("sb1", "s1"))
	}
	appendAll := func(j *Journal) {
		for off := 0; off < total; off += chunk {
			j.Append(Stdout, data)
		}
		j.Finish(End{})
	}
	follow := func(b *testing.B, j *Journal) {
		var got int64
		if _, err := j.Follow(context.Background(), 0, func(r, f int64) error {
			b.Fatalf("dropped %d..%d", r, f)
			return nil
		}, func(c Chunk) error {
			got += int64(len(c.Data))
			return nil
		}); err != nil || got != total {
			b.Fatalf("followed %d bytes: %v", got, err)
		}
	}
	concurrent := func(open func(*testing.B) *Journal) func(*testing.B) {
		return func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				j := open(b)
				done := make(chan struct{})
				go func() {
					defer close(done)
					follow(b, j)
				}()
				waitAttached(b, j, 1)
				appendAll(j)
				<-done
				j.Close()
			}
		}
	}
	b.Run("memory", concurrent(memory))
	b.Run("spill", concurrent(spilling))
	b.Run("spill-readback", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			b.StopTimer()
			j := spilling(b)
			appendAll(j)
			b.StartTimer()
			follow(b, j)
			b.StopTimer()
			j.Close()
			b.StartTimer()
		}
	})
	b.Run("spill-append", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			j := spilling(b)
			appendAll(j)
			b.StopTimer()
			j.Close()
			b.StartTimer()
		}
	})
}
