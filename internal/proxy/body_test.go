package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// earlyAnswer is a sandbox whose agent and ports answer 400 before
// reading the request body, and read it only once the proxy is done with
// the response, as the agent's HTTP/2 transport does with its body-writer
// goroutine (envd rejecting a POST /files by its metadata, say).
type earlyAnswer struct {
	nodeapi.Sandbox // nil: only ID, Agent and DialPort are called
	// late records reads of the request body after the answer's body was
	// closed, so the test knows the race was exercised.
	mu   sync.Mutex
	late int
}

func (s *earlyAnswer) ID() string { return "early1" }

func (s *earlyAnswer) Agent() http.RoundTripper { return s }

// RoundTrip answers at once and reads the request body a moment after
// the proxy closes the answer's body (the end of its ServeHTTP).
func (s *earlyAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	closed := make(chan struct{})
	go s.readLater(r.Body, closed)
	return &http.Response{
		StatusCode: http.StatusBadRequest, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/plain"}}, ContentLength: 3,
		Body: &signalClose{Reader: strings.NewReader("no\n"), closed: closed}, Request: r,
	}, nil
}

func (s *earlyAnswer) readLater(body io.ReadCloser, closed <-chan struct{}) {
	if body == nil {
		return
	}
	<-closed
	spin(time.Duration(rand.IntN(60)) * time.Microsecond)
	if n, _ := io.Copy(io.Discard, body); n > 0 {
		s.mu.Lock()
		s.late++
		s.mu.Unlock()
	}
	body.Close()
}

// DialPort serves one HTTP/1 exchange on a pipe: headers read, 400 sent,
// and the body read only after the proxy's transport has the answer.
func (s *earlyAnswer) DialPort(_ context.Context, _ int) (net.Conn, error) {
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		br := bufio.NewReader(server)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.WriteString(server, "HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\nConnection: close\r\n\r\nno\n"); err != nil {
			return
		}
		spin(time.Duration(rand.IntN(200)) * time.Microsecond)
		if n, _ := io.Copy(io.Discard, req.Body); n > 0 {
			s.mu.Lock()
			s.late++
			s.mu.Unlock()
		}
	}()
	return client, nil
}

// spin waits d without sleeping (a sleep is far coarser than the window).
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

type signalClose struct {
	io.Reader
	once   sync.Once
	closed chan struct{}
}

func (b *signalClose) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// runningControlPlane has one public, running sandbox.
type runningControlPlane struct{ sb nodeapi.Sandbox }

func (c runningControlPlane) Running(context.Context, string) (nodeapi.Sandbox, error) {
	return c.sb, nil
}

func (c runningControlPlane) Get(_ project.Scope, id string) (controlplane.Sandbox, error) {
	return controlplane.Sandbox{ID: id, State: apiv1.StateRunning}, nil
}

func (c runningControlPlane) List(project.Scope, controlplane.Filter) []controlplane.Sandbox {
	return nil
}

// A sandbox that answers before reading the whole request body must not
// make net/http panic ("invalid concurrent Body.Read call"): no read of
// the client's body may be in flight, or start, once the proxy's
// ServeHTTP has returned. Keep-alive connections carry request after
// request, so a late read collides with the server reading the next one.
func TestEarlyAnswerLateBodyRead(t *testing.T) {
	for _, c := range []struct {
		port         string
		size, rounds int
	}{
		{"49983", 2048, 400},
		{"8080", 2048, 400},
		// Longer than the proxy drains: the connection is dropped, not
		// reused, and nothing hangs.
		{"49983", 600 << 10, 16},
		{"8080", 600 << 10, 16},
	} {
		port, rounds := c.port, c.rounds
		t.Run(fmt.Sprintf("port%s/%dB", port, c.size), func(t *testing.T) {
			sb := &earlyAnswer{}
			var logged lockedBuffer
			srv := httptest.NewUnstartedServer(New(Config{ControlPlane: runningControlPlane{sb}}))
			srv.Config.ErrorLog = log.New(&logged, "", 0)
			srv.Start()
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			defer client.CloseIdleConnections()
			body := bytes.Repeat([]byte("m"), c.size)
			var wg sync.WaitGroup
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < rounds/4; i++ {
						req, _ := http.NewRequest(http.MethodPost, srv.URL+"/files?path=/tmp/x", bytes.NewReader(body))
						req.Header.Set(headerSandboxID, "early1")
						req.Header.Set(headerSandboxPort, port)
						res, err := client.Do(req)
						if err != nil {
							continue // a connection the server closed: counted by the log check
						}
						io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode != http.StatusBadRequest {
							t.Errorf("status %d, want the sandbox's 400", res.StatusCode)
						}
					}
				}()
			}
			wg.Wait()
			if strings.Contains(logged.String(), "panic") {
				t.Fatalf("net/http panicked serving the proxy:\n%s", firstLines(logged.String(), 40))
			}
			sb.mu.Lock()
			t.Logf("%d of %d request bodies were read after the answer", sb.late, rounds)
			sb.mu.Unlock()
		})
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("… (%d bytes in all)", len(s)))
	}
	return strings.Join(lines, "\n")
}
