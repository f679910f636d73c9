package network

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// uplinkPrefix marks the host-side ends of uplinks. The rest of the name is
// derived from the slot's name, so it is found again after a restart
// without stored state.
const uplinkPrefix = "spu"

// uplinkLockPath serialises uplink allocation between processes (two
// installations on one host, or a server and its tests) as well as within
// one.
const uplinkLockPath = "/run/space-uplinks.lock"

// UplinkName is the host-side interface of a slot's uplink.
func UplinkName(slotName string) string {
	sum := sha256.Sum256([]byte(slotName))
	return uplinkPrefix + hex.EncodeToString(sum[:])[:15-len(uplinkPrefix)]
}

// EgressConfig is a node's egress setup.
type EgressConfig struct {
	// UplinkPool is the node-local IPv4 range uplinks are numbered from,
	// one /30 per running sandbox. It must not be used elsewhere on the host.
	UplinkPool netip.Prefix
	// AllowPrivate are private ranges the operator lets sandboxes reach
	// (still subject to each sandbox's policy).
	AllowPrivate []netip.Prefix
	// Limits bound every sandbox's bandwidth and connections (limits.go);
	// a sandbox's policy may only tighten them.
	Limits Limits
}

// Egress connects slots to the host's network and enforces each sandbox's
// policy in its gateway namespace. The rules travel with the slot: the host
// holds only one static table, whatever the number of sandboxes.
type Egress struct {
	cfg EgressConfig
	mu  sync.Mutex // serialises uplink allocation within this process

	loadedMu sync.Mutex
	loaded   map[string]loadedRules // by slot name; see loaded.go
}

// NewEgress validates the configuration, loads the host table and enables
// IPv4 forwarding on the host, which uplinks need.
func NewEgress(cfg EgressConfig) (*Egress, error) {
	pool := cfg.UplinkPool
	if !pool.IsValid() || !pool.Addr().Is4() || pool.Bits() > 30 {
		return nil, fmt.Errorf("uplink pool %s: want an IPv4 range of at least a /30", pool)
	}
	cfg.UplinkPool = pool.Masked()
	for _, b := range alwaysBlocked {
		if b.Overlaps(cfg.UplinkPool) {
			return nil, fmt.Errorf("uplink pool %s overlaps the reserved range %s", pool, b)
		}
	}
	for i, p := range cfg.AllowPrivate {
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("allowed private range %s: only IPv4 is supported", p)
		}
		cfg.AllowPrivate[i] = p.Masked()
	}
	if err := loadRules(Namespace{}, hostRules(cfg.UplinkPool)); err != nil {
		return nil, fmt.Errorf("host egress rules: %w", err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	return &Egress{cfg: cfg, loaded: map[string]loadedRules{}}, nil
}

// Apply gives the slot the uplink its policy needs (none when offline) and
// replaces its gateway's ruleset atomically. It is idempotent, so it runs at
// every boot and restore and for every policy change.
func (e *Egress) Apply(s *Slot, p Policy) error {
	if p.Offline {
		if err := deleteUplink(s.Name); err != nil {
			return err
		}
		return e.loadPolicyRules(s, p, 0, false)
	}
	// The rules go in before the uplink exists or forwarding is on, so the
	// sandbox never has an unfiltered moment.
	if err := e.loadPolicyRules(s, p, e.cfg.Limits.Tighter(p.Limits).MaxConnections, true); err != nil {
		return err
	}
	if err := e.ensureUplink(s); err != nil {
		return fmt.Errorf("slot %s: uplink: %w", s.Name, err)
	}
	if err := e.applyLimits(s, p.Limits); err != nil {
		return fmt.Errorf("slot %s: limits: %w", s.Name, err)
	}
	if known, ok := e.loadedFor(s); ok && known.forwarding {
		return nil
	}
	err := s.Gateway.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	})
	if err == nil {
		e.remember(s, func(l *loadedRules) { l.forwarding = true })
	}
	return err
}

// UplinkAddrs returns the host's and the gateway's address on the slot's
// uplink, if it has one.
func UplinkAddrs(slotName string) (host, gateway netip.Addr, ok bool) {
	link, err := netlink.LinkByName(UplinkName(slotName))
	if err != nil {
		return host, gateway, false
	}
	addrs, err := addrList(nil, link)
	if err != nil || len(addrs) == 0 {
		return host, gateway, false
	}
	host, _ = netip.AddrFromSlice(addrs[0].IP.To4())
	return host, host.Next(), true
}

// ensureUplink creates the slot's uplink unless a whole one is there. The
// block is chosen by a hash of the slot's name, probing onwards past blocks
// in use, which it learns from the host's interfaces: the kernel is the only
// record, so a restarted node neither loses nor duplicates a block.
func (e *Egress) ensureUplink(s *Slot) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	unlock, err := lockFile(uplinkLockPath)
	if err != nil {
		return err
	}
	defer unlock()

	hostName := UplinkName(s.Name)
	if _, _, ok := UplinkAddrs(s.Name); ok && gatewayHasUplink(s.Gateway) {
		return nil
	}
	if err := deleteUplink(s.Name); err != nil {
		return err
	}
	used, err := usedBlocks()
	if err != nil {
		return err
	}
	block, err := e.freeBlock(s.Name, used)
	if err != nil {
		return err
	}
	hostAddr := block.Addr().Next()
	gwAddr := hostAddr.Next()

	gw, err := s.Gateway.Open()
	if err != nil {
		return err
	}
	defer gw.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostName},
		PeerName:      uplinkLink,
		PeerNamespace: netlink.NsFd(int(gw)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", hostName, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = deleteUplink(s.Name)
		}
	}()
	if err := configureAddr(nil, hostName, hostAddr, netip.Addr{}); err != nil {
		return err
	}
	gwHandle, err := netlink.NewHandleAt(gw)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", s.Gateway.Name, err)
	}
	defer gwHandle.Close()
	if err := configureAddr(gwHandle, uplinkLink, gwAddr, hostAddr); err != nil {
		return err
	}
	ok = true
	return nil
}

// freeBlock picks the slot's /30: the one its name hashes to, or the next
// free one after it.
func (e *Egress) freeBlock(name string, used map[netip.Addr]bool) (netip.Prefix, error) {
	pool := e.cfg.UplinkPool
	blocks := uint32(1) << (30 - pool.Bits())
	sum := sha256.Sum256([]byte(name))
	start := binary.BigEndian.Uint32(sum[:4]) % blocks
	base := binary.BigEndian.Uint32(pool.Addr().AsSlice())
	for i := uint32(0); i < blocks; i++ {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], base+((start+i)%blocks)*4)
		block := netip.PrefixFrom(netip.AddrFrom4(a), 30)
		if !used[block.Addr()] {
			return block, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("uplink pool %s is exhausted", pool)
}

// usedBlocks lists the /30 blocks held by existing host-side uplink ends.
// Links come and go while other slots are created and destroyed, which can
// interrupt a netlink dump; an interrupted dump may miss a block in use, so
// it is taken again.
func usedBlocks() (map[netip.Addr]bool, error) {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		var used map[netip.Addr]bool
		if used, err = dumpUsedBlocks(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return used, err
		}
	}
	return nil, err
}

func dumpUsedBlocks() (map[netip.Addr]bool, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	ours := map[int]bool{}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, uplinkPrefix) {
			ours[l.Attrs().Index] = true
		}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	used := map[netip.Addr]bool{}
	for _, a := range addrs {
		if !ours[a.LinkIndex] {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok {
			used[netip.PrefixFrom(ip, 30).Masked().Addr()] = true
		}
	}
	return used, nil
}

// gatewayHasUplink reports whether the gateway end of the uplink is present
// and numbered (a crash may leave a half-configured pair).
func gatewayHasUplink(gateway Namespace) bool {
	gw, err := gateway.Open()
	if err != nil {
		return false
	}
	defer gw.Close()
	h, err := netlink.NewHandleAt(gw)
	if err != nil {
		return false
	}
	defer h.Close()
	link, err := h.LinkByName(uplinkLink)
	if err != nil {
		return false
	}
	addrs, err := addrList(h, link)
	if err != nil || len(addrs) == 0 {
		return false
	}
	routes, err := h.RouteList(link, netlink.FAMILY_V4)
	if err != nil {
		return false
	}
	for _, r := range routes {
		if r.Gw != nil {
			return true
		}
	}
	return false
}

// deleteUplink removes the slot's uplink pair from the host side. Deleting
// the gateway namespace would take it too, but only once every socket in
// that namespace is closed; doing it here frees the block at once.
func deleteUplink(slotName string) error {
	link, err := netlink.LinkByName(UplinkName(slotName))
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("find uplink of %s: %w", slotName, err)
	}
	if err := netlink.LinkDel(link); err != nil && !errors.Is(err, syscall.ENODEV) {
		return fmt.Errorf("delete uplink of %s: %w", slotName, err)
	}
	return nil
}

// configureAddr numbers a link with a /30 address, brings it up and, when
// via is valid, routes everything through via. A nil handle means the
// host's namespace.
func configureAddr(h *netlink.Handle, name string, addr, via netip.Addr) error {
	if h == nil {
		var err error
		if h, err = netlink.NewHandle(); err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		defer h.Close()
	}
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	ipnet := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(30, 32)}
	if err := h.AddrReplace(link, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("address %s on %s: %w", addr, name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up %s: %w", name, err)
	}
	if !via.IsValid() {
		return nil
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: via.AsSlice()}
	if err := h.RouteReplace(route); err != nil {
		return fmt.Errorf("default route via %s: %w", via, err)
	}
	return nil
}

// loadRules loads an nftables ruleset in one transaction, in namespace or,
// for the zero Namespace, in the host's.
func loadRules(namespace Namespace, ruleset string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := runIn(namespace, cmd); err != nil {
		where := namespace.Name
		if where == "" {
			where = "host"
		}
		return fmt.Errorf("nft in %s: %w: %s", where, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// runIn runs cmd in the network namespace (the zero one: the host's). The
// child is forked from a thread that entered the namespace, so it starts
// there: one process instead of nsenter's two, which matters on the path
// of every create and policy change.
func runIn(namespace Namespace, cmd *exec.Cmd) error {
	if namespace.Path == "" {
		return cmd.Run()
	}
	return namespace.Do(cmd.Run)
}

// InNamespace runs fn on an OS thread that entered network namespace ns:
// sockets fn opens, and processes it starts, belong to ns for their whole
// life. The thread is never unlocked, so it dies with fn's goroutine
// rather than return to the scheduler's pool in the wrong namespace.
func InNamespace(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			done <- fmt.Errorf("enter namespace: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// lockFile takes an exclusive advisory lock on path.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uplink lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("uplink lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// DefaultUplinkPool is the uplink pool of `space serve` unless told
// otherwise.
var DefaultUplinkPool = netip.MustParsePrefix("10.200.0.0/16")

// addrList lists a link's IPv4 addresses (h nil: the host's namespace),
// dumping again when concurrent changes interrupted the dump: a partial
// answer would make a whole uplink look broken and get it renumbered.
func addrList(h *netlink.Handle, link netlink.Link) ([]netlink.Addr, error) {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		var addrs []netlink.Addr
		if h == nil {
			addrs, err = netlink.AddrList(link, netlink.FAMILY_V4)
		} else {
			addrs, err = h.AddrList(link, netlink.FAMILY_V4)
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return addrs, err
		}
	}
	return nil, err
}
