package network

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network/nettest"
	"github.com/vishvananda/netlink"
)

// testPool is the default pool every installation on a test host shares
// (the server's default too), so tests and a running server coexist.
var testPool = netip.MustParsePrefix("10.200.0.0/16")

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"203.0.113.7", " 198.51.100.0/24 ", "192.0.2.9/24"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"203.0.113.7/32", "198.51.100.0/24", "192.0.2.0/24"}
	for i, p := range got {
		if p.String() != want[i] {
			t.Errorf("entry %d: got %s, want %s", i, p, want[i])
		}
	}
	for _, bad := range []string{"example.com", "fc00::/7", "10.0.0.0/33", ""} {
		if _, err := ParsePrefixes([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestMinimalPrefixesDropsCovered(t *testing.T) {
	in := []netip.Prefix{
		netip.MustParsePrefix("10.1.2.3/32"), netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24"),
	}
	got := fmt.Sprint(minimalPrefixes(in))
	if got != "[10.0.0.0/8 192.0.2.0/24]" {
		t.Fatalf("got %s", got)
	}
}

func TestGatewayRulesShape(t *testing.T) {
	p := Policy{AllowInternet: false, Allow: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
	rules := gatewayRules(p, testPool, nil)
	for _, want := range []string{
		"delete table inet space",
		"ip saddr != 169.254.0.21 drop",
		"meta nfproto ipv6 drop",
		"10.200.0.0/16",
		"169.254.0.0/16",
		"elements = { 203.0.113.0/24 }",
		`iifname "veth0" goto refuse`,
		"reject with tcp reset",
		`oifname "up0" masquerade`,
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, rules)
		}
	}
	// Without the internet the sandbox chain must end in a refusal.
	chain := rules[strings.Index(rules, "chain from_sandbox"):]
	chain = chain[:strings.Index(chain, "}")]
	if !strings.HasSuffix(strings.TrimSpace(chain), "goto denied") {
		t.Errorf("from_sandbox does not end in a refusal:\n%s", chain)
	}
	if strings.Contains(gatewayRules(Policy{Offline: true, AllowInternet: true}, testPool, nil), "\t\taccept\n") {
		t.Error("an offline policy accepts traffic")
	}
}

// TestRulesetsLoad checks both rendered rulesets with nft itself (in a
// scratch namespace, so the host is not touched).
func TestRulesetsLoad(t *testing.T) {
	requireRoot(t)
	s, err := testSlots.Create(fmt.Sprintf("nftchk%d", time.Now().UnixNano()%100000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Destroy() })
	allowPrivate := []netip.Prefix{netip.MustParsePrefix("10.50.0.0/16")}
	for _, p := range []Policy{
		{}, {Offline: true}, {AllowInternet: true},
		{AllowInternet: true, Deny: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("203.0.113.9/32")}},
		{AllowDomains: []string{"example.com", "*.example.org"}}, {AllowInternet: true, InspectHTTP: true},
	} {
		if err := loadRules(s.Gateway, gatewayRules(p, testPool, allowPrivate)); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
	}
	for i := 0; i < 2; i++ { // loading again must be harmless
		if err := loadRules(s.Sandbox, hostRules(testPool)); err != nil {
			t.Fatal(err)
		}
	}
}

// egressFixture is a slot with an uplink, a fake internet and helpers to
// connect from the sandbox side, which is a plain namespace here (no sandbox runtime).
type egressFixture struct {
	t        *testing.T
	egress   *Egress
	slot     *Slot
	internet *nettest.Internet
}

func newEgressFixture(t *testing.T, name string) *egressFixture {
	requireRoot(t)
	internet := nettest.StartInternet(t, "net", netip.MustParsePrefix("198.51.100.0/24"))
	e, err := NewEgress(EgressConfig{UplinkPool: testPool})
	if err != nil {
		t.Fatal(err)
	}
	s, err := testSlots.Create(fmt.Sprintf("%s%d", name, time.Now().UnixNano()%100000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			t.Error(err)
		}
	})
	return &egressFixture{t: t, egress: e, slot: s, internet: internet}
}

func (f *egressFixture) apply(p Policy) {
	f.t.Helper()
	if err := f.egress.Apply(f.slot, p); err != nil {
		f.t.Fatal(err)
	}
}

// fetch GETs url from the sandbox namespace.
func (f *egressFixture) fetch(url string) (string, error) {
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		Dial: func(network, addr string) (net.Conn, error) {
			return nettest.DialFrom(f.slot.Sandbox.Path, "", addr, 3*time.Second)
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// refused asserts a connection from the sandbox to addr fails with a
// refusal, as a reject rule makes it: a silent drop would end in the
// dial's timeout instead, which is not one of the errors taken here (so
// no wall-clock bound is needed, and none flakes on a busy host).
func (f *egressFixture) refused(addr string) {
	f.t.Helper()
	conn, err := nettest.DialFrom(f.slot.Sandbox.Path, "", addr, 3*time.Second)
	if err == nil {
		conn.Close()
		f.t.Fatalf("sandbox reached %s", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EHOSTUNREACH) &&
		!errors.Is(err, syscall.ENETUNREACH) && !errors.Is(err, syscall.EACCES) {
		f.t.Fatalf("connect to %s: want a refusal, got %v", addr, err)
	}
}

func TestEgressAllowsInternetAndKeepsTheAgentChannel(t *testing.T) {
	f := newEgressFixture(t, "egr")
	f.apply(Policy{AllowInternet: true})
	body, err := f.fetch(f.internet.URL())
	if err != nil || body != nettest.Greeting {
		t.Fatalf("fetch: %q, %v", body, err)
	}
	// The agent channel: the node dials in from the gateway namespace.
	l := nettest.ListenIn(t, f.slot.Sandbox.Path, net.JoinHostPort(SandboxAddr, "49983"))
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("agent"))
			c.Close()
		}
	}()
	conn, err := f.slot.DialContext(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(conn)
	conn.Close()
	if string(got) != "agent" {
		t.Fatalf("agent channel read %q", got)
	}
	// Applying again is idempotent and keeps the same uplink.
	host1, _, _ := UplinkAddrs(f.slot.Name)
	f.apply(Policy{AllowInternet: true})
	host2, _, ok := UplinkAddrs(f.slot.Name)
	if !ok || host1 != host2 || !testPool.Contains(host1) {
		t.Fatalf("uplink moved or left the pool: %s -> %s", host1, host2)
	}
}

func TestEgressRefusesWhatPolicyDenies(t *testing.T) {
	f := newEgressFixture(t, "deny")
	server := net.JoinHostPort(f.internet.ServerAddr.String(), "80")

	f.apply(Policy{AllowInternet: false})
	f.refused(server)

	f.apply(Policy{AllowInternet: false, Allow: []netip.Prefix{netip.PrefixFrom(f.internet.ServerAddr, 32)}})
	if _, err := f.fetch(f.internet.URL()); err != nil {
		t.Fatalf("allowed address: %v", err)
	}

	f.apply(Policy{AllowInternet: true, Deny: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}})
	f.refused(server)

	// Deny wins over allow.
	f.apply(Policy{Allow: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, Deny: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}})
	f.refused(server)
}

func TestEgressNeverReachesHostNeighboursOrReservedRanges(t *testing.T) {
	f := newEgressFixture(t, "iso")
	f.apply(Policy{AllowInternet: true, Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
	hostUplink, gwUplink, ok := UplinkAddrs(f.slot.Name)
	if !ok {
		t.Fatal("no uplink")
	}
	// A host service on every address, including the host's end of the
	// fake internet: a public-looking address of the host itself.
	hostListener, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostListener.Close()
	go func() {
		for {
			c, err := hostListener.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := fmt.Sprint(hostListener.Addr().(*net.TCPAddr).Port)

	// A second slot stands for a neighbouring sandbox.
	other, err := testSlots.Create(fmt.Sprintf("nbr%d", time.Now().UnixNano()%100000))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy()
	if err := f.egress.Apply(other, Policy{AllowInternet: true}); err != nil {
		t.Fatal(err)
	}
	_, otherGw, _ := UplinkAddrs(other.Name)
	nettest.ListenIn(t, other.Gateway.Path, net.JoinHostPort(otherGw.String(), "8080"))

	for _, addr := range []string{
		net.JoinHostPort(hostUplink.String(), port),                       // the host's end of the uplink
		net.JoinHostPort(f.internet.HostAddr.String(), port),              // another host address
		net.JoinHostPort(gwUplink.String(), port),                         // the gateway itself
		net.JoinHostPort(GatewayAddr, port),                               // the gateway, inside
		net.JoinHostPort(otherGw.String(), "8080"),                        // another slot
		"169.254.169.254:80",                                              // metadata
		"10.1.2.3:80", "192.168.1.1:80", "172.16.0.1:80", "100.64.0.1:80", // private
		"224.0.0.1:80",
	} {
		f.refused(addr)
	}
	if _, err := nettest.DialFrom(f.slot.Sandbox.Path, "", "127.0.0.1:"+port, time.Second); err == nil {
		t.Fatal("the sandbox's loopback reached the host's")
	}
}

func TestEgressOperatorAllowsPrivateRange(t *testing.T) {
	requireRoot(t)
	// The fake internet sits in a range treated as private here (the
	// benchmarking block), standing in for an operator's internal service.
	internet := nettest.StartInternet(t, "priv", netip.MustParsePrefix("198.18.7.0/24"))
	server := net.JoinHostPort(internet.ServerAddr.String(), "80")
	s, err := testSlots.Create(fmt.Sprintf("prv%d", time.Now().UnixNano()%100000))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	closed, err := NewEgress(EgressConfig{UplinkPool: testPool})
	if err != nil {
		t.Fatal(err)
	}
	f := &egressFixture{t: t, egress: closed, slot: s, internet: internet}
	f.apply(Policy{AllowInternet: true})
	f.refused(server)

	open, err := NewEgress(EgressConfig{UplinkPool: testPool, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("198.18.7.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	f.egress = open
	if _, err := f.fetch(internet.URL()); err == nil {
		t.Fatal("reachable before the policy was applied again")
	}
	f.apply(Policy{AllowInternet: true})
	if _, err := f.fetch(internet.URL()); err != nil {
		t.Fatalf("operator-allowed private range: %v", err)
	}
	// A sandbox's own deny still applies.
	f.apply(Policy{AllowInternet: true, Deny: []netip.Prefix{netip.PrefixFrom(internet.ServerAddr, 32)}})
	f.refused(server)
}

func TestEgressDropsSpoofedSources(t *testing.T) {
	f := newEgressFixture(t, "spf")
	f.apply(Policy{AllowInternet: true})
	// Give the sandbox side other addresses and send from them.
	server := net.JoinHostPort(f.internet.ServerAddr.String(), "80")
	for _, spoofed := range []string{"10.9.9.9", "169.254.0.25", "198.51.100.77"} {
		out, err := nettest.Command(f.slot.Sandbox.Path, "ip", "addr", "add", spoofed+"/32", "dev", "eth0").CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if conn, err := nettest.DialFrom(f.slot.Sandbox.Path, spoofed, server, time.Second); err == nil {
			conn.Close()
			t.Fatalf("a connection from spoofed source %s got through", spoofed)
		}
	}
	// The real address still works.
	if _, err := f.fetch(f.internet.URL()); err != nil {
		t.Fatal(err)
	}
}

func TestOfflineRemovesUplinkAndDestroyCleansUp(t *testing.T) {
	f := newEgressFixture(t, "off")
	f.apply(Policy{AllowInternet: true})
	if _, err := netlink.LinkByName(UplinkName(f.slot.Name)); err != nil {
		t.Fatal("no uplink after apply")
	}
	f.apply(Policy{Offline: true, AllowInternet: true})
	if _, err := netlink.LinkByName(UplinkName(f.slot.Name)); err == nil {
		t.Fatal("offline slot kept its uplink")
	}
	f.refused(net.JoinHostPort(f.internet.ServerAddr.String(), "80"))
	f.apply(Policy{AllowInternet: true})
	if _, err := f.fetch(f.internet.URL()); err != nil {
		t.Fatalf("back online: %v", err)
	}
	if err := f.slot.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(UplinkName(f.slot.Name)); err == nil {
		t.Fatal("uplink outlived its slot")
	}
}

// A held policy refuses everything until the hold is lifted, and lifting
// it (the cheap path: one set element) opens exactly that policy.
func TestEgressHoldRefusesUntilReleased(t *testing.T) {
	f := newEgressFixture(t, "hold")
	server := net.JoinHostPort(f.internet.ServerAddr.String(), "80")
	open := Policy{AllowInternet: true}
	held := open
	held.Hold = true

	f.apply(held)
	f.refused(server)
	f.apply(open)
	if body, err := f.fetch(f.internet.URL()); err != nil || body != nettest.Greeting {
		t.Fatalf("released sandbox: %q, %v", body, err)
	}
	f.apply(held)
	f.refused(server)
	f.apply(open)
	if body, err := f.fetch(f.internet.URL()); err != nil || body != nettest.Greeting {
		t.Fatalf("released again: %q, %v", body, err)
	}
}

// What Egress remembers of a slot's rules must not outlive its namespace:
// a slot made anew under the same name (a restore) gets its rules loaded.
func TestEgressReloadsRulesIntoARebuiltSlot(t *testing.T) {
	f := newEgressFixture(t, "rebuild")
	server := net.JoinHostPort(f.internet.ServerAddr.String(), "80")
	f.apply(Policy{})
	f.refused(server)
	if err := f.slot.Destroy(); err != nil {
		t.Fatal(err)
	}
	s, err := testSlots.Create(f.slot.Name)
	if err != nil {
		t.Fatal(err)
	}
	f.slot = s
	f.apply(Policy{})
	f.refused(server)
}
