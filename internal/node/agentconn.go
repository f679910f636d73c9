package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/space-platform/space/internal/agent/gen/filesystempb/filesystempbconnect"
	"github.com/space-platform/space/internal/agent/gen/processpb/processpbconnect"
)

// agentBaseURL is a placeholder host: every request is dialed through the
// sandbox's own channel, never resolved.
const agentBaseURL = "http://agent"

// agentMaxFrame is the largest HTTP/2 frame the node reads from an agent.
const agentMaxFrame = 1 << 20

// agentDialTimeout bounds one connection attempt to an agent, unless its
// backend says otherwise (agentDialBound).
const agentDialTimeout = time.Second

// agentDialBound is implemented by a backend whose agent channel takes
// longer to connect than a dial through the sandbox's network slot: a
// VM's virtio-serial port gives up an unanswered handshake and redials
// (about a second each), which a one-second bound would cut short.
type agentDialBound interface {
	AgentDialTimeout() time.Duration
}

// AgentConn is the node's persistent channel to one sandbox's agent: a single
// HTTP/2 (cleartext) connection multiplexing every call. When the connection
// breaks (a checkpoint, a restore) the next call dials again.
type AgentConn struct {
	mu        sync.Mutex
	conns     map[net.Conn]bool // every connection dialed, for Reset
	closed    bool              // Close was called: no more dials
	token     atomic.Pointer[string]
	transport *http2.Transport
	http      *http.Client
	// dialTimeout bounds one dial, and one health check's attempt.
	dialTimeout time.Duration
	Process     processpbconnect.ProcessClient
	FS          filesystempbconnect.FilesystemClient
}

// dialFunc opens a raw connection to the agent.
type dialFunc func(ctx context.Context) (net.Conn, error)

func newAgentConn(dial dialFunc, token string, dialTimeout time.Duration) *AgentConn {
	a := &AgentConn{conns: map[net.Conn]bool{}, dialTimeout: dialTimeout}
	t := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
			// The transport shares one dial among waiting requests and may
			// not bound it; an unanswered SYN (the sandbox's network stack
			// not up yet) would otherwise stall every call for minutes.
			if a.isClosed() {
				return nil, errAgentConnClosed
			}
			ctx, cancel := context.WithTimeout(ctx, a.dialTimeout)
			defer cancel()
			conn, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			return a.track(conn), nil
		},
		// Output and downloads come in frames of up to 1 MiB rather than
		// HTTP/2's default 16 KiB: each frame costs the agent a write
		// through gVisor's network stack.
		MaxReadFrameSize: agentMaxFrame,
		// A restored or frozen sandbox silently keeps the old connection;
		// pings notice it so calls redial instead of hanging.
		ReadIdleTimeout: 15 * time.Second,
		PingTimeout:     5 * time.Second,
	}
	a.transport = t
	a.setToken(token)
	a.http = &http.Client{Transport: tokenTransport{a}}
	// The link never leaves the host: compressing every output chunk
	// inside the sandbox only costs CPU (it halved stdout throughput).
	noGzip := connect.WithAcceptCompression("gzip", nil, nil)
	a.Process = processpbconnect.NewProcessClient(a.http, agentBaseURL, noGzip)
	a.FS = filesystempbconnect.NewFilesystemClient(a.http, agentBaseURL, noGzip)
	return a
}

// tokenTransport adds the sandbox's access token to every request.
type tokenTransport struct{ a *AgentConn }

func (t tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if token := *t.a.token.Load(); token != "" && req.Header.Get("X-Access-Token") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("X-Access-Token", token)
	}
	return t.a.transport.RoundTrip(req)
}

// setToken switches the token sent with every request.
func (a *AgentConn) setToken(token string) { a.token.Store(&token) }

// Reset closes every connection, busy or not. After a suspend or restore
// the old connection leads nowhere; without this, calls multiplexed onto it
// would hang until HTTP/2 pings gave up on it.
func (a *AgentConn) Reset() {
	a.mu.Lock()
	conns := a.conns
	a.conns = map[net.Conn]bool{}
	a.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	a.transport.CloseIdleConnections()
}

// errAgentConnClosed answers the calls of a node that let go of its
// sandboxes.
var errAgentConnClosed = errors.New("agent channel closed: the node let go of the sandbox")

// Close closes every connection and refuses to dial again, for a node
// that lets go of the sandbox while its goroutines (session followers)
// may still call: each redial would take back a channel that serves one
// connection at a time from the node that adopts the sandbox next.
func (a *AgentConn) Close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.Reset()
}

func (a *AgentConn) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// track remembers a dialed connection until it is closed.
func (a *AgentConn) track(c net.Conn) net.Conn {
	a.mu.Lock()
	a.conns[c] = true
	a.mu.Unlock()
	return &trackedConn{Conn: c, a: a}
}

type trackedConn struct {
	net.Conn
	a *AgentConn
}

func (c *trackedConn) Close() error {
	c.a.mu.Lock()
	delete(c.a.conns, c.Conn)
	c.a.mu.Unlock()
	return c.Conn.Close()
}

// Do sends a plain HTTP request (the /files, /init and /health endpoints).
func (a *AgentConn) Do(req *http.Request) (*http.Response, error) { return a.http.Do(req) }

// waitHealthy polls /health until the agent answers or ctx ends. Early dials
// fail while the sandbox's network stack comes up.
func (a *AgentConn) waitHealthy(ctx context.Context) error {
	var lastErr error
	for delay := 2 * time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		attempt, cancel := context.WithTimeout(ctx, max(time.Second, a.dialTimeout))
		req, _ := http.NewRequestWithContext(attempt, http.MethodGet, agentBaseURL+"/health", nil)
		resp, err := a.http.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 300 {
				return nil
			}
			err = fmt.Errorf("health: status %d", resp.StatusCode)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent did not become healthy: %w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(delay):
		}
	}
}

// agentInit is the body of the agent's POST /init.
type agentInit struct {
	AccessToken    string            `json:"accessToken"`
	EnvVars        map[string]string `json:"envVars,omitempty"`
	DefaultUser    string            `json:"defaultUser,omitempty"`
	DefaultWorkdir string            `json:"defaultWorkdir,omitempty"`
	Hostname       string            `json:"hostname,omitempty"`
	Entropy        []byte            `json:"entropy,omitempty"`
	Timestamp      time.Time         `json:"timestamp"`
	Identity       map[string]string `json:"identity,omitempty"`
}

// init gives the agent its identity. It authenticates with the current token
// and switches the connection to the new one.
func (a *AgentConn) init(ctx context.Context, in agentInit) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, agentBaseURL+"/init", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("agent init: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("agent init: status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	a.setToken(in.AccessToken)
	return nil
}
