package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func readAllEvents(t *testing.T, stream string) []sseEvent {
	t.Helper()
	r := newSSEReader(strings.NewReader(stream))
	var events []sseEvent
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return events
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		events = append(events, ev)
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   []sseEvent
	}{
		{
			name:   "single event",
			stream: "event: stdout\nid: 5\ndata: {\"text\":\"hello\"}\n\n",
			want:   []sseEvent{{Type: "stdout", Data: []byte(`{"text":"hello"}`), ID: "5", HasID: true}},
		},
		{
			name:   "multi-line data is joined with newlines",
			stream: "data: one\ndata: two\ndata:\ndata: four\n\n",
			want:   []sseEvent{{Type: "message", Data: []byte("one\ntwo\n\nfour")}},
		},
		{
			name:   "comments and keepalives are ignored",
			stream: ": keepalive\n\n:another\nevent: log\n: in the middle\ndata: x\n\n: keepalive\n\n",
			want:   []sseEvent{{Type: "log", Data: []byte("x")}},
		},
		{
			name:   "CRLF and lone CR line endings",
			stream: "event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\rdata: 3\n\n",
			want: []sseEvent{
				{Type: "a", Data: []byte("1")},
				{Type: "b", Data: []byte("2")},
				{Type: "message", Data: []byte("3")},
			},
		},
		{
			name:   "only one leading space is stripped and colons stay in values",
			stream: "data:no-space\ndata:  two spaces\ndata: a:b: c\n\n",
			want:   []sseEvent{{Type: "message", Data: []byte("no-space\n two spaces\na:b: c")}},
		},
		{
			name:   "id persists to later events but HasID is per event",
			stream: "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
			want: []sseEvent{
				{Type: "message", Data: []byte("a"), ID: "7", HasID: true},
				{Type: "message", Data: []byte("b"), ID: "7"},
				{Type: "message", Data: []byte("c"), ID: "", HasID: true},
			},
		},
		{
			name:   "id with NUL is ignored",
			stream: "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
			want: []sseEvent{
				{Type: "message", Data: []byte("a"), ID: "1", HasID: true},
				{Type: "message", Data: []byte("b"), ID: "1"},
			},
		},
		{
			name:   "event without data is still dispatched",
			stream: "event: done\n\n",
			want:   []sseEvent{{Type: "done", Data: []byte{}}},
		},
		{
			name:   "unknown fields are ignored",
			stream: "foo: bar\ndata: x\nbaz\n\n",
			want:   []sseEvent{{Type: "message", Data: []byte("x")}},
		},
		{
			name:   "event cut off by the end of the stream is discarded",
			stream: "data: complete\n\nevent: stdout\nid: 9\ndata: {\"text\":\"incompl",
			want:   []sseEvent{{Type: "message", Data: []byte("complete")}},
		},
		{
			name:   "event without its blank line is discarded",
			stream: "data: complete\n\ndata: no blank line\n",
			want:   []sseEvent{{Type: "message", Data: []byte("complete")}},
		},
		{
			name:   "byte order mark at the start is skipped",
			stream: "\xEF\xBB\xBFdata: x\n\n",
			want:   []sseEvent{{Type: "message", Data: []byte("x")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readAllEvents(t, tt.stream)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d events %+v, want %d %+v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.Type != w.Type || string(g.Data) != string(w.Data) || g.ID != w.ID || g.HasID != w.HasID {
					t.Errorf("event %d = {%q %q id=%q has=%v}, want {%q %q id=%q has=%v}",
						i, g.Type, g.Data, g.ID, g.HasID, w.Type, w.Data, w.ID, w.HasID)
				}
			}
		})
	}
}

// TestSSEReaderByteAtATime makes sure line handling does not depend on how
// the network splits the stream, in particular a "\r\n" split in two reads.
func TestSSEReaderByteAtATime(t *testing.T) {
	stream := "event: a\r\ndata: 1\r\n\r\n: c\r\nevent: b\r\ndata: 2\r\n\r\n"
	r := newSSEReader(iotest.OneByteReader(strings.NewReader(stream)))
	for _, want := range []string{"a", "b"} {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if ev.Type != want {
			t.Fatalf("type = %q, want %q", ev.Type, want)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last event: err = %v, want io.EOF", err)
	}
}

func TestSSEReaderRetryAndErrors(t *testing.T) {
	r := newSSEReader(strings.NewReader("retry: 1500\ndata: x\n\nretry: nope\n\n"))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if r.Retry != 1500*time.Millisecond {
		t.Fatalf("Retry = %v, want 1.5s", r.Retry)
	}
	boom := errors.New("connection reset")
	r = newSSEReader(io.MultiReader(strings.NewReader("data: x\n"), iotest.ErrReader(boom)))
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the read error", err)
	}
}

func TestSSEReaderLargeData(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	got := readAllEvents(t, "data: "+big+"\n\n")
	if len(got) != 1 || string(got[0].Data) != big {
		t.Fatalf("large event lost or altered")
	}
}
