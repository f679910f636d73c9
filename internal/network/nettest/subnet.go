package nettest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// reachedServices are the hosts a test run needs on the real network: the
// Debian mirror (the base template's build), the Go module proxy and the
// npm registry (the E2B SDK suite). Machines like this one reach them
// through documentation-range addresses, so a fake internet must not cover
// those while other tests run.
var reachedServices = []string{"deb.debian.org", "proxy.golang.org", "registry.npmjs.org"}

// CheckSubnetFree reports why subnet cannot be a fake network on this
// host: one of the host's addresses or routes, a nameserver, or an address
// one of the services a test run reaches resolves to lies inside it.
// Routing it to a namespace would cut the host off from that.
func CheckSubnetFree(subnet netip.Prefix) error {
	subnet = subnet.Masked()
	inside := func(what string, ip net.IP) error {
		if a, ok := netip.AddrFromSlice(ip.To4()); ok && subnet.Contains(a) {
			return fmt.Errorf("fake network %s would take over %s %s", subnet, what, a)
		}
		return nil
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list host addresses: %w", err)
	}
	for _, a := range addrs {
		if err := inside("the host's address", a.IP); err != nil {
			return err
		}
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list host routes: %w", err)
	}
	for _, r := range routes {
		if r.Gw != nil {
			if err := inside("the host's gateway", r.Gw); err != nil {
				return err
			}
		}
	}
	for _, ns := range nameservers() {
		if err := inside("the host's nameserver", ns); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, host := range reachedServices {
		ips, _ := net.DefaultResolver.LookupIP(ctx, "ip4", host)
		for _, ip := range ips {
			if err := inside(host+" at", ip); err != nil {
				return err
			}
		}
	}
	return nil
}

func nameservers() []net.IP {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []net.IP
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "nameserver" {
			if ip := net.ParseIP(f[1]); ip != nil {
				out = append(out, ip)
			}
		}
	}
	return out
}
