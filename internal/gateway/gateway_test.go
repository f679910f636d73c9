package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/network/nettest"
)

// fixture is a slot whose sandbox side is a plain namespace (no gVisor),
// with the gateway's services and a fake web behind the uplink.
type fixture struct {
	t      *testing.T
	web    *nettest.Web
	egress *network.Egress
	gw     *Gateway
	slot   *network.Slot

	mu     sync.Mutex
	denied []string
}

func newFixture(t *testing.T) *fixture {
	if os.Geteuid() != 0 {
		t.Skip("gateway tests need root (namespaces, nftables)")
	}
	// A range no other package's tests use: they run in parallel.
	web, err := nettest.StartWeb("gw", netip.MustParsePrefix("192.175.48.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(web.Close)
	f := &fixture{t: t, web: web}
	if f.egress, err = network.NewEgress(network.EgressConfig{UplinkPool: netip.MustParsePrefix("10.200.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	f.gw, err = New(Config{Egress: f.egress, Upstream: web.DNS.String(), OnDenied: func(id, msg string) {
		f.mu.Lock()
		f.denied = append(f.denied, msg)
		f.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.gw.Close)
	slots, err := network.OpenNamespaces(filepath.Join(t.TempDir(), "netns"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slots.Close() })
	if f.slot, err = slots.Create(fmt.Sprintf("gwt%d", time.Now().UnixNano()%100000)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.gw.Release(f.slot.Name)
		if err := f.slot.Destroy(); err != nil {
			t.Error(err)
		}
	})
	return f
}

func (f *fixture) apply(p network.Policy) {
	f.t.Helper()
	if err := f.egress.Apply(f.slot, p); err != nil {
		f.t.Fatal(err)
	}
	if err := f.gw.Apply(f.slot, p); err != nil {
		f.t.Fatal(err)
	}
}

// lookup asks server (any address: the gateway takes every DNS packet)
// for name's A records from the sandbox side.
func (f *fixture) lookup(server netip.AddrPort, name string) (rcode int, addrs []string) {
	f.t.Helper()
	var resp *dns.Msg
	err := nettest.InNamespace(f.slot.Sandbox.Path, func() error {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		var err error
		resp, _, err = (&dns.Client{Timeout: 3 * time.Second}).Exchange(q, server.String())
		return err
	})
	if err != nil {
		f.t.Fatalf("look up %s at %s: %v", name, server, err)
	}
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			addrs = append(addrs, a.A.String())
		}
	}
	return resp.Rcode, addrs
}

// get fetches url from the sandbox side, connecting to addr whatever the
// URL's host says (like curl --resolve).
func (f *fixture) get(url, addr string) (string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.web.CAPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return nettest.DialFrom(f.slot.Sandbox.Path, "", addr, 3*time.Second)
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), nil
}

func (f *fixture) mustGet(url, addr, want string) {
	f.t.Helper()
	body, err := f.get(url, addr)
	if err != nil || body != want {
		f.t.Fatalf("GET %s via %s: %q, %v; want %q", url, addr, body, err, want)
	}
}

// mustFail asserts the fetch is refused, quickly.
func (f *fixture) mustFail(url, addr string) error {
	f.t.Helper()
	began := time.Now()
	body, err := f.get(url, addr)
	if err == nil {
		f.t.Fatalf("GET %s via %s got through: %q", url, addr, body)
	}
	if d := time.Since(began); d > 3*time.Second {
		f.t.Fatalf("GET %s via %s: refusal took %s", url, addr, d)
	}
	return err
}

func (f *fixture) sawDenial(substr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.denied {
		if strings.Contains(d, substr) {
			return true
		}
	}
	return false
}

// waitDenial waits for a denial event (delivered asynchronously).
func (f *fixture) waitDenial(substr string) {
	f.t.Helper()
	for i := 0; i < 100; i++ {
		if f.sawDenial(substr) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t.Fatalf("no denial mentioning %q; got %q", substr, f.denied)
}

func TestGatewayAllowList(t *testing.T) {
	f := newFixture(t)
	w := f.web
	f.apply(network.Policy{AllowDomains: []string{nettest.AllowedName, nettest.RebindName, nettest.MixedName}})
	shared := w.SharedAddr.String()
	gwDNS := netip.MustParseAddrPort(network.GatewayAddr + ":53")

	// An allowed name resolves and is reachable over HTTP and HTTPS.
	if rc, addrs := f.lookup(gwDNS, nettest.AllowedName); rc != dns.RcodeSuccess || len(addrs) != 1 || addrs[0] != shared {
		t.Fatalf("allowed name: rcode %d, %v", rc, addrs)
	}
	f.mustGet("http://allowed.test/", shared+":80", nettest.WebBody("allowed.test", "", w.SharedAddr))
	f.mustGet("https://allowed.test/", shared+":443", nettest.WebBody("allowed.test", "allowed.test", w.SharedAddr))

	// A name outside the list is refused by the resolver...
	if rc, _ := f.lookup(gwDNS, nettest.OtherName); rc != dns.RcodeRefused {
		t.Fatalf("other name: rcode %s", dns.RcodeToString[rc])
	}
	f.waitDenial("DNS lookup of other.test")
	// ...and by the proxy, even at an address an allowed name shares.
	f.mustFail("https://denied.test/", shared+":443")
	f.waitDenial("TLS to denied.test")
	if body, err := f.get("http://denied.test/", shared+":80"); err == nil || !strings.Contains(body, "denied.test") {
		t.Fatalf("HTTP to denied.test: %q, %v", body, err)
	}
	f.waitDenial("HTTP to denied.test")

	// An address literal, with no name or under its own, is refused.
	f.mustFail("http://"+shared+"/", shared+":80")
	f.mustFail("https://"+w.OtherAddr.String()+"/", w.OtherAddr.String()+":443")
	// Other ports follow the addresses DNS opened: the shared one is open
	// (that is the price of sharing), the other one is not.
	f.mustGet("http://x/", shared+":"+nettest.PlainPort, nettest.WebBody("x", "", w.SharedAddr))
	f.mustFail("http://x/", w.OtherAddr.String()+":"+nettest.PlainPort)

	// Another resolver never answers: the gateway does, by the policy.
	if rc, addrs := f.lookup(w.RogueDNS, nettest.AllowedName); rc != dns.RcodeSuccess || len(addrs) != 1 || addrs[0] != shared {
		t.Fatalf("query to the rogue resolver: rcode %d, %v (want the gateway's answer)", rc, addrs)
	}
	// A forged answer gets the sandbox nowhere: the proxy resolves the
	// name itself, and the forged address was never opened.
	f.mustGet("http://allowed.test/", w.RogueAddr.String()+":80", nettest.WebBody("allowed.test", "", w.SharedAddr))
	if c, err := nettest.DialFrom(f.slot.Sandbox.Path, "", w.RogueAddr.String()+":"+nettest.PlainPort, 3*time.Second); err == nil {
		c.Close()
		t.Fatal("reached the forged address")
	} else if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.EACCES) {
		t.Fatalf("forged address: want a refusal, got %v", err)
	}
	f.waitDenial(w.RogueAddr.String() + ":" + nettest.PlainPort + "/tcp")

	// DNS rebinding: private addresses are taken out of answers.
	if rc, addrs := f.lookup(gwDNS, nettest.RebindName); rc != dns.RcodeSuccess || len(addrs) != 0 {
		t.Fatalf("rebinding name: rcode %d, %v", rc, addrs)
	}
	if _, addrs := f.lookup(gwDNS, nettest.MixedName); len(addrs) != 1 || addrs[0] != shared {
		t.Fatalf("mixed name: %v", addrs)
	}
	f.waitDenial(nettest.RebindAddr.String())
}

func TestGatewayDenyDomainWithInternet(t *testing.T) {
	f := newFixture(t)
	w := f.web
	shared := w.SharedAddr.String()
	gwDNS := netip.MustParseAddrPort(network.GatewayAddr + ":53")
	f.apply(network.Policy{AllowInternet: true, DenyDomains: []string{nettest.DeniedName}})

	if rc, _ := f.lookup(gwDNS, nettest.DeniedName); rc != dns.RcodeNameError {
		t.Fatalf("denied name: rcode %s", dns.RcodeToString[rc])
	}
	if rc, addrs := f.lookup(gwDNS, nettest.OtherName); rc != dns.RcodeSuccess || len(addrs) != 1 {
		t.Fatalf("other name: rcode %d, %v", rc, addrs)
	}
	f.mustGet("https://allowed.test/", shared+":443", nettest.WebBody("allowed.test", "allowed.test", w.SharedAddr))
	f.mustFail("https://denied.test/", shared+":443")
	f.mustFail("http://denied.test/", shared+":80")
	// With the internet open, a bare address is fine.
	f.mustGet("http://"+shared+"/", shared+":80", nettest.WebBody(shared, "", w.SharedAddr))

	// One connection, one name: a second request for a denied name that
	// shares the address does not ride on an allowed one's connection.
	c, err := nettest.DialFrom(f.slot.Sandbox.Path, "", shared+":80", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, _ := io.ReadAll(c)
	if !strings.Contains(string(all), "host=allowed.test") || strings.Contains(string(all), "host=denied.test") {
		t.Fatalf("pipelined requests: %q", all)
	}
	f.waitDenial("HTTP to denied.test on a connection opened for allowed.test")
}

func TestGatewayPolicyChangeAndRelease(t *testing.T) {
	f := newFixture(t)
	w := f.web
	shared := w.SharedAddr.String()
	gwDNS := netip.MustParseAddrPort(network.GatewayAddr + ":53")
	f.apply(network.Policy{AllowDomains: []string{nettest.AllowedName, nettest.OtherName}})
	if _, addrs := f.lookup(gwDNS, nettest.OtherName); len(addrs) != 1 {
		t.Fatalf("other name: %v", addrs)
	}
	other := w.OtherAddr.String() + ":443"
	// Ports the proxy does not take are open by the address DNS answered.
	plain := w.OtherAddr.String() + ":" + nettest.PlainPort
	plainURL := "http://other.test:" + nettest.PlainPort + "/"
	f.mustGet(plainURL, plain, nettest.WebBody("other.test", "", w.OtherAddr))
	// Reloading the rules keeps the addresses of answers still allowed...
	f.apply(network.Policy{AllowDomains: []string{nettest.AllowedName, nettest.OtherName}})
	f.mustGet(plainURL, plain, nettest.WebBody("other.test", "", w.OtherAddr))
	f.mustGet("https://other.test/", other, nettest.WebBody("other.test", "other.test", w.OtherAddr))

	// ...and a narrower policy closes the name and its addresses at once.
	f.apply(network.Policy{AllowDomains: []string{nettest.AllowedName}})
	f.mustFail("https://other.test/", other)
	if rc, _ := f.lookup(gwDNS, nettest.OtherName); rc != dns.RcodeRefused {
		t.Fatalf("other name after the change: %s", dns.RcodeToString[rc])
	}
	f.mustFail(plainURL, plain) // its address closed with it
	f.mustGet("http://allowed.test/", shared+":80", nettest.WebBody("allowed.test", "", w.SharedAddr))

	// Release closes every socket in the gateway namespace, or it could
	// not be deleted.
	f.gw.Release(f.slot.Name)
	if err := f.slot.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f.slot.Gateway.Path); !os.IsNotExist(err) {
		t.Fatalf("gateway namespace still there: %v", err)
	}
}
