package cli

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/server"
)

func runServe(ctx context.Context, args []string) error {
	cfg := server.DefaultConfig()
	fs := newFlagSet("space serve [flags]", `
Run the space server: control plane, node service and HTTP API in one
process, with embedded state under --data-dir. Sandboxes keep running when
the server stops; a restarted server adopts them.`)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "where state, volumes and templates live")
	fs.StringVar(&cfg.Store, "store", "", "state store: empty for the embedded bbolt <data-dir>/state.db, or a postgres://user@host/db URL")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address of the HTTP API")
	fs.StringVar(&cfg.E2BListen, "e2b-listen", cfg.E2BListen, "address of the E2B-compatible API (E2B_API_URL); empty to turn it off")
	fs.DurationVar(&cfg.HTTP.ReadHeaderTimeout, "http-read-header-timeout", cfg.HTTP.ReadHeaderTimeout, "how long a client of any listener (API, E2B API, proxy) may take to send a request's headers")
	fs.DurationVar(&cfg.HTTP.IdleTimeout, "http-idle-timeout", cfg.HTTP.IdleTimeout, "close keep-alive connections of any listener after this long without a request")
	fs.IntVar(&cfg.HTTP.MaxConnections, "http-max-connections", cfg.HTTP.MaxConnections, "connections open at once on each listener (0: unlimited); further ones wait until one closes")
	fs.StringVar(&cfg.ProxyListen, "proxy-listen", cfg.ProxyListen, "address of the sandbox traffic proxy (E2B_SANDBOX_URL); empty to turn it off")
	fs.StringVar(&cfg.ProxyTLSCert, "proxy-tls-cert", "", "PEM certificate (chain) for the sandbox proxy to serve HTTPS with, e.g. for *.<domain>")
	fs.StringVar(&cfg.ProxyTLSKey, "proxy-tls-key", "", "PEM private key of --proxy-tls-cert")
	fs.StringVar(&cfg.Domain, "domain", cfg.Domain, "sandbox domain for host routing (<port>-<id>.<domain>); empty: header routing only, domain null in E2B responses")
	fs.StringVar(&cfg.RunscPath, "runsc", "", "runsc binary (default: found next to space, in .tools/bin or on PATH)")
	fs.StringVar(&cfg.AgentPath, "agent", "", "space-agent binary (default: found next to space or in .tools/bin)")
	fs.StringVar(&cfg.Platform, "platform", cfg.Platform, "gVisor platform (systrap, ptrace, kvm)")
	templates := fs.String("build-templates", strings.Join(cfg.BuildTemplates, ","), "built-in templates to build at start when missing (comma-separated; empty for none)")
	fs.IntVar(&cfg.Defaults.TimeoutS, "default-timeout-s", cfg.Defaults.TimeoutS, "lifetime of a sandbox whose create request names none")
	fs.StringVar(&cfg.Defaults.Template, "default-template", cfg.Defaults.Template, "template of a create request that names none")
	fs.DurationVar(&cfg.Defaults.Retention, "retention", cfg.Defaults.Retention, "how long stopped and failed sandboxes stay visible")
	fs.IntVar(&cfg.Defaults.IdleSuspendS, "idle-suspend-s", cfg.Defaults.IdleSuspendS, "suspend a sandbox after this many seconds without activity (default for sandboxes that name none)")
	fs.DurationVar(&cfg.Defaults.SuspendedRetention, "suspended-retention", cfg.Defaults.SuspendedRetention, "delete suspended sandboxes after this long")
	fs.DurationVar(&cfg.Defaults.SnapshotRetention, "snapshot-retention", cfg.Defaults.SnapshotRetention, "keep rolling snapshots this long (default for sandboxes that name none)")
	fs.Float64Var(&cfg.MemoryOvercommit, "memory-overcommit", cfg.MemoryOvercommit, "sum of sandbox memory limits allowed, as a multiple of host memory (0: unlimited)")
	uplinkPool := fs.String("uplink-pool", cfg.Network.UplinkPool.String(), "IPv4 range sandbox uplinks are numbered from, a /30 each (\"none\": sandboxes get no network)")
	fs.IntVar(&cfg.Defaults.BandwidthMbit, "sandbox-bandwidth-mbit", cfg.Defaults.BandwidthMbit, "bandwidth of each sandbox's network in Mbit/s, each way (0: unlimited); create requests may ask for less")
	fs.IntVar(&cfg.Defaults.MaxConnections, "sandbox-max-connections", cfg.Defaults.MaxConnections, "connections each sandbox may have open at once (0: unlimited); create requests may ask for fewer")
	allowPrivate := fs.String("allow-private", "", "private IPv4 ranges sandboxes may reach, comma-separated CIDRs (default: none)")
	fs.StringVar(&cfg.DNSUpstream, "dns-upstream", "", "resolver (host:port) that sandboxes' allowed names are looked up with (default: the host's first nameserver in /etc/resolv.conf)")
	fs.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "key the secrets in the state store are encrypted with, created if missing (default <data-dir>/secrets.key)")
	fs.StringVar(&cfg.EgressCAFile, "egress-ca-file", "", "PEM certificates trusted, besides the system roots, for upstream servers of credential injection")
	pools := fs.String("pool", "base=2", "warm pool sizes by template, e.g. base=2,minimal=1 (sizes set through the API win)")
	archiveMiB := fs.Int64("max-template-archive-mib", 2048, "largest OCI archive a template build may upload, in MiB")
	imageGiB := fs.Int64("volume-image-gib", 0, "size of the loop-backed btrfs image made when --data-dir is not on btrfs (default: from free disk)")
	fs.IntVar(&cfg.ProjectQuota.MaxSandboxes, "project-max-sandboxes", 0, "sandboxes each project may have at once, suspended ones included (0: unlimited; PUT /v1/projects/{name} sets one project's)")
	fs.IntVar(&cfg.ProjectQuota.MaxMemoryMB, "project-max-memory-mb", 0, "sum of memory_mb of each project's sandboxes (0: unlimited)")
	fs.IntVar(&cfg.ProjectQuota.MaxSnapshots, "project-max-snapshots", 0, "snapshots each project may keep, rolling ones included (0: unlimited)")
	fs.Float64Var(&cfg.ProjectQuota.CreatesPerSecond, "project-creates-per-second", 0, "sandbox creates a second for each project, branches counting one each (0: unlimited)")
	fs.IntVar(&cfg.MaxRequestsPerKey, "max-requests-per-key", 256, "requests (streams included) one API key may have in flight on the API; past it 429")
	resetAdmin := fs.Bool("reset-admin-key", false, "mint a new admin key, write it to <data-dir>/admin.key (0600), print it and exit; run on the host with the server stopped")
	if err := parseNoArgs(fs, args, "serve"); err != nil {
		return err
	}
	if cfg.ProjectQuota.MaxSandboxes < 0 || cfg.ProjectQuota.MaxMemoryMB < 0 || cfg.ProjectQuota.MaxSnapshots < 0 || cfg.ProjectQuota.CreatesPerSecond < 0 {
		return fs.usageErrorf("--project-* quotas must be 0 (unlimited) or positive")
	}
	if cfg.MaxRequestsPerKey < 1 {
		return fs.usageErrorf("--max-requests-per-key must be positive")
	}
	if *resetAdmin {
		key, err := server.ResetAdminKey(ctx, cfg.DataDir, cfg.Store)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "space: new admin key written to %s (the old keys still work; revoke them with this one)\n", filepath.Join(cfg.DataDir, "admin.key"))
		fmt.Fprintln(stdout, key)
		return nil
	}
	cfg.BuildTemplates = nil
	for _, t := range strings.Split(*templates, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.BuildTemplates = append(cfg.BuildTemplates, t)
		}
	}
	cfg.VolumeImageBytes = *imageGiB << 30
	if *archiveMiB <= 0 {
		return fs.usageErrorf("--max-template-archive-mib must be positive")
	}
	cfg.MaxTemplateArchiveBytes = *archiveMiB << 20
	if cfg.Defaults.BandwidthMbit < 0 || cfg.Defaults.MaxConnections < 0 {
		return fs.usageErrorf("--sandbox-bandwidth-mbit and --sandbox-max-connections must be 0 (unlimited) or positive")
	}
	if cfg.HTTP.ReadHeaderTimeout <= 0 || cfg.HTTP.IdleTimeout <= 0 || cfg.HTTP.MaxConnections < 0 {
		return fs.usageErrorf("--http-read-header-timeout and --http-idle-timeout must be positive, --http-max-connections 0 (unlimited) or positive")
	}
	if err := parseNetworkFlags(&cfg, *uplinkPool, *allowPrivate); err != nil {
		return fs.usageErrorf("%v", err)
	}
	cfg.PoolSizes = map[string]int{}
	for _, p := range strings.Split(*pools, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, size, ok := strings.Cut(p, "=")
		n, err := strconv.Atoi(size)
		if !ok || err != nil || n < 0 {
			return fs.usageErrorf("--pool wants template=size pairs, got %q", p)
		}
		cfg.PoolSizes[name] = n
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("space serve must run as root: it manages namespaces, mounts and cgroups")
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	fmt.Fprintln(stderr, "space: shutting down (sandboxes keep running)")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// parseNetworkFlags fills the server's egress configuration from
// --uplink-pool and --allow-private.
func parseNetworkFlags(cfg *server.Config, uplinkPool, allowPrivate string) error {
	cfg.Network = network.EgressConfig{}
	if uplinkPool != "none" && uplinkPool != "" {
		p, err := netip.ParsePrefix(uplinkPool)
		if err != nil {
			return fmt.Errorf("--uplink-pool: %w", err)
		}
		cfg.Network.UplinkPool = p
	}
	var ranges []string
	for _, r := range strings.Split(allowPrivate, ",") {
		if r = strings.TrimSpace(r); r != "" {
			ranges = append(ranges, r)
		}
	}
	allowed, err := network.ParsePrefixes(ranges)
	if err != nil {
		return fmt.Errorf("--allow-private: %w", err)
	}
	cfg.Network.AllowPrivate = allowed
	return nil
}
