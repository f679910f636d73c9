package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/space-platform/space/pkg/apiv1"
)

// outputRecord is one write of the fake session's output journal.
type outputRecord struct {
	stream string
	data   []byte
}

// connectionCut says how a connection of the fake attach endpoint ends
// before the exit event: after sending events events, either cleanly (the
// handler returns mid-event) or abruptly (the TCP connection is closed in
// the middle of a chunk).
type connectionCut struct {
	events int
	abrupt bool
}

// fakeAttachServer serves GET .../attach from a fixed journal, cutting
// connections as planned, and records how each connection asked to resume.
type fakeAttachServer struct {
	records  []outputRecord
	dropped  int64 // bytes dropped from the front of the journal
	exitCode int
	cuts     []connectionCut // connection i follows cuts[i]; later ones run to the end
	// frames answers binary output frames to a client that accepts them.
	frames         bool
	answeredFrames atomic.Int32

	mu          sync.Mutex
	lastEventID []string // Last-Event-ID header of each connection ("" if absent)
	fromQuery   []string
}

func (f *fakeAttachServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	conn := len(f.lastEventID)
	f.lastEventID = append(f.lastEventID, r.Header.Get("Last-Event-ID"))
	f.fromQuery = append(f.fromQuery, r.URL.Query().Get("from"))
	f.mu.Unlock()

	start := int64(0)
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		start, _ = strconv.ParseInt(v, 10, 64)
	} else if v := r.URL.Query().Get("from"); v != "" {
		start, _ = strconv.ParseInt(v, 10, 64)
	}
	cut := connectionCut{events: -1}
	if conn < len(f.cuts) {
		cut = f.cuts[conn]
	}

	frames := f.frames && strings.Contains(r.Header.Get("Accept"), apiv1.OutputFramesMediaType)
	if frames {
		f.answeredFrames.Add(1)
		w.Header().Set("Content-Type", apiv1.OutputFramesMediaType)
	} else {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	w.WriteHeader(http.StatusOK)
	sent := 0
	// send writes one event, or cuts the connection instead when the plan
	// says so; it reports whether the handler should go on.
	send := func(event string, id int64, data any) bool {
		if frames {
			return f.sendFrame(w, &sent, cut, event, id, data)
		}
		payload, _ := json.Marshal(data)
		if sent == cut.events {
			// Half an event: the client must discard it.
			fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s", event, id, payload[:len(payload)/2])
			w.(http.Flusher).Flush()
			if cut.abrupt {
				netConn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					netConn.Close()
				}
			}
			return false
		}
		fmt.Fprintf(w, ": keepalive\n\nevent: %s\nid: %d\ndata: %s\n\n", event, id, payload)
		w.(http.Flusher).Flush()
		sent++
		return true
	}

	if start < f.dropped {
		if !send(apiv1.EventTruncated, f.dropped, apiv1.TruncatedEvent{Requested: start, From: f.dropped}) {
			return
		}
		start = f.dropped
	}
	offset := int64(0)
	for _, rec := range f.records {
		recStart, recEnd := offset, offset+int64(len(rec.data))
		offset = recEnd
		if recEnd <= start {
			continue
		}
		data := rec.data[max(0, start-recStart):]
		chunk := apiv1.OutputChunk{Text: string(data)}
		if !utf8.Valid(data) {
			chunk = apiv1.OutputChunk{Base64: base64.StdEncoding.EncodeToString(data)}
		}
		if !send(rec.stream, recEnd, chunk) {
			return
		}
	}
	send(apiv1.EventExit, offset, apiv1.ExitEvent{ExitCode: f.exitCode})
}

// sendFrame is send for the binary encoding: output goes as it is, and a
// planned cut leaves half a frame.
func (f *fakeAttachServer) sendFrame(w http.ResponseWriter, sent *int, cut connectionCut, event string, id int64, data any) bool {
	kinds := map[string]byte{apiv1.EventStdout: apiv1.FrameStdout, apiv1.EventStderr: apiv1.FrameStderr,
		apiv1.EventTruncated: apiv1.FrameTruncated, apiv1.EventExit: apiv1.FrameExit}
	var payload []byte
	switch d := data.(type) {
	case apiv1.OutputChunk:
		payload = []byte(d.Text)
		if d.Base64 != "" {
			payload, _ = base64.StdEncoding.DecodeString(d.Base64)
		}
	default:
		payload, _ = json.Marshal(d)
	}
	var frame bytes.Buffer
	apiv1.WriteFrame(&frame, apiv1.FrameKeepalive, id, nil)
	apiv1.WriteFrame(&frame, kinds[event], id, payload)
	if *sent == cut.events {
		w.Write(frame.Bytes()[:frame.Len()-max(1, len(payload)/2)])
		w.(http.Flusher).Flush()
		if cut.abrupt {
			if netConn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				netConn.Close()
			}
		}
		return false
	}
	w.Write(frame.Bytes())
	w.(http.Flusher).Flush()
	*sent++
	return true
}

func testClient(t *testing.T, handler http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return New(srv.URL, "test-key", WithReconnect(time.Millisecond, 5*time.Millisecond, 5))
}

func TestAttachResumesAfterDroppedConnections(t *testing.T) {
	for _, frames := range []bool{false, true} {
		t.Run(fmt.Sprintf("frames=%v", frames), func(t *testing.T) { testAttachResumes(t, frames) })
	}
}

func testAttachResumes(t *testing.T, frames bool) {
	fake := &fakeAttachServer{
		frames: frames,
		records: []outputRecord{
			{apiv1.EventStdout, []byte("hello ")},
			{apiv1.EventStderr, []byte("warn\n")},
			{apiv1.EventStdout, []byte{0xff, 0xfe, 'a'}}, // not UTF-8: sent as base64
			{apiv1.EventStdout, []byte("world\n")},
			{apiv1.EventStderr, []byte("bye\n")},
			{apiv1.EventStdout, []byte("ünïcödé\n")},
		},
		dropped:  3,
		exitCode: 3,
		cuts: []connectionCut{
			{events: 3},               // truncated + 2 records, then half an event
			{events: 1, abrupt: true}, // 1 record, then the TCP connection dies
			{events: 0},               // nothing at all
			{events: 2, abrupt: true},
		},
	}
	c := testClient(t, fake)
	stream, err := c.Attach(context.Background(), "sb1", "s1", 0)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer stream.Close()

	var stdout, stderr bytes.Buffer
	var truncated *apiv1.TruncatedEvent
	var exit *Event
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		switch ev.Type {
		case apiv1.EventStdout:
			stdout.Write(ev.Data)
		case apiv1.EventStderr:
			stderr.Write(ev.Data)
		case apiv1.EventTruncated:
			if truncated != nil {
				t.Errorf("truncated event delivered twice")
			}
			truncated = ev.Truncated
		case apiv1.EventExit:
			exit = &ev
		}
	}

	if want := "lo \xff\xfeaworld\nünïcödé\n"; stdout.String() != want {
		t.Errorf("stdout = %q, want %q", stdout.String(), want)
	}
	if want := "warn\nbye\n"; stderr.String() != want {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}
	if truncated == nil || truncated.Requested != 0 || truncated.From != 3 {
		t.Errorf("truncated = %+v, want requested 0 from 3", truncated)
	}
	total := int64(0)
	for _, rec := range fake.records {
		total += int64(len(rec.data))
	}
	if exit == nil || exit.ExitCode != 3 || exit.Offset != total {
		t.Errorf("exit = %+v, want code 3 at offset %d", exit, total)
	}
	// Each reconnect resumes right after the last event the caller got:
	// 11 after "hello " (ends at 6) and "warn\n" (ends at 11), then 14 after
	// the base64 chunk, still 14 after an empty connection, and 24 after
	// "world\n" and "bye\n".
	wantIDs := []string{"", "11", "14", "14", "24"}
	if fmt.Sprint(fake.lastEventID) != fmt.Sprint(wantIDs) {
		t.Errorf("Last-Event-ID per connection = %q, want %q", fake.lastEventID, wantIDs)
	}
	if _, err := stream.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("Next after exit = %v, want io.EOF", err)
	}
	if frames && int(fake.answeredFrames.Load()) != len(wantIDs) {
		t.Errorf("%d of %d connections were answered in frames: the client did not ask for them", fake.answeredFrames.Load(), len(wantIDs))
	}
}

func TestAttachFromOffsetUsesQueryFirst(t *testing.T) {
	fake := &fakeAttachServer{
		records: []outputRecord{{apiv1.EventStdout, []byte("0123456789")}},
		cuts:    []connectionCut{{events: 0}},
	}
	c := testClient(t, fake)
	stream, err := c.Attach(context.Background(), "sb1", "s1", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	ev, err := stream.Next()
	if err != nil {
		t.Fatal(err)
	}
	if string(ev.Data) != "456789" || ev.Offset != 10 {
		t.Errorf("event = %q at %d, want \"456789\" at 10", ev.Data, ev.Offset)
	}
	if fake.fromQuery[0] != "4" || fake.lastEventID[0] != "" {
		t.Errorf("first connection: from=%q Last-Event-ID=%q, want from=4 and no header", fake.fromQuery[0], fake.lastEventID[0])
	}
	if fake.fromQuery[1] != "" || fake.lastEventID[1] != "4" {
		t.Errorf("reconnect: from=%q Last-Event-ID=%q, want only Last-Event-ID 4", fake.fromQuery[1], fake.lastEventID[1])
	}
}

// TestAttachDropsResentOutput covers a server that resends output the client
// already has after a reconnect, in chunks that do not line up with the
// earlier ones: the caller must still see each byte once.
func TestAttachDropsResentOutput(t *testing.T) {
	var connections atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		connections.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		switch connections.Load() {
		case 1:
			io.WriteString(w, "event: stdout\nid: 5\ndata: {\"text\":\"hello\"}\n\n")
		default:
			if got := r.Header.Get("Last-Event-ID"); got != "5" {
				t.Errorf("reconnect Last-Event-ID = %q, want 5", got)
			}
			io.WriteString(w, "event: stdout\nid: 9\ndata: {\"text\":\"llo wor\"}\n\n")
			io.WriteString(w, "event: stdout\nid: 11\ndata: {\"text\":\"ld\"}\n\n")
			io.WriteString(w, "event: stdout\nid: 11\ndata: {\"text\":\"ld\"}\n\n")
			io.WriteString(w, "event: exit\nid: 11\ndata: {\"exit_code\":0}\n\n")
		}
	})
	c := testClient(t, handler)
	stream, err := c.Attach(context.Background(), "sb", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out.Write(ev.Data)
	}
	if out.String() != "hello world" {
		t.Errorf("output = %q, want %q", out.String(), "hello world")
	}
}

func TestAttachErrors(t *testing.T) {
	t.Run("missing session fails at Attach", func(t *testing.T) {
		c := testClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeTestError(w, http.StatusNotFound, "session s1 not found")
		}))
		_, err := c.Attach(context.Background(), "sb", "s1", 0)
		if !IsNotFound(err) || err.Error() != "session s1 not found" {
			t.Fatalf("err = %v, want the 404 message", err)
		}
	})
	t.Run("session gone while reconnecting is not retried", func(t *testing.T) {
		var connections atomic.Int32
		c := testClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			connections.Add(1)
			if connections.Load() > 1 {
				writeTestError(w, http.StatusNotFound, "session s1 not found")
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: stdout\nid: 1\ndata: {\"text\":\"x\"}\n\n")
		}))
		stream, err := c.Attach(context.Background(), "sb", "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Next(); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Next(); !IsNotFound(err) {
			t.Fatalf("err = %v, want 404", err)
		}
		if connections.Load() != 2 {
			t.Errorf("connections = %d, want 2 (no retry after a 404)", connections.Load())
		}
	})
	t.Run("server that keeps failing is given up on", func(t *testing.T) {
		var connections atomic.Int32
		c := testClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			connections.Add(1)
			if connections.Load() > 1 {
				writeTestError(w, http.StatusServiceUnavailable, "agent unavailable")
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
		}))
		stream, err := c.Attach(context.Background(), "sb", "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Next()
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("err = %v, want it to wrap the last 503", err)
		}
		if connections.Load() != 6 {
			t.Errorf("connections = %d, want 1 + 5 attempts", connections.Load())
		}
	})
	t.Run("Close unblocks Next", func(t *testing.T) {
		release := make(chan struct{})
		c := testClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer close(release)
		stream, err := c.Attach(context.Background(), "sb", "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(20*time.Millisecond, func() { stream.Close() })
		if _, err := stream.Next(); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
}

func writeTestError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(apiv1.Error{Code: status, Message: message})
}
