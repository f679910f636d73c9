package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// fakeInternet is the only "outside" these tests reach: a namespace on this
// machine holding 192.31.196.10, joined to the host by a veth pair holding
// 192.31.196.1. The range is one this host does not otherwise need
// (nettest refuses one it does: machines like this reach the Debian mirror
// and the module proxy at documentation-range addresses).
func fakeInternet(t *testing.T) *nettest.Internet {
	t.Helper()
	requireServer(t)
	return nettest.StartInternet(t, "e2e", netip.MustParsePrefix("192.31.196.0/24"))
}

// fetch sends an HTTP request from the sandbox to hostPort with busybox nc
// (the static busybox's wget crashes in gVisor) and reports the response
// and whether any HTTP answer came back. It fails the test if a refusal was
// slow: denied connections must be refused, not left to time out.
func fetch(t *testing.T, id, hostPort string) (string, bool) {
	t.Helper()
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	script := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s %s`, host, port)
	res, err := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec nc %s: %v", hostPort, err)
	}
	reached := res.ExitCode == 0 && strings.HasPrefix(res.Stdout, "HTTP/")
	if !reached && time.Since(began) > 3*time.Second {
		t.Errorf("connecting to %s failed only after %s (a drop, not a refusal?): %s", hostPort, time.Since(began), res.Stderr)
	}
	return res.Stdout, reached
}

func requireReach(t *testing.T, id, hostPort string) {
	t.Helper()
	if body, ok := fetch(t, id, hostPort); !ok || !strings.HasSuffix(body, nettest.Greeting) {
		t.Fatalf("sandbox %s could not reach %s (got %q)", id, hostPort, body)
	}
}

func requireBlocked(t *testing.T, id, hostPort string) {
	t.Helper()
	if body, ok := fetch(t, id, hostPort); ok {
		t.Fatalf("sandbox %s reached %s: %q", id, hostPort, body)
	}
}

// serverAddr is the fake internet's HTTP server address.
func serverAddr(inet *nettest.Internet) string {
	return net.JoinHostPort(inet.ServerAddr.String(), "80")
}

func boolPtr(b bool) *bool { return &b }

func TestNetworkPolicyAtCreate(t *testing.T) {
	inet := fakeInternet(t)
	byDefault := newSandbox(t, apiv1.CreateSandboxRequest{})
	requireReach(t, byDefault.ID, serverAddr(inet))
	if byDefault.Network == nil || byDefault.Network.AllowInternet == nil || !*byDefault.Network.AllowInternet {
		t.Errorf("default policy not reported: %+v", byDefault.Network)
	}

	closed := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{AllowInternet: boolPtr(false)}})
	requireBlocked(t, closed.ID, serverAddr(inet))

	allowed := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{
		AllowInternet: boolPtr(false), Allow: []string{inet.ServerAddr.String()},
	}})
	requireReach(t, allowed.ID, serverAddr(inet))

	denied := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{Deny: []string{"192.31.196.0/24"}}})
	requireBlocked(t, denied.ID, serverAddr(inet))
}

func TestNetworkPolicyChangesOnRunningSandbox(t *testing.T) {
	inet := fakeInternet(t)
	ctx := testContext(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{AllowInternet: boolPtr(false)}})
	requireBlocked(t, sb.ID, serverAddr(inet))

	updated, err := env.client.SetNetwork(ctx, sb.ID, apiv1.NetworkPolicy{AllowInternet: boolPtr(true)})
	if err != nil {
		t.Fatal(err)
	}
	if !*updated.Network.AllowInternet {
		t.Fatalf("policy not updated: %+v", updated.Network)
	}
	requireReach(t, sb.ID, serverAddr(inet))

	if _, err := env.client.SetNetwork(ctx, sb.ID, apiv1.NetworkPolicy{Deny: []string{inet.ServerAddr.String() + "/32"}}); err != nil {
		t.Fatal(err)
	}
	requireBlocked(t, sb.ID, serverAddr(inet))

	// Turned off and on again: the uplink goes and comes back.
	if _, err := env.client.SetNetwork(ctx, sb.ID, apiv1.NetworkPolicy{Mode: apiv1.NetworkModeNone}); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(sb.ID); len(left) > 0 && strings.Contains(strings.Join(left, " "), "/sys/class/net") {
		t.Fatalf("network none kept the uplink: %v", left)
	}
	requireBlocked(t, sb.ID, serverAddr(inet))
	if _, err := env.client.SetNetwork(ctx, sb.ID, apiv1.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	requireReach(t, sb.ID, serverAddr(inet))
}

func TestNetworkRejectsBadPolicies(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	for _, p := range []apiv1.NetworkPolicy{
		{Allow: []string{"ex*ample.com"}},
		{Deny: []string{"a.*.com"}},
		{Allow: []string{"-bad.example.com"}},
		{Allow: []string{"10.0.0.0/33"}},
		{Deny: []string{"fc00::/7"}},
		{Mode: "bridge"},
	} {
		_, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Network: &p})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
			t.Errorf("%+v: want 400, got %v", p, err)
		}
	}
}

func TestNetworkNoneIsLoopbackOnly(t *testing.T) {
	inet := fakeInternet(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{Mode: apiv1.NetworkModeNone}})
	requireBlocked(t, sb.ID, serverAddr(inet))
	for _, l := range leftovers(sb.ID) {
		if strings.HasPrefix(l, "/sys/class/net/") {
			t.Fatalf("network none has an uplink: %s", l)
		}
	}
	// Loopback works; the agent channel obviously does (this exec).
	execOK(t, sb.ID, "(echo hi | nc -l -p 7000 &) ; sleep 0.3; nc 127.0.0.1 7000 </dev/null >/dev/null; true")
	if sb.Network.Mode != apiv1.NetworkModeNone {
		t.Errorf("mode not reported: %+v", sb.Network)
	}
}

// hostHTTP serves the greeting on every host address, standing in for any
// service of the host.
func hostHTTP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, nettest.Greeting)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { _ = srv.Close() })
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func TestNetworkSandboxCannotReachHostNeighboursOrMetadata(t *testing.T) {
	inet := fakeInternet(t)
	port := hostHTTP(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	neighbour := newSandbox(t, apiv1.CreateSandboxRequest{})
	requireReach(t, sb.ID, serverAddr(inet)) // the uplink works, so refusals below are policy

	uplinkHost, _, ok := network.UplinkAddrs(sb.ID)
	if !ok {
		t.Fatal("sandbox has no uplink")
	}
	_, neighbourGateway, ok := network.UplinkAddrs(neighbour.ID)
	if !ok {
		t.Fatal("neighbour has no uplink")
	}
	apiURL, _ := url.Parse(env.srv.URL)
	api := apiURL.Port()
	targets := []string{
		net.JoinHostPort(uplinkHost.String(), port),
		net.JoinHostPort(inet.HostAddr.String(), port), // a public-looking host address
		net.JoinHostPort(neighbourGateway.String(), port),
		net.JoinHostPort(network.GatewayAddr, port),
		"127.0.0.1:" + port, // the sandbox's own loopback, not the host's
		"127.0.0.1:" + api,
		"169.254.169.254:80",
	}
	// Every address of the host itself.
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			targets = append(targets, net.JoinHostPort(ipn.IP.String(), port), net.JoinHostPort(ipn.IP.String(), api))
		}
	}
	for _, target := range targets {
		requireBlocked(t, sb.ID, target)
	}
}

func TestNetworkSpoofedSourceDoesNotGetOut(t *testing.T) {
	inet := fakeInternet(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	requireReach(t, sb.ID, serverAddr(inet))
	// Even root inside may renumber its interface; whatever gVisor lets it
	// do, nothing but 169.254.0.21 may leave the slot.
	res, err := env.client.Exec(testContext(t), sb.ID, apiv1.ExecRequest{User: "root", Cmd: []string{"/bin/sh", "-c",
		"ip addr add 10.9.9.9/32 dev eth0 && ip route replace default via 169.254.0.22 dev eth0 src 10.9.9.9 && " +
			"ip route get " + inet.ServerAddr.String() + " | grep -q 'src 10.9.9.9' || exit 7; " +
			"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 " + inet.ServerAddr.String() + " 80; status=$?; " +
			"ip route replace default via 169.254.0.22 dev eth0; ip addr del 10.9.9.9/32 dev eth0; exit $status",
	}})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case res.ExitCode == 7:
		t.Logf("gVisor did not let the sandbox use another source address: %s", res.Stderr)
	case res.ExitCode == 0 || strings.Contains(res.Stdout, nettest.Greeting):
		t.Fatalf("a spoofed source reached the fake internet: %+v", res)
	}
	requireReach(t, sb.ID, serverAddr(inet)) // the real address still works
}

func TestNetworkSurvivesSuspendResumeAndBranch(t *testing.T) {
	inet := fakeInternet(t)
	ctx := testContext(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{
		AllowInternet: boolPtr(false), Allow: []string{"192.31.196.0/24"},
	}})
	requireReach(t, sb.ID, serverAddr(inet))
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, l := range leftovers(sb.ID) {
		if strings.HasPrefix(l, "/sys/class/net/") {
			t.Fatalf("suspended sandbox kept its uplink: %s", l)
		}
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	requireReach(t, sb.ID, serverAddr(inet))

	branches, err := env.client.Branch(ctx, sb.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range branches {
		t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), b.ID) })
		if _, err := env.client.WaitSandbox(ctx, b.ID, apiv1.StateRunning, time.Minute); err != nil {
			t.Fatal(err)
		}
		requireReach(t, b.ID, serverAddr(inet))
	}
	// A branch carries its source's policy and changes it on its own.
	if _, err := env.client.SetNetwork(ctx, branches[0].ID, apiv1.NetworkPolicy{AllowInternet: boolPtr(false)}); err != nil {
		t.Fatal(err)
	}
	requireBlocked(t, branches[0].ID, serverAddr(inet))
	requireReach(t, branches[1].ID, serverAddr(inet))
	requireReach(t, sb.ID, serverAddr(inet))
}
