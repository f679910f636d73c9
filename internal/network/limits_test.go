package network

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network/nettest"
	"github.com/vishvananda/netlink"
)

func TestLimitsTighter(t *testing.T) {
	for _, c := range []struct{ a, b, want Limits }{
		{Limits{}, Limits{}, Limits{}},
		{Limits{200, 1024}, Limits{}, Limits{200, 1024}},
		{Limits{}, Limits{8, 20}, Limits{8, 20}},
		{Limits{200, 1024}, Limits{8, 2000}, Limits{8, 1024}},
		{Limits{200, 0}, Limits{-1, 5}, Limits{200, 5}},
	} {
		if got := c.a.Tighter(c.b); got != c.want {
			t.Errorf("%+v.Tighter(%+v) = %+v, want %+v", c.a, c.b, got, c.want)
		}
	}
}

func TestLimitRulesShape(t *testing.T) {
	rules := limitRules(20)
	for _, want := range []string{
		"delete table inet space_limits",
		"priority mangle",
		`iifname "veth0" ct state new ct count over 20 goto over_limit`,
		"reject with tcp reset",
		`comment "space max_connections=20"`,
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, rules)
		}
	}
	if unlimited := limitRules(0); strings.Contains(unlimited, "chain") || !strings.Contains(unlimited, "delete table inet space_limits") {
		t.Errorf("unlimited ruleset should only remove the table:\n%s", unlimited)
	}
}

// The node's limits, tightened by the sandbox's, hold in a real slot: the
// connection count refuses the connection past the bound at once and
// survives a re-apply, and traffic each way is shaped to the rate.
func TestLimitsEnforcedInGateway(t *testing.T) {
	f := newEgressFixture(t, "lim")
	f.egress.cfg.Limits = Limits{BandwidthMbit: 100, MaxConnections: 50}
	policy := Policy{AllowInternet: true, Limits: Limits{BandwidthMbit: 8, MaxConnections: 3}}
	f.apply(policy)

	// 8 Mbit/s is a million bytes a second, on both ends of the uplink.
	gw, err := f.slot.Gateway.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	gwHandle, err := netlink.NewHandleAt(gw)
	if err != nil {
		t.Fatal(err)
	}
	defer gwHandle.Close()
	hostHandle, err := netlink.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer hostHandle.Close()
	rateOf := func(h *netlink.Handle, name string) uint64 {
		t.Helper()
		link, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		tbf, err := rootTbf(h, link)
		if err != nil {
			t.Fatal(err)
		}
		if tbf == nil {
			return 0
		}
		return tbf.Rate
	}
	if up, down := rateOf(gwHandle, uplinkLink), rateOf(hostHandle, UplinkName(f.slot.Name)); up != 1_000_000 || down != 1_000_000 {
		t.Fatalf("token bucket rates: from the sandbox %d B/s, to it %d B/s; want 1000000 both", up, down)
	}

	server := f.internet.ServerAddr.String()
	holder := nettest.Hold(t, f.internet.Namespace, net.JoinHostPort(server, "9000"))
	held := net.JoinHostPort(server, "9000")
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c, err := nettest.DialFrom(f.slot.Sandbox.Path, "", held, 3*time.Second)
		if err != nil {
			t.Fatalf("connection %d of 3: %v", i+1, err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	f.refusedConnection(held)
	// Applying the same limits again keeps the count.
	f.apply(policy)
	f.refusedConnection(held)
	if got := holder.Accepted(); got != 3 {
		t.Fatalf("the far end accepted %d connections, want 3", got)
	}
	// A closed connection frees its place.
	conns[0].Close()
	conns = conns[1:]
	conns = append(conns, f.dialEventually(held))
	for _, c := range conns {
		c.Close()
	}

	// Both directions stay under the rate; going faster is impossible with
	// the bucket in place, however slow the machine.
	const size = 1 << 20
	nettest.ServeSource(t, f.internet.Namespace, net.JoinHostPort(server, "9001"), size)
	nettest.ServeSink(t, f.internet.Namespace, net.JoinHostPort(server, "9002"), size)
	measure := func(what, port string, transfer func(net.Conn) (int64, error)) {
		t.Helper()
		c := f.dialEventually(net.JoinHostPort(server, port))
		defer c.Close()
		began := time.Now()
		n, err := transfer(c)
		elapsed := time.Since(began)
		if err != nil || n != size {
			t.Fatalf("%s: %d bytes, %v", what, n, err)
		}
		if rate := float64(n) / elapsed.Seconds(); rate > 1.5*1_000_000 {
			t.Fatalf("%s ran at %.0f B/s, over the 1000000 B/s limit", what, rate)
		}
	}
	measure("download", "9001", func(c net.Conn) (int64, error) { return io.Copy(io.Discard, c) })
	measure("upload", "9002", func(c net.Conn) (int64, error) {
		if _, err := c.Write(make([]byte, size)); err != nil {
			return 0, err
		}
		answer, err := io.ReadAll(c)
		if string(answer) != "1048576" {
			return 0, fmt.Errorf("the sink answered %q (%v)", answer, err)
		}
		return size, nil
	})

	// Without limits on either side, nothing is left behind.
	f.egress.cfg.Limits = Limits{}
	f.apply(Policy{AllowInternet: true})
	if up, down := rateOf(gwHandle, uplinkLink), rateOf(hostHandle, UplinkName(f.slot.Name)); up != 0 || down != 0 {
		t.Fatalf("token buckets left after the limits were lifted: %d, %d", up, down)
	}
	if rules, loaded := listTable(f.slot.Gateway, limitsTable); loaded {
		t.Fatalf("connection table left after the limit was lifted:\n%s", rules)
	}
}

// refusedConnection asserts a connection from the sandbox to addr is
// refused with a reset, at once.
func (f *egressFixture) refusedConnection(addr string) {
	f.t.Helper()
	c, err := nettest.DialFrom(f.slot.Sandbox.Path, "", addr, 3*time.Second)
	if err == nil {
		c.Close()
		f.t.Fatalf("a connection past the limit to %s was let through", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		f.t.Fatalf("connection past the limit: want it refused, got %v", err)
	}
}

// dialEventually connects from the sandbox to addr once the gateway has
// let go of connections just closed, which takes their closing handshake.
func (f *egressFixture) dialEventually(addr string) net.Conn {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := nettest.DialFrom(f.slot.Sandbox.Path, "", addr, 3*time.Second)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("no connection to %s after others were closed: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
