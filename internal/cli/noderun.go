package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/membership"

	"github.com/space-platform/space/internal/server"
)

func runNodeService(ctx context.Context, args []string) error {
	// The node flags fill a serve configuration first, so that they share
	// serve's parsing (parseNetworkFlags) and defaults.
	d := server.DefaultNodeConfig()
	serveCfg := server.DefaultConfig()
	cfg := d
	fs := newFlagSet("space node [run] --control-plane URL [flags]", `
Run the node service of a cluster: the sandboxes of this machine, driven by
the control plane over Connect RPC. The node registers with --control-plane,
heartbeats its capacity and use, and registers again after a control plane
restart; its sandboxes keep running when the node process stops, and a
restarted one adopts them. Several nodes on one machine need their own
--data-dir, --listen and --uplink-pool (and get ids of their own).

The node and the control plane share a cluster token, read from
--cluster-token-file or $SPACE_CLUSTER_TOKEN.`)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "where the node's volumes, images and runtime state live")
	fs.StringVar(&cfg.ID, "id", "", "the node's id, a DNS label (default: made once and kept in <data-dir>/node-id)")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address of the node's RPC service")
	fs.StringVar(&cfg.Advertise, "advertise", "", "URL the control plane reaches this node at (default: http://<--listen>)")
	fs.StringVar(&cfg.ControlPlane, "control-plane", "", "URL of the control plane to register with (required); several replicas' URLs, comma-separated, are tried in turn when one does not answer")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", membership.DefaultInterval, "how often the node heartbeats; keep it well under the control plane's --heartbeat-timeout")
	tokenFile := fs.String("cluster-token-file", "", "file holding the cluster token (default: $SPACE_CLUSTER_TOKEN)")
	fs.StringVar(&cfg.TLSCAFile, "tls-ca", "", "PEM certificates to verify the control plane's TLS certificate with")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert", "", "certificate (PEM) of the node's RPC service; with --tls-key it speaks TLS")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.StringVar(&cfg.EgressCAFile, "egress-ca-file", "", "PEM certificates trusted, besides the system roots, for upstream servers of credential injection")
	fs.StringVar(&cfg.RunscPath, "runsc", "", "runsc binary (default: found next to space, in .tools/bin or on PATH)")
	fs.StringVar(&cfg.AgentPath, "agent", "", "space-agent binary (default: found next to space or in .tools/bin)")
	fs.StringVar(&cfg.Platform, "platform", cfg.Platform, "gVisor platform (systrap, ptrace, kvm)")
	runtimes := fs.String("runtimes", strings.Join(cfg.Runtimes, ","), "sandbox backends this server offers, comma-separated: gvisor, microvm")
	fs.StringVar(&cfg.Accel, "accel", cfg.Accel, "acceleration of the microvm runtime: auto (KVM when a probe guest boots under it, else emulation), kvm or tcg")
	fs.BoolVar(&cfg.SharedMounts, "shared-mounts", false, "the data dir is a shared mount the next node process sees from another mount namespace (a container restart; the Helm chart sets it): keep the node's mounts there shared")
	uplinkPool := fs.String("uplink-pool", cfg.Network.UplinkPool.String(), "IPv4 range sandbox uplinks are numbered from, a /30 each (\"none\": sandboxes get no network); nodes on one machine need ranges of their own")
	allowPrivate := fs.String("allow-private", "", "private IPv4 ranges sandboxes may reach, comma-separated CIDRs (default: none)")
	fs.StringVar(&cfg.DNSUpstream, "dns-upstream", "", "resolver (host:port) that sandboxes' allowed names are looked up with (default: the host's first nameserver in /etc/resolv.conf)")
	fs.IntVar(&cfg.BandwidthMbit, "sandbox-bandwidth-mbit", cfg.BandwidthMbit, "bandwidth of each sandbox's network in Mbit/s, each way (0: unlimited)")
	fs.IntVar(&cfg.MaxConnections, "sandbox-max-connections", cfg.MaxConnections, "connections each sandbox may have open at once (0: unlimited)")
	templates := fs.String("build-templates", strings.Join(cfg.BuildTemplates, ","), "built-in templates to build at start when missing (comma-separated; empty for none)")
	fs.BoolVar(&cfg.TemplateRegistryPrivate, "template-registry-private", false, "let template builds pull images from registries on loopback, private or link-local addresses")
	fs.StringVar(&cfg.TemplateBuildCache, "template-build-cache", "", "keep finished template builds in this directory, by template ID, and take a build found there instead of building it again (shared by the servers of a host; kept when a data directory is wiped)")
	imageGiB := fs.Int64("volume-image-gib", 0, "size of the loop-backed btrfs image made when --data-dir is not on btrfs (default: from free disk)")
	if err := parseNoArgs(fs, args, "node"); err != nil {
		return err
	}
	cps := server.ControlPlaneURLs(cfg.ControlPlane)
	if len(cps) == 0 {
		return fs.usageErrorf("space node needs --control-plane URL")
	}
	for _, u := range cps {
		if err := checkHTTPURL("--control-plane", u); err != nil {
			return fs.usageErrorf("%v", err)
		}
	}
	if cfg.ID != "" {
		if err := cluster.ValidID(cfg.ID); err != nil {
			return fs.usageErrorf("--id: %v", err)
		}
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fs.usageErrorf("--listen %q is not host:port", cfg.Listen)
	}
	if cfg.Advertise == "" {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return fs.usageErrorf("--listen %s names no host the control plane can reach; give --advertise URL", cfg.Listen)
		}
		scheme := "http"
		if cfg.TLSCertFile != "" {
			scheme = "https"
		}
		cfg.Advertise = scheme + "://" + cfg.Listen
	}
	if err := checkHTTPURL("--advertise", cfg.Advertise); err != nil {
		return fs.usageErrorf("%v", err)
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return fs.usageErrorf("--tls-cert and --tls-key go together")
	}
	if cfg.HeartbeatInterval <= 0 {
		return fs.usageErrorf("--heartbeat-interval must be positive")
	}
	if cfg.BandwidthMbit < 0 || cfg.MaxConnections < 0 {
		return fs.usageErrorf("--sandbox-bandwidth-mbit and --sandbox-max-connections must be 0 (unlimited) or positive")
	}
	if err := parseNetworkFlags(&serveCfg, *uplinkPool, *allowPrivate); err != nil {
		return fs.usageErrorf("%v", err)
	}
	cfg.Network = serveCfg.Network
	cfg.VolumeImageBytes = *imageGiB << 30
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
	if cfg.ClusterToken, err = clusterToken(*tokenFile); err != nil {
		return err
	}
	if cfg.TLSCAFile != "" {
		if _, err = readCA(cfg.TLSCAFile); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("space node must run as root: it manages namespaces, mounts and cgroups")
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.StartNode(ctx, cfg)
	if err != nil {
		return err
	}
	var left error
	select {
	case <-ctx.Done():
	case left = <-srv.Left():
	}
	fmt.Fprintln(stderr, "space: node shutting down (sandboxes keep running)")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(left, srv.Shutdown(shutdownCtx))
}

// checkHTTPURL checks that flag's value is an http:// or https:// URL
// with a host.
func checkHTTPURL(flag, value string) error {
	u, err := url.Parse(value)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q is not an http:// or https:// URL with a host", flag, value)
	}
	return nil
}

// clusterToken reads the cluster token from file, or from
// $SPACE_CLUSTER_TOKEN when file is empty.
func clusterToken(file string) (string, error) {
	if file == "" {
		token := strings.TrimSpace(os.Getenv("SPACE_CLUSTER_TOKEN"))
		if token == "" {
			return "", errors.New("no cluster token: give --cluster-token-file or set SPACE_CLUSTER_TOKEN")
		}
		return token, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read the cluster token: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("the cluster token file %s is empty", file)
	}
	return token, nil
}

// readCA reads PEM certificates to verify a peer with.
func readCA(file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the TLS CA: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("the TLS CA file %s holds no PEM certificate", file)
	}
	return data, nil
}
