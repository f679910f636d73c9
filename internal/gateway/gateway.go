package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"github.com/space-platform/space/internal/network"
)

// Config configures a node's gateway services.
type Config struct {
	// Egress is the node's egress; its Permits decides addresses the same
	// way the gateway rules do.
	Egress *network.Egress
	// Upstream is the resolver ("host:port") allowed names are resolved
	// with. It is dialed from the host's namespace, so a resolver on the
	// host's loopback works.
	Upstream string
	// Interceptor, if set, terminates TLS for hosts with credential rules.
	Interceptor Interceptor
	// OnDenied is told of every refusal, as a one-line message naming what
	// was refused. It is called from one goroutine at a time, at a bounded
	// rate per sandbox.
	OnDenied func(sandboxID, message string)
	Logger   *slog.Logger
}

// Gateway runs the egress services of every slot on the node.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	upstream *upstream
	events   chan denial

	mu     sync.Mutex
	slots  map[string]*slotGateway
	closed bool
	done   chan struct{}
}

type denial struct{ id, message string }

// DefaultUpstream returns the first nameserver of the host's
// /etc/resolv.conf as host:port.
func DefaultUpstream() (string, error) {
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return "", fmt.Errorf("read the host's resolver: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			return net.JoinHostPort(strings.Split(f[1], "%")[0], "53"), nil
		}
	}
	return "", fmt.Errorf("/etc/resolv.conf names no nameserver; set the DNS upstream explicitly")
}

// New returns a gateway with no slots.
func New(cfg Config) (*Gateway, error) {
	if cfg.Egress == nil {
		return nil, fmt.Errorf("gateway: no egress configured")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
		return nil, fmt.Errorf("DNS upstream %q: want host:port", cfg.Upstream)
	}
	g := &Gateway{
		cfg: cfg, log: cfg.Logger, upstream: newUpstream(cfg.Upstream),
		events: make(chan denial, 256), slots: map[string]*slotGateway{}, done: make(chan struct{}),
	}
	go g.deliverEvents()
	return g, nil
}

// Apply starts the slot's services unless they run, and makes p the
// policy they enforce from now on. It runs after the slot's rules were
// (re)loaded, which empties the set of addresses DNS answers opened, so
// it refills the set with the answers still live that p still allows.
func (g *Gateway) Apply(slot *network.Slot, p network.Policy) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("gateway of %s: the gateway is closed", slot.Name)
	}
	s := g.slots[slot.Name]
	if s != nil && !s.sameNamespace() {
		// The slot was rebuilt under the services (a release was missed):
		// their sockets live in a namespace nothing routes to any more.
		s.close()
		delete(g.slots, slot.Name)
		s = nil
	}
	if s == nil {
		var err error
		if s, err = g.start(slot, p); err != nil {
			return fmt.Errorf("gateway of %s: %w", slot.Name, err)
		}
		g.slots[slot.Name] = s
		return nil
	}
	s.policy.Store(&p)
	if err := s.refill(p); err != nil {
		return fmt.Errorf("gateway of %s: %w", slot.Name, err)
	}
	return nil
}

// Release stops the slot's services and closes every socket they hold in
// its gateway namespace (the namespace lingers while one is open). It is
// safe for a slot without services.
func (g *Gateway) Release(slotName string) {
	g.mu.Lock()
	s := g.slots[slotName]
	delete(g.slots, slotName)
	g.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// Close releases every slot's services.
func (g *Gateway) Close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	slots := g.slots
	g.slots = map[string]*slotGateway{}
	g.mu.Unlock()
	for _, s := range slots {
		s.close()
	}
	close(g.done)
}

// denied queues a denial event. The queue is bounded and events beyond it
// are dropped: recording is disk I/O and must never hold up the resolver
// or the proxy.
func (g *Gateway) denied(s *slotGateway, message string) {
	g.log.Debug("egress denied", "sandbox", s.id, "what", message)
	if g.cfg.OnDenied == nil || !s.limiter.allow() {
		return
	}
	select {
	case g.events <- denial{s.id, message}:
	default:
	}
}

func (g *Gateway) deliverEvents() {
	for {
		select {
		case ev := <-g.events:
			g.cfg.OnDenied(ev.id, ev.message)
		case <-g.done:
			return
		}
	}
}

// eventLimiter is a token bucket: a burst of eventBurst events, then one
// per eventInterval, per sandbox. What it drops is counted and reported
// with the next event that passes.
type eventLimiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

const (
	eventBurst    = 20
	eventInterval = time.Second
)

func (l *eventLimiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.last.IsZero() {
		l.tokens = eventBurst
	} else {
		l.tokens = min(eventBurst, l.tokens+float64(now.Sub(l.last))/float64(eventInterval))
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false
	}
	l.tokens--
	return true
}

// takeSuppressed returns how many events were dropped since it was last
// called.
func (l *eventLimiter) takeSuppressed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.suppressed
	l.suppressed = 0
	return n
}

// slotGateway is one slot's resolver, proxy and denial log.
type slotGateway struct {
	g       *Gateway
	id      string
	slot    *network.Slot
	ns      netns.NsHandle // keeps a handle for nftables; closed on release
	policy  atomic.Pointer[network.Policy]
	limiter eventLimiter
	ctx     context.Context
	cancel  context.CancelFunc

	dns     *resolver
	answers *answerSet
	nflog   *nflog
	proxies []net.Listener

	connMu sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func (g *Gateway) start(slot *network.Slot, p network.Policy) (_ *slotGateway, err error) {
	ns, err := slot.Gateway.Open()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &slotGateway{g: g, id: slot.Name, slot: slot, ns: ns, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	s.policy.Store(&p)
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.answers = newAnswerSet(ns)

	var udp net.PacketConn
	var tcpDNS, httpL, tlsL net.Listener
	var log *nflog
	err = network.InNamespace(ns, func() error {
		var lc net.ListenConfig
		var err error
		if udp, err = lc.ListenPacket(ctx, "udp4", fmt.Sprintf("%s:%d", network.GatewayAddr, network.ResolverPort)); err != nil {
			return fmt.Errorf("resolver: %w", err)
		}
		if tcpDNS, err = lc.Listen(ctx, "tcp4", fmt.Sprintf("%s:%d", network.GatewayAddr, network.ResolverPort)); err != nil {
			udp.Close()
			return fmt.Errorf("resolver: %w", err)
		}
		if httpL, err = lc.Listen(ctx, "tcp4", fmt.Sprintf("%s:%d", network.GatewayAddr, network.HTTPProxyPort)); err != nil {
			udp.Close()
			tcpDNS.Close()
			return fmt.Errorf("HTTP proxy: %w", err)
		}
		if tlsL, err = lc.Listen(ctx, "tcp4", fmt.Sprintf("%s:%d", network.GatewayAddr, network.TLSProxyPort)); err != nil {
			udp.Close()
			tcpDNS.Close()
			httpL.Close()
			return fmt.Errorf("TLS proxy: %w", err)
		}
		if log, err = openNflog(network.DenyLogGroup); err != nil {
			udp.Close()
			tcpDNS.Close()
			httpL.Close()
			tlsL.Close()
			return fmt.Errorf("denial log: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.proxies = []net.Listener{httpL, tlsL}
	s.nflog = log
	s.dns = startResolver(s, udp, tcpDNS)
	s.wg.Add(3)
	go func() { defer s.wg.Done(); s.serveProxy(httpL, false) }()
	go func() { defer s.wg.Done(); s.serveProxy(tlsL, true) }()
	go func() { defer s.wg.Done(); s.watchDenials() }()
	return s, nil
}

func (s *slotGateway) sameNamespace() bool {
	h, err := s.slot.Gateway.Open()
	if err != nil {
		return false
	}
	defer h.Close()
	return h.Equal(s.ns)
}

// close stops the services and closes every socket of the slot.
func (s *slotGateway) close() {
	s.cancel()
	if s.dns != nil {
		s.dns.shutdown()
	}
	for _, l := range s.proxies {
		l.Close()
	}
	if s.nflog != nil {
		s.nflog.Close()
	}
	s.connMu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.connMu.Unlock()
	s.wg.Wait()
	if s.answers != nil {
		s.answers.close()
	}
	s.ns.Close()
}

// track registers a connection to close on release; it refuses (and
// closes the connection) once the slot is released.
func (s *slotGateway) track(c net.Conn) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *slotGateway) untrack(c net.Conn) {
	s.connMu.Lock()
	delete(s.conns, c)
	s.connMu.Unlock()
	c.Close()
}

func (s *slotGateway) denied(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if n := s.limiter.takeSuppressed(); n > 0 {
		msg += fmt.Sprintf(" (%d more denials were not recorded)", n)
	}
	s.g.denied(s, msg)
}

// dial connects to addr from the slot's gateway namespace, so the
// connection leaves through the slot's uplink like the sandbox's own
// traffic would.
func (s *slotGateway) dial(ctx context.Context, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return s.slot.DialContext(ctx, "tcp4", addr)
}
