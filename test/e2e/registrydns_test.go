package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/space-platform/space/internal/gateway"
	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/pkg/apiv1"
)

// registryNames are the package registries template builds download from
// in the build sandbox: Debian's mirror (the bootstrap stage's
// sources.list) and the npm registry (code-interpreter-v1-runtimes fetches
// Deno there). The host reaches them anyway (debootstrap runs on the
// host); every other name stays in the fake web.
var registryNames = []string{"deb.debian.org", "registry.npmjs.org"}

// startRegistryDNS serves DNS on the loopback for the test server's
// sandboxes: the registries' names from the host's resolver, every other
// name from fake (the fake web's DNS, which knows only its own names). It
// returns the address to use as the server's DNS upstream and a stop
// function.
func startRegistryDNS(fake netip.AddrPort) (string, func(), error) {
	host, err := gateway.DefaultUpstream()
	if err != nil {
		return "", nil, err
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		upstream := fake.String()
		if len(req.Question) == 1 {
			name := strings.TrimSuffix(strings.ToLower(req.Question[0].Name), ".")
			for _, r := range registryNames {
				if name == r {
					upstream = host
				}
			}
		}
		network := "udp"
		if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
			network = "tcp"
		}
		resp, _, err := (&dns.Client{Net: network}).Exchange(req, upstream)
		if err != nil {
			resp = new(dns.Msg)
			resp.SetRcode(req, dns.RcodeServerFailure)
		}
		_ = w.WriteMsg(resp)
	})
	// DNS wants UDP and TCP on one port: take a free UDP port and try
	// TCP on it, again with another when a connection holds that number.
	var (
		pc net.PacketConn
		l  net.Listener
	)
	for try := 0; ; try++ {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return "", nil, err
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			break
		}
		pc.Close()
		if try == 20 {
			return "", nil, err
		}
	}
	udp := &dns.Server{PacketConn: pc, Handler: handler}
	tcp := &dns.Server{Listener: l, Handler: handler}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	stop := func() {
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
	}
	return pc.LocalAddr().String(), stop, nil
}

// A sandbox resolves the registries' names (so template builds can
// download) and no other real name: the rest of the test internet is the
// fake web.
func TestRegistryNamesResolveForBuilds(t *testing.T) {
	requireServer(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	for _, name := range registryNames {
		if addrs, out := lookup(t, sb.ID, name, ""); len(addrs) == 0 {
			t.Errorf("%s does not resolve in a sandbox:\n%s", name, out)
		}
	}
	if addrs, out := lookup(t, sb.ID, "example.com", ""); len(addrs) != 0 || !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("example.com resolved outside the fake web: %v\n%s", addrs, out)
	}
	if addrs, _ := lookup(t, sb.ID, nettest.AllowedName, ""); len(addrs) == 0 {
		t.Errorf("the fake web's %s does not resolve", nettest.AllowedName)
	}
}
