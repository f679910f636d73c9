package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"github.com/space-platform/space/internal/testtier"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// pyDomain is the sandbox domain of the host-routing run: names under it
// never reach a resolver, the forward proxy below takes them.
const pyDomain = "sbx.space.test"

// TestE2BPythonSDKs runs compat/e2b-py: the real E2B Python SDKs from PyPI
// against this server, once per pinned environment (the reference
// baseline e2b 2.21.1 + e2b-code-interpreter 2.6.2, and the newest 2.x of
// both), each in a virtualenv compat/e2b-py/setup.sh installs with
// `pip install --require-hashes` and caches under .tools/venv. Each
// environment runs pytest twice: the suite with E2B_SANDBOX_URL (header
// routing, one origin), and the host-routing files (test_host_*.py, the
// code interpreter on 49999 among them) with https://<port>-<id>.<domain>
// names through a local wildcard TLS terminator. SPACE_E2B_PY_TESTS
// narrows the run to some files (space-separated, relative to
// compat/e2b-py); SPACE_E2B_PY_ENVS to some environments. It skips only
// when PyPI is unreachable.
func TestE2BPythonSDKs(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "installs PyPI packages and builds the base template")
	// Mostly waiting on the server and the sandboxes: alongside the
	// other parallel tests (each SDK suite has its own directory and
	// sandboxes).
	inParallelGroup(t)
	dir := filepath.Join(env.repoRoot, "compat", "e2b-py")
	envs := strings.Fields(os.Getenv("SPACE_E2B_PY_ENVS"))
	if len(envs) == 0 {
		envs = []string{"baseline", "latest"}
	}
	venvs := make(map[string]string)
	for _, name := range envs {
		venvs[name] = installPySDKs(t, dir, name)
	}
	files := strings.Fields(os.Getenv("SPACE_E2B_PY_TESTS"))
	if len(files) == 0 {
		files = []string{"."}
	}
	var header, host []string
	for _, f := range files {
		if f == "." || f == "tests" || f == "tests/" {
			header = append(header, "tests/")
			host = append(host, "host_tests/")
		} else if strings.HasPrefix(f, "host_tests") {
			host = append(host, f)
		} else {
			header = append(header, f)
		}
	}
	if len(host) > 0 {
		buildCodeInterpreter(t) // base, and code-interpreter-v1 for the code interpreter
	} else if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	term := startWildcardTLS(t, pyDomain, env.srv.ProxyURL())

	base := append(withoutE2BEnv(os.Environ()),
		"E2B_API_URL="+env.srv.E2BURL(),
		"E2B_API_KEY="+env.srv.AdminKey,
		"E2B_TEMPLATE=base",
		"SPACE_API_URL="+env.srv.URL,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	base = append(base, netJSEnv(t)...) // the fake web, for tests/test_features.py
	for _, name := range envs {
		t.Run(name, func(t *testing.T) {
			if len(header) > 0 {
				runPytest(t, venvs[name], dir, append(base, "E2B_SANDBOX_URL="+env.srv.ProxyURL()), header)
			}
			if len(host) > 0 {
				envd, ci := term.tunnelled("49983"), term.tunnelled("49999")
				// No E2B_SANDBOX_URL: the SDK names hosts itself, and every
				// request, the API's included, goes through the forward
				// proxy (the SDKs' `proxy` option), which sends names under
				// pyDomain to the TLS terminator.
				runPytest(t, venvs[name], dir, append(base,
					"E2B_DOMAIN="+pyDomain,
					"E2B_PY_PROXY="+term.proxyURL,
					"SSL_CERT_FILE="+term.caFile,
				), host)
				// The SDKs really went by host name, envd and the code
				// interpreter both (a regression to header routing would
				// pass the suite without this).
				if term.tunnelled("49983") == envd || term.tunnelled("49999") == ci {
					t.Fatalf("no TLS tunnel to 49983-*/49999-*.%s during the host-routing run: %v", pyDomain, term.tunnels)
				}
			}
		})
	}
}

func runPytest(t *testing.T, venv, dir string, environ, files []string) {
	t.Helper()
	args := append([]string{"-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "--durations=5"}, files...)
	runTestCommand(t, "pytest "+strings.Join(files, " "), dir, environ, filepath.Join(venv, "bin", "python"), args...)
}

// pipUnreachable recognises pip's network failures; quiet pip says only
// "(from versions: none)" when it cannot reach the index (a pin PyPI lacks
// lists the versions there are, and fails the test).
var pipUnreachable = regexp.MustCompile(`\(from versions: none\)|NewConnectionError|Temporary failure in name resolution|Name or service not known|Connection refused|Network is unreachable|ConnectTimeoutError|ReadTimeoutError`)

// installPySDKs runs dir/setup.sh (compat/e2b-py's with the environment's
// name, sdk/python's with none), which installs a lockfile into its
// virtualenv unless it is there already, and returns the virtualenv's path.
func installPySDKs(t *testing.T, dir, name string) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed; the Python tests need it (scripts/install-deps.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var args []string
	if name != "" {
		args = []string{name}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "setup.sh"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if pipUnreachable.Match(stderr.Bytes()) {
			t.Skipf("PyPI is unreachable, so the Python packages cannot be installed:\n%s", stderr.String())
		}
		t.Fatalf("setup.sh %s: %v\n%s", name, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("setup.sh %s:\n%s", name, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// wildcardTLS is a local stand-in for the reverse proxy of docs/e2b.md's
// host routing: a throwaway CA, a TLS listener with a certificate for
// *.<domain> that forwards to the sandbox proxy keeping the Host header,
// and an HTTP forward proxy that tunnels CONNECT to names under <domain>
// to that listener (so nothing needs /etc/hosts or a resolver) and
// forwards plain-HTTP requests to loopback origins (the E2B API).
type wildcardTLS struct {
	proxyURL string // the forward proxy, for the SDKs' proxy option
	caFile   string // PEM of the CA, for SSL_CERT_FILE

	mu      sync.Mutex
	tunnels map[string]int // CONNECTs by port prefix of the name ("49999")
}

// tunnelled reports how many CONNECTs named <port>-*.<domain>.
func (w *wildcardTLS) tunnelled(port string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tunnels[port]
}

func startWildcardTLS(t *testing.T, domain, upstream string) *wildcardTLS {
	t.Helper()
	wt := &wildcardTLS{tunnels: make(map[string]int)}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "space e2e throwaway CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "*." + domain},
		DNSNames:     []string{"*." + domain, domain},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}

	up, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	// The Host header passes through unchanged: NewSingleHostReverseProxy
	// rewrites the URL only, and the sandbox proxy routes by that Host.
	terminator := &http.Server{
		Handler: httputil.NewSingleHostReverseProxy(up),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}},
			NextProtos:   []string{"h2", "http/1.1"},
		},
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go terminator.ServeTLS(tl, "", "")

	var tunnels sync.WaitGroup
	forward := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.Out.URL = r.In.URL // absolute-form: the origin the client named
		r.Out.Host = r.In.Host
	}}
	fwd := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			h := r.URL.Hostname()
			if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
				http.Error(w, "this proxy forwards plain HTTP to loopback origins only", http.StatusForbidden)
				return
			}
			forward.ServeHTTP(w, r)
			return
		}
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil || !strings.HasSuffix(host, "."+domain) {
			http.Error(w, "CONNECT only to names under "+domain, http.StatusForbidden)
			return
		}
		port, _, _ := strings.Cut(host, "-")
		wt.mu.Lock()
		wt.tunnels[port]++
		wt.mu.Unlock()
		backend, err := net.Dial("tcp", tl.Addr().String())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			backend.Close()
			return
		}
		rw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
		rw.Flush()
		tunnels.Add(1)
		go func() {
			defer tunnels.Done()
			done := make(chan struct{}, 2)
			go func() { io.Copy(backend, rw); backend.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { io.Copy(conn, backend); done <- struct{}{} }()
			<-done
			<-done
			conn.Close()
			backend.Close()
		}()
	})}
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go fwd.Serve(fl)
	t.Cleanup(func() {
		fwd.Close()
		terminator.Close()
		tunnels.Wait()
	})
	wt.proxyURL, wt.caFile = "http://"+fl.Addr().String(), caFile
	return wt
}

// TestE2BConnectWhileProxyResumes: a paused sandbox that traffic resumes
// (the proxy's auto-resume) while a connect arrives. The newest Python SDK
// re-opens a background command's stream after a pause, so its
// Sandbox.connect() raced the proxy and got 409 "is running; cannot
// resume"; connect must find the sandbox running instead, as E2B's does.
func TestE2BConnectWhileProxyResumes(t *testing.T) {
	sb := e2bCreate(t, "minimal", map[string]any{"autoResume": map[string]any{"enabled": true}})
	h := envdHeaders(sb, "49983")
	for round := 0; round < 4; round++ {
		if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); resp.status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", resp.status, resp.body)
		}
		var wg sync.WaitGroup
		traffic := make(chan string, 4)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, env.srv.ProxyURL()+"/filesystem.Filesystem/Stat", strings.NewReader(`{"path":"/tmp"}`))
				req.Header = h.Clone()
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					traffic <- err.Error()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					traffic <- fmt.Sprintf("Stat through the proxy: %d %s", resp.StatusCode, body)
				}
			}()
		}
		resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 120}, nil)
		wg.Wait()
		close(traffic)
		// Traffic that meets the sandbox while connect resumes it gets
		// 502 "is resuming" today instead of waiting (internal/proxy's
		// business, reported); this test is about connect.
		for msg := range traffic {
			t.Logf("round %d: %s", round, msg)
		}
		if resp.status != http.StatusOK && resp.status != http.StatusCreated {
			t.Fatalf("round %d: connect while the proxy resumes: %d %s", round, resp.status, resp.body)
		}
	}
}
