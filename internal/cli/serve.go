package cli

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
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
	policy := addPolicyFlags(fs, &cfg.Defaults, &cfg.HTTP, &cfg.ProjectQuota, &cfg.MaxRequestsPerKey, &cfg.MaxUploadsPerKey)
	fs.StringVar(&cfg.ProxyListen, "proxy-listen", cfg.ProxyListen, "address of the sandbox traffic proxy (E2B_SANDBOX_URL); empty to turn it off")
	fs.StringVar(&cfg.ProxyTLSCert, "proxy-tls-cert", "", "PEM certificate (chain) for the sandbox proxy to serve HTTPS with, e.g. for *.<domain>")
	fs.StringVar(&cfg.ProxyTLSKey, "proxy-tls-key", "", "PEM private key of --proxy-tls-cert")
	fs.StringVar(&cfg.Domain, "domain", cfg.Domain, "sandbox domain for host routing (<port>-<id>.<domain>); empty: header routing only, domain null in E2B responses")
	fs.StringVar(&cfg.RunscPath, "runsc", "", "runsc binary (default: found next to space, in .tools/bin or on PATH)")
	fs.StringVar(&cfg.AgentPath, "agent", "", "space-agent binary (default: found next to space or in .tools/bin)")
	fs.StringVar(&cfg.Platform, "platform", cfg.Platform, "gVisor platform (systrap, ptrace, kvm)")
	runtimes := fs.String("runtimes", strings.Join(cfg.Runtimes, ","), "sandbox backends this server offers, comma-separated: gvisor, microvm")
	fs.StringVar(&cfg.Accel, "accel", cfg.Accel, "acceleration of the microvm runtime: auto (KVM when a probe guest boots under it, else emulation), kvm or tcg")
	templates := fs.String("build-templates", strings.Join(cfg.BuildTemplates, ","), "built-in templates to build at start when missing (comma-separated; empty for none)")
	fs.Float64Var(&cfg.MemoryOvercommit, "memory-overcommit", cfg.MemoryOvercommit, "sum of sandbox memory limits allowed, as a multiple of host memory (0: unlimited)")
	uplinkPool := fs.String("uplink-pool", cfg.Network.UplinkPool.String(), "IPv4 range sandbox uplinks are numbered from, a /30 each (\"none\": sandboxes get no network)")
	allowPrivate := fs.String("allow-private", "", "private IPv4 ranges sandboxes may reach, comma-separated CIDRs (default: none)")
	fs.StringVar(&cfg.DNSUpstream, "dns-upstream", "", "resolver (host:port) that sandboxes' allowed names are looked up with (default: the host's first nameserver in /etc/resolv.conf)")
	fs.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "key the secrets in the state store are encrypted with, created if missing (default <data-dir>/secrets.key)")
	fs.StringVar(&cfg.EgressCAFile, "egress-ca-file", "", "PEM certificates trusted, besides the system roots, for upstream servers of credential injection")
	pools := fs.String("pool", "base=2,code-interpreter-v1=1", "warm pool sizes by template, e.g. base=2,minimal=1; a template not built has none (sizes set through the API win)")
	archiveMiB := fs.Int64("max-template-archive-mib", 2048, "largest OCI archive, or archive of files (E2B's copy), a template build may upload, in MiB")
	fs.BoolVar(&cfg.TemplateRegistryPrivate, "template-registry-private", false, "let template builds pull images from registries on loopback, private or link-local addresses")
	fs.StringVar(&cfg.TemplateBuildCache, "template-build-cache", "", "keep finished template builds in this directory, by template ID, and take a build found there instead of building it again (shared by the servers of a host; kept when a data directory is wiped)")
	imageGiB := fs.Int64("volume-image-gib", 0, "size of the loop-backed btrfs image made when --data-dir is not on btrfs (default: from free disk)")
	resetAdmin := fs.Bool("reset-admin-key", false, "mint a new admin key, write it to <data-dir>/admin.key (0600), print it and exit; run on the host with the server stopped")
	if err := parseNoArgs(fs, args, "serve"); err != nil {
		return err
	}
	if err := policy.check(fs); err != nil {
		return err
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
	cfg.Runtimes = nil
	for _, r := range strings.Split(*runtimes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Runtimes = append(cfg.Runtimes, r)
		}
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
	if err := parseNetworkFlags(&cfg, *uplinkPool, *allowPrivate); err != nil {
		return fs.usageErrorf("%v", err)
	}
	var err error
	if cfg.PoolSizes, err = parsePoolSizes(fs, *pools); err != nil {
		return err
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
