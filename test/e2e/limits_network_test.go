package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/pkg/apiv1"
)

// qdiscRate returns the rate of the token bucket at the root of a link as
// tc prints it ("16Mbit"), in the namespace (see nettest.InNamespace) or
// ("") the host's.
func qdiscRate(t *testing.T, namespace, link string) string {
	t.Helper()
	args := []string{"qdisc", "show", "dev", link, "root"}
	cmd := exec.Command("tc", args...)
	if namespace != "" {
		cmd = nettest.Command(namespace, "tc", args...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tc %v: %v: %s", args, err, out)
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "tbf" {
			for j := i; j+1 < len(f); j++ {
				if f[j] == "rate" {
					return f[j+1]
				}
			}
		}
	}
	return ""
}

// A sandbox's bandwidth limit holds each way: transfers from and to the
// fake internet stay under it (they cannot go faster with the limit in
// place, however slow the machine), and the token buckets are on both
// ends of its uplink, also after a resume. The default limit shows in its
// view, and a request above the server's limit is refused.
func TestNetworkLimitBandwidth(t *testing.T) {
	inet := fakeInternet(t)
	const mbit, size = 16, 4 << 20
	server := inet.ServerAddr.String()
	nettest.ServeSource(t, inet.Namespace, net.JoinHostPort(server, "9001"), size)
	nettest.ServeSink(t, inet.Namespace, net.JoinHostPort(server, "9002"), size)

	byDefault := newSandbox(t, apiv1.CreateSandboxRequest{})
	if n := byDefault.Network; n == nil || n.BandwidthMbit != env.cfg.Defaults.BandwidthMbit || n.MaxConnections != env.cfg.Defaults.MaxConnections {
		t.Fatalf("default limits not reported: %+v", n)
	}
	_, err := env.client.CreateSandbox(testContext(t), apiv1.CreateSandboxRequest{
		Network: &apiv1.NetworkPolicy{BandwidthMbit: env.cfg.Defaults.BandwidthMbit + 1},
	})
	if apiStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "server's limit") {
		t.Fatalf("asking for more than the server's bandwidth: %v", err)
	}

	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{BandwidthMbit: mbit}})
	if sb.Network == nil || sb.Network.BandwidthMbit != mbit {
		t.Fatalf("limit not reported: %+v", sb.Network)
	}
	slot := env.srv.Namespaces().Slot(sb.ID)
	if up, down := qdiscRate(t, slot.Gateway.Path, "up0"), qdiscRate(t, "", network.UplinkName(sb.ID)); up != "16Mbit" || down != "16Mbit" {
		t.Fatalf("token buckets: from the sandbox %q, to it %q; want 16Mbit each", up, down)
	}

	limit := float64(mbit) * 1e6 / 8 // bytes per second
	for _, c := range []struct{ what, script, want string }{
		{"download", fmt.Sprintf("nc %s 9001 | wc -c", server), strconv.Itoa(size)},
		{"upload", fmt.Sprintf("head -c %d /dev/zero | nc %s 9002", size, server), strconv.Itoa(size)},
	} {
		began := time.Now()
		out := strings.TrimSpace(execOK(t, sb.ID, c.script))
		elapsed := time.Since(began)
		if out != c.want {
			t.Fatalf("%s moved %q bytes, want %s", c.what, out, c.want)
		}
		rate := float64(size) / elapsed.Seconds()
		t.Logf("%s: %.0f B/s under a limit of %.0f B/s", c.what, rate, limit)
		if rate > 1.5*limit {
			t.Fatalf("%s ran at %.0f B/s, over the limit of %.0f B/s", c.what, rate, limit)
		}
	}

	// The limits come back with the sandbox after a suspend, in whatever
	// slot it resumes.
	ctx := testContext(t)
	if _, err := env.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	if up, down := qdiscRate(t, slot.Gateway.Path, "up0"), qdiscRate(t, "", network.UplinkName(sb.ID)); up != "16Mbit" || down != "16Mbit" {
		t.Fatalf("after a resume, token buckets: from the sandbox %q, to it %q; want 16Mbit each", up, down)
	}
}

// A sandbox may hold max_connections connections at once: the ones past
// it are refused at once, and closing some makes room again.
func TestNetworkLimitConnections(t *testing.T) {
	inet := fakeInternet(t)
	const limit, extra = 20, 10
	server := inet.ServerAddr.String()
	holder := nettest.Hold(t, inet.Namespace, net.JoinHostPort(server, "9000"))

	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{MaxConnections: limit}})
	if sb.Network == nil || sb.Network.MaxConnections != limit {
		t.Fatalf("limit not reported: %+v", sb.Network)
	}
	// Each nc holds its connection open (its input never ends) and, once
	// it exits, leaves its exit status in /tmp/conns.
	execOK(t, sb.ID, fmt.Sprintf(`mkdir -p /tmp/conns && for i in $(seq %d); do
		(sleep 600 | (nc %s 9000; echo $? > /tmp/conns/$i)) >/dev/null 2>&1 &
	done`, limit+extra, server))
	var refused int
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := execOK(t, sb.ID, "ls /tmp/conns | wc -l")
		refused, _ = strconv.Atoi(strings.TrimSpace(out))
		if holder.Accepted()+refused >= limit+extra {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("of %d connections %d were accepted and %d refused; the rest hang (dropped, not refused?)",
				limit+extra, holder.Accepted(), refused)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := holder.Accepted(); got != limit || refused != extra {
		t.Fatalf("%d connections accepted and %d refused, want %d and %d", got, refused, limit, extra)
	}
	if statuses := execOK(t, sb.ID, "cat /tmp/conns/*"); strings.Contains(statuses, "0") {
		t.Fatalf("a refused nc exited 0: %q", statuses)
	}

	// Closing them makes room again.
	holder.Release()
	execOK(t, sb.ID, "pkill sleep || killall sleep || true")
	deadline = time.Now().Add(30 * time.Second)
	for {
		body, ok := fetchQuiet(t, sb.ID, serverAddr(inet))
		if ok && strings.HasSuffix(body, nettest.Greeting) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new connection after the held ones were closed: %q", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fetchQuiet is fetch without its check that a failure was fast.
func fetchQuiet(t *testing.T, id, hostPort string) (string, bool) {
	t.Helper()
	host, port, _ := net.SplitHostPort(hostPort)
	res, err := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c",
		fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s %s`, host, port)}})
	if err != nil {
		t.Fatalf("exec nc %s: %v", hostPort, err)
	}
	return res.Stdout, res.ExitCode == 0 && strings.HasPrefix(res.Stdout, "HTTP/")
}
