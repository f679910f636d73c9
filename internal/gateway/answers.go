package gateway

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/space-platform/space/internal/network"
)

// Bounds on how long a DNS answer keeps its addresses open. The floor
// covers clients that resolve, then connect a little later; the ceiling
// limits what one long-TTL answer keeps open after a policy change.
const (
	minAnswerTTL = 30 * time.Second
	maxAnswerTTL = time.Hour
	// maxAnswers bounds the live answers remembered per sandbox.
	maxAnswers = 4096
)

type answerKey struct {
	addr netip.Addr
	name string
}

// answerSet is the resolver's record of the addresses it opened for one
// sandbox and the nftables set that opens them. The record outlives a
// reload of the slot's rules (which empties the set), so the set can be
// refilled with what the new policy still allows.
type answerSet struct {
	ns   netns.NsHandle
	set  *nftables.Set
	mu   sync.Mutex
	live map[answerKey]time.Time // expiry
}

func newAnswerSet(ns netns.NsHandle) *answerSet {
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: network.TableName}
	return &answerSet{
		ns:   ns,
		set:  &nftables.Set{Table: table, Name: network.DNSAllowedSet, KeyType: nftables.TypeIPAddr, HasTimeout: true},
		live: map[answerKey]time.Time{},
	}
}

func answerTTL(ttl uint32) time.Duration {
	return min(max(time.Duration(ttl)*time.Second, minAnswerTTL), maxAnswerTTL)
}

// open records name's addresses and, when enforce is set (the policy
// restricts addresses), adds them to the set before the answer reaches the
// sandbox, so its next connection finds them open.
func (a *answerSet) open(name string, addrs []netip.Addr, ttl time.Duration, enforce bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	expiry := now.Add(ttl)
	var fresh, refresh []netip.Addr
	for _, addr := range addrs {
		k := answerKey{addr, name}
		if old, ok := a.live[k]; ok && old.After(now) {
			if !old.Before(expiry.Add(-minAnswerTTL / 2)) {
				continue // open long enough already
			}
			refresh = append(refresh, addr)
		} else {
			fresh = append(fresh, addr)
		}
		a.remember(k, expiry, now)
	}
	if !enforce || len(fresh)+len(refresh) == 0 {
		return nil
	}
	err := a.add(fresh, refresh, ttl)
	if err != nil && len(refresh) > 0 {
		// An element may have expired between the check and the update;
		// adding all of them afresh is then right.
		err = a.add(append(fresh, refresh...), nil, ttl)
	}
	return err
}

func (a *answerSet) remember(k answerKey, expiry, now time.Time) {
	if _, ok := a.live[k]; !ok && len(a.live) >= maxAnswers {
		for old, exp := range a.live {
			if !exp.After(now) {
				delete(a.live, old)
			}
		}
		for old := range a.live {
			if len(a.live) < maxAnswers {
				break
			}
			delete(a.live, old) // forgotten, but its element still times out
		}
	}
	a.live[k] = expiry
}

// add puts addresses into the set with timeout ttl; refresh ones are
// deleted first in the same transaction, as adding an element that exists
// leaves its old timeout on older kernels.
func (a *answerSet) add(fresh, refresh []netip.Addr, ttl time.Duration) error {
	conn, err := nftables.New(nftables.WithNetNSFd(int(a.ns)))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if len(refresh) > 0 {
		if err := conn.SetDeleteElements(a.set, elements(refresh, 0)); err != nil {
			return fmt.Errorf("update %s: %w", network.DNSAllowedSet, err)
		}
	}
	if err := conn.SetAddElements(a.set, elements(append(fresh, refresh...), ttl)); err != nil {
		return fmt.Errorf("update %s: %w", network.DNSAllowedSet, err)
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("update %s: %w", network.DNSAllowedSet, err)
	}
	return nil
}

func elements(addrs []netip.Addr, ttl time.Duration) []nftables.SetElement {
	out := make([]nftables.SetElement, len(addrs))
	for i, a := range addrs {
		b := a.As4()
		out[i] = nftables.SetElement{Key: b[:], Timeout: ttl}
	}
	return out
}

// refill puts the live answers whose names allowed says are still allowed
// back into the (freshly emptied) set, each with its remaining time.
func (a *answerSet) refill(allowed func(name string) bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	byTTL := map[time.Duration][]netip.Addr{}
	seen := map[netip.Addr]time.Duration{}
	for k, exp := range a.live {
		if !exp.After(now) {
			delete(a.live, k)
			continue
		}
		if !allowed(k.name) {
			continue
		}
		// One element per address: the longest remaining time wins.
		left := exp.Sub(now).Truncate(time.Second) + time.Second
		if left > seen[k.addr] {
			seen[k.addr] = left
		}
	}
	for addr, left := range seen {
		byTTL[left] = append(byTTL[left], addr)
	}
	if len(byTTL) == 0 {
		return nil
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(a.ns)))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	for ttl, addrs := range byTTL {
		if err := conn.SetAddElements(a.set, elements(addrs, ttl)); err != nil {
			return fmt.Errorf("refill %s: %w", network.DNSAllowedSet, err)
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("refill %s: %w", network.DNSAllowedSet, err)
	}
	return nil
}

func (a *answerSet) close() {}
