package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/space-platform/space/internal/server"
)

// nodeService is what `space node` is told: where the node keeps its
// sandboxes and how it runs them (the node part of `space serve`'s
// configuration), where it listens, how the control plane reaches it, and
// how the two authenticate each other.
type nodeService struct {
	// Node holds the data dir, runtime and network settings, as for
	// space serve.
	Node server.Config
	// Listen is the address of the node's RPC service; Advertise the URL
	// the control plane reaches it at.
	Listen, Advertise string
	// ControlPlane is the URL of the control plane the node registers
	// with.
	ControlPlane string
	// ClusterToken authenticates the node and the control plane to each
	// other.
	ClusterToken string
	// TLSCA, when set, holds the PEM certificates the peer's TLS
	// certificate is verified against.
	TLSCA []byte
}

// defaultNodeListen is where a node's RPC service listens by default: next
// to space serve's API (7070), so that a node and a control plane on one
// machine do not collide.
const defaultNodeListen = "127.0.0.1:7071"

func runNodeService(ctx context.Context, args []string) error {
	cfg := nodeService{Node: server.DefaultConfig(), Listen: defaultNodeListen}
	fs := newFlagSet("space node [run] --control-plane URL [flags]", `
Run the node service of a cluster: the sandboxes of this machine, driven by
the control plane over Connect RPC. The node registers with --control-plane,
heartbeats its capacity and use, and registers again after a control plane
restart; its sandboxes keep running when the node process stops, and a
restarted one adopts them. Several nodes on one machine need their own
--data-dir, --listen and --uplink-pool.

The node and the control plane share a cluster token, read from
--cluster-token-file or $SPACE_CLUSTER_TOKEN.`)
	fs.StringVar(&cfg.Node.DataDir, "data-dir", cfg.Node.DataDir, "where the node's volumes, images and runtime state live")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address of the node's RPC service")
	fs.StringVar(&cfg.Advertise, "advertise", "", "URL the control plane reaches this node at (default: http://<--listen>)")
	fs.StringVar(&cfg.ControlPlane, "control-plane", "", "URL of the control plane to register with (required)")
	tokenFile := fs.String("cluster-token-file", "", "file holding the cluster token (default: $SPACE_CLUSTER_TOKEN)")
	caFile := fs.String("tls-ca", "", "PEM certificates to verify the control plane's TLS certificate with")
	fs.StringVar(&cfg.Node.RunscPath, "runsc", "", "runsc binary (default: found next to space, in .tools/bin or on PATH)")
	fs.StringVar(&cfg.Node.AgentPath, "agent", "", "space-agent binary (default: found next to space or in .tools/bin)")
	fs.StringVar(&cfg.Node.Platform, "platform", cfg.Node.Platform, "gVisor platform (systrap, ptrace, kvm)")
	uplinkPool := fs.String("uplink-pool", cfg.Node.Network.UplinkPool.String(), "IPv4 range sandbox uplinks are numbered from, a /30 each (\"none\": sandboxes get no network); nodes on one machine need ranges of their own")
	allowPrivate := fs.String("allow-private", "", "private IPv4 ranges sandboxes may reach, comma-separated CIDRs (default: none)")
	fs.StringVar(&cfg.Node.DNSUpstream, "dns-upstream", "", "resolver (host:port) that sandboxes' allowed names are looked up with (default: the host's first nameserver in /etc/resolv.conf)")
	fs.IntVar(&cfg.Node.Defaults.BandwidthMbit, "sandbox-bandwidth-mbit", cfg.Node.Defaults.BandwidthMbit, "bandwidth of each sandbox's network in Mbit/s, each way (0: unlimited)")
	fs.IntVar(&cfg.Node.Defaults.MaxConnections, "sandbox-max-connections", cfg.Node.Defaults.MaxConnections, "connections each sandbox may have open at once (0: unlimited)")
	imageGiB := fs.Int64("volume-image-gib", 0, "size of the loop-backed btrfs image made when --data-dir is not on btrfs (default: from free disk)")
	if err := parseNoArgs(fs, args, "node"); err != nil {
		return err
	}
	if cfg.ControlPlane == "" {
		return fs.usageErrorf("space node needs --control-plane URL")
	}
	if err := checkHTTPURL("--control-plane", cfg.ControlPlane); err != nil {
		return fs.usageErrorf("%v", err)
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fs.usageErrorf("--listen %q is not host:port", cfg.Listen)
	}
	if cfg.Advertise == "" {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return fs.usageErrorf("--listen %s names no host the control plane can reach; give --advertise URL", cfg.Listen)
		}
		cfg.Advertise = "http://" + cfg.Listen
	}
	if err := checkHTTPURL("--advertise", cfg.Advertise); err != nil {
		return fs.usageErrorf("%v", err)
	}
	if cfg.Node.Defaults.BandwidthMbit < 0 || cfg.Node.Defaults.MaxConnections < 0 {
		return fs.usageErrorf("--sandbox-bandwidth-mbit and --sandbox-max-connections must be 0 (unlimited) or positive")
	}
	if err := parseNetworkFlags(&cfg.Node, *uplinkPool, *allowPrivate); err != nil {
		return fs.usageErrorf("%v", err)
	}
	cfg.Node.VolumeImageBytes = *imageGiB << 30
	if cfg.ClusterToken, err = clusterToken(*tokenFile); err != nil {
		return err
	}
	if *caFile != "" {
		if cfg.TLSCA, err = readCA(*caFile); err != nil {
			return err
		}
	}
	// The node service itself is wired here once its parts exist
	// (internal/noderpc serving the node on --listen, membership.Run
	// registering it with --control-plane through the RPC client); until
	// then the flags are checked, so scripts written against them keep
	// working.
	return errors.New("the node service is not implemented yet; space serve runs a node in its own process")
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
