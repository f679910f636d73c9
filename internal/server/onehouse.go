package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/upgrade"
)

// startOneHouse starts `space serve` as one house: the cluster's control
// plane on the embedded store (or cfg.Store) and the cluster's node in
// the same process, joined by calls instead of RPC (issue #30). Both
// run the code a cluster runs, so that a feature is written once.
//
// A data dir that serve wrote before one house is upgraded on its first
// start (internal/upgrade).
func startOneHouse(ctx context.Context, cfg Config) (_ *Server, err error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	st, err := openStore(ctx, cfg.DataDir, cfg.Store)
	if err != nil {
		return nil, err
	}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "space: "+format+"\n", args...) }
	upgrading, err := upgrade.IsServeStore(st)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	keys, err := auth.Open(st)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	// Taken by the bootstrap record when it is made (its first start);
	// a CA placed in a new data dir (an installer's, a test's) too.
	seed, err := upgrade.ServeSeed(cfg.DataDir, cfg.SecretsKeyFile, keys)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	if upgrading {
		say("upgrading this data dir of space serve to one house (its secrets key, egress CA, admin key, templates and E2B builds become the control plane's records)")
	}
	token, err := loadOrCreateClusterToken(filepath.Join(cfg.DataDir, clusterTokenFile))
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	// The node's id is its id file's, made on first start, as `space
	// node`'s: the control plane needs it before the node starts.
	id, err := nodeID(cfg.DataDir)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	nodeCfg := NodeConfig{
		ID:      id,
		DataDir: cfg.DataDir, RunscPath: cfg.RunscPath, AgentPath: cfg.AgentPath, Platform: cfg.Platform,
		Runtimes: cfg.Runtimes, Accel: cfg.Accel, VolumeImageBytes: cfg.VolumeImageBytes, EgressCAFile: cfg.EgressCAFile,
		Network: cfg.Network, DNSUpstream: cfg.DNSUpstream,
		BandwidthMbit: cfg.Defaults.BandwidthMbit, MaxConnections: cfg.Defaults.MaxConnections, BuildDefaults: cfg.Defaults,
		BuildTemplates: cfg.BuildTemplates, TemplateRegistryPrivate: cfg.TemplateRegistryPrivate,
		TemplateBuildCache: cfg.TemplateBuildCache,
		SessionOutputLimit: cfg.SessionOutputLimit, SessionSpillLimit: cfg.SessionSpillLimit,
		Progress: cfg.Progress, Logger: cfg.Logger,
	}
	local := &inProcessNode{id: id, start: func(s *Server, register func(string, nodeapi.Info, []cpapi.Template) error) error {
		node, err := startNode(ctx, nodeCfg, nodeLink{cp: s.nodeService, close: func() error { return nil }, local: s.nodes})
		if err != nil {
			return err
		}
		s.localNode = node
		side := node.side
		s.pool, s.slots, s.gateway, s.templates = side.pool, side.slots, side.gateway, side.templates
		s.node = node.held()
		// Before Recover, which may boot a sandbox of an imported template.
		templates, builds, err := upgrade.ImportServeCatalog(s.st, side.templates, cfg.DataDir, id)
		if err != nil {
			return err
		}
		if templates+builds > 0 {
			say("imported %d project templates and %d E2B builds of serve's catalog", templates, builds)
		}
		info, err := node.held().Info(ctx)
		if err != nil {
			return err
		}
		return register(node.URL, info, node.held().BuiltinTemplates())
	}}
	s, err := startControlPlane(ctx, ControlPlaneConfig{
		Store: cfg.Store, DataDir: cfg.DataDir,
		Listen: cfg.Listen, E2BListen: cfg.E2BListen, ProxyListen: cfg.ProxyListen, Domain: cfg.Domain,
		ClusterToken: token, HTTP: cfg.HTTP, Defaults: cfg.Defaults, MemoryOvercommit: cfg.MemoryOvercommit,
		ProjectQuota: cfg.ProjectQuota, MaxRequestsPerKey: cfg.MaxRequestsPerKey, MaxUploadsPerKey: cfg.MaxUploadsPerKey, PoolSizes: cfg.PoolSizes,
		ProxyTLSCert: cfg.ProxyTLSCert, ProxyTLSKey: cfg.ProxyTLSKey, MaxTemplateArchiveBytes: cfg.MaxTemplateArchiveBytes,
		Progress: cfg.Progress, Logger: cfg.Logger,
	}, st, local, seed)
	if err != nil {
		return nil, err
	}
	s.localNode.join()
	say("one house: node %s runs in this process, reached by calls", id)
	return s, nil
}

// clusterTokenFile holds the token of a one-house serve's cluster in its
// data dir: the key its bootstrap record is sealed with, and what a
// `space node` would need to join it.
const clusterTokenFile = "cluster.token"

// loadOrCreateClusterToken reads the token at path, making one (0600) on
// first start.
func loadOrCreateClusterToken(path string) (string, error) {
	if data, err := os.ReadFile(path); err == nil {
		token := strings.TrimSpace(string(data))
		if token == "" {
			return "", fmt.Errorf("%s is empty", path)
		}
		return token, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read the cluster token: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the cluster token: %w", err)
	}
	return token, nil
}
