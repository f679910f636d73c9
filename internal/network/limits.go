package network

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
)

// Limits bound how much of the node's network one sandbox may use, so that
// one sandbox cannot starve the others. Zero fields are unlimited.
type Limits struct {
	// BandwidthMbit caps the sandbox's traffic through its uplink in each
	// direction, in megabits per second.
	BandwidthMbit int
	// MaxConnections caps the connections the sandbox has open through its
	// gateway at once: TCP connections, and UDP and ICMP flows as the
	// gateway's connection tracking sees them. Every flow held costs the
	// node conntrack memory, so a sandbox may not open them without bound.
	MaxConnections int
}

// Tighter combines two limits field by field: the lower wins, and zero
// (unlimited) yields to any bound.
func (l Limits) Tighter(o Limits) Limits {
	lower := func(a, b int) int {
		switch {
		case a <= 0:
			return max(b, 0)
		case b <= 0 || a < b:
			return a
		}
		return b
	}
	return Limits{BandwidthMbit: lower(l.BandwidthMbit, o.BandwidthMbit), MaxConnections: lower(l.MaxConnections, o.MaxConnections)}
}

// limitsTable is the gateway's nftables table for connection counting. It
// is separate from the policy's table (tableName) so that a policy change
// does not reset the counts, and it hooks prerouting before destination
// NAT, so connections the gateway redirects to its own resolver and proxy
// count as well as forwarded ones.
const limitsTable = "space_limits"

// applyLimits enforces limits on a slot that has its uplink: the node's
// own limits, tightened by the sandbox's. It is idempotent and leaves
// state that already matches alone, so re-applying neither resets the
// connection count nor drops queued packets.
func (e *Egress) applyLimits(s *Slot, sandbox Limits) error {
	l := e.cfg.Limits.Tighter(sandbox)
	if known, ok := e.loadedFor(s); !ok || !known.connLimitSet || known.connLimit != l.MaxConnections {
		if err := applyConnectionLimit(s.Gateway, l.MaxConnections); err != nil {
			return err
		}
		e.remember(s, func(k *loadedRules) { k.connLimit, k.connLimitSet = l.MaxConnections, true })
	}
	// Traffic to the sandbox is shaped where it leaves the host for the
	// uplink, traffic from it where it leaves the gateway for the host.
	// Both ends belong to the uplink, so neither shapes the node's own
	// channel to the agent (veth0), and they go away with the uplink.
	if err := shapeLink(nil, UplinkName(s.Name), l.BandwidthMbit); err != nil {
		return fmt.Errorf("shape traffic to the sandbox: %w", err)
	}
	gw, err := s.Gateway.Open()
	if err != nil {
		return err
	}
	defer gw.Close()
	h, err := netlink.NewHandleAt(gw)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", s.Gateway.Name, err)
	}
	defer h.Close()
	if err := shapeLink(h, uplinkLink, l.BandwidthMbit); err != nil {
		return fmt.Errorf("shape traffic from the sandbox: %w", err)
	}
	return nil
}

// connectionLimitMarker tags the counting rule with its bound, so that a
// re-apply can tell the loaded table is already the wanted one.
func connectionLimitMarker(n int) string {
	return fmt.Sprintf("space max_connections=%d", n)
}

// limitRules renders the connection-count table for at most n concurrent
// connections from the sandbox; n <= 0 removes the table.
func limitRules(n int) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("table %s %s", tableFamily, limitsTable)
	w("delete table %s %s", tableFamily, limitsTable)
	if n <= 0 {
		return b.String()
	}
	w("table %s %s {", tableFamily, limitsTable)
	// A refused connection fails at once instead of timing out.
	w("\tchain over_limit {")
	w("\t\tmeta l4proto tcp reject with tcp reset")
	w("\t\treject with icmpx type admin-prohibited")
	w("\t}")
	// After conntrack (-200), which ct state and ct count need, and before
	// destination NAT (-100).
	w("\tchain prerouting {")
	w("\t\ttype filter hook prerouting priority mangle; policy accept;")
	w("\t\tiifname %q ct state new ct count over %d goto over_limit comment %q", gatewayLink, n, connectionLimitMarker(n))
	w("\t}")
	w("}")
	return b.String()
}

// applyConnectionLimit loads the connection-count table into the gateway
// namespace unless the one there already has this bound: reloading starts
// the count from zero while the sandbox's connections stay open.
func applyConnectionLimit(gateway Namespace, n int) error {
	current, loaded := listTable(gateway, limitsTable)
	switch {
	case n <= 0 && !loaded:
		return nil
	case n > 0 && loaded && strings.Contains(current, `comment "`+connectionLimitMarker(n)+`"`):
		return nil
	}
	if err := loadRules(gateway, limitRules(n)); err != nil {
		return fmt.Errorf("connection limit: %w", err)
	}
	return nil
}

// listTable returns a table of the namespace as nft prints it;
// loaded is false when there is no such table.
func listTable(namespace Namespace, table string) (ruleset string, loaded bool) {
	cmd := exec.Command("nft", "list", "table", tableFamily, table)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := runIn(namespace, cmd); err != nil {
		return "", false
	}
	return out.String(), true
}

// Shaping parameters: the bucket holds 5 ms of traffic but at least a
// full-size GSO packet (larger ones would be split first), and the queue
// behind it 50 ms more, which keeps TCP at the rate without long delays.
const (
	minBurstBytes = 64 << 10
	burstMillis   = 5
	queueMillis   = 50
)

// tbfFor returns the token bucket that shapes a link to mbit.
func tbfFor(link netlink.Link, mbit int) *netlink.Tbf {
	rate := uint64(mbit) * 1_000_000 / 8 // bytes per second
	burst := max(rate*burstMillis/1000, minBurstBytes)
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: link.Attrs().Index,
			Handle:    netlink.MakeHandle(1, 0),
			Parent:    netlink.HANDLE_ROOT,
		},
		Rate:   rate,
		Buffer: netlink.Xmittime(rate, uint32(burst)),
		Limit:  uint32(rate*queueMillis/1000 + burst),
	}
}

// shapeLink makes a token bucket of mbit the root queue of a link (h nil:
// the host's namespace), or removes the one there when mbit is 0. A
// missing link is not an error: a slot without an uplink has nothing to
// shape.
func shapeLink(h *netlink.Handle, name string, mbit int) error {
	if h == nil {
		var err error
		if h, err = netlink.NewHandle(); err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		defer h.Close()
	}
	link, err := h.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("find link %s: %w", name, err)
	}
	current, err := rootTbf(h, link)
	if err != nil {
		return err
	}
	if mbit <= 0 {
		if current == nil {
			return nil
		}
		if err := h.QdiscDel(current); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("remove the rate limit of %s: %w", name, err)
		}
		return nil
	}
	want := tbfFor(link, mbit)
	if current != nil && current.Rate == want.Rate && current.Buffer == want.Buffer && current.Limit == want.Limit {
		return nil // replacing it would drop what is queued
	}
	if err := h.QdiscReplace(want); err != nil {
		return fmt.Errorf("rate limit %s to %d Mbit/s: %w", name, mbit, err)
	}
	return nil
}

// rootTbf returns the link's root queue if it is a token bucket.
func rootTbf(h *netlink.Handle, link netlink.Link) (*netlink.Tbf, error) {
	qdiscs, err := h.QdiscList(link)
	if err != nil {
		return nil, fmt.Errorf("list queues of %s: %w", link.Attrs().Name, err)
	}
	for _, q := range qdiscs {
		if tbf, ok := q.(*netlink.Tbf); ok && q.Attrs().Parent == netlink.HANDLE_ROOT {
			return tbf, nil
		}
	}
	return nil, nil
}
