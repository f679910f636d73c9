package node

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

func TestJournalResumeFromAnyOffset(t *testing.T) {
	j := NewJournal(1 << 20)
	var want bytes.Buffer
	for i := 0; i < 100; i++ {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		j.Append(Stdout, []byte(line))
	}
	j.Finish(End{ExitCode: 3})
	for _, from := range []int64{0, 1, 7, 500, int64(want.Len())} {
		var got bytes.Buffer
		end, err := j.Follow(context.Background(), from, func(int64, int64) error {
			t.Fatal("nothing was dropped")
			return nil
		}, func(c Chunk) error { got.Write(c.Data); return nil })
		if err != nil || end.ExitCode != 3 {
			t.Fatalf("Follow(%d) = %v, %v", from, end, err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()[from:]) {
			t.Fatalf("Follow(%d) returned %d bytes, want %d", from, got.Len(), want.Len()-int(from))
		}
	}
}

func TestJournalBoundDropsOldestAndReportsIt(t *testing.T) {
	j := NewJournal(10)
	for i := 0; i < 5; i++ {
		j.Append(Stderr, []byte("abcd"))
	}
	j.Finish(End{})
	var requested, first int64 = -1, -1
	var got bytes.Buffer
	if _, err := j.Follow(context.Background(), 0, func(r, f int64) error {
		requested, first = r, f
		return nil
	}, func(c Chunk) error { got.Write(c.Data); return nil }); err != nil {
		t.Fatal(err)
	}
	if requested != 0 || first != 12 || got.String() != "abcdabcd" {
		t.Fatalf("dropped(%d,%d), got %q; want dropped(0,12) and two chunks", requested, first, got.String())
	}
}

func TestJournalFollowWakesOnAppend(t *testing.T) {
	j := NewJournal(1 << 20)
	done := make(chan string)
	go func() {
		var got bytes.Buffer
		_, _ = j.Follow(context.Background(), 0, nil, func(c Chunk) error { got.Write(c.Data); return nil })
		done <- got.String()
	}()
	time.Sleep(10 * time.Millisecond)
	j.Append(PTY, []byte("late"))
	j.Finish(End{})
	if got := <-done; got != "late" {
		t.Fatalf("got %q", got)
	}
}
