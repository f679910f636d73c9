// Package server assembles the processes of space: `space control-plane`
// (controlplaneproc.go: the control plane, its template catalog
// (internal/catalog) and the answers to the nodes' credential calls
// (internal/credentialcalls), the nodes it calls (internal/nodeset), the
// API, the cluster service nodes join through), `space node`
// (nodeproc.go and nodeside.go: storage, runtimes, network, templates,
// the node RPC) and `space serve`, which is both in one process on the
// embedded store, the node joined by calls (onehouse.go).
//
// It is wiring: it takes each process's configuration, opens the parts,
// each in its own package behind the interface its consumer defines, and
// joins them in the order a start and a shutdown need. The logic that
// joining them called for lives in packages of its own: the sealed
// bootstrap record a cluster's replicas share (internal/bootstrap), the
// set of nodes a control plane calls (internal/nodeset), the node as its
// RPC service serves it, templates included (internal/nodeservice), and
// the one-time import of a data dir the release before one house wrote
// (internal/upgrade). Beside the joining stays what a start asks of the
// host and its flags: the helper binaries, the machine's size, the
// node's id and one house's cluster token files, the checks of
// --runtimes, the built-in templates a node builds when it starts, and
// the operator's reset of the admin key.
package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/bootstrap"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/internal/gateway"
	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/inflight"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeset"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
)

// Config is everything `space serve` can be told.
type Config struct {
	DataDir string
	// Store is where the control plane's state lives: empty for the
	// embedded bbolt file <data-dir>/state.db, or a postgres:// URL (see
	// store.OpenURL).
	Store     string
	Listen    string
	RunscPath string
	AgentPath string
	Platform  string
	// Runtimes are the sandbox backends offered (runtime.GVisor,
	// runtime.MicroVM); Accel is the microVM backend's acceleration
	// (auto, kvm, tcg). See checkRuntimes.
	Runtimes []string
	Accel    string
	// BuildTemplates are built-in templates built at start when missing
	// (in the background, with progress in the log).
	BuildTemplates []string
	// PoolSizes are the default warm pool sizes by template name (a size
	// set through the API wins).
	PoolSizes map[string]int
	// VolumeImageBytes sizes the loop-backed btrfs image if one is made.
	VolumeImageBytes int64
	Defaults         controlplane.Defaults
	// MemoryOvercommit bounds the sum of sandbox memory limits (see
	// controlplane.Capacity).
	MemoryOvercommit float64
	// SessionOutputLimit bounds the output a session keeps in memory,
	// SessionSpillLimit what it spills to disk behind that (0: the node's
	// default, 256 MiB; negative: no spill). Past both, an attached client
	// that is behind holds the process back; output nobody reads goes.
	SessionOutputLimit int64
	SessionSpillLimit  int64
	// E2BListen and ProxyListen are the E2B API's and the sandbox
	// proxy's addresses (empty: off); Domain is the sandbox domain they
	// announce and route (empty: none, header routing only).
	E2BListen, ProxyListen, Domain string
	// HTTP bounds connections on each listener (see HTTPLimits); unset
	// timeouts take their defaults.
	HTTP HTTPLimits
	// ProxyTLSCert and ProxyTLSKey, both set, make the sandbox proxy serve
	// HTTPS (HTTP/2 by ALPN) instead of plain HTTP (HTTP/1.1 and h2c).
	ProxyTLSCert, ProxyTLSKey string
	// Network configures sandbox egress; see network.EgressConfig. An
	// invalid (zero) UplinkPool gives sandboxes no network at all.
	Network network.EgressConfig
	// DNSUpstream is the resolver ("host:port") sandboxes' allowed names
	// are resolved with; empty: the host's first nameserver.
	DNSUpstream string
	// SecretsKeyFile holds the key secrets are encrypted with (default
	// <data-dir>/secrets.key, created on first start). Keep it apart from
	// backups of state.db.
	SecretsKeyFile string
	// EgressCAFile adds PEM certificates to the system roots that upstream
	// servers of credential injection are verified against.
	EgressCAFile string
	// MaxTemplateArchiveBytes bounds an OCI archive uploaded with a
	// template recipe (api.DefaultMaxTemplateArchive when zero).
	MaxTemplateArchiveBytes int64
	// TemplateRegistryPrivate lets recipes pull images (from:
	// image:<reference>, E2B's fromImage) from registries on loopback,
	// private or link-local addresses.
	TemplateRegistryPrivate bool
	// TemplateBuildCache is a directory of finished template builds
	// shared across data directories (template.Config.BuildCache); empty:
	// none.
	TemplateBuildCache string
	// ProjectQuota is every project's quota unless set for it through the
	// API (PUT /v1/projects/{name}); zero fields are unlimited.
	ProjectQuota project.Quota
	// MaxRequestsPerKey bounds one API key's requests in flight on the
	// API and the E2B API together (0: api.DefaultMaxRequestsPerKey).
	MaxRequestsPerKey int
	// MaxUploadsPerKey bounds one API key's uploads in flight (file and
	// volume writes, template archives) on both APIs (0:
	// api.DefaultMaxUploadsPerKey).
	MaxUploadsPerKey int
	// Progress receives human-readable start-up and build progress.
	Progress io.Writer
	Logger   *slog.Logger
}

// DefaultConfig returns the defaults of `space serve`.
func DefaultConfig() Config {
	return Config{
		DataDir:        "/var/lib/space",
		Listen:         "127.0.0.1:7070",
		HTTP:           DefaultHTTPLimits(),
		E2BListen:      "127.0.0.1:3000",
		ProxyListen:    "127.0.0.1:3001",
		Platform:       "systrap",
		Runtimes:       []string{runtime.GVisor},
		Accel:          "auto",
		BuildTemplates: []string{"minimal", "base"},
		// code-interpreter-v1 has its pool once it is built (it is not by
		// default: --build-templates), so that the first runCode of the
		// code-interpreter SDKs meets a warm kernel.
		PoolSizes: map[string]int{"base": 2, "code-interpreter-v1": 1},
		Defaults: controlplane.Defaults{
			Template: "base", VCPUs: 1, MemoryMB: 512, DiskMB: 4096, Pids: 4096,
			TimeoutS: 300, Retention: 10 * time.Minute,
			IdleSuspendS: 6 * 3600, SuspendedRetention: 7 * 24 * time.Hour, SnapshotRetention: 7 * 24 * time.Hour,
			MinSnapshotInterval: controlplane.DefaultMinSnapshotInterval,
			BandwidthMbit:       200, MaxConnections: 1024,
		},
		MemoryOvercommit:   8,
		SessionOutputLimit: 8 << 20,
		Network:            network.EgressConfig{UplinkPool: network.DefaultUplinkPool},
		Progress:           os.Stderr,
	}
}

// Server is a running space server.
type Server struct {
	URL      string
	AdminKey string

	cfg       Config
	st        store.Store
	pool      *storage.Pool
	templates *template.Manager
	slots     *network.Namespaces
	cp        *controlplane.ControlPlane
	node      nodeapi.Node
	cat       templateResolver
	// nodes are a cluster control plane's nodes (StartControlPlane), and
	// nodeService the nodes' side of the contract it serves them.
	nodes       *nodeset.Set
	nodeService *cpapi.Service
	// localNode is serve's node on the in-process link (one house).
	localNode *NodeServer
	gateway   *gateway.Gateway
	// hostPaths keeps the data dir out of what clients read.
	hostPaths *hostpath.Hider
	// requests and uploads are each API key's bounds in flight, shared
	// by the API and the E2B API.
	requests, uploads *inflight.Limiter
	http              *http.Server
	listener          net.Listener
	cancel            context.CancelFunc
	done              chan struct{}
	compat            compatServers // E2B API and sandbox proxy (e2b.go)
	// e2bTemplates serves E2B's template build API.
	e2bTemplates e2b.Templates
}

// templateResolver resolves a template for its node (Server.TemplateSpec).
type templateResolver interface {
	Resolve(scope project.Scope, nameOrID string) (nodeapi.TemplateSpec, string, error)
}

// quotaCheckInterval is how often the volume pool checks that btrfs still
// accounts disk usage; between a lapse and its repair limits do not hold.
const quotaCheckInterval = 5 * time.Second

// Start brings the server up and returns once it accepts requests.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	return startOneHouse(ctx, cfg)
}

// serveAPI opens the main listener for handler and serves it in the
// background. On failure the compatibility listeners are closed too.
func (s *Server) serveAPI(ctx context.Context, handler http.Handler) error {
	var err error
	if s.http, s.listener, err = listenHTTP(s.cfg.Listen, handler, s.cfg.HTTP); err != nil {
		_ = s.shutdownCompat(ctx)
		return err
	}
	s.URL = "http://" + s.listener.Addr().String()
	go func() {
		defer close(s.done)
		if err := s.http.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("http server", "err", err)
		}
	}()
	return nil
}

// Templates exposes the template manager (for the CLI's local builds and tests).
func (s *Server) Templates() *template.Manager { return s.templates }

// Namespaces exposes the directory of the sandboxes' network slots (for tests).
func (s *Server) Namespaces() *network.Namespaces { return s.slots }

// Node exposes the server's node as the control plane drives it (for the
// node contract's conformance test).
func (s *Server) Node() nodeapi.Node { return s.node }

// TemplateSpec is what the node is told of a ready template (for tests that
// drive the node directly).
func (s *Server) TemplateSpec(name string) (nodeapi.TemplateSpec, error) {
	tpl, _, err := s.cat.Resolve(project.Everything, name)
	return tpl, err
}

// Shutdown stops serving. Sandboxes keep running; a restarted server adopts them.
func (s *Server) Shutdown(ctx context.Context) error {
	err := errors.Join(s.http.Shutdown(ctx), s.shutdownCompat(ctx))
	s.cancel()
	<-s.done
	if s.localNode != nil {
		err = errors.Join(err, s.localNode.Shutdown(ctx))
	}
	if s.nodes != nil {
		s.nodes.Close()
	}
	s.closeStores()
	return err
}

func (s *Server) closeStores() {
	if s.st != nil {
		_ = s.st.Close()
	}
}

// openStore opens the state store: url if given, else the embedded
// state.db of dataDir.
func openStore(ctx context.Context, dataDir, url string) (store.Store, error) {
	if url == "" {
		return store.Open(filepath.Join(dataDir, "state.db"))
	}
	return store.OpenURL(ctx, url)
}

// ResetAdminKey mints a new admin key on the host, for an operator who
// lost every admin key: it writes <data-dir>/admin.key (0600) and returns
// the key. With the embedded store (storeURL empty) the server must be
// stopped, since it holds state.db open; a PostgreSQL store may be in use.
// The old keys stay valid (revoke them with the new one).
func ResetAdminKey(ctx context.Context, dataDir, storeURL string) (string, error) {
	if storeURL == "" {
		if _, err := os.Stat(filepath.Join(dataDir, "state.db")); err != nil {
			return "", fmt.Errorf("no space state in %s (is --data-dir right?)", dataDir)
		}
	}
	st, err := openStore(ctx, dataDir, storeURL)
	if err != nil {
		if storeURL == "" {
			err = fmt.Errorf("%w (stop the running server first: it holds the state database)", err)
		}
		return "", err
	}
	defer st.Close()
	keys, err := auth.Open(st)
	if err != nil {
		return "", err
	}
	return bootstrap.MintAdminKey(keys, "admin-reset-"+time.Now().UTC().Format("20060102-150405"), filepath.Join(dataDir, "admin.key"))
}

// findTool locates a helper binary: the configured path, an environment
// variable, next to this executable, in the repository's .tools/bin, or PATH.
func findTool(configured, env, name string) (string, error) {
	candidates := []string{configured, os.Getenv(env)}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		candidates = append(candidates, filepath.Join(dir, name), filepath.Join(dir, ".tools", "bin", name))
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; dir != "/"; dir = filepath.Dir(dir) {
			candidates = append(candidates, filepath.Join(dir, ".tools", "bin", name))
		}
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			return filepath.Abs(c)
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("cannot find %s: build it with scripts/install-deps.sh (or `make`), or set $%s", name, env)
}

// nodeCapacity reads this machine's size: its CPUs, its memory and the
// size of the filesystem its volumes live on (the loop image storage
// made, where the data dir is not on btrfs). Sizes, not what was free at
// start: free disk, reported beside it, then never exceeds it, and a node
// started again with sandboxes does not count their disk as gone.
func nodeCapacity(volumesRoot string) node.Capacity {
	c := node.Capacity{VCPUs: goruntime.NumCPU()}
	if kb, _, err := readMeminfo(); err == nil {
		c.MemoryMB = kb / 1024
	}
	var fs syscall.Statfs_t
	if syscall.Statfs(volumesRoot, &fs) == nil {
		c.DiskMB = int(fs.Blocks * uint64(fs.Bsize) >> 20)
	}
	return c
}

// prefixWriter prefixes every line written through it.
type prefixWriter struct {
	prefix string
	out    io.Writer
	buf    []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		fmt.Fprintf(w.out, "%s%s\n", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// readMeminfo reads MemTotal and MemAvailable, in KiB.
func readMeminfo() (total, available int, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("read memory size: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
			total = kb
		} else if _, err := fmt.Sscanf(sc.Text(), "MemAvailable: %d kB", &kb); err == nil {
			available = kb
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("read memory size: %w", err)
	}
	return total, available, nil
}
