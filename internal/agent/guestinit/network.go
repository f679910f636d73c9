package guestinit

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// configureNetwork brings up lo and, when the host gave an address, the
// device with the host's MAC as eth0 with that address and the gateway as
// default route. A guest without networking (no space_ip) keeps lo only.
func configureNetwork(params map[string]string) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	cidr := params[ParamIP]
	if cidr == "" {
		return nil
	}
	mac, err := net.ParseMAC(params[ParamMAC])
	if err != nil {
		return fmt.Errorf("%s: %w", ParamMAC, err)
	}
	link, err := linkByMAC(mac)
	if err != nil {
		return err
	}
	if link.Attrs().Name != "eth0" {
		if err := netlink.LinkSetName(link, "eth0"); err != nil {
			return fmt.Errorf("rename %s to eth0: %w", link.Attrs().Name, err)
		}
	}
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		return fmt.Errorf("%s: %w", ParamIP, err)
	}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("address %s on eth0: %w", cidr, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up eth0: %w", err)
	}
	if gw := net.ParseIP(params[ParamGateway]); gw != nil {
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw}); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	return nil
}

func linkByMAC(mac net.HardwareAddr) (netlink.Link, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if l.Attrs().HardwareAddr.String() == mac.String() {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no network device with MAC %s", mac)
}
