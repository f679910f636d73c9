package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/bootstrap"
	"github.com/space-platform/space/internal/catalog"
	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/clusterrpc"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/credentialcalls"
	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/inflight"
	"github.com/space-platform/space/internal/metrics"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeset"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/internal/store"
)

// ControlPlaneConfig is everything `space control-plane` can be told.
type ControlPlaneConfig struct {
	// Store is the PostgreSQL URL every replica shares.
	Store string
	// DataDir holds the replica's own files (admin.key).
	DataDir string
	// Listen is the native API's address, which the nodes' cluster
	// service shares; E2BListen and ProxyListen the E2B API's and the
	// sandbox proxy's (empty: off); Domain as in Config.
	Listen, E2BListen, ProxyListen, Domain string
	// ClusterToken authenticates the control plane and the nodes to each
	// other; TLSCAFile, when set, verifies the nodes' TLS certificates.
	ClusterToken, TLSCAFile string
	// AdminKey, when set, is the first admin key of an empty store
	// instead of a minted one (an installer generated it).
	AdminKey string
	// HeartbeatTimeout is how long a node may be silent before it is
	// unreachable (cluster.DefaultHeartbeatTimeout when zero).
	HeartbeatTimeout time.Duration
	HTTP             HTTPLimits
	Defaults         controlplane.Defaults
	// MemoryOvercommit bounds the sum of a node's sandbox memory limits
	// at its memory times this factor.
	MemoryOvercommit  float64
	ProjectQuota      project.Quota
	MaxRequestsPerKey int
	MaxUploadsPerKey  int
	// PoolSizes are the cluster-wide warm pool sizes by template name (a
	// size set through the API wins), split over the nodes holding it.
	PoolSizes map[string]int
	// ProxyTLSCert, ProxyTLSKey and MaxTemplateArchiveBytes are as in
	// Config.
	ProxyTLSCert, ProxyTLSKey string
	MaxTemplateArchiveBytes   int64
	Progress                  io.Writer
	Logger                    *slog.Logger
}

// registryReadCache is how old the registry's copy of the nodes may be
// (cluster.Config.ReadCacheTTL): well under the heartbeat timeout.
const registryReadCache = time.Second

// DefaultControlPlaneConfig returns the defaults of `space control-plane`:
// those of `space serve` where they apply.
func DefaultControlPlaneConfig() ControlPlaneConfig {
	d := DefaultConfig()
	return ControlPlaneConfig{
		DataDir: d.DataDir, Listen: d.Listen, E2BListen: d.E2BListen, ProxyListen: d.ProxyListen,
		HeartbeatTimeout: cluster.DefaultHeartbeatTimeout, HTTP: d.HTTP, Defaults: d.Defaults,
		MemoryOvercommit: d.MemoryOvercommit, Progress: os.Stderr,
	}
}

// StartControlPlane brings a control-plane replica up over the shared
// store: the nodes' cluster service and the native API on cfg.Listen, the
// E2B API and the sandbox proxy, reaching sandboxes on the nodes over
// noderpc. It returns once it accepts requests.
func StartControlPlane(ctx context.Context, cfg ControlPlaneConfig) (*Server, error) {
	if cfg.ClusterToken == "" {
		return nil, errors.New("space control-plane needs the cluster token")
	}
	st, err := store.OpenURL(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	return startControlPlane(ctx, cfg, st, nil, bootstrap.Seed{})
}

// inProcessNode is a node that runs in its control plane's process
// (serve's, startOneHouse).
type inProcessNode struct {
	id string
	// start brings the node up on s's in-process link and records it
	// with register, once the control plane is built and before it
	// recovers; it joins once Recover reconciled it, and heartbeats once
	// startControlPlane returns (NodeServer.join).
	start func(s *Server, register func(address string, info nodeapi.Info, ts []cpapi.Template) error) error
}

// startControlPlane is the body of a control plane on st, which it closes
// on failure and on Shutdown: a replica on PostgreSQL, or serve's on its
// embedded store with its node in process (local). A new bootstrap record
// takes what seed holds.
func startControlPlane(ctx context.Context, cfg ControlPlaneConfig, st store.Store, local *inProcessNode, seed bootstrap.Seed) (_ *Server, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "space: "+format+"\n", args...) }
	s := &Server{
		cfg: Config{
			DataDir: cfg.DataDir, Store: cfg.Store, Listen: cfg.Listen, E2BListen: cfg.E2BListen, ProxyListen: cfg.ProxyListen,
			Domain: cfg.Domain, HTTP: cfg.HTTP, Defaults: cfg.Defaults, Progress: cfg.Progress, Logger: cfg.Logger,
			ProxyTLSCert: cfg.ProxyTLSCert, ProxyTLSKey: cfg.ProxyTLSKey, MaxTemplateArchiveBytes: cfg.MaxTemplateArchiveBytes,
		},
		st:   st,
		done: make(chan struct{}), hostPaths: hostpath.New(cfg.DataDir),
		// One count per key for both APIs, so a key's bounds hold
		// across them.
		requests: inflight.New(cmp.Or(cfg.MaxRequestsPerKey, api.DefaultMaxRequestsPerKey), "requests"),
		uploads:  inflight.New(cmp.Or(cfg.MaxUploadsPerKey, api.DefaultMaxUploadsPerKey), "uploads"),
	}
	defer func() {
		if err != nil {
			if s.localNode != nil {
				_ = s.localNode.Shutdown(context.WithoutCancel(ctx))
			}
			s.closeStores()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	keys, err := auth.Open(s.st)
	if err != nil {
		return nil, err
	}
	adminKeyPath := filepath.Join(cfg.DataDir, "admin.key")
	boot, err := bootstrap.Load(ctx, s.st, keys, cfg.ClusterToken, adminKeyPath, cfg.AdminKey, seed)
	if err != nil {
		return nil, err
	}
	if s.AdminKey = boot.AdminKey; s.AdminKey != "" {
		if err := bootstrap.WriteAdminKeyFile(adminKeyPath, s.AdminKey); err != nil {
			return nil, err
		}
	}
	if boot.Created {
		say("created admin API key (shown once; also saved to %s): %s", adminKeyPath, s.AdminKey)
	}
	quotas, err := project.OpenQuotas(s.st, cfg.ProjectQuota)
	if err != nil {
		return nil, err
	}
	secretStore, err := secrets.Open(s.st, boot.SecretsKey)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	// Drains run in this process, in the background, once the control
	// plane below is built; the registry hands a drain request to it.
	var drainer controlplane.Drainer
	reg, err := cluster.New(cluster.Config{
		Store: s.st, HeartbeatTimeout: cfg.HeartbeatTimeout, Drainer: &drainer,
		Placement: cluster.PlacementConfig{MemoryOvercommit: cfg.MemoryOvercommit},
		// A create read the nodes and heartbeats from PostgreSQL three
		// times (resolve, place, the chosen node): a second's copy saves
		// that; another replica's cordon is seen up to a second late.
		ReadCacheTTL: registryReadCache,
	})
	if err != nil {
		return nil, err
	}
	nodes := nodeset.New(reg, cfg.ClusterToken, cfg.TLSCAFile)
	s.nodes = nodes
	buildLimits, buildDisk := buildShape(cfg.Defaults)
	cat := catalog.New(catalog.Config{
		Store: s.st, Registry: reg, ControlPlane: func() *controlplane.ControlPlane { return s.cp },
		BuildLimits: buildLimits, BuildDiskBytes: buildDisk, Quotas: quotas, RegistryReadCache: registryReadCache,
	})
	s.cat = cat
	// The nodes' side of the contract (cpapi), which the cluster service
	// serves to the nodes.
	s.nodeService = &cpapi.Service{
		Registry: reg, Logger: cfg.Logger,
		// The API (and so this service) serves once s.cp is built.
		Credentials: credentialcalls.Answerer{CA: boot.EgressCA, Sandboxes: func() credentialcalls.Sandboxes { return s.cp }, Secrets: secretStore},
		// The templates first: the control plane resolves them when it
		// reconciles the node that joined.
		Joined: func(n cluster.Node, ts []cpapi.Template) {
			if _, err := cat.Record(n.ID, ts); err != nil {
				cfg.Logger.Error("node joined", "node", n.ID, "err", err)
			}
			nodes.Join(n)
		},
		// A heartbeat that reports templates the node had not (one
		// house's node builds its built-ins after it joined) fills their
		// pools.
		Heard: func(id string, ts []cpapi.Template) {
			changed, err := cat.Record(id, ts)
			if err != nil {
				cfg.Logger.Error("node heartbeat", "node", id, "err", err)
			}
			nodes.Heard(id)
			cat.ShipMissing(id)
			if changed && s.cp != nil {
				go s.cp.RefreshPools()
			}
		},
	}
	clusterPath, clusterHandler := clusterrpc.NewHandler(clusterrpc.ServerConfig{
		ControlPlane: s.nodeService, Token: cfg.ClusterToken,
	})

	replicaID, err := controlplane.LoadReplicaID(filepath.Join(cfg.DataDir, "replica-id"))
	if err != nil {
		return nil, err
	}
	metricsReg := metrics.NewRegistry()
	// Its Capacity stays zero: placement weighs each node's figures
	// (cluster.Registry.Place), and a refusal names the cluster's.
	cpCfg := controlplane.Config{
		Store: s.st, Templates: cat, ReplicaID: replicaID, Defaults: cfg.Defaults, Logger: cfg.Logger, Metrics: metricsReg,
		Secrets: secretStore, Quotas: quotas, HostPaths: s.hostPaths, Nodes: nodes,
	}
	if local != nil {
		cpCfg.LocalNode = local.id
		// Records of earlier versions name their images by path, in the
		// data dir the node in this process shares.
		cpCfg.LegacyImagesDir = filepath.Join(cfg.DataDir, "images")
	}
	s.cp = controlplane.New(cpCfg)
	// The node in this process is up (and registered) before Recover,
	// which reconciles it: its sandboxes are adopted before the API
	// serves, as serve always did. Other nodes are reconciled as they
	// join.
	if local != nil {
		// Recorded as registered, without a join: Recover reconciles it,
		// and it joins after, reconciled.
		register := func(address string, info nodeapi.Info, ts []cpapi.Template) error {
			if _, err := reg.Register(local.id, address, info); err != nil {
				return err
			}
			_, err := cat.Record(local.id, ts)
			return err
		}
		if err := local.start(s, register); err != nil {
			return nil, err
		}
	}
	if err := s.cp.Recover(ctx); err != nil {
		return nil, err
	}
	if local != nil {
		// Its events are followed and its pools set from now on, while
		// its missing built-in templates build.
		if err := nodes.JoinLocal(local.id); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	// The nodes' service shares the API's listener under its Connect
	// path; it takes the cluster token, not API keys.
	mux.Handle(clusterPath, clusterHandler)
	mux.Handle("/", api.HidePaths(api.New(api.Config{
		ControlPlane: s.cp, Templates: cat, Keys: keys, Secrets: secretStore, Quotas: quotas, Metrics: metricsReg, Logger: cfg.Logger,
		Nodes: nodes.OperatorView(), Requests: s.requests, Uploads: s.uploads, MaxTemplateArchive: cfg.MaxTemplateArchiveBytes,
	}), s.hostPaths))

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	cat.StartBuilds(runCtx, nodes, cfg.Logger)
	s.e2bTemplates = catalog.NewE2BTemplates(cat, s.cfg.MaxTemplateArchiveBytes)
	if err := s.startCompat(keys, secretStore, cat); err != nil {
		cancel()
		return nil, err
	}
	if err := s.serveAPI(ctx, mux); err != nil {
		cancel()
		return nil, err
	}
	s.cp.ApplyPools(cfg.PoolSizes)
	go s.cp.Run(runCtx)
	// Keys and quotas another replica changes take effect here too.
	go keys.Follow(runCtx)
	go quotas.Follow(runCtx)
	drainer.Start(runCtx, s.cp, func(id string, err error) {
		if err := reg.NoteDrain(id, controlplane.DrainReason(err)); err != nil {
			cfg.Logger.Error("drain", "node", id, "err", err)
		}
	})
	// A drain an earlier process left unfinished goes on. A node whose
	// heartbeats stopped lists as unreachable and waits for its return.
	if listed, err := reg.List(); err == nil {
		for _, n := range listed {
			if n.State == cluster.Draining {
				_ = drainer.StartDrain(n.ID)
			}
		}
	}
	say("listening on %s (the API, and the cluster service nodes join through)", s.URL)
	if s.compat.e2bURL != "" || s.compat.proxyURL != "" {
		say("E2B API on %s, sandbox proxy on %s", s.compat.e2bURL, s.compat.proxyURL)
	}
	return s, nil
}
