package network

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/space-platform/space/internal/publicnet"
)

// Policy is what a sandbox may reach beyond its own slot. The zero value
// gives the sandbox an uplink but lets nothing through it, so a sandbox
// whose policy was never set (a pooled one awaiting its owner) stays shut.
type Policy struct {
	// Offline leaves the sandbox without an uplink: loopback and the agent
	// channel only.
	Offline bool
	// AllowInternet lets the sandbox reach any address that is neither
	// always blocked, private (unless the operator allowed the range) nor
	// in Deny.
	AllowInternet bool
	// Allow opens these ranges even without AllowInternet; Deny closes
	// ranges whatever else says. Deny wins over Allow. Neither can open
	// what is always blocked or a private range the operator has not
	// allowed.
	Allow []netip.Prefix
	Deny  []netip.Prefix
	// Limits are the sandbox's own bandwidth and connection bounds
	// (limits.go); the node's (EgressConfig.Limits) still cap them.
	Limits Limits
	// AllowDomains and DenyDomains are names ("example.com") and wildcards
	// ("*.example.com", any name below example.com but not example.com
	// itself), lower-case. The gateway's resolver and proxy enforce them;
	// see internal/gateway. DenyDomains wins over AllowDomains and over
	// AllowInternet.
	AllowDomains []string
	DenyDomains  []string
	// InspectHTTP sends the sandbox's HTTP and HTTPS connections (ports 80
	// and 443) through the gateway's proxy even without domain rules, for
	// sandboxes whose requests the gateway must see (credential rules).
	InspectHTTP bool
	// Hold refuses everything the sandbox starts (the agent channel is
	// unaffected) while the rest of the policy is loaded. A warm pool's
	// sandboxes wait held under the policy their owners will most likely
	// ask for; lifting the hold is one set element, so a claim does not
	// reload the rules (a reload waits for the kernel's RCU grace periods).
	Hold bool
}

// HasDomainRules reports whether the policy names domains, which routes
// the sandbox's web traffic through the gateway's proxy.
func (p Policy) HasDomainRules() bool {
	return len(p.AllowDomains) > 0 || len(p.DenyDomains) > 0
}

// Ports of the gateway's own services on GatewayAddr. Every DNS packet the
// sandbox sends, whatever its destination, is redirected to ResolverPort;
// when the proxy is in use, TCP 80 goes to HTTPProxyPort and TCP 443 to
// TLSProxyPort.
const (
	ResolverPort  = 53
	HTTPProxyPort = 15080
	TLSProxyPort  = 15443
)

// Bounds on what a sandbox may ask of its gateway's services: DNS queries
// per second over UDP, and open TCP connections to the resolver and proxy
// together.
const (
	maxDNSQueryRate = 500
	maxServiceConns = 1024
)

// DenyLogGroup is the NFLOG group, in each gateway namespace, that
// connections refused by address are logged to (rate limited).
const DenyLogGroup = 7

// DNSAllowedSet is the gateway's nftables set (in table inet space) of
// addresses the resolver answered for an allowed name; it opens them to
// the sandbox until the element's timeout.
const DNSAllowedSet = "dns_allowed"

// TableFamily and TableName name the gateway's nftables table.
const (
	TableFamily = tableFamily
	TableName   = tableName
)

// alwaysBlocked are destinations no policy can open (see
// publicnet.ReservedIPv4). The uplink pool is added per node, so sandboxes
// cannot reach each other or the host's end of their uplinks.
var alwaysBlocked = publicnet.ReservedIPv4

// privateRanges are blocked unless the operator allows a part of them (see
// publicnet.InternalIPv4): the same list the server's own fetches refuse,
// so a recipe cannot make the server reach what sandboxes cannot.
var privateRanges = publicnet.InternalIPv4

// ParsePrefixes parses CIDRs and bare addresses (a host route). Sandboxes
// have no IPv6 egress, so an IPv6 entry is an error rather than a rule that
// silently does nothing.
func ParsePrefixes(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range entries {
		e = strings.TrimSpace(e)
		p, err := netip.ParsePrefix(e)
		if err != nil {
			a, aerr := netip.ParseAddr(e)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not an IPv4 address or CIDR", e)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Unmap().Is4() {
			return nil, fmt.Errorf("%q: IPv6 rules are not supported (sandboxes have no IPv6 egress)", e)
		}
		out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked())
	}
	return out, nil
}

// minimalPrefixes drops prefixes contained in another one and sorts the
// rest: nftables interval sets refuse overlapping elements.
func minimalPrefixes(in []netip.Prefix) []netip.Prefix {
	sorted := append([]netip.Prefix(nil), in...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Bits() != sorted[j].Bits() {
			return sorted[i].Bits() < sorted[j].Bits()
		}
		return sorted[i].Addr().Less(sorted[j].Addr())
	})
	var kept []netip.Prefix
	for _, p := range sorted {
		covered := false
		for _, k := range kept {
			if k.Contains(p.Addr()) {
				covered = true
				break
			}
		}
		if !covered {
			kept = append(kept, p)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Addr().Less(kept[j].Addr()) })
	return kept
}

// Names of the nftables objects space owns. Both the host and every gateway
// namespace hold one table of this name; nothing else in them is touched.
const (
	tableFamily = "inet"
	tableName   = "space"
	uplinkLink  = "up0"
	releasedSet = "released"
)

// gatewayRules renders the ruleset of a slot's gateway namespace. Loading it
// replaces the previous one in a single transaction, so a policy change
// never opens a gap. uplinkPool is the node's uplink pool; it is always
// blocked so a sandbox can reach neither another slot nor the host's end
// of any uplink.
func gatewayRules(p Policy, uplinkPool netip.Prefix, allowPrivate []netip.Prefix) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	// Declaring the table first makes the delete succeed on first load.
	w("table %s %s", tableFamily, tableName)
	w("delete table %s %s", tableFamily, tableName)
	w("table %s %s {", tableFamily, tableName)
	set := func(name string, prefixes []netip.Prefix) {
		w("\tset %s {", name)
		w("\t\ttype ipv4_addr; flags interval;")
		if ps := minimalPrefixes(prefixes); len(ps) > 0 {
			elems := make([]string, len(ps))
			for i, p := range ps {
				elems[i] = p.String()
			}
			w("\t\telements = { %s }", strings.Join(elems, ", "))
		}
		w("\t}")
	}
	var blocked []netip.Prefix
	blocked = append(blocked, alwaysBlocked...)
	if uplinkPool.IsValid() {
		blocked = append(blocked, uplinkPool)
	}
	set("always_blocked", blocked)
	set("private", privateRanges)
	set("operator_allowed", allowPrivate)
	set("deny", p.Deny)
	set("allow", p.Allow)
	w("\tset %s {", DNSAllowedSet)
	w("\t\ttype ipv4_addr; flags timeout;")
	w("\t}")
	// The sandbox's address is in this set unless the policy holds it.
	w("\tset %s {", releasedSet)
	w("\t\ttype ipv4_addr;")
	if !p.Hold {
		w("\t\telements = { %s }", SandboxAddr)
	}
	w("\t}")

	// Refusing rather than dropping makes denied connections fail at once.
	w("\tchain refuse {")
	w("\t\tmeta l4proto tcp reject with tcp reset")
	w("\t\treject with icmpx type admin-prohibited")
	w("\t}")

	// Refusals by address are also logged to the gateway (which turns them
	// into sandbox events), at a bounded rate so a sandbox cannot flood it.
	w("\tchain denied {")
	w("\t\tlimit rate 20/second burst 40 packets log group %d", DenyLogGroup)
	w("\t\tgoto refuse")
	w("\t}")

	// Whatever resolver the sandbox asks, its own gateway answers, so a
	// name reaches the sandbox only through the policy. With domain rules
	// web traffic goes to the proxy, which decides by Host / SNI.
	w("\tchain prerouting {")
	w("\t\ttype nat hook prerouting priority dstnat; policy accept;")
	if !p.Offline {
		w("\t\tiifname %q udp dport 53 dnat ip to %s:%d", gatewayLink, GatewayAddr, ResolverPort)
		w("\t\tiifname %q tcp dport 53 dnat ip to %s:%d", gatewayLink, GatewayAddr, ResolverPort)
		if p.HasDomainRules() || p.InspectHTTP {
			w("\t\tiifname %q tcp dport 80 dnat ip to %s:%d", gatewayLink, GatewayAddr, HTTPProxyPort)
			w("\t\tiifname %q tcp dport 443 dnat ip to %s:%d", gatewayLink, GatewayAddr, TLSProxyPort)
		}
	}
	w("\t}")

	// The gateway offers the sandbox only its resolver and proxy; otherwise
	// only replies on connections the node opened (the agent channel) come
	// back in.
	w("\tchain input {")
	w("\t\ttype filter hook input priority filter; policy accept;")
	w("\t\tiifname %q ct state established,related accept", gatewayLink)
	w("\t\tiifname %q ip saddr != @%s goto refuse", gatewayLink, releasedSet)
	if !p.Offline {
		// The services run in the node's process: bound what one sandbox
		// can make it hold (connections) or do (queries sent upstream).
		w("\t\tiifname %q ip daddr %s udp dport %d limit rate over %d/second burst %d packets drop",
			gatewayLink, GatewayAddr, ResolverPort, maxDNSQueryRate, maxDNSQueryRate)
		w("\t\tiifname %q ip daddr %s tcp dport { %d, %d, %d } ct state new ct count over %d goto refuse",
			gatewayLink, GatewayAddr, ResolverPort, HTTPProxyPort, TLSProxyPort, maxServiceConns)
		w("\t\tiifname %q ip daddr %s udp dport %d accept", gatewayLink, GatewayAddr, ResolverPort)
		w("\t\tiifname %q ip daddr %s tcp dport { %d, %d, %d } accept", gatewayLink, GatewayAddr, ResolverPort, HTTPProxyPort, TLSProxyPort)
	}
	w("\t\tiifname %q goto refuse", gatewayLink)
	w("\t\tiifname %q ct state established,related accept", uplinkLink)
	w("\t\tiifname %q drop", uplinkLink)
	w("\t}")

	w("\tchain forward {")
	w("\t\ttype filter hook forward priority filter; policy drop;")
	w("\t\tiifname %q goto from_sandbox", gatewayLink)
	w("\t\tiifname %q oifname %q ct state established,related accept", uplinkLink, gatewayLink)
	w("\t}")

	w("\tchain from_sandbox {")
	// No IPv6 egress yet, and only the sandbox's own address may leave it.
	w("\t\tmeta nfproto ipv6 drop")
	w("\t\tip saddr != %s drop", SandboxAddr)
	w("\t\tct state established,related accept")
	w("\t\tip saddr != @%s goto refuse", releasedSet)
	if p.Offline {
		w("\t\tgoto refuse")
	} else {
		w("\t\toifname != %q goto refuse", uplinkLink)
		w("\t\tip daddr @always_blocked goto denied")
		w("\t\tip daddr @private ip daddr != @operator_allowed goto denied")
		w("\t\tip daddr @deny goto denied")
		w("\t\tip daddr @allow accept")
		if p.AllowInternet {
			w("\t\taccept")
		} else {
			// Addresses the resolver answered for an allowed name, until
			// their TTL runs out. Deny and the blocked ranges above still
			// win over a DNS answer.
			w("\t\tip daddr @%s accept", DNSAllowedSet)
			w("\t\tgoto denied")
		}
	}
	w("\t}")

	w("\tchain postrouting {")
	w("\t\ttype nat hook postrouting priority srcnat; policy accept;")
	w("\t\toifname %q masquerade", uplinkLink)
	w("\t}")
	w("}")
	return b.String()
}

// hostRules renders the host's table: it masquerades uplink traffic out of
// whatever interface the host routes it to, and keeps sandboxes away from
// the host itself and from each other even if a gateway's rules were
// missing. It has no per-sandbox rules, so it is loaded once per start.
// Several installations may share a host: the table is amended, never
// replaced, so each one's uplink pool is added to the set of pools and the
// chains are rewritten with the same rules in one transaction.
func hostRules(uplinkPool netip.Prefix) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	match := uplinkPrefix + "*"
	t := tableFamily + " " + tableName
	w("add table %s", t)
	w("add set %s uplink_pools { type ipv4_addr; flags interval; auto-merge; }", t)
	w("add element %s uplink_pools { %s }", t, uplinkPool.Masked())
	chain := func(name, hook string, rules ...string) {
		if hook != "" {
			w("add chain %s %s { %s; policy accept; }", t, name, hook)
		} else {
			w("add chain %s %s", t, name)
		}
		w("flush chain %s %s", t, name)
		for _, r := range rules {
			w("add rule %s %s %s", t, name, r)
		}
	}
	chain("refuse", "",
		"meta l4proto tcp reject with tcp reset",
		"reject with icmpx type admin-prohibited")
	chain("input", "type filter hook input priority filter",
		fmt.Sprintf("iifname %q goto refuse", match))
	chain("forward", "type filter hook forward priority filter",
		fmt.Sprintf("iifname %q oifname %q goto refuse", match, match))
	chain("postrouting", "type nat hook postrouting priority srcnat",
		fmt.Sprintf("ip saddr @uplink_pools oifname != %q masquerade", match))
	return b.String()
}

// Permits reports whether the policy lets the sandbox connect to addr
// under the node's configuration, as the gateway rules decide it. byName
// says the connection is for a name the policy already allowed, which
// opens any address that is neither blocked, private nor denied; otherwise
// the address itself must be allowed. The gateway's proxy uses it so that
// it and the rules agree.
func (e *Egress) Permits(p Policy, addr netip.Addr, byName bool) bool {
	addr = addr.Unmap()
	if p.Offline || !addr.Is4() {
		return false
	}
	if publicnet.Contains(alwaysBlocked, addr) || e.cfg.UplinkPool.Contains(addr) {
		return false
	}
	if publicnet.Contains(privateRanges, addr) && !publicnet.Contains(e.cfg.AllowPrivate, addr) {
		return false
	}
	if publicnet.Contains(p.Deny, addr) {
		return false
	}
	return byName || p.AllowInternet || publicnet.Contains(p.Allow, addr)
}

// maxDomainLen is the longest name DNS can carry (RFC 1035).
const maxDomainLen = 253

// ParseDomain checks a domain rule, "example.com" or "*.example.com", and
// returns it lower-cased without a trailing dot. A wildcard stands for any
// name below the domain, at any depth, but not the domain itself.
func ParseDomain(entry string) (string, error) {
	d := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(entry), "."))
	name := strings.TrimPrefix(d, "*.")
	if name == "" {
		return "", fmt.Errorf("%q is not a domain name", entry)
	}
	if len(name) > maxDomainLen {
		return "", fmt.Errorf("%q is longer than %d characters", entry, maxDomainLen)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", fmt.Errorf("%q: labels must be 1 to 63 characters", entry)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("%q: a label may not begin or end with a hyphen", entry)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c == '*' {
					return "", fmt.Errorf("%q: a wildcard is only allowed as the whole first label (*.example.com)", entry)
				}
				return "", fmt.Errorf("%q: %q is not allowed in a domain name", entry, c)
			}
		}
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return "", fmt.Errorf("%q is an address, not a domain name", entry)
	}
	allDigits := true
	for _, c := range labels[len(labels)-1] {
		if c < '0' || c > '9' {
			allDigits = false
		}
	}
	if allDigits {
		return "", fmt.Errorf("%q is not a domain name (its last label is numeric)", entry)
	}
	return d, nil
}

// MatchDomain reports whether name (lower-case, no trailing dot) is
// covered by a rule from ParseDomain.
func MatchDomain(rule, name string) bool {
	if suffix, ok := strings.CutPrefix(rule, "*"); ok {
		return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
	}
	return name == rule
}
