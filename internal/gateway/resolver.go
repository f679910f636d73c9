package gateway

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/space-platform/space/internal/network"
)

// upstream is the resolver allowed names are forwarded to.
type upstream struct {
	addr string
	udp  *dns.Client
	tcp  *dns.Client
}

func newUpstream(addr string) *upstream {
	return &upstream{
		addr: addr,
		udp:  &dns.Client{Net: "udp", Timeout: 5 * time.Second, UDPSize: dns.DefaultMsgSize},
		tcp:  &dns.Client{Net: "tcp", Timeout: 5 * time.Second},
	}
}

// exchange forwards a query, over TCP when the UDP answer was truncated.
func (u *upstream) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	r, _, err := u.udp.ExchangeContext(ctx, q, u.addr)
	if err == nil && r.Truncated {
		r, _, err = u.tcp.ExchangeContext(ctx, q, u.addr)
	}
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", u.addr, err)
	}
	return r, nil
}

// lookup returns name's IPv4 addresses (following whatever CNAMEs the
// upstream resolved) and the answer's smallest TTL.
func (u *upstream) lookup(ctx context.Context, name string) ([]netip.Addr, uint32, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, err := u.exchange(ctx, q)
	if err != nil {
		return nil, 0, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, 0, fmt.Errorf("resolve %s: %s", name, dns.RcodeToString[r.Rcode])
	}
	var addrs []netip.Addr
	ttl := uint32(0)
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			if addr, ok := netip.AddrFromSlice(a.A.To4()); ok {
				addrs = append(addrs, addr)
				if ttl == 0 || a.Hdr.Ttl < ttl {
					ttl = a.Hdr.Ttl
				}
			}
		}
	}
	if len(addrs) == 0 {
		return nil, 0, fmt.Errorf("resolve %s: no IPv4 address", name)
	}
	return addrs, ttl, nil
}

// resolver is a slot's DNS server on the gateway address.
type resolver struct {
	udp, tcp *dns.Server
}

func startResolver(s *slotGateway, pc net.PacketConn, l net.Listener) *resolver {
	h := dns.HandlerFunc(s.serveDNS)
	r := &resolver{
		udp: &dns.Server{PacketConn: pc, Handler: h},
		tcp: &dns.Server{Listener: l, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }},
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); _ = r.udp.ActivateAndServe() }()
	go func() { defer s.wg.Done(); _ = r.tcp.ActivateAndServe() }()
	return r
}

func (r *resolver) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.udp.ShutdownContext(ctx)
	_ = r.tcp.ShutdownContext(ctx)
	// Shutdown of a server that never got going leaves its socket open.
	_ = r.udp.PacketConn.Close()
	_ = r.tcp.Listener.Close()
}

// canonicalName lower-cases a DNS name and drops the final dot.
func canonicalName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// nameVerdict is how the policy treats a name.
type nameVerdict int

const (
	nameAllowed nameVerdict = iota
	// nameDenied is named by a deny rule.
	nameDenied
	// nameNotAllowed is outside an allow list.
	nameNotAllowed
)

// judgeName applies the policy's domain rules to a canonical name. Deny
// rules win; then an allow rule or AllowInternet lets it through.
func judgeName(p network.Policy, name string) nameVerdict {
	if p.Offline {
		return nameNotAllowed
	}
	for _, d := range p.DenyDomains {
		if network.MatchDomain(d, name) {
			return nameDenied
		}
	}
	if p.AllowInternet {
		return nameAllowed
	}
	for _, d := range p.AllowDomains {
		if network.MatchDomain(d, name) {
			return nameAllowed
		}
	}
	return nameNotAllowed
}

// serveDNS answers one query. A name the policy refuses is never sent
// upstream (no lookups as a side channel); an allowed one is, and only
// the addresses the policy would let the sandbox reach are kept and
// opened.
func (s *slotGateway) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		resp.SetRcode(req, dns.RcodeNotImplemented)
		_ = w.WriteMsg(resp)
		return
	}
	q := req.Question[0]
	name := canonicalName(q.Name)
	p := *s.policy.Load()
	switch judgeName(p, name) {
	case nameDenied:
		s.denied("DNS lookup of %s (denied domain)", name)
		resp.SetRcode(req, dns.RcodeNameError)
		_ = w.WriteMsg(resp)
		return
	case nameNotAllowed:
		s.denied("DNS lookup of %s (not in the allowed domains)", name)
		resp.SetRcode(req, dns.RcodeRefused)
		_ = w.WriteMsg(resp)
		return
	}

	fwd := new(dns.Msg)
	fwd.SetQuestion(q.Name, q.Qtype)
	fwd.Question[0].Qclass = q.Qclass
	fwd.RecursionDesired = true
	fwd.SetEdns0(dns.DefaultMsgSize, false)
	ctx, cancel := context.WithTimeout(s.ctx, 6*time.Second)
	defer cancel()
	up, err := s.g.upstream.exchange(ctx, fwd)
	if err != nil {
		s.g.log.Warn("DNS upstream", "sandbox", s.id, "name", name, "err", err)
		resp.SetRcode(req, dns.RcodeServerFailure)
		_ = w.WriteMsg(resp)
		return
	}

	resp.SetRcode(req, up.Rcode)
	resp.RecursionAvailable = true
	var opened []netip.Addr
	ttl := uint32(0)
	var dropped []string
	for _, rr := range up.Answer {
		switch rr := rr.(type) {
		case *dns.AAAA:
			continue // no IPv6 egress: an AAAA would only stall clients
		case *dns.A:
			addr, ok := netip.AddrFromSlice(rr.A.To4())
			if !ok || !s.g.cfg.Egress.Permits(p, addr, true) {
				// Blocked, private or denied: answering it would at best
				// fail and at worst aim the sandbox at internal services
				// (DNS rebinding).
				dropped = append(dropped, rr.A.String())
				continue
			}
			opened = append(opened, addr)
			if ttl == 0 || rr.Hdr.Ttl < ttl {
				ttl = rr.Hdr.Ttl
			}
		}
		resp.Answer = append(resp.Answer, rr)
	}
	for _, rr := range up.Ns {
		if rr.Header().Rrtype != dns.TypeA && rr.Header().Rrtype != dns.TypeAAAA {
			resp.Ns = append(resp.Ns, rr)
		}
	}
	if len(dropped) > 0 {
		s.denied("DNS answer for %s: address %s (blocked, private or denied range)", name, strings.Join(dropped, ", "))
	}
	if len(opened) > 0 {
		enforce := !p.AllowInternet
		if err := s.answers.open(name, opened, answerTTL(ttl), enforce); err != nil {
			s.g.log.Warn("open DNS answer", "sandbox", s.id, "name", name, "err", err)
			if enforce {
				resp = new(dns.Msg)
				resp.SetRcode(req, dns.RcodeServerFailure)
			}
		}
	}
	if _, isUDP := w.RemoteAddr().(*net.UDPAddr); isUDP {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		resp.Truncate(size)
	}
	_ = w.WriteMsg(resp)
}

// refill reopens the live answers p still allows after the slot's rules
// were reloaded.
func (s *slotGateway) refill(p network.Policy) error {
	if p.Offline || p.AllowInternet {
		return nil // the set is not consulted
	}
	return s.answers.refill(func(name string) bool { return judgeName(p, name) == nameAllowed })
}
