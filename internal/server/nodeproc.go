package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/clusterrpc"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/credentialcalls"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/membership"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/noderpc"
	"github.com/space-platform/space/internal/nodeservice"
	"github.com/space-platform/space/internal/nodeset"
)

// NodeConfig is everything `space node` can be told.
type NodeConfig struct {
	DataDir, RunscPath, AgentPath, Platform string
	// Runtimes and Accel are as in Config.
	Runtimes []string
	Accel    string
	// SharedMounts says the data dir is a shared mount that the node's
	// successor sees from another mount namespace (a Kubernetes host path
	// with Bidirectional propagation); see network.OpenSharedNamespaces.
	SharedMounts bool
	// VolumeImageBytes sizes the loop-backed btrfs image if one is made.
	VolumeImageBytes int64
	// ID names the node in the cluster; empty: the id kept in
	// <data-dir>/node-id, made on first start.
	ID string
	// Listen is the address of the node's RPC service, Advertise the URL
	// the control plane reaches it at, ControlPlane the control plane's:
	// several replicas' URLs, comma-separated, which the node fails over
	// between.
	Listen, Advertise, ControlPlane string
	// ClusterToken authenticates the node and the control plane to each
	// other; TLSCAFile, when set, verifies the control plane's TLS
	// certificate.
	ClusterToken, TLSCAFile string
	// TLSCertFile and TLSKeyFile, both set, make the node's RPC service
	// speak TLS.
	TLSCertFile, TLSKeyFile string
	// EgressCAFile holds PEM certificates trusted, besides the system
	// roots, for the upstream servers of credential injection (as serve's
	// Config.EgressCAFile).
	EgressCAFile string
	// Network configures sandbox egress (see Config.Network); nodes on
	// one machine need uplink pools of their own.
	Network     network.EgressConfig
	DNSUpstream string
	// BandwidthMbit and MaxConnections are every sandbox's network limits
	// (0: unlimited).
	BandwidthMbit, MaxConnections int
	// BuildDefaults size the node's build sandboxes (buildShape): the
	// control plane's defaults of ordinary sandboxes, which one house
	// knows; DefaultConfig's when zero.
	BuildDefaults controlplane.Defaults
	// BuildTemplates are built-in templates built at start when missing.
	BuildTemplates []string
	// TemplateRegistryPrivate lets template builds pull images from
	// registries on private addresses (Config.TemplateRegistryPrivate).
	TemplateRegistryPrivate bool
	// TemplateBuildCache is Config.TemplateBuildCache.
	TemplateBuildCache string
	SessionOutputLimit int64
	// SessionSpillLimit is as serve's Config.SessionSpillLimit.
	SessionSpillLimit int64
	// HeartbeatInterval is membership.DefaultInterval when zero.
	HeartbeatInterval time.Duration
	Progress          io.Writer
	Logger            *slog.Logger
}

// DefaultNodeConfig returns the defaults of `space node`: those of the
// node part of `space serve`.
func DefaultNodeConfig() NodeConfig {
	d := DefaultConfig()
	return NodeConfig{
		DataDir: d.DataDir, Listen: "127.0.0.1:7071", Platform: d.Platform, Runtimes: d.Runtimes, Accel: d.Accel,
		Network: d.Network, BandwidthMbit: d.Defaults.BandwidthMbit, MaxConnections: d.Defaults.MaxConnections,
		BuildTemplates: d.BuildTemplates, SessionOutputLimit: d.SessionOutputLimit,
		SessionSpillLimit: d.SessionSpillLimit,
		Progress:          os.Stderr,
	}
}

// NodeServer is a running `space node`, or the node of `space serve`.
type NodeServer struct {
	// ID is the node's id, URL where its RPC service listens (its
	// in-process address when it serves none).
	ID, URL string

	cfg    NodeConfig
	side   *nodeSide
	http   *http.Server // nil in the control plane's process
	runCtx context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the RPC server stopped
	member chan error    // membership's end
	link   nodeLink
}

// nodeLink is how a node reaches its control plane: the node → control
// plane contract, over the cluster RPC or by calls.
type nodeLink struct {
	cp    cpapi.ControlPlane
	close func() error
	// local, when set, is the node set of a control plane in this
	// process: the node joins it at its in-process address and serves no
	// RPC of its own.
	local *nodeset.Set
}

// StartNode brings a node up: the cluster's egress CA from the control
// plane (it waits for the control plane to answer), its sandboxes'
// machinery, its RPC service on cfg.Listen, then in the background the
// built-in templates and its membership of the control plane. Sandboxes a previous node process left
// running keep running; the control plane adopts them when the node joins.
func StartNode(ctx context.Context, cfg NodeConfig) (*NodeServer, error) {
	if cfg.ClusterToken == "" {
		return nil, errors.New("space node needs the cluster token")
	}
	replicas, err := clusterrpc.DialReplicas(ControlPlaneURLs(cfg.ControlPlane), cfg.ClusterToken, clusterrpc.DialOptions{
		CAFile: cfg.TLSCAFile,
	})
	if err != nil {
		return nil, err
	}
	s, err := startNode(ctx, cfg, nodeLink{cp: replicas, close: replicas.Close})
	if err != nil {
		return nil, err
	}
	s.join()
	say := func(format string, args ...any) { fmt.Fprintf(s.cfg.Progress, "space: "+format+"\n", args...) }
	say("node %s listening on %s (advertised as %s), joining %s", s.ID, s.URL, s.cfg.Advertise, cfg.ControlPlane)
	return s, nil
}

// startNode is the body of a node on either link: `space node` over the
// cluster RPC, serve's node by calls. The node joins its control plane
// once join is called.
func startNode(ctx context.Context, cfg NodeConfig, link nodeLink) (_ *NodeServer, err error) {
	defer func() {
		if err != nil {
			_ = link.close()
		}
	}()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "space: "+format+"\n", args...) }
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.ID == "" {
		if cfg.ID, err = nodeID(cfg.DataDir); err != nil {
			return nil, err
		}
	} else if err := cluster.ValidID(cfg.ID); err != nil {
		return nil, fmt.Errorf("--id: %w", err)
	}
	s := &NodeServer{ID: cfg.ID, cfg: cfg, done: make(chan struct{}), member: make(chan error, 1), link: link}
	roots, err := upstreamRoots(cfg.EgressCAFile)
	if err != nil {
		return nil, err
	}
	// The cluster's egress CA, before anything is built: every node's
	// templates trust it (and so hash to one id), every node's gateway
	// signs leaves with it. It is kept in memory only; a restarted node
	// fetches it again.
	ca, err := credentialcalls.FetchEgressCA(ctx, link.cp, cfg.ID, say)
	if err != nil {
		return nil, err
	}
	if link.local == nil {
		say("egress CA %s (the cluster's)", ca.Fingerprint()[:16])
	}
	// The rules and secrets stay in the control plane's store; the
	// gateway asks for them when a sandbox connects (and, in the control
	// plane's process, every time: no cache to go stale).
	ttl := credentialcalls.TTL
	if link.local != nil {
		ttl = 0
	}
	remote := credentialcalls.NewNodeCache(cfg.ID, link.cp, cfg.Logger, ttl)
	interceptor := credentials.NewInterceptor(credentials.Config{
		CA: ca, UpstreamRoots: roots, Logger: cfg.Logger,
		Rules: remote, Secrets: remote,
	})
	side, err := openNodeSide(ctx, nodeSideConfig{
		RegistryPrivate: cfg.TemplateRegistryPrivate,
		BuildCache:      cfg.TemplateBuildCache,
		DataDir:         cfg.DataDir, RunscPath: cfg.RunscPath, AgentPath: cfg.AgentPath, Platform: cfg.Platform,
		Runtimes: cfg.Runtimes, Accel: cfg.Accel,
		SharedNetns: cfg.SharedMounts, VolumeImageBytes: cfg.VolumeImageBytes, ID: cfg.ID,
		Network: cfg.Network, DNSUpstream: cfg.DNSUpstream, Interceptor: interceptor,
		Limits:    network.Limits{BandwidthMbit: cfg.BandwidthMbit, MaxConnections: cfg.MaxConnections},
		TrustedCA: ca.CertPEM(), SessionOutputLimit: cfg.SessionOutputLimit,
		SessionSpillLimit: cfg.SessionSpillLimit,
		BuildDefaults:     cfg.BuildDefaults,
		Logger:            cfg.Logger, say: say,
	})
	if err != nil {
		return nil, err
	}
	s.side = side
	defer func() {
		if err != nil {
			side.close()
		}
	}()
	held := s.held()
	var ln net.Listener
	if link.local != nil {
		s.URL = cluster.InProcessAddress(cfg.ID)
		cfg.Advertise = s.URL
		link.local.AddLocal(cfg.ID, held)
		close(s.done)
	} else {
		if s.http, err = noderpc.NewServer(noderpc.NewHandler(held, cfg.ClusterToken, cfg.Logger), noderpc.ServerOptions{
			CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, Logger: cfg.Logger,
		}); err != nil {
			return nil, err
		}
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
		scheme := "http"
		if cfg.TLSCertFile != "" {
			scheme = "https"
		}
		s.URL = scheme + "://" + ln.Addr().String()
		if cfg.Advertise == "" {
			cfg.Advertise = s.URL
		}
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.runCtx, s.cancel = runCtx, cancel
	s.cfg = cfg
	side.run(runCtx)
	if ln != nil {
		go func() {
			defer close(s.done)
			if err := noderpc.Serve(s.http, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Logger.Error("node rpc server", "err", err)
			}
		}()
	}
	return s, nil
}

// join builds the node's missing built-in templates and runs its
// membership of the control plane in the background.
//
// A node of its own process joins once its built-in templates are built
// and booted (at once when they are, as on a restart): the control plane
// sweeps what a node runs for no sandbox of its own when the node joins,
// a template's first boot included. One house's node was registered and
// reconciled before the control plane recovered, and joined after
// (nodeset.Set.JoinLocal): it heartbeats at once, so that sandboxes of its ready
// templates run while the others build, and each built template is
// reported when it is ready, not at the next interval.
func (s *NodeServer) join() {
	cfg := s.cfg
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "space: "+format+"\n", args...) }
	member := membership.Config{
		ID: cfg.ID, Address: cfg.Advertise, Node: s.held(), ControlPlane: s.link.cp,
		Templates: s.held().BuiltinTemplates, Interval: cfg.HeartbeatInterval, Logger: cfg.Logger,
	}
	if s.link.local == nil {
		go func() {
			s.side.buildTemplates(s.runCtx, cfg.BuildTemplates, cfg.Progress, say, nil)
			s.member <- membership.Run(s.runCtx, member)
		}()
		return
	}
	now := make(chan struct{}, 1)
	member.Registered, member.Now = true, now
	go func() { s.member <- membership.Run(s.runCtx, member) }()
	go s.side.buildTemplates(s.runCtx, cfg.BuildTemplates, cfg.Progress, say, func() {
		select {
		case now <- struct{}{}:
		default: // one is asked for already
		}
	})
}

// held is the node as its control plane drives it.
func (s *NodeServer) held() nodeservice.Node {
	return nodeservice.New(s.side.node, s.side.templates, s.cfg.Logger)
}

// ControlPlaneURLs splits a comma-separated list of control-plane URLs
// (NodeConfig.ControlPlane), dropping empty entries.
func ControlPlaneURLs(list string) []string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Left delivers the error that ended the node's membership: the control
// plane removed it as lost. Nothing is delivered while the node belongs.
func (s *NodeServer) Left() <-chan error { return s.member }

// Shutdown stops the node's RPC service and loops. Sandboxes keep
// running; a restarted node process keeps them, and the control plane
// adopts them again.
//
// A node that runs no sandbox at all (an uninstall removed them) also
// releases its host mounts (nodeSide.releaseHost).
func (s *NodeServer) Shutdown(ctx context.Context) error {
	var err error
	if s.http != nil {
		err = s.http.Shutdown(ctx)
	}
	s.cancel()
	<-s.done
	_ = s.link.close()
	s.side.close()
	if ids, lerr := s.side.node.Sandboxes(ctx); lerr == nil && len(ids) == 0 {
		err = errors.Join(err, s.side.releaseHost())
	}
	return err
}

// nodeID reads the node's id from <data-dir>/node-id, making one on first
// start: the host's name and a random suffix, so that several nodes on
// one machine differ and a node keeps its id across restarts.
func nodeID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "node-id")
	if data, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(data))
		if err := cluster.ValidID(id); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read the node id: %w", err)
	}
	host, _ := os.Hostname()
	var label strings.Builder
	for _, c := range strings.ToLower(host) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			label.WriteRune(c)
		}
		if label.Len() == 48 {
			break
		}
	}
	base := strings.Trim(label.String(), "-")
	if base == "" {
		base = "node"
	}
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		return "", err
	}
	id := base + "-" + hex.EncodeToString(suffix)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the node id: %w", err)
	}
	return id, nil
}
