// Package proxy is the host-side reverse proxy for sandbox traffic: the E2B
// SDKs' envd calls (port 49983, at E2B_SANDBOX_URL) and services that
// sandbox processes expose on other ports (the code interpreter on 49999,
// web servers, WebSockets). It routes as E2B's own proxy does (§1.6 of the
// E2B protocol reference): by the E2b-Sandbox-Id / E2b-Sandbox-Port headers
// when the request's Host is localhost, an IP address or sandbox.<domain>,
// otherwise by a Host of the form <port>-<sandboxID>.<domain>.
//
// envd traffic reaches the agent over the node's channel to it, unchanged:
// the client's X-Access-Token is passed through and the agent checks it
// (the proxy never adds the sandbox's own token). Other ports of a sandbox
// created with private traffic take only requests carrying its traffic
// access token (E2b-Traffic-Access-Token), checked here before the sandbox
// is touched. Sandboxes suspended with auto-resume on are resumed by the
// first request that reaches them with a credential (the access token or a
// signature for envd and for a public sandbox's ports, the traffic token
// for a private one's); one arriving during the suspend waits for it to
// end. Any other sandbox that does not run answers E2B's not-found (see
// unreachable).
package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// EnvdPort is the port the E2B SDKs address envd on; the proxy sends it to
// the sandbox's agent.
const EnvdPort = 49983

// Routing headers E2B SDKs send with every sandbox request.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
	// headerTrafficToken carries a sandbox's traffic access token to its
	// exposed ports (E2B's name for it).
	headerTrafficToken = "E2b-Traffic-Access-Token"
)

// ControlPlane is what the proxy needs of space's control plane;
// *controlplane.ControlPlane satisfies it.
type ControlPlane interface {
	// Running returns a running sandbox's data plane, resuming a
	// suspended one first when its auto-resume is on.
	Running(ctx context.Context, id string) (nodeapi.Sandbox, error)
	// Get and List see every project: the proxy takes no API key, a
	// sandbox's own tokens are what admit a request (see ServeHTTP).
	Get(scope project.Scope, id string) (controlplane.Sandbox, error)
	List(scope project.Scope, f controlplane.Filter) []controlplane.Sandbox
}

var _ ControlPlane = (*controlplane.ControlPlane)(nil)

// Config wires the proxy.
type Config struct {
	ControlPlane ControlPlane
	// Domain is the sandbox domain of host routing (<port>-<id>.<domain>)
	// and of sandbox.<domain> header routing; empty accepts any domain
	// for host routing.
	Domain string
	Logger *slog.Logger
}

// Proxy routes sandbox traffic; it is an http.Handler.
type Proxy struct {
	cfg Config
	log *slog.Logger
	// ports carries traffic to ports other than envd; its connections are
	// pooled per sandbox and port (the URL host names both).
	ports *http.Transport
	// grpcPorts carries gRPC (HTTP/2 with trailers, end to end) to a
	// sandbox service speaking HTTP/2 without TLS.
	grpcPorts *http.Transport
	// tlsPorts carries traffic to ports whose services serve HTTPS
	// themselves. Their certificates are not verified: they are the
	// sandbox's own, often self-signed, and the hop runs over the node's
	// channel to that very sandbox, which the dial already pins.
	tlsPorts *http.Transport
}

// New builds a proxy.
func New(cfg Config) *Proxy {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Domain = strings.ToLower(strings.TrimSuffix(cfg.Domain, "."))
	p := &Proxy{cfg: cfg, log: cfg.Logger}
	p.ports = &http.Transport{
		DialContext: p.dialSandboxPort,
		// No idle connections: one kept across a suspend looks alive (its
		// namespace lingers while the socket holds it) but leads nowhere
		// after the resume, and the next request hangs on it. A dial is a
		// millisecond.
		DisableKeepAlives: true,
		// Sandbox services are often plain HTTP/1.1 servers; no h2c.
		ForceAttemptHTTP2: false,
	}
	p.grpcPorts = &http.Transport{DialContext: p.dialSandboxPort, DisableKeepAlives: true}
	p.grpcPorts.Protocols = new(http.Protocols)
	p.grpcPorts.Protocols.SetUnencryptedHTTP2(true)
	p.tlsPorts = &http.Transport{
		DialContext:       p.dialSandboxPort,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, // see tlsPorts
	}
	return p
}

// Close drops idle connections to sandbox services.
func (p *Proxy) Close() {
	p.ports.CloseIdleConnections()
	p.grpcPorts.CloseIdleConnections()
	p.tlsPorts.CloseIdleConnections()
}

// target is where one request goes.
type target struct {
	id   string
	port int
}

// sandboxIDPattern is E2B's (and space's) sandbox id alphabet; host routing
// depends on ids having no '-' or '.'.
var sandboxIDPattern = regexp.MustCompile(`^[a-z0-9]+$`)

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, err := p.route(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if t.port == EnvdPort && path.Clean("/"+r.URL.Path) == "/init" {
		// /init re-keys the agent; only the node may call it.
		writeError(w, http.StatusForbidden, "envd's /init is internal to space and cannot be called through the proxy")
		return
	}
	// Before Running: a refused request must not resume the sandbox, so
	// whoever only knows its id (another project's key, anyone) changes
	// nothing.
	var mask string
	var https bool
	if s, err := p.cfg.ControlPlane.Get(project.Everything, t.id); err == nil {
		mask, https = s.RequestHost(t.port), s.ServesHTTPS(t.port)
		if t.port != EnvdPort {
			if msg := trafficRefusal(s.TrafficToken(), r.Header.Get(headerTrafficToken), t.id); msg != "" {
				writeError(w, http.StatusForbidden, msg)
				return
			}
			// A public sandbox's ports need no credential while it runs,
			// but waking it does: otherwise anyone who knows its id keeps
			// it running (and its project paying) for free.
			if wouldResume(s) && s.TrafficToken() == "" && !carriesAccessToken(r, s.AccessToken) {
				writeError(w, http.StatusUnauthorized, fmt.Sprintf("sandbox %q is suspended; a request to its ports resumes it only with its access token (%s), or resume it through the API", t.id, headerAccessToken))
				return
			}
		} else if wouldResume(s) && !carriesAccessToken(r, s.AccessToken) {
			writeError(w, http.StatusUnauthorized, fmt.Sprintf("sandbox %q is suspended; only a request with its access token (%s) resumes it", t.id, headerAccessToken))
			return
		}
	}
	sb, err := p.cfg.ControlPlane.Running(r.Context(), t.id)
	if err != nil {
		p.unreachable(w, t, err)
		return
	}
	r.Header.Del(headerSandboxID)
	r.Header.Del(headerSandboxPort)
	r.Header.Del(headerTrafficToken) // the sandbox's services have no use for it
	enableFullDuplex(w)
	body, w := guardBody(w, r)
	defer body.finish() // no read of the client's body outlives this handler
	if t.port == EnvdPort {
		p.envd(sb).ServeHTTP(w, r)
		return
	}
	p.service(t, r, mask, https).ServeHTTP(w, r)
}

// wouldResume reports whether a request reaching s resumes it: it is
// suspended, or being suspended, with auto-resume on.
func wouldResume(s controlplane.Sandbox) bool {
	return s.Lifecycle.AutoResume && (s.State == apiv1.StateSuspended || s.State == apiv1.StateSuspending)
}

// carriesAccessToken reports whether an envd request may be one the agent
// accepts, checked in the agent's order: the access token header if there
// is one, else a /files URL signed with the token (whose expiry the agent
// checks). The signature is verified here too: any ?signature= would let a
// stranger resume the sandbox.
func carriesAccessToken(r *http.Request, want string) bool {
	if want == "" {
		return true
	}
	if presented := r.Header.Get(headerAccessToken); presented != "" {
		return subtle.ConstantTimeCompare([]byte(want), []byte(presented)) == 1
	}
	q := r.URL.Query()
	return q.Get("signature") != "" && signedWith(q, r.Method, q.Get("signature"), want)
}

// trafficRefusal says why a request carrying token (the value of the
// E2b-Traffic-Access-Token header) may not reach an exposed port of a
// sandbox whose traffic token is want; "" lets it through. A sandbox
// without a token is public.
func trafficRefusal(want, token, id string) string {
	switch {
	case want == "":
		return ""
	case token == "":
		return fmt.Sprintf("sandbox %q takes requests to its ports only with its traffic access token in the %s header", id, headerTrafficToken)
	case subtle.ConstantTimeCompare([]byte(want), []byte(token)) != 1:
		return fmt.Sprintf("the %s header does not match sandbox %q's traffic access token", headerTrafficToken, id)
	}
	return ""
}

// unreachable answers a request for a sandbox that is not there or does
// not run (unknown, ended, or paused without auto-resume) as E2B's proxy
// does, on every port: 502 with {sandboxId, message, code}. The SDKs read
// a 502 from envd as "not running" (isRunning() is false, RPCs fail as
// Unavailable); connect() through the API resumes a paused sandbox.
func (p *Proxy) unreachable(w http.ResponseWriter, t target, err error) {
	var stateErr *controlplane.StateError
	switch {
	case errors.Is(err, controlplane.ErrNotFound), errors.As(err, &stateErr):
		p.log.Debug("proxy: sandbox not running", "sandbox", t.id, "port", t.port, "err", err)
		writeNotFound(w, t.id)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client gave up while the sandbox was settling or resuming.
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("sandbox %q: gave up waiting for it to run: %v", t.id, err))
	default:
		p.log.Warn("proxy: sandbox unreachable", "sandbox", t.id, "err", err)
		writeError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %q is unreachable: %v", t.id, err))
	}
}

// sandboxNotFound is the message of E2B's proxy for a sandbox it cannot
// route to; SDKs and users match on it.
const sandboxNotFound = "The sandbox was not found"

// writeNotFound writes E2B's not-found answer of the traffic proxy.
func writeNotFound(w http.ResponseWriter, id string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusBadGateway)
	_ = json.NewEncoder(w).Encode(struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
		Code      int    `json:"code"`
	}{id, sandboxNotFound, http.StatusBadGateway})
}

// route decides which sandbox and port a request is for.
func (p *Proxy) route(r *http.Request) (target, error) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	headerID := r.Header.Get(headerSandboxID)
	byHeaders := host == "localhost" || net.ParseIP(strings.Trim(host, "[]")) != nil ||
		(p.cfg.Domain != "" && host == "sandbox."+p.cfg.Domain)
	if !byHeaders {
		if t, ok := p.hostTarget(host); ok {
			return t, nil
		}
		if headerID == "" {
			return target{}, fmt.Errorf("cannot route host %q: use <port>-<sandboxID>.<domain> or the %s and %s headers", host, headerSandboxID, headerSandboxPort)
		}
	}
	if headerID != "" {
		port := EnvdPort
		if raw := r.Header.Get(headerSandboxPort); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 || n > 65535 {
				return target{}, fmt.Errorf("%s must be a port number, got %q", headerSandboxPort, raw)
			}
			port = n
		}
		if !sandboxIDPattern.MatchString(headerID) {
			return target{}, fmt.Errorf("%s %q is not a sandbox id", headerSandboxID, headerID)
		}
		return target{id: headerID, port: port}, nil
	}
	// The Python SDK 2.21's Sandbox.connect() sends envd requests with only
	// X-Access-Token. Every sandbox's token is unique, so it names the
	// sandbox; such requests are always envd's.
	if token := r.Header.Get(headerAccessToken); token != "" {
		if id, ok := p.sandboxByToken(token); ok {
			return target{id: id, port: EnvdPort}, nil
		}
		return target{}, fmt.Errorf("no %s header, and the %s matches no sandbox", headerSandboxID, headerAccessToken)
	}
	// Signed /files URLs (uploadUrl/downloadUrl) are fetched by any HTTP
	// client, without headers; the signature is made with one sandbox's
	// token, so it names the sandbox too.
	if sig := r.URL.Query().Get("signature"); sig != "" && path.Clean("/"+r.URL.Path) == "/files" {
		if id, ok := p.sandboxBySignature(r, sig); ok {
			return target{id: id, port: EnvdPort}, nil
		}
		return target{}, fmt.Errorf("no %s header, and the URL signature matches no sandbox", headerSandboxID)
	}
	return target{}, fmt.Errorf("missing %s header: with a single origin (E2B_SANDBOX_URL) every request must name its sandbox", headerSandboxID)
}

// hostTarget parses <port>-<sandboxID>.<domain>.
func (p *Proxy) hostTarget(host string) (target, bool) {
	label, rest, _ := strings.Cut(host, ".")
	if p.cfg.Domain != "" && rest != p.cfg.Domain {
		return target{}, false
	}
	portStr, id, ok := strings.Cut(label, "-")
	if !ok || !sandboxIDPattern.MatchString(id) {
		return target{}, false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return target{}, false
	}
	return target{id: id, port: port}, true
}

// sandboxByToken finds the live sandbox whose access token this is.
func (p *Proxy) sandboxByToken(token string) (string, bool) {
	for _, s := range p.cfg.ControlPlane.List(project.Everything, controlplane.Filter{}) {
		if s.State == apiv1.StateStopped || s.State == apiv1.StateFailed {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(s.AccessToken), []byte(token)) == 1 {
			return s.ID, true
		}
	}
	return "", false
}

// sandboxBySignature finds the live sandbox whose token signed this /files
// URL (envd's v1 signature; the agent checks it again, with its expiry).
func (p *Proxy) sandboxBySignature(r *http.Request, sig string) (string, bool) {
	q := r.URL.Query()
	for _, s := range p.cfg.ControlPlane.List(project.Everything, controlplane.Filter{}) {
		if s.State == apiv1.StateStopped || s.State == apiv1.StateFailed {
			continue
		}
		if signedWith(q, r.Method, sig, s.AccessToken) {
			return s.ID, true
		}
	}
	return "", false
}

// signedWith reports whether sig is envd's v1 signature, made with access
// token token, of a /files request with query q and method.
func signedWith(q url.Values, method, sig, token string) bool {
	operation := "read"
	if method == http.MethodPost {
		operation = "write"
	}
	parts := []string{q.Get("path"), operation, q.Get("username"), token}
	if exp := q.Get("signature_expiration"); exp != "" {
		parts = append(parts, exp)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(want), []byte(sig)) == 1
}

// envd forwards to the sandbox's agent over the node's HTTP/2 channel.
// Responses are flushed as they come: Connect server streams (process
// output, watches) must reach the client promptly.
func (p *Proxy) envd(sb nodeapi.Sandbox) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "agent"
			pr.Out.Host = "agent"
		},
		Transport:     sb.Agent(), // the client's token, unchanged
		FlushInterval: -1,
		ErrorHandler:  p.proxyError(sb.ID(), EnvdPort),
	}
}

// service forwards to another port inside the sandbox, HTTP/1.1 and
// WebSocket upgrades alike; a client's HTTP/2 becomes HTTP/1.1 to the
// service, except gRPC, which needs HTTP/2 end to end (h2c inside). A
// non-empty mask is the Host the service gets (the sandbox's
// mask_request_host); the client's goes in X-Forwarded-Host. A port the
// sandbox declared HTTPS (https_ports) is reached over TLS.
func (p *Proxy) service(t target, r *http.Request, mask string, https bool) *httputil.ReverseProxy {
	transport, scheme := p.ports, "http"
	switch {
	case https:
		transport, scheme = p.tlsPorts, "https"
	case r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc"):
		transport = p.grpcPorts
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = net.JoinHostPort(t.id, strconv.Itoa(t.port))
			pr.Out.Host = pr.In.Host // services may care for their own Host
			pr.SetXForwarded()
			if mask != "" {
				pr.Out.Host = mask
			}
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorHandler:  p.proxyError(t.id, t.port),
	}
}

// dialSandboxPort dials the sandbox and port named by a service URL's host.
func (p *Proxy) dialSandboxPort(ctx context.Context, _, addr string) (net.Conn, error) {
	id, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("proxy dial %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("proxy dial %q: %w", addr, err)
	}
	sb, err := p.cfg.ControlPlane.Running(ctx, id)
	if err != nil {
		return nil, err
	}
	return sb.DialPort(ctx, port)
}

// proxyError answers a request the sandbox side failed, as JSON.
func (p *Proxy) proxyError(id string, port int) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return // the client went away
		}
		p.log.Debug("proxy: upstream failed", "sandbox", id, "port", port, "err", err)
		writeError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %q: nothing answered on port %d: %v", id, port, err))
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// enableFullDuplex lets a response start while the request body is still
// being read. Without it Go's server closes the body once the handler
// writes headers, which cut off about 1% of proxied streams whose client
// was still sending.
func enableFullDuplex(w http.ResponseWriter) {
	_ = http.NewResponseController(w).EnableFullDuplex()
}
