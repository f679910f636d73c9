package credentials

import (
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// RuleSource gives the credential rules of a sandbox (the control plane).
type RuleSource interface {
	CredentialRules(sandboxID string) []Rule
}

// SecretSource gives the value of a secret a sandbox's rules name; the
// secret is looked up in the sandbox's own project.
type SecretSource interface {
	Secret(sandboxID, name string) ([]byte, error)
}

// Config wires an Interceptor.
type Config struct {
	CA      *CA
	Rules   RuleSource
	Secrets SecretSource
	// UpstreamRoots verify upstream servers; nil means the system roots.
	UpstreamRoots *x509.CertPool
	Logger        *slog.Logger
}

// Interceptor implements the gateway's TLS interception for hosts with
// credential rules.
type Interceptor struct {
	cfg Config
}

// NewInterceptor returns an interceptor; cfg.CA, Rules and Secrets are
// required.
func NewInterceptor(cfg Config) *Interceptor {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Interceptor{cfg: cfg}
}

// Intercepts reports whether a rule of the sandbox applies to host.
func (in *Interceptor) Intercepts(sandboxID, host string) bool {
	for _, r := range in.cfg.Rules.CredentialRules(sandboxID) {
		if r.Matches(host) {
			return true
		}
	}
	return false
}

const (
	handshakeTimeout = 15 * time.Second
	idleTimeout      = 2 * time.Minute
)

// Serve terminates the sandbox's TLS connection to host and proxies its
// HTTP/1.1 requests to host over TLS opened with dial, injecting the
// sandbox's credentials for host. It returns when the connection ends.
func (in *Interceptor) Serve(ctx context.Context, sandboxID, host string, conn net.Conn, dial func(ctx context.Context, network, addr string) (net.Conn, error)) error {
	defer conn.Close()
	host = normalizeHost(host)
	leaf, err := in.cfg.CA.Leaf(host)
	if err != nil {
		return err
	}
	tlsConn := tls.Server(conn, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	hsCtx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	err = tlsConn.HandshakeContext(hsCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("TLS handshake with sandbox %s for %s: %w", sandboxID, host, err)
	}

	transport := &http.Transport{
		DialContext: dial,
		TLSClientConfig: &tls.Config{
			RootCAs: in.cfg.UpstreamRoots, ServerName: host,
			NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
		},
		DisableCompression:  true, // we strip Accept-Encoding; see proxy.ServeHTTP
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     idleTimeout,
		TLSHandshakeTimeout: handshakeTimeout,
	}
	defer transport.CloseIdleConnections()
	p := &proxy{in: in, sandboxID: sandboxID, host: host, transport: transport}

	l := newOneConnListener(tlsConn)
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       idleTimeout,
		ErrorLog:          log.New(io.Discard, "", 0), // its messages may quote requests
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				l.done()
			}
		},
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	if err := srv.Serve(l); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve sandbox %s connection to %s: %w", sandboxID, host, err)
	}
	return nil
}

// proxy forwards one sandbox connection's requests to its host.
type proxy struct {
	in        *Interceptor
	sandboxID string
	host      string
	transport *http.Transport
}

// hopHeaders belong to one connection and are not forwarded.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rules, values, err := p.credentials()
	red := newRedactor(slices.Collect(maps.Values(values)))
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Space-Proxy-Error", "1")
		w.WriteHeader(status)
		io.WriteString(w, "space gateway: "+red.String(msg)+"\n")
	}
	if err != nil {
		fail(http.StatusBadGateway, err.Error())
		return
	}
	// The name the request addresses must be the one the connection (and
	// the upstream certificate) is for: a different Host on the same TLS
	// server (domain fronting) would carry the secret to another site.
	if reqHost := normalizeHost(r.Host); reqHost != p.host {
		fail(http.StatusMisdirectedRequest, fmt.Sprintf("this connection is for %s; the request names host %q", p.host, r.Host))
		return
	}
	if r.Method == http.MethodConnect || r.Header.Get("Upgrade") != "" {
		// A tunnel would carry the upstream's bytes back unchecked.
		fail(http.StatusNotImplemented, "protocol upgrades (WebSocket) are not supported to hosts with injected credentials")
		return
	}

	target := r.RequestURI
	var headerRules []Rule
	for _, rule := range rules {
		if rule.Placeholder != "" {
			target = strings.ReplaceAll(target, rule.Placeholder, values[rule.Secret])
		}
		if rule.Header != "" {
			headerRules = append(headerRules, rule)
		}
	}
	u, err := url.ParseRequestURI(target)
	if err != nil || !strings.HasPrefix(target, "/") {
		fail(http.StatusBadRequest, fmt.Sprintf("request target %q is not a path", r.RequestURI))
		return
	}
	u.Scheme, u.Host = "https", p.host

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL = u
	out.Host = p.host
	for _, h := range connectionHeaders(r.Header) {
		out.Header.Del(h)
	}
	// Responses are scanned for secrets, so they must arrive unencoded.
	out.Header.Del("Accept-Encoding")
	for name, vv := range out.Header {
		for i, v := range vv {
			for _, rule := range rules {
				if rule.Placeholder != "" {
					v = strings.ReplaceAll(v, rule.Placeholder, values[rule.Secret])
				}
			}
			vv[i] = v
		}
		out.Header[name] = vv
	}
	for _, rule := range headerRules {
		out.Header.Set(rule.Header, expand(rule.Value, values))
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}

	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.in.cfg.Logger.Info("credential proxy: upstream failed", "sandbox", p.sandboxID, "host", p.host, "err", red.String(err.Error()))
		fail(http.StatusBadGateway, fmt.Sprintf("upstream %s: %v", p.host, err))
		return
	}
	defer resp.Body.Close()
	body, err := decodedBody(resp)
	if err != nil {
		fail(http.StatusBadGateway, fmt.Sprintf("upstream %s: %v", p.host, err))
		return
	}
	defer body.Close()

	for _, h := range connectionHeaders(resp.Header) {
		resp.Header.Del(h)
	}
	bodiless := r.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	if !bodiless {
		// Redaction can change the length; the body goes out chunked.
		resp.Header.Del("Content-Length")
	}
	for name, vv := range resp.Header {
		for _, v := range vv {
			w.Header().Add(name, red.String(v))
		}
	}
	w.WriteHeader(resp.StatusCode)
	if bodiless {
		return
	}
	flusher, _ := w.(http.Flusher)
	rw := &redactingWriter{r: red, w: w}
	if flusher != nil {
		rw.flush = flusher.Flush
	}
	_, copyErr := io.Copy(rw, body)
	_ = rw.Close()
	for name, vv := range resp.Trailer {
		for _, v := range vv {
			w.Header().Add(http.TrailerPrefix+name, red.String(v))
		}
	}
	if copyErr != nil {
		// The status is out; cutting the connection tells the client the
		// body is incomplete.
		panic(http.ErrAbortHandler)
	}
}

// credentials loads the rules for the connection's host and the values of
// every secret the sandbox's rules use: all of them are redacted from
// responses, whichever host they are for.
func (p *proxy) credentials() (rules []Rule, values map[string]string, err error) {
	values = map[string]string{}
	var missing []string
	for _, rule := range p.in.cfg.Rules.CredentialRules(p.sandboxID) {
		for _, name := range rule.Secrets() {
			if _, ok := values[name]; ok {
				continue
			}
			v, err := p.in.cfg.Secrets.Secret(p.sandboxID, name)
			if err != nil {
				missing = append(missing, name)
				continue
			}
			values[name] = string(v)
		}
		if rule.Matches(p.host) {
			rules = append(rules, rule)
		}
	}
	if len(missing) > 0 {
		return nil, values, fmt.Errorf("secrets %s used by this sandbox's credential rules cannot be read (deleted?)", strings.Join(missing, ", "))
	}
	return mostSpecific(rules), values, nil
}

// mostSpecific keeps, of the header rules that match one host, those of
// the most specific host pattern: an exact name over any wildcard, a
// longer wildcard suffix over a shorter one (as E2B's network rules do),
// so a rule for api.example.com is not mixed with one for *.example.com.
// Env rules all stay: each only swaps its own placeholder.
func mostSpecific(matching []Rule) []Rule {
	best := -1
	for _, r := range matching {
		if r.Header != "" {
			best = max(best, specificity(r.Host))
		}
	}
	var out []Rule
	for _, r := range matching {
		if r.Header == "" || specificity(r.Host) == best {
			out = append(out, r)
		}
	}
	return out
}

// specificity ranks a host pattern: a wildcard by its suffix's length, an
// exact name above every wildcard.
func specificity(pattern string) int {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return len(suffix)
	}
	return 1 << 16 // longer than any name
}

// connectionHeaders are the hop-by-hop headers of h, including those its
// Connection header names.
func connectionHeaders(h http.Header) []string {
	out := append([]string(nil), hopHeaders...)
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out = append(out, name)
			}
		}
	}
	return out
}

// decodedBody returns the response body without content coding, so it can
// be scanned. Codings it cannot undo are refused rather than passed on
// unscanned.
func decodedBody(resp *http.Response) (io.ReadCloser, error) {
	coding := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	switch coding {
	case "", "identity":
		return io.NopCloser(resp.Body), nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		resp.Header.Del("Content-Encoding")
		return zr, nil
	case "deflate":
		resp.Header.Del("Content-Encoding")
		return flate.NewReader(resp.Body), nil
	}
	return nil, fmt.Errorf("the response has Content-Encoding %q, which the gateway cannot check for secrets", coding)
}

// oneConnListener hands out one connection, then blocks until it is done.
type oneConnListener struct {
	conn     net.Conn
	once     sync.Once
	taken    bool
	mu       sync.Mutex
	finished chan struct{}
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{conn: c, finished: make(chan struct{})}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	<-l.finished
	return nil, net.ErrClosed
}

func (l *oneConnListener) done()          { l.once.Do(func() { close(l.finished) }) }
func (l *oneConnListener) Close() error   { l.done(); return nil }
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }
