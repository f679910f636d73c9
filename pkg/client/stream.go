package client

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// eventSource is what a stream's events are read from: a text/event-stream
// or binary output frames.
type eventSource interface {
	Next() (sseEvent, error)
	// retry is the reconnection delay the server asked for (0 if none).
	retry() time.Duration
}

// resumingStream reads a text/event-stream endpoint and reopens it when the
// connection drops before the caller is done with it. The caller decides
// where to resume: open builds each request from the caller's own position.
type resumingStream struct {
	client *Client
	ctx    context.Context
	cancel context.CancelFunc
	open   func(ctx context.Context) (*http.Request, error)

	mu   sync.Mutex // guards body against a concurrent close
	body interface{ Close() error }

	// frames makes the stream ask for binary output frames
	// (apiv1.OutputFramesMediaType) before an event stream.
	frames bool
	events eventSource
	// failures counts consecutive reconnects that have not yet delivered an
	// event; it bounds retries against a server that keeps failing.
	failures int
	// retryHint is the reconnection delay the server asked for with retry:.
	retryHint time.Duration
}

func (c *Client) newResumingStream(ctx context.Context, open func(ctx context.Context) (*http.Request, error)) *resumingStream {
	ctx, cancel := context.WithCancel(ctx)
	return &resumingStream{client: c, ctx: ctx, cancel: cancel, open: open}
}

// connect opens the stream once, without retrying.
func (s *resumingStream) connect() error {
	req, err := s.open(s.ctx)
	if err != nil {
		return err
	}
	accept := "text/event-stream"
	if s.frames {
		accept = apiv1.OutputFramesMediaType + ", " + accept
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := s.client.send(req)
	if err != nil {
		return err
	}
	var events eventSource
	switch mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); {
	case mediaType == "text/event-stream":
		events = newSSEReader(resp.Body)
	case mediaType == apiv1.OutputFramesMediaType && s.frames:
		events = newFrameReader(resp.Body)
	default:
		resp.Body.Close()
		return &notEventStreamError{path: req.URL.Path, contentType: resp.Header.Get("Content-Type")}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil { // closed while connecting
		resp.Body.Close()
		return s.ctx.Err()
	}
	s.body = resp.Body
	s.events = events
	return nil
}

type notEventStreamError struct{ path, contentType string }

func (e *notEventStreamError) Error() string {
	return fmt.Sprintf("%s answered %q instead of an event stream", e.path, e.contentType)
}

// next returns the next event, reconnecting as often as the policy allows
// when the connection ends or fails.
func (s *resumingStream) next() (sseEvent, error) {
	for {
		if s.events == nil {
			if err := s.reconnect(); err != nil {
				return sseEvent{}, err
			}
		}
		ev, err := s.events.Next()
		if err == nil {
			s.failures = 0
			return ev, nil
		}
		if retry := s.events.retry(); retry > 0 {
			s.retryHint = retry
		}
		s.closeBody()
		if ctxErr := s.ctx.Err(); ctxErr != nil {
			return sseEvent{}, ctxErr
		}
		if errors.Is(err, errSSELineTooLong) || errors.Is(err, apiv1.ErrFrameTooLarge) {
			return sseEvent{}, err
		}
		// EOF or a network error: the connection dropped; reconnect.
	}
}

// reconnect reopens the stream with exponential backoff.
func (s *resumingStream) reconnect() error {
	policy := s.client.reconnect
	var lastErr error
	for {
		if s.failures >= policy.maxAttempts {
			if lastErr == nil {
				return fmt.Errorf("event stream kept closing: gave up after %d reconnects without receiving anything", s.failures)
			}
			return fmt.Errorf("event stream lost: gave up after %d reconnects: %w", s.failures, lastErr)
		}
		delay := s.backoff()
		s.failures++
		timer := time.NewTimer(delay)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return s.ctx.Err()
		case <-timer.C:
		}
		err := s.connect()
		if err == nil {
			return nil
		}
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		if !isRetryable(err) {
			return err
		}
		lastErr = err
	}
}

func (s *resumingStream) backoff() time.Duration {
	policy := s.client.reconnect
	delay := policy.minBackoff
	if s.retryHint > 0 {
		delay = s.retryHint
	}
	for i := 0; i < s.failures && delay < policy.maxBackoff; i++ {
		delay *= 2
	}
	return min(delay, policy.maxBackoff)
}

// isRetryable says whether reconnecting may help: network errors and
// server-side trouble may pass, but a 404 (session gone) or 401 will not.
func isRetryable(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode >= 500 || apiErr.StatusCode == http.StatusTooManyRequests
	}
	var notStream *notEventStreamError
	return !errors.As(err, &notStream)
}

func (s *resumingStream) closeBody() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.body != nil {
		s.body.Close()
		s.body = nil
	}
	s.events = nil
}

// close ends the stream; it may be called from another goroutine while
// next is blocked, which then returns context.Canceled.
func (s *resumingStream) close() {
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.body != nil {
		s.body.Close()
		s.body = nil
	}
}
