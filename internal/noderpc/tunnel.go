package noderpc

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
)

// Routes next to the Connect service.
const (
	// agentPrefix, then a sandbox id, forwards HTTP requests to the
	// sandbox's agent (nodeapi.Sandbox.Agent): /agent/{id} is stripped,
	// the rest of the path and the query go to the agent unchanged.
	agentPrefix = "/agent/"
	// portRoute is a full-duplex tunnel to a TCP port inside a sandbox
	// (nodeapi.Sandbox.DialPort): the request body is what the client
	// sends, the response body what the port answers. It needs HTTP/2
	// (or an HTTP/1.1 server that allows full duplex), which the client
	// always speaks.
	portRoute = "POST /port/{id}/{port}"
)

// forwardedAuthHeader carries the Authorization header of a request to the
// agent (envd reads the user from Basic auth) while Authorization itself
// holds the cluster token.
const forwardedAuthHeader = "Space-Forwarded-Authorization"

// nodeErrorHeader marks a tunnel response as the node's own refusal (the
// sandbox is gone, the port refused) rather than the agent's answer; its
// value is the NodeError in JSON, the body the message.
const nodeErrorHeader = "Space-Node-Error"

// requireToken lets through only requests bearing the cluster token. Both
// sides are hashed before the constant-time comparison so that neither the
// token's bytes nor its length leak through timing.
func requireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if token == "" || !found || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			// The Connect protocol's error body, so RPC clients read the
			// message; the token presented is never echoed.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{
				"code":    "unauthenticated",
				"message": "missing or wrong cluster token (send it as Authorization: Bearer <cluster token>)",
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeNodeError answers a tunnel request with the node's error.
func writeNodeError(w http.ResponseWriter, err error) {
	detail, _ := describe(err)
	status := http.StatusBadGateway
	if detail.GetKind() == kindNoSandbox {
		status = http.StatusNotFound
	}
	b, _ := protojson.Marshal(detail)
	w.Header().Set(nodeErrorHeader, string(b))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, err.Error())
}

// readNodeError rebuilds the error of a response writeNodeError wrote; nil
// when the response is not one.
func readNodeError(resp *http.Response) error {
	h := resp.Header.Get(nodeErrorHeader)
	if h == "" {
		return nil
	}
	detail := &pb.NodeError{}
	_ = protojson.Unmarshal([]byte(h), detail)
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return rebuild(string(msg), detail, nil)
}

func (s *server) serveAgent(w http.ResponseWriter, r *http.Request) {
	id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, agentPrefix), "/")
	sb, err := s.node.Sandbox(r.Context(), id)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	prefix := agentPrefix + id
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := pr.Out.URL
			u.Scheme, u.Host = "http", "agent"
			u.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
			u.RawPath = strings.TrimPrefix(pr.In.URL.RawPath, prefix) // ids need no escaping
			if u.Path == "" {
				u.Path = "/"
			}
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")
			if a := pr.In.Header.Get(forwardedAuthHeader); a != "" {
				pr.Out.Header.Set("Authorization", a)
			}
			pr.Out.Header.Del(forwardedAuthHeader)
		},
		// The agent's answer is the sandbox's to shape: it must not pass
		// for the node's own refusal.
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del(nodeErrorHeader)
			return nil
		},
		Transport: sb.Agent(),
		// Streamed responses (process output over Connect) reach the
		// client as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				s.log.Warn("agent request", "sandbox", id, "path", r.URL.Path, "err", err)
			}
			writeNodeError(w, err)
		},
	}
	rp.ServeHTTP(w, r)
}

func (s *server) servePort(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		writeNodeError(w, errors.New("dial sandbox "+id+": port "+strconv.Quote(r.PathValue("port"))+" is not a number"))
		return
	}
	sb, err := s.node.Sandbox(r.Context(), id)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	conn, err := sb.DialPort(r.Context(), port)
	if err != nil {
		writeNodeError(w, err)
		return
	}
	// The connection ends when the client goes away.
	stop := context.AfterFunc(r.Context(), func() { _ = conn.Close() })
	defer stop()
	defer conn.Close()

	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // HTTP/1.1 only; HTTP/2 always is
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, r.Body)
		// The client is done sending: pass the half-close on.
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(flushWriter{w, rc}, conn)
	_ = conn.Close()
	_ = r.Body.Close()
	wg.Wait()
}

// flushWriter sends every write to the client at once.
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}
