package cli

import (
	"context"
	"errors"
	"net/url"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/server"
)

// controlPlaneService is what `space control-plane` is told.
type controlPlaneService struct {
	// Store is the PostgreSQL URL every replica shares.
	Store string
	// DataDir holds the replica's own files (admin.key).
	DataDir string
	// Listen, E2BListen and ProxyListen are the native API's, the E2B
	// API's and the sandbox proxy's addresses (empty: off, but Listen).
	Listen, E2BListen, ProxyListen string
	// ClusterToken authenticates the control plane and the nodes to each
	// other.
	ClusterToken string
	// HeartbeatTimeout is how long a node may be silent before it is
	// unreachable.
	HeartbeatTimeout time.Duration
}

func runControlPlane(ctx context.Context, args []string) error {
	d := server.DefaultConfig()
	cfg := controlPlaneService{
		DataDir: d.DataDir, Listen: d.Listen, E2BListen: d.E2BListen, ProxyListen: d.ProxyListen,
		HeartbeatTimeout: cluster.DefaultHeartbeatTimeout,
	}
	fs := newFlagSet("space control-plane --store postgres://... [flags]", `
Run a control-plane replica of a cluster: the native API, the E2B API and
the sandbox traffic proxy, without a node of its own; sandboxes run on the
nodes (space node) that register with it. Every replica shares one
PostgreSQL store and answers any request; the background loops run on one
replica at a time. On an empty store the first replica creates the admin
key, prints it once and writes it to <data-dir>/admin.key.

The control plane and the nodes share a cluster token, read from
--cluster-token-file or $SPACE_CLUSTER_TOKEN.`)
	fs.StringVar(&cfg.Store, "store", "", "PostgreSQL URL of the cluster's state, postgres://user@host/db (required)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "where this replica's own files (admin.key) live")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address of the HTTP API")
	fs.StringVar(&cfg.E2BListen, "e2b-listen", cfg.E2BListen, "address of the E2B-compatible API (E2B_API_URL); empty to turn it off")
	fs.StringVar(&cfg.ProxyListen, "proxy-listen", cfg.ProxyListen, "address of the sandbox traffic proxy (E2B_SANDBOX_URL); empty to turn it off")
	tokenFile := fs.String("cluster-token-file", "", "file holding the cluster token (default: $SPACE_CLUSTER_TOKEN)")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", cfg.HeartbeatTimeout, "a node that sends no heartbeat for this long is unreachable")
	if err := parseNoArgs(fs, args, "control-plane"); err != nil {
		return err
	}
	if cfg.Store == "" {
		return fs.usageErrorf("space control-plane needs --store postgres://...")
	}
	if u, err := url.Parse(cfg.Store); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// The URL may hold a password: name only what is wrong with it.
		return fs.usageErrorf("--store must be a postgres:// or postgresql:// URL")
	}
	if cfg.Listen == "" {
		return fs.usageErrorf("--listen must not be empty: the API is how nodes and clients reach the control plane")
	}
	if cfg.HeartbeatTimeout <= 0 {
		return fs.usageErrorf("--heartbeat-timeout must be positive")
	}
	var err error
	if cfg.ClusterToken, err = clusterToken(*tokenFile); err != nil {
		return err
	}
	// The replica (the API over the PostgreSQL store, the node registry
	// fed by the nodes' RPC, placement) is wired here once its parts
	// exist; until then the flags are checked.
	return errors.New("the control plane is not implemented yet; space serve runs one in its own process")
}
