// Package kubetest starts a real etcd and kube-apiserver for a test, so that
// manifests can be checked by the API server itself (server-side dry-run)
// rather than by a schema copy. It has no Kubernetes Go dependency: it runs
// the binaries scripts/kube-tools.sh builds and talks plain HTTPS to them.
//
// kube-apiserver is looked up in $SPACE_KUBE_BIN, else in
// .tools/kube/<Version>/bin under the module root; etcd in $SPACE_ETCD,
// else on PATH (Debian's etcd-server). A missing binary fails the test with
// the command that provides it: a dry-run test that skipped would prove
// nothing. Helm finds the helm binary the same way ($SPACE_HELM, else
// .tools/helm/<HelmVersion>/bin/helm).
package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/internal/testtier"
)

// Version is the Kubernetes release whose kube-apiserver is run.
const Version = "v1.37.2"

// HelmVersion is the helm release scripts/kube-tools.sh builds.
const HelmVersion = "v3.22.0"

// Ports are taken from this range, which belongs to kubetest
// (the other half, 16500-16999, is scripts/kube-up.sh's).
const portLow, portHigh = 16000, 16499

// Cluster is a running etcd + kube-apiserver pair. Its fields are read-only.
type Cluster struct {
	// URL is the API server's https URL, e.g. https://127.0.0.1:16123.
	URL string
	// Token authenticates as user "admin" in group system:masters.
	Token string
	// Kubeconfig is a kubeconfig file (server, CA, token) for helm and friends.
	Kubeconfig string
	// CAFile holds the CA certificate the serving certificate is signed by.
	CAFile string
	// Dir is the cluster's private directory (data, certificates, logs).
	Dir string

	client *http.Client

	mu        sync.Mutex
	discovery map[string][]apiResource // by group/version
}

// Start launches etcd and kube-apiserver, waits until /readyz answers ok, and
// stops both when the test ends. It takes 10-30 s, most of it the API
// server's start-up hooks.
func Start(t testing.TB) *Cluster {
	t.Helper()
	testtier.Full(t, "runs etcd and kube-apiserver")
	apiserver, err := kubeAPIServerPath()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	etcd, err := etcdPath()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	dir := t.TempDir()
	c := &Cluster{Dir: dir, discovery: map[string][]apiResource{}}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]

	p, err := writePKI(dir)
	if err != nil {
		t.Fatalf("kubetest: certificates: %v", err)
	}
	c.CAFile = p.caFile
	c.Token = randomHex(16)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.Token+",admin,admin,system:masters\n"), 0o600); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	c.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, []byte(Kubeconfig(c.URL, c.CAFile, c.Token)), 0o600); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	c.client = &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	t.Logf("kubetest: starting etcd on %s", etcdURL)
	etcdProc, err := startProcess(t, dir, "etcd", etcd,
		"--name=kubetest",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		// A test's data is thrown away: fewer fsyncs, less waiting.
		"--snapshot-count=100000",
	)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() { etcdProc.stop(t) })

	t.Logf("kubetest: starting kube-apiserver %s on %s", Version, c.URL)
	apiProc, err := startProcess(t, dir, "kube-apiserver", apiserver,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// Nothing here runs pods that would reach the API server through the
		// kubernetes Service; the reconciler would refuse a loopback address.
		"--endpoint-reconciler-type=none",
		// As a cluster that runs privileged node agents (CNI, storage,
		// space's own node DaemonSet) is configured.
		"--allow-privileged=true",
		"--secure-port="+strconv.Itoa(apiPort),
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+p.certFile,
		"--tls-private-key-file="+p.keyFile,
		"--client-ca-file="+p.caFile,
		"--service-account-key-file="+p.saPubFile,
		"--service-account-signing-key-file="+p.saKeyFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--profiling=false",
		// space's node runs privileged (network namespaces, nftables,
		// btrfs): without this every pod template asking for it is refused.
		"--allow-privileged=true",
	)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	// Registered after etcd's, so it runs first: the API server stops
	// before the store it writes to.
	t.Cleanup(func() { apiProc.stop(t) })

	if err := c.waitReady(t, 3*time.Minute, etcdProc, apiProc); err != nil {
		t.Fatalf("kubetest: %v\n--- etcd log (tail) ---\n%s\n--- kube-apiserver log (tail) ---\n%s",
			err, etcdProc.tail(30), apiProc.tail(30))
	}
	return c
}

// Kubeconfig renders a kubeconfig for a server, its CA file and a bearer token.
func Kubeconfig(server, caFile, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: admin
current-context: kubetest
`, server, caFile, token)
}

// waitReady polls /readyz, logging which checks still fail every few
// seconds so a slow start shows where it is.
func (c *Cluster) waitReady(t testing.TB, timeout time.Duration, procs ...*process) error {
	t.Helper()
	start := time.Now()
	lastLog := time.Time{}
	for {
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("%s exited before the API server was ready: %v", p.name, p.waitErr)
			}
		}
		status, body, err := c.raw(context.Background(), http.MethodGet, "/readyz?verbose", "", nil)
		if err == nil && status == http.StatusOK {
			t.Logf("kubetest: kube-apiserver ready after %s", time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("kube-apiserver not ready after %s: status %d, err %v, %s", timeout, status, err, failingChecks(body))
		}
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			what := fmt.Sprint(err)
			if err == nil {
				what = fmt.Sprintf("status %d, failing: %s", status, failingChecks(body))
			}
			t.Logf("kubetest: waiting for /readyz (%s): %s", time.Since(start).Round(time.Second), what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// failingChecks picks the "[-]check failed" lines out of a verbose /readyz.
func failingChecks(body []byte) string {
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "[-]") {
			out = append(out, strings.Fields(l)[0][3:])
		}
	}
	if len(out) == 0 {
		return "none listed"
	}
	return strings.Join(out, ", ")
}

// Do sends a request to the API server as admin and returns the response
// body; a status outside 2xx is an error carrying the server's message.
func (c *Cluster) Do(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
	status, resp, err := c.raw(ctx, method, path, contentType, body)
	if err != nil {
		return nil, err
	}
	if status < 200 || status > 299 {
		return resp, &StatusError{Code: status, Message: statusMessage(resp)}
	}
	return resp, nil
}

// StatusError is a refusal by the API server.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Message) }

func (c *Cluster) raw(ctx context.Context, method, path, contentType string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// statusMessage extracts metav1.Status.message, falling back to the body.
func statusMessage(body []byte) string {
	var s struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &s) == nil && s.Message != "" {
		return s.Message
	}
	return strings.TrimSpace(string(body))
}

// ModuleRoot walks up from the working directory (a test's package
// directory) to the main module's go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/space-platform/space\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("module root (go.mod of github.com/space-platform/space) not found above the working directory")
		}
		dir = parent
	}
}

// Helm returns the path of the helm binary scripts/kube-tools.sh builds
// ($SPACE_HELM if set), failing the test if it is missing.
func Helm(t testing.TB) string {
	t.Helper()
	p := os.Getenv("SPACE_HELM")
	if p == "" {
		root, err := ModuleRoot()
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		p = filepath.Join(root, ".tools", "helm", HelmVersion, "bin", "helm")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kubetest: helm %s not found at %s: run scripts/kube-tools.sh --only apiserver,helm (or set SPACE_HELM)", HelmVersion, p)
	}
	return p
}

func kubeAPIServerPath() (string, error) {
	dir := os.Getenv("SPACE_KUBE_BIN")
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".tools", "kube", Version, "bin")
	}
	p := filepath.Join(dir, "kube-apiserver")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kube-apiserver %s not found at %s: run scripts/kube-tools.sh --only apiserver,helm (or set SPACE_KUBE_BIN to its directory)", Version, p)
	}
	return p, nil
}

func etcdPath() (string, error) {
	if p := os.Getenv("SPACE_ETCD"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", errors.New("etcd not found on PATH: run scripts/install-deps.sh (Debian package etcd-server) or set SPACE_ETCD")
	}
	return p, nil
}

// freePorts picks n distinct ports of the range that nothing listens on.
// Another process may take one between this check and the bind; the start
// then fails with "address already in use" in the component's log.
func freePorts(n int) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for tries := 0; len(out) < n && tries < 500; tries++ {
		r, err := rand.Int(rand.Reader, big.NewInt(portHigh-portLow+1))
		if err != nil {
			return nil, err
		}
		port := portLow + int(r.Int64())
		if seen[port] {
			continue
		}
		seen[port] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		out = append(out, port)
	}
	if len(out) < n {
		return nil, fmt.Errorf("no %d free ports in %d-%d", n, portLow, portHigh)
	}
	return out, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// process is a component started by startProcess, logging to a file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

func startProcess(t testing.TB, dir, name, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// If the test binary dies without running its cleanups, the kernel
	// kills the component rather than leaving it holding ports and dirs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after 15 s.
func (p *process) stop(t testing.TB) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Logf("kubetest: %s did not stop on SIGTERM within 15 s, killing it", p.name)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last n lines of the component's log.
func (p *process) tail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
