package network

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
)

// loadedRules is what Egress last loaded into one slot's gateway namespace.
// Reloading a ruleset costs the kernel's RCU grace periods (tens of
// milliseconds on a busy node), so a change that only sets or lifts the
// hold, or none at all, skips it.
type loadedRules struct {
	// epoch identifies the slot's namespaces the rules went into (see
	// slotEpochs): a slot rebuilt under the same name (a restore) starts
	// without them.
	epoch uint64
	// rules is the ruleset as rendered without the hold, followed by the
	// policy's domain rules: a change of those must reload too, as the
	// reload empties the resolver's set (dns_allowed) for the gateway to
	// refill with what the new policy still allows.
	rules string
	held  bool
	// connLimit is the connection bound in the limits table (0: none),
	// valid when connLimitSet.
	connLimit    int
	connLimitSet bool
	// forwarding is set once IPv4 forwarding is on in the namespace.
	forwarding bool
}

// loadedFor returns what is known to be loaded in the slot's gateway
// namespace now, if anything.
func (e *Egress) loadedFor(s *Slot) (loadedRules, bool) {
	epoch := slotEpochs.of(s.Name)
	e.loadedMu.Lock()
	defer e.loadedMu.Unlock()
	l, ok := e.loaded[s.Name]
	if !ok || l.epoch != epoch {
		return loadedRules{}, false
	}
	return l, true
}

func (e *Egress) remember(s *Slot, update func(*loadedRules)) {
	epoch := slotEpochs.of(s.Name)
	e.loadedMu.Lock()
	defer e.loadedMu.Unlock()
	l, ok := e.loaded[s.Name]
	if !ok || l.epoch != epoch {
		l = loadedRules{epoch: epoch}
	}
	update(&l)
	e.loaded[s.Name] = l
}

// Forget drops what Egress remembers of a slot; call it when the slot is
// destroyed.
func (e *Egress) Forget(slotName string) {
	e.loadedMu.Lock()
	defer e.loadedMu.Unlock()
	delete(e.loaded, slotName)
}

// loadPolicyRules brings the gateway's table to policy p: nothing when it
// is there already, one set element when only the hold differs, otherwise
// a reload of the whole table in one transaction. A reload also brings the
// connection-limit table to connLimit (when withLimit) if it is not known
// to hold that bound already, saving a second nft run on a new slot.
func (e *Egress) loadPolicyRules(s *Slot, p Policy, connLimit int, withLimit bool) error {
	unheld := p
	unheld.Hold = false
	unheldRules := gatewayRules(unheld, e.cfg.UplinkPool, e.cfg.AllowPrivate)
	key := unheldRules + fmt.Sprintf("# allow %q deny %q\n", p.AllowDomains, p.DenyDomains)
	known, ok := e.loadedFor(s)
	if ok && known.rules == key {
		if known.held == p.Hold {
			return nil
		}
		if err := setHold(s.Gateway, p.Hold); err == nil {
			e.remember(s, func(l *loadedRules) { l.held = p.Hold })
			return nil
		}
		// Fall back to a full load, which sets the hold as well.
	}
	script := unheldRules
	if p.Hold {
		script = gatewayRules(p, e.cfg.UplinkPool, e.cfg.AllowPrivate)
	}
	addLimit := withLimit && !(ok && known.connLimitSet && known.connLimit == connLimit)
	if addLimit {
		script += limitRules(connLimit)
	}
	if err := loadRules(s.Gateway, script); err != nil {
		e.Forget(s.Name)
		return fmt.Errorf("slot %s: %w", s.Name, err)
	}
	e.remember(s, func(l *loadedRules) {
		l.rules, l.held = key, p.Hold
		if addLimit {
			l.connLimit, l.connLimitSet = connLimit, true
		}
	})
	return nil
}

// setHold adds or removes the sandbox's address in the released set.
func setHold(gateway Namespace, hold bool) error {
	ns, err := gateway.Open()
	if err != nil {
		return err
	}
	defer ns.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("nftables in %s: %w", gateway.Name, err)
	}
	set := &nftables.Set{
		Table:   &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName},
		Name:    releasedSet,
		KeyType: nftables.TypeIPAddr,
	}
	addr := netip.MustParseAddr(SandboxAddr).As4()
	elems := []nftables.SetElement{{Key: addr[:]}}
	if hold {
		err = conn.SetDeleteElements(set, elems)
	} else {
		err = conn.SetAddElements(set, elems)
	}
	if err != nil {
		return fmt.Errorf("hold in %s: %w", gateway.Name, err)
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("hold in %s: %w", gateway.Name, err)
	}
	return nil
}
