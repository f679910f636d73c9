package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/space-platform/space/internal/server"
)

func runControlPlane(ctx context.Context, args []string) error {
	cfg := server.DefaultControlPlaneConfig()
	fs := newFlagSet("space control-plane --store postgres://... [flags]", `
Run a control-plane replica of a cluster: the native API, the E2B API and
the sandbox traffic proxy, without a node of its own; sandboxes run on the
nodes (space node) that register with it on --listen. Every replica shares
one PostgreSQL store and answers any request. On an empty store the first
replica creates the admin key, prints it once and writes it to
<data-dir>/admin.key; later replicas write the same file, reading the key
from the store's bootstrap record, which is sealed with the cluster token.

The control plane and the nodes share a cluster token, read from
--cluster-token-file or $SPACE_CLUSTER_TOKEN.`)
	fs.StringVar(&cfg.Store, "store", "", "PostgreSQL URL of the cluster's state, postgres://user@host/db (required; default: $SPACE_STORE)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "where this replica's own files (admin.key) live")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address of the HTTP API (and of the nodes' cluster service)")
	fs.StringVar(&cfg.E2BListen, "e2b-listen", cfg.E2BListen, "address of the E2B-compatible API (E2B_API_URL); empty to turn it off")
	fs.StringVar(&cfg.ProxyListen, "proxy-listen", cfg.ProxyListen, "address of the sandbox traffic proxy (E2B_SANDBOX_URL); empty to turn it off")
	fs.StringVar(&cfg.Domain, "domain", "", "sandbox domain the E2B API announces and the proxy routes (default: none, header routing only)")
	tokenFile := fs.String("cluster-token-file", "", "file holding the cluster token (default: $SPACE_CLUSTER_TOKEN)")
	adminKeyFile := fs.String("admin-key-file", "", "file holding the first admin key (e2b_ and 40 hex digits) to create on an empty store instead of minting one")
	fs.StringVar(&cfg.TLSCAFile, "tls-ca", "", "PEM certificates to verify the nodes' TLS certificates with (for https:// node addresses)")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", cfg.HeartbeatTimeout, "a node that sends no heartbeat for this long is unreachable")
	fs.Float64Var(&cfg.MemoryOvercommit, "memory-overcommit", cfg.MemoryOvercommit, "sum of sandbox memory limits placed on a node, as a multiple of its memory (0: unlimited)")
	cfg.MaxRequestsPerKey = 256
	policy := addPolicyFlags(fs, &cfg.Defaults, &cfg.HTTP, &cfg.ProjectQuota, &cfg.MaxRequestsPerKey, &cfg.MaxUploadsPerKey)
	pools := fs.String("pool", "", "cluster-wide warm pool sizes by template, e.g. base=4,minimal=2, split over the nodes holding the template (sizes set through the API win)")
	if err := parseNoArgs(fs, args, "control-plane"); err != nil {
		return err
	}
	if err := policy.check(fs); err != nil {
		return err
	}
	var err error
	if cfg.PoolSizes, err = parsePoolSizes(fs, *pools); err != nil {
		return err
	}
	if cfg.Store == "" {
		// From the environment, so that a password need not be in argv.
		cfg.Store = strings.TrimSpace(os.Getenv("SPACE_STORE"))
	}
	if cfg.Store == "" {
		return fs.usageErrorf("space control-plane needs --store postgres://... (or $SPACE_STORE)")
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
	if *adminKeyFile != "" {
		data, err := os.ReadFile(*adminKeyFile)
		if err != nil {
			return fmt.Errorf("read the admin key: %w", err)
		}
		if cfg.AdminKey = strings.TrimSpace(string(data)); cfg.AdminKey == "" {
			return fs.usageErrorf("--admin-key-file %s is empty", *adminKeyFile)
		}
	}
	if cfg.ClusterToken, err = clusterToken(*tokenFile); err != nil {
		return err
	}
	if cfg.TLSCAFile != "" {
		if _, err := readCA(cfg.TLSCAFile); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.StartControlPlane(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	fmt.Fprintln(stderr, "space: control plane shutting down (sandboxes keep running on their nodes)")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
