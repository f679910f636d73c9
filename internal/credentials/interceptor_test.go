package credentials

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/internal/store"
)

const (
	testSecret      = "sk-live-4f9c2e7a1b3d5f60"
	otherSecret     = "ghp_second-secret-value-77"
	testPlaceholder = PlaceholderPrefix + "0123456789abcdef0123456789abcdef"
)

// staticRules serves fixed rules per sandbox, as the control plane would.
type staticRules map[string][]Rule

func (s staticRules) CredentialRules(id string) []Rule { return s[id] }

// upstream is a TLS server standing in for a real API: it records every
// request it gets and echoes the request's headers and target back in its
// body and in a response header, as a careless or hostile API might.
type upstream struct {
	addr string
	mu   sync.Mutex
	seen []*http.Request
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.seen...)
}

// startUpstream serves TLS with a leaf for names from ca.
func startUpstream(t *testing.T, ca *CA, names ...string) *upstream {
	t.Helper()
	u := &upstream{}
	certs := map[string]*tls.Certificate{}
	for _, n := range names {
		c, err := ca.Leaf(n)
		if err != nil {
			t.Fatal(err)
		}
		certs[n] = c
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c, ok := certs[h.ServerName]; ok {
				return c, nil
			}
			return nil, fmt.Errorf("no certificate for %q", h.ServerName)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	u.addr = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r)
		u.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		w.Header().Set("Location", "https://"+r.Host+r.RequestURI)
		var echo bytes.Buffer
		fmt.Fprintf(&echo, "%s %s\nhost %s\n", r.Method, r.RequestURI, r.Host)
		r.Header.Write(&echo)
		echo.Write(body)
		switch r.URL.Path {
		case "/split":
			// The secret arrives in pieces, each flushed on its own.
			flusher := w.(http.Flusher)
			for _, piece := range []string{"start ", testSecret[:7], testSecret[7:15], testSecret[15:], " end"} {
				io.WriteString(w, piece)
				flusher.Flush()
			}
		case "/gzip":
			// Compressed although the request did not ask for it.
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			zw.Write(echo.Bytes())
			zw.Close()
		default:
			w.Write(echo.Bytes())
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return u
}

// defaultProject reads every sandbox's secrets from project default.
type defaultProject struct{ *secrets.Store }

func (d defaultProject) Secret(_, name string) ([]byte, error) { return d.Get(name) }

type fixture struct {
	in        *Interceptor
	sandboxCA *x509.CertPool
	store     *secrets.Store
	dialed    chan string
}

func newFixture(t *testing.T, rules staticRules, upstreamCA *CA) *fixture {
	t.Helper()
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := secrets.LoadOrCreateKey(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(st, key)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"TOKEN": testSecret, "OTHER": otherSecret} {
		if _, _, err := sec.Set(name, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(upstreamCA.CertPEM())
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AppendCertsFromPEM(ca.CertPEM())
	return &fixture{
		in:        NewInterceptor(Config{CA: ca, Rules: rules, Secrets: defaultProject{sec}, UpstreamRoots: roots}),
		sandboxCA: sandboxRoots,
		store:     sec,
		dialed:    make(chan string, 100),
	}
}

// client is what code in the sandbox uses: it trusts the installation's
// CA, and each of its connections to host is served by the interceptor,
// which dials up to up.
func (f *fixture) client(t *testing.T, sandboxID, host string, up *upstream) *http.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		f.dialed <- addr
		var d net.Dialer
		return d.DialContext(ctx, network, up.addr)
	}
	tr := &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			sandboxSide, gatewaySide := net.Pipe()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = f.in.Serve(ctx, sandboxID, host, gatewaySide, dial)
			}()
			return sandboxSide, nil
		},
		TLSClientConfig: &tls.Config{RootCAs: f.sandboxCA, ServerName: host},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, url string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vv := range header {
		req.Header[k] = vv
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp, string(body)
}

// requireNoSecret fails if anything the sandbox received holds a secret.
func requireNoSecret(t *testing.T, what string, resp *http.Response, body string) {
	t.Helper()
	var all bytes.Buffer
	resp.Header.Write(&all)
	all.WriteString(body)
	for _, s := range []string{testSecret, otherSecret} {
		if strings.Contains(all.String(), s) {
			t.Fatalf("%s: the sandbox received a secret:\n%s", what, all.String())
		}
	}
}

func testCAs(t *testing.T) (upstreamCA, rogueCA *CA) {
	t.Helper()
	var err error
	if upstreamCA, err = LoadOrCreateCA(filepath.Join(t.TempDir(), "upstream-ca")); err != nil {
		t.Fatal(err)
	}
	if rogueCA, err = LoadOrCreateCA(filepath.Join(t.TempDir(), "rogue-ca")); err != nil {
		t.Fatal(err)
	}
	return upstreamCA, rogueCA
}

func TestInterceptorInjectsHeaderAndRedactsEcho(t *testing.T) {
	upCA, _ := testCAs(t)
	up := startUpstream(t, upCA, "api.example.test")
	f := newFixture(t, staticRules{"sb1": {
		{Host: "api.example.test", Header: "Authorization", Value: "Bearer ${TOKEN}"},
	}}, upCA)
	if !f.in.Intercepts("sb1", "API.example.test") || f.in.Intercepts("sb1", "other.test") || f.in.Intercepts("sb2", "api.example.test") {
		t.Fatal("Intercepts disagrees with the rules")
	}
	c := f.client(t, "sb1", "api.example.test", up)

	resp, body := get(t, c, "https://api.example.test/v1/models?x=1", http.Header{
		"Authorization":   {"Bearer whatever-the-sandbox-sent"},
		"Accept-Encoding": {"gzip, br"},
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	seen := up.requests()
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests", len(seen))
	}
	if got := seen[0].Header.Get("Authorization"); got != "Bearer "+testSecret {
		t.Errorf("upstream saw Authorization %q", got)
	}
	if got := seen[0].Header.Get("Accept-Encoding"); got != "" {
		t.Errorf("Accept-Encoding was forwarded: %q", got)
	}
	if seen[0].Host != "api.example.test" || seen[0].RequestURI != "/v1/models?x=1" {
		t.Errorf("upstream saw host %q target %q", seen[0].Host, seen[0].RequestURI)
	}
	if addr := <-f.dialed; addr != "api.example.test:443" {
		t.Errorf("dialled %q, want the host on 443", addr)
	}
	requireNoSecret(t, "echo", resp, body)
	if !strings.Contains(body, "Authorization: Bearer "+Redacted) || resp.Header.Get("X-Echo-Authorization") != "Bearer "+Redacted {
		t.Errorf("the echo does not show the redaction: header %q body:\n%s", resp.Header.Get("X-Echo-Authorization"), body)
	}

	// Keep-alive: a second request on the same connection is injected too.
	resp, body = get(t, c, "https://api.example.test/split", nil)
	requireNoSecret(t, "split response", resp, body)
	if !strings.Contains(body, "start "+Redacted+" end") {
		t.Errorf("split secret not redacted in place: %q", body)
	}
	if n := len(up.requests()); n != 2 {
		t.Errorf("upstream saw %d requests", n)
	}
	if got := len(f.dialed); got != 0 {
		t.Errorf("the second request dialled again (%d more dials): no keep-alive", got)
	}

	resp, body = get(t, c, "https://api.example.test/gzip", nil)
	requireNoSecret(t, "gzip response", resp, body)
	if resp.Header.Get("Content-Encoding") != "" || !strings.Contains(body, "Authorization: Bearer "+Redacted) {
		t.Errorf("gzip response not decoded and redacted: %v %q", resp.Header, body)
	}
}

func TestInterceptorPlaceholderOnlyForBoundHost(t *testing.T) {
	upCA, _ := testCAs(t)
	up := startUpstream(t, upCA, "api.example.test", "other.example.test")
	f := newFixture(t, staticRules{"sb1": {
		{Host: "api.example.test", Env: "API_KEY", Secret: "TOKEN", Placeholder: testPlaceholder},
		{Host: "other.example.test", Header: "X-Other", Value: "${OTHER}"},
	}}, upCA)

	bound := f.client(t, "sb1", "api.example.test", up)
	resp, body := get(t, bound, "https://api.example.test/q?key="+testPlaceholder, http.Header{
		"X-Api-Key": {testPlaceholder}, "Authorization": {"Bearer " + testPlaceholder},
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	r := up.requests()[0]
	if r.Header.Get("X-Api-Key") != testSecret || r.Header.Get("Authorization") != "Bearer "+testSecret || r.URL.Query().Get("key") != testSecret {
		t.Errorf("placeholder not replaced for the bound host: headers %v, target %s", r.Header, r.RequestURI)
	}
	requireNoSecret(t, "bound host", resp, body)
	if strings.Contains(resp.Header.Get("Location"), testSecret) || !strings.Contains(resp.Header.Get("Location"), Redacted) {
		t.Errorf("Location header: %q", resp.Header.Get("Location"))
	}

	// The same placeholder sent to another intercepted host stays a
	// placeholder: replacing it there would hand the secret to that host.
	other := f.client(t, "sb1", "other.example.test", up)
	resp, body = get(t, other, "https://other.example.test/q?key="+testPlaceholder, http.Header{"X-Api-Key": {testPlaceholder}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	r = up.requests()[1]
	if r.Header.Get("X-Api-Key") != testPlaceholder || r.URL.Query().Get("key") != testPlaceholder {
		t.Errorf("placeholder replaced for a host it is not bound to: %v %s", r.Header, r.RequestURI)
	}
	if r.Header.Get("X-Other") != otherSecret {
		t.Errorf("the other host's own rule was not applied: %q", r.Header.Get("X-Other"))
	}
	requireNoSecret(t, "other host", resp, body)
}

func TestInterceptorRefusesUntrustedUpstream(t *testing.T) {
	upCA, rogueCA := testCAs(t)
	// The upstream's certificate comes from a CA the gateway does not trust.
	up := startUpstream(t, rogueCA, "api.example.test")
	f := newFixture(t, staticRules{"sb1": {{Host: "api.example.test", Header: "Authorization", Value: "Bearer ${TOKEN}"}}}, upCA)
	c := f.client(t, "sb1", "api.example.test", up)
	resp, body := get(t, c, "https://api.example.test/", nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("untrusted upstream: status %d body %q", resp.StatusCode, body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the untrusted upstream received %d requests", n)
	}
	requireNoSecret(t, "untrusted upstream", resp, body)
}

func TestInterceptorRefusesMisdirectedAndUpgrades(t *testing.T) {
	upCA, _ := testCAs(t)
	up := startUpstream(t, upCA, "api.example.test")
	f := newFixture(t, staticRules{"sb1": {{Host: "api.example.test", Header: "Authorization", Value: "Bearer ${TOKEN}"}}}, upCA)
	c := f.client(t, "sb1", "api.example.test", up)

	req, _ := http.NewRequest(http.MethodGet, "https://api.example.test/", nil)
	req.Host = "evil.example.test" // domain fronting: same TLS name, other site
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("fronted request: status %d", resp.StatusCode)
	}

	_, body := get(t, c, "https://api.example.test/ws", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
	if !strings.Contains(body, "not supported") {
		t.Errorf("upgrade: %q", body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream received %d refused requests", n)
	}

	// A secret that disappeared is named, not silently left out.
	if err := f.store.Delete("TOKEN"); err != nil {
		t.Fatal(err)
	}
	resp, body = get(t, c, "https://api.example.test/", nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "TOKEN") {
		t.Errorf("deleted secret: status %d body %q", resp.StatusCode, body)
	}
}
