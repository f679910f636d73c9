package nettest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Names the fake web's DNS server answers. AllowedName and DeniedName
// share one address (SharedAddr), as sites behind one CDN do; OtherName
// has its own; RebindName resolves to a private address (DNS rebinding);
// MixedName to the shared and a private one.
const (
	AllowedName = "allowed.test"
	DeniedName  = "denied.test"
	OtherName   = "other.test"
	RebindName  = "rebind.test"
	MixedName   = "mixed.test"
)

// PlainPort is a port the web servers also answer HTTP on, which no
// gateway redirects to its proxy: reaching it shows an address is open.
const (
	PlainPort       = "8080"
	PlainPortNumber = 8080
)

// RebindAddr is the private address RebindName and MixedName resolve to.
var RebindAddr = netip.MustParseAddr("10.99.0.1")

// Web is a fake internet with names: a namespace holding web servers (HTTP
// on 80 and PlainPort, HTTPS on 443 with a certificate from a test CA) that answer with
// the host they were asked for, a DNS server for the names above, and a
// rogue DNS server that answers AllowedName with RogueAddr instead.
type Web struct {
	Namespace string
	HostLink  string
	HostAddr  netip.Addr
	// SharedAddr serves AllowedName and DeniedName, OtherAddr OtherName,
	// RogueAddr is where the rogue resolver sends AllowedName.
	SharedAddr, OtherAddr, RogueAddr netip.Addr
	// DNS and RogueDNS are the resolvers' addresses (port 53, UDP and TCP).
	DNS, RogueDNS netip.AddrPort
	// CAPEM is the test CA's certificate, which the HTTPS servers' chain to.
	CAPEM []byte

	seenMu sync.Mutex
	seen   map[string]*http.Request // the last request for each host name
	// seenAt is the last request for each host name and target: suites
	// that run side by side ask for the same host, each for targets of
	// its own.
	seenAt map[[2]string]*http.Request

	closers []func() error
}

// WebBody is what the fake web's servers answer: the Host of the
// request, the TLS server name ("" over HTTP) and the address that took
// the connection.
func WebBody(host, sni string, addr netip.Addr) string {
	return fmt.Sprintf("host=%s sni=%s addr=%s", host, sni, addr)
}

// StartWeb builds the fake web in subnet (a /24 no other fake internet
// uses) under name (at most 8 characters). It does not depend on a test,
// so TestMain can share one; Close removes it.
func StartWeb(name string, subnet netip.Prefix) (_ *Web, err error) {
	a := subnet.Masked().Addr().As4()
	at := func(last byte) netip.Addr { return netip.AddrFrom4([4]byte{a[0], a[1], a[2], last}) }
	w := &Web{
		Namespace: "spacetest-w" + name, HostLink: "spw-" + name, HostAddr: at(1),
		SharedAddr: at(10), OtherAddr: at(11), RogueAddr: at(12),
		DNS: netip.AddrPortFrom(at(53), 53), RogueDNS: netip.AddrPortFrom(at(54), 53),
		seen: map[string]*http.Request{}, seenAt: map[[2]string]*http.Request{},
	}
	w.destroy()
	if err := CheckSubnetFree(subnet); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	cmds := [][]string{
		{"ip", "netns", "add", w.Namespace},
		{"ip", "link", "add", w.HostLink, "type", "veth", "peer", "name", "eth0", "netns", w.Namespace},
		{"ip", "addr", "add", w.HostAddr.String() + "/24", "dev", w.HostLink},
		{"ip", "link", "set", w.HostLink, "up"},
		{"ip", "-n", w.Namespace, "link", "set", "eth0", "up"},
		{"ip", "-n", w.Namespace, "link", "set", "lo", "up"},
	}
	for _, addr := range []netip.Addr{w.SharedAddr, w.OtherAddr, w.RogueAddr, w.DNS.Addr(), w.RogueDNS.Addr()} {
		cmds = append(cmds, []string{"ip", "-n", w.Namespace, "addr", "add", addr.String() + "/24", "dev", "eth0"})
	}
	cmds = append(cmds, []string{"ip", "-n", w.Namespace, "route", "add", "default", "via", w.HostAddr.String()})
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	cert, caPEM, err := testCertificate(w.SharedAddr, w.OtherAddr, w.RogueAddr)
	if err != nil {
		return nil, err
	}
	w.CAPEM = caPEM
	handler := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		var addr netip.Addr
		if ta, ok := local.(*net.TCPAddr); ok {
			addr, _ = netip.AddrFromSlice(ta.IP.To4())
		}
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		w.seenMu.Lock()
		seen := &http.Request{Method: r.Method, RequestURI: r.RequestURI, Header: r.Header.Clone(), TLS: r.TLS}
		w.seen[host] = seen
		w.seenAt[[2]string{host, r.RequestURI}] = seen
		w.seenMu.Unlock()
		fmt.Fprint(rw, WebBody(host, sni, addr))
	})
	for _, addr := range []netip.Addr{w.SharedAddr, w.OtherAddr, w.RogueAddr} {
		for _, port := range []string{"80", "443", PlainPort} {
			secure := port == "443"
			l, err := w.listen("tcp", net.JoinHostPort(addr.String(), port))
			if err != nil {
				return nil, err
			}
			srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
			if secure {
				l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})
			}
			go srv.Serve(l)
			w.closers = append(w.closers, srv.Close)
		}
	}
	records := map[string][]netip.Addr{
		AllowedName: {w.SharedAddr}, DeniedName: {w.SharedAddr}, OtherName: {w.OtherAddr},
		RebindName: {RebindAddr}, MixedName: {w.SharedAddr, RebindAddr},
	}
	if err := w.serveDNS(w.DNS, records); err != nil {
		return nil, err
	}
	if err := w.serveDNS(w.RogueDNS, map[string][]netip.Addr{AllowedName: {w.RogueAddr}}); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Web) listen(network, addr string) (l net.Listener, err error) {
	err = InNamespace(w.Namespace, func() error {
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, w.Namespace, err)
	}
	return l, nil
}

// serveDNS answers A queries for records (and wildcards below them are not
// answered: NXDOMAIN) with a short TTL, on UDP and TCP.
func (w *Web) serveDNS(at netip.AddrPort, records map[string][]netip.Addr) error {
	h := dns.HandlerFunc(func(rw dns.ResponseWriter, req *dns.Msg) {
		resp := new(dns.Msg)
		resp.SetReply(req)
		resp.Authoritative = true
		if len(req.Question) != 1 {
			resp.Rcode = dns.RcodeFormatError
			_ = rw.WriteMsg(resp)
			return
		}
		q := req.Question[0]
		addrs, ok := records[strings.TrimSuffix(strings.ToLower(q.Name), ".")]
		if !ok {
			resp.Rcode = dns.RcodeNameError
		}
		if q.Qtype == dns.TypeA {
			for _, a := range addrs {
				resp.Answer = append(resp.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
					A:   a.AsSlice(),
				})
			}
		}
		_ = rw.WriteMsg(resp)
	})
	var pc net.PacketConn
	err := InNamespace(w.Namespace, func() error {
		var err error
		pc, err = net.ListenPacket("udp", at.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("DNS on %s: %w", at, err)
	}
	l, err := w.listen("tcp", at.String())
	if err != nil {
		pc.Close()
		return err
	}
	udp := &dns.Server{PacketConn: pc, Handler: h}
	tcp := &dns.Server{Listener: l, Handler: h}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	w.closers = append(w.closers, func() error {
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
		_ = pc.Close()
		return l.Close()
	})
	return nil
}

// LastRequest is the last request the web servers received for host
// (method, target, headers and TLS state; no body), or nil: what arrived
// upstream, for tests of what the gateway adds to requests.
func (w *Web) LastRequest(host string) *http.Request {
	w.seenMu.Lock()
	defer w.seenMu.Unlock()
	return w.seen[host]
}

// LastRequestFor is the last request for host with the request target
// uri, or nil: another test's later request for host does not hide it.
func (w *Web) LastRequestFor(host, uri string) *http.Request {
	w.seenMu.Lock()
	defer w.seenMu.Unlock()
	return w.seenAt[[2]string{host, uri}]
}

// Close stops the servers and removes the namespace.
func (w *Web) Close() {
	for _, c := range w.closers {
		_ = c()
	}
	w.closers = nil
	w.destroy()
}

func (w *Web) destroy() {
	if l, err := netlink.LinkByName(w.HostLink); err == nil {
		_ = netlink.LinkDel(l)
	}
	_ = netns.DeleteNamed(w.Namespace)
}

// testCertificate makes a CA and a server certificate for every name of
// the fake web (and the given addresses), valid for a day.
func testCertificate(addrs ...netip.Addr) (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "space test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: AllowedName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames:    []string{AllowedName, DeniedName, OtherName, MixedName, "*." + AllowedName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, a := range addrs {
		leafTmpl.IPAddresses = append(leafTmpl.IPAddresses, a.AsSlice())
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}, caPEM, nil
}

// RemoveWeb tears down the fake web called name (as given to StartWeb)
// if it exists: for one left behind by a process killed before its Close,
// which would otherwise hold its subnet for good.
func RemoveWeb(name string) {
	(&Web{Namespace: "spacetest-w" + name, HostLink: "spw-" + name}).destroy()
}

// WebNames lists the fake webs on the host by the names StartWeb was given.
func WebNames() ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutPrefix(e.Name(), "spacetest-w"); ok {
			names = append(names, name)
		}
	}
	return names, nil
}
