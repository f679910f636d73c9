// Package network owns the per-sandbox network plumbing of a node: the
// network namespace a sandbox runs in, the gateway namespace in front of it,
// and the private channel the node uses to reach the agent inside.
//
// Every sandbox sees the same inside address (SandboxAddr) and gateway
// (GatewayAddr). Its own namespace makes that legal, and it means a
// checkpoint taken in one slot restores unchanged into any other slot, which
// is what suspend, restore and branch rely on. The node reaches the agent by
// dialing SandboxAddr from inside the slot's gateway namespace; nothing in
// the host's own namespace is routed to a sandbox, so a sandbox cannot reach
// host services through this channel.
//
// Egress (egress.go) adds an uplink from the gateway namespace to the host
// and the sandbox's policy as an nftables table in the gateway namespace,
// so the rules travel with the slot; policy.go renders them. See
// docs/security.md.
package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"

	"github.com/vishvananda/netlink"
)

// Addresses every slot uses; see the package comment for why they are fixed.
const (
	SandboxAddr = "169.254.0.21"
	GatewayAddr = "169.254.0.22"
	prefixLen   = 30

	sandboxLink = "eth0"
	gatewayLink = "veth0"

	// nsPrefix marks the namespaces this package owns, gatewaySuffix the
	// gateway's of a slot.
	nsPrefix      = "space-"
	gatewaySuffix = "-gw"
)

// Slot is the network of one sandbox: two named namespaces joined by a veth
// pair. Names are derived from the owner's name, so a restarted node finds
// the slot of a sandbox it re-adopts without any stored state.
type Slot struct {
	Name    string
	Sandbox Namespace // where the sandbox runs ("space-<name>")
	Gateway Namespace // its gateway ("space-<name>-gw")
	// stale are the slot's namespace files in its other directory (the
	// node's or LegacyDir), which Destroy removes as well.
	stale []Namespace
}

func slotIn(dir, name string) *Slot {
	ns := func(file string) Namespace {
		return Namespace{Name: file, Path: filepath.Join(dir, file), legacy: dir == LegacyDir}
	}
	return &Slot{Name: name, Sandbox: ns(nsPrefix + name), Gateway: ns(nsPrefix + name + gatewaySuffix)}
}

// NetNSPath is the path handed to the runtime as the sandbox's network namespace.
func (s *Slot) NetNSPath() string { return s.Sandbox.Path }

// Exists reports whether both namespaces of the slot are present.
func (s *Slot) Exists() bool {
	return s.Sandbox.exists() && s.Gateway.exists()
}

// Create builds the slot's namespaces and veth pair. A half-built slot left by
// a crash is removed first (in LegacyDir too).
func (n *Namespaces) Create(name string) (*Slot, error) {
	s := n.slot(name)
	if err := s.Destroy(); err != nil {
		return nil, err
	}
	if err := s.create(); err != nil {
		_ = s.Destroy()
		return nil, fmt.Errorf("create network slot %s: %w", name, err)
	}
	slotEpochs.renew(name)
	return s, nil
}

// slotEpochs numbers each slot's namespaces as this process made (or first
// saw) them. What is remembered about a slot (Egress's loaded rules) is
// tied to its epoch, so it cannot outlive the namespaces even where the
// kernel hands a new namespace the inode number of a freed one.
var slotEpochs epochs

type epochs struct {
	mu     sync.Mutex
	last   uint64
	byName map[string]uint64
}

// of returns the slot's epoch, giving a slot made before this process
// started (an adopted sandbox's) one of its own.
func (e *epochs) of(name string) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n, ok := e.byName[name]; ok {
		return n
	}
	return e.renewLocked(name)
}

func (e *epochs) renew(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.renewLocked(name)
}

func (e *epochs) renewLocked(name string) uint64 {
	if e.byName == nil {
		e.byName = map[string]uint64{}
	}
	e.last++
	e.byName[name] = e.last
	return e.last
}

func (e *epochs) drop(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byName, name)
}

func (s *Slot) create() error {
	sbx, err := s.Sandbox.create()
	if err != nil {
		return err
	}
	defer sbx.Close()
	gw, err := s.Gateway.create()
	if err != nil {
		return err
	}
	defer gw.Close()

	gwHandle, err := netlink.NewHandleAt(gw)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", s.Gateway.Name, err)
	}
	defer gwHandle.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: gatewayLink},
		PeerName:      sandboxLink,
		PeerNamespace: netlink.NsFd(int(sbx)),
	}
	if err := gwHandle.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth pair: %w", err)
	}
	if err := configureLink(gwHandle, gatewayLink, GatewayAddr, ""); err != nil {
		return err
	}
	if err := upLink(gwHandle, "lo"); err != nil {
		return err
	}
	return s.Prepare()
}

// Prepare (re)applies the sandbox side's address and default route, as
// Create left them. A runtime backend whose sandbox takes them off the
// interface when it starts (e.g. into a network stack of its own) calls it
// before every start or restore in the slot.
func (s *Slot) Prepare() error {
	sbx, err := s.Sandbox.Open()
	if err != nil {
		return err
	}
	defer sbx.Close()
	h, err := netlink.NewHandleAt(sbx)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", s.Sandbox.Name, err)
	}
	defer h.Close()
	if err := upLink(h, "lo"); err != nil {
		return err
	}
	return configureLink(h, sandboxLink, SandboxAddr, GatewayAddr)
}

func configureLink(h *netlink.Handle, name, addr, via string) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	ipnet := &net.IPNet{IP: net.ParseIP(addr), Mask: net.CIDRMask(prefixLen, 32)}
	if err := h.AddrReplace(link, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("address %s on %s: %w", addr, name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up %s: %w", name, err)
	}
	if via == "" {
		return nil
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.ParseIP(via)}
	if err := h.RouteReplace(route); err != nil {
		return fmt.Errorf("default route via %s: %w", via, err)
	}
	return nil
}

func upLink(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up %s: %w", name, err)
	}
	return nil
}

// Destroy removes the slot's uplink and both namespaces (and with them the
// veth pair): their mounts and files, in the node's directory and in
// LegacyDir. Removing a slot that does not exist is not an error.
func (s *Slot) Destroy() error {
	slotEpochs.drop(s.Name)
	var errs []error
	if err := deleteUplink(s.Name); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range append([]Namespace{s.Sandbox, s.Gateway}, s.stale...) {
		if err := ns.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DialContext connects to addr ("host:port", normally SandboxAddr and the
// agent port) from inside the slot's gateway namespace. The socket keeps that
// namespace for its whole life, whatever thread later uses it.
func (s *Slot) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := s.Gateway.Do(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}
