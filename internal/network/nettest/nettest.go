// Package nettest builds a stand-in for the internet out of network
// namespaces on the test machine, so egress tests never send a packet to a
// real network. It uses documentation ranges (RFC 5737), which are not
// routed on the internet.
package nettest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Internet is a namespace reachable from the host through a veth pair, with
// an HTTP server on port 80 answering Greeting.
type Internet struct {
	// Namespace is the namespace's name; HostAddr the host's end and
	// ServerAddr the server's address.
	Namespace  string
	HostLink   string
	HostAddr   netip.Addr
	ServerAddr netip.Addr
}

// Greeting is the body the fake internet's HTTP server answers with.
const Greeting = "hello from the fake internet"

// StartInternet builds the fake internet in subnet (a /24 of a
// documentation range: the host takes .1, the server .10) and removes it
// when the test ends. name must be unique among concurrently running tests
// and at most 8 characters.
func StartInternet(t testing.TB, name string, subnet netip.Prefix) *Internet {
	t.Helper()
	base := subnet.Masked().Addr()
	in := &Internet{
		Namespace:  "spacetest-" + name,
		HostLink:   "spt-" + name,
		HostAddr:   base.Next(),
		ServerAddr: netip.AddrFrom4([4]byte{base.As4()[0], base.As4()[1], base.As4()[2], 10}),
	}
	in.destroy()
	if err := CheckSubnetFree(subnet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.destroy)
	run(t, "ip", "netns", "add", in.Namespace)
	run(t, "ip", "link", "add", in.HostLink, "type", "veth", "peer", "name", "eth0", "netns", in.Namespace)
	run(t, "ip", "addr", "add", fmt.Sprintf("%s/24", in.HostAddr), "dev", in.HostLink)
	run(t, "ip", "link", "set", in.HostLink, "up")
	run(t, "ip", "-n", in.Namespace, "addr", "add", fmt.Sprintf("%s/24", in.ServerAddr), "dev", "eth0")
	run(t, "ip", "-n", in.Namespace, "link", "set", "eth0", "up")
	run(t, "ip", "-n", in.Namespace, "link", "set", "lo", "up")
	run(t, "ip", "-n", in.Namespace, "route", "add", "default", "via", in.HostAddr.String())

	l := ListenIn(t, in.Namespace, net.JoinHostPort(in.ServerAddr.String(), "80"))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, Greeting)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { _ = srv.Close() })
	return in
}

// URL is the fake internet's HTTP address.
func (in *Internet) URL() string { return "http://" + in.ServerAddr.String() + "/" }

func (in *Internet) destroy() {
	if l, err := netlink.LinkByName(in.HostLink); err == nil {
		_ = netlink.LinkDel(l)
	}
	_ = netns.DeleteNamed(in.Namespace)
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// ListenIn opens a TCP listener inside the namespace (see InNamespace)
// and closes it when the test ends.
func ListenIn(t testing.TB, namespace, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	err := InNamespace(namespace, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, namespace, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// DialFrom connects from inside the namespace (see InNamespace),
// optionally from a given local address, giving up after timeout.
func DialFrom(namespace, local, addr string, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := InNamespace(namespace, func() error {
		d := net.Dialer{Timeout: timeout}
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		var err error
		conn, err = d.DialContext(context.Background(), "tcp", addr)
		return err
	})
	return conn, err
}

// Command is a command that runs in the namespace (see InNamespace), as
// `ip -n` would for a name in /run/netns.
func Command(namespace, name string, args ...string) *exec.Cmd {
	if !strings.HasPrefix(namespace, "/") {
		namespace = filepath.Join("/run/netns", namespace)
	}
	return exec.Command("nsenter", append([]string{"--net=" + namespace, "--", name}, args...)...)
}

// InNamespace runs fn on a thread in the namespace, named (in /run/netns,
// as `ip netns add` makes them) or given by the path of its file (a slot's,
// network.Namespace.Path). The thread is discarded afterwards; sockets fn
// opens keep the namespace.
func InNamespace(namespace string, fn func() error) error {
	open := netns.GetFromName
	if strings.HasPrefix(namespace, "/") {
		open = netns.GetFromPath
	}
	h, err := open(namespace)
	if err != nil {
		return fmt.Errorf("open %s: %w", namespace, err)
	}
	defer h.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}
