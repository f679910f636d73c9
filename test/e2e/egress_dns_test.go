package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
)

// These tests use env.web, the fake internet with names that the server's
// gateways resolve through (see harness_test.go): allowed.test and
// denied.test share one address, other.test has its own, a rogue resolver
// answers allowed.test with a third, and rebind.test resolves to a private
// address.

// sh runs a shell command in the sandbox and returns its output and exit
// code, whatever they are.
func sh(t *testing.T, id, script string) (string, int) {
	t.Helper()
	res, err := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res.Stdout + res.Stderr, res.ExitCode
}

// lookup resolves name in the sandbox with busybox nslookup (optionally at
// server) and returns the addresses it printed, other than the server's.
func lookup(t *testing.T, id, name, server string) (addrs []string, out string) {
	t.Helper()
	out, _ = sh(t, id, fmt.Sprintf("nslookup %s %s", name, server))
	seenName := false
	for _, line := range strings.Split(out, "\n") {
		// The answer's addresses follow the "Name:" line; before it
		// come the server's.
		if strings.HasPrefix(line, "Name:") {
			seenName = true
		}
		if f := strings.Fields(line); seenName && len(f) >= 2 && f[0] == "Address:" {
			addrs = append(addrs, strings.Split(f[1], "#")[0])
		}
	}
	return addrs, out
}

// get sends GET / with the given Host to addr:port with nc and returns
// the response ("" when the connection was refused). A refusal must come
// fast.
func get(t *testing.T, id, host, addr string, port int) string {
	t.Helper()
	began := time.Now()
	out, _ := sh(t, id, fmt.Sprintf(`printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' | nc -w 5 %s %d`, host, addr, port))
	if !strings.HasPrefix(out, "HTTP/") && time.Since(began) > 3*time.Second {
		t.Errorf("%s:%d (Host %s) failed only after %s: %q", addr, port, host, time.Since(began), out)
	}
	if !strings.HasPrefix(out, "HTTP/") {
		return ""
	}
	return out
}

func requireBody(t *testing.T, resp, want string) {
	t.Helper()
	if !strings.HasPrefix(resp, "HTTP/1.") || !strings.Contains(resp, " 200 ") || !strings.HasSuffix(resp, want) {
		t.Fatalf("want 200 with %q, got %q", want, resp)
	}
}

func requireRefused(t *testing.T, resp, what string) {
	t.Helper()
	if resp != "" && !strings.Contains(resp, " 403 ") {
		t.Fatalf("%s got through: %q", what, resp)
	}
}

// waitEvent waits for a network.denied event whose message has substr.
func waitEvent(t *testing.T, id, substr string) {
	t.Helper()
	var events []apiv1.SandboxEvent
	for i := 0; i < 50; i++ {
		var err error
		if events, err = env.client.Events(testContext(t), id); err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if ev.Type == "network.denied" && strings.Contains(ev.Message, substr) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no network.denied event mentioning %q in %+v", substr, events)
}

func TestEgressDomainAllowList(t *testing.T) {
	requireServer(t)
	w := env.web
	shared, other, rogue := w.SharedAddr.String(), w.OtherAddr.String(), w.RogueAddr.String()
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{
		AllowInternet: boolPtr(false), Allow: []string{"allowed.test", "rebind.test"},
	}})
	if out := execOK(t, sb.ID, "cat /etc/resolv.conf"); !strings.Contains(out, "nameserver 169.254.0.22") {
		t.Fatalf("resolv.conf does not point at the gateway: %q", out)
	}

	// Allowed by name: resolvable and reachable.
	if addrs, out := lookup(t, sb.ID, "allowed.test", ""); len(addrs) != 1 || addrs[0] != shared {
		t.Fatalf("allowed.test: %v\n%s", addrs, out)
	}
	requireBody(t, get(t, sb.ID, "allowed.test", "allowed.test", 80), nettest.WebBody("allowed.test", "", w.SharedAddr))

	// Outside the list: not resolved, and not reachable by address or by
	// naming it to the shared address.
	if addrs, out := lookup(t, sb.ID, "other.test", ""); len(addrs) != 0 || !strings.Contains(out, "REFUSED") {
		t.Fatalf("other.test resolved: %v\n%s", addrs, out)
	}
	waitEvent(t, sb.ID, "DNS lookup of other.test")
	requireRefused(t, get(t, sb.ID, "denied.test", shared, 80), "Host: denied.test at the shared address")
	waitEvent(t, sb.ID, "HTTP to denied.test")
	requireRefused(t, get(t, sb.ID, shared, shared, 80), "an address literal")
	requireRefused(t, get(t, sb.ID, other, other, nettest.PlainPortNumber), "an address no answer opened")
	waitEvent(t, sb.ID, other+":8080/tcp")

	// A rogue resolver is never asked: the gateway answers in its place.
	if addrs, out := lookup(t, sb.ID, "allowed.test", w.RogueDNS.Addr().String()); len(addrs) != 1 || addrs[0] != shared {
		t.Fatalf("allowed.test at the rogue resolver: %v (want the gateway's answer %s)\n%s", addrs, shared, out)
	}
	// Acting on a forged answer anyway: the name goes where the gateway
	// resolves it, and the forged address stays closed.
	requireBody(t, get(t, sb.ID, "allowed.test", rogue, 80), nettest.WebBody("allowed.test", "", w.SharedAddr))
	requireRefused(t, get(t, sb.ID, "allowed.test", rogue, nettest.PlainPortNumber), "the forged address")

	// DNS rebinding: an allowed name's private address is taken out.
	if addrs, out := lookup(t, sb.ID, "rebind.test", ""); len(addrs) != 0 {
		t.Fatalf("rebind.test resolved to %v\n%s", addrs, out)
	}
	waitEvent(t, sb.ID, nettest.RebindAddr.String())
}

func TestEgressDenyDomainWithInternet(t *testing.T) {
	requireServer(t)
	w := env.web
	shared := w.SharedAddr.String()
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{Deny: []string{"Denied.Test"}}})
	if sb.Network == nil || len(sb.Network.Deny) != 1 || sb.Network.Deny[0] != "denied.test" {
		t.Fatalf("stored policy: %+v", sb.Network)
	}
	if addrs, out := lookup(t, sb.ID, "denied.test", ""); len(addrs) != 0 || !strings.Contains(out, "NXDOMAIN") {
		t.Fatalf("denied.test resolved: %v\n%s", addrs, out)
	}
	waitEvent(t, sb.ID, "DNS lookup of denied.test")
	requireRefused(t, get(t, sb.ID, "denied.test", shared, 80), "Host: denied.test")
	requireBody(t, get(t, sb.ID, "allowed.test", "allowed.test", 80), nettest.WebBody("allowed.test", "", w.SharedAddr))
	requireBody(t, get(t, sb.ID, "other.test", "other.test", 80), nettest.WebBody("other.test", "", w.OtherAddr))
	// The internet is open, so addresses are too.
	requireBody(t, get(t, sb.ID, shared, shared, 80), nettest.WebBody(shared, "", w.SharedAddr))
}

func TestEgressDomainPolicyChangeOnRunningSandbox(t *testing.T) {
	requireServer(t)
	w := env.web
	other := w.OtherAddr.String()
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{
		AllowInternet: boolPtr(false), Allow: []string{"allowed.test"},
	}})
	requireRefused(t, get(t, sb.ID, "other.test", other, 80), "other.test before the change")

	if _, err := env.client.SetNetwork(testContext(t), sb.ID, apiv1.NetworkPolicy{
		AllowInternet: boolPtr(false), Allow: []string{"allowed.test", "*.test"},
	}); err != nil {
		t.Fatal(err)
	}
	if addrs, out := lookup(t, sb.ID, "other.test", ""); len(addrs) != 1 || addrs[0] != other {
		t.Fatalf("other.test after allowing it: %v\n%s", addrs, out)
	}
	requireBody(t, get(t, sb.ID, "other.test", "other.test", 80), nettest.WebBody("other.test", "", w.OtherAddr))
	requireBody(t, get(t, sb.ID, "other.test", other, nettest.PlainPortNumber), nettest.WebBody("other.test", "", w.OtherAddr))

	if _, err := env.client.SetNetwork(testContext(t), sb.ID, apiv1.NetworkPolicy{
		AllowInternet: boolPtr(false), Allow: []string{"allowed.test"},
	}); err != nil {
		t.Fatal(err)
	}
	requireRefused(t, get(t, sb.ID, "other.test", other, 80), "other.test after the change")
	requireRefused(t, get(t, sb.ID, "other.test", other, nettest.PlainPortNumber), "other.test's address after the change")
	requireBody(t, get(t, sb.ID, "allowed.test", "allowed.test", 80), nettest.WebBody("allowed.test", "", w.SharedAddr))
}

// HTTPS is judged by the TLS server name, without decrypting: curl (in the
// base template) verifies the fake web's certificate end to end.
func TestEgressHTTPSByServerName(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "needs the base template (debootstrap)")
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	w := env.web
	shared := w.SharedAddr.String()
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "base", Network: &apiv1.NetworkPolicy{
		AllowInternet: boolPtr(false), Allow: []string{"allowed.test"},
	}})
	if _, err := env.client.WriteFile(testContext(t), sb.ID, "/tmp/ca.pem", bytes.NewReader(w.CAPEM)); err != nil {
		t.Fatal(err)
	}
	out, code := sh(t, sb.ID, "curl -sS --max-time 5 --cacert /tmp/ca.pem https://allowed.test/")
	if code != 0 || out != nettest.WebBody("allowed.test", "allowed.test", w.SharedAddr) {
		t.Fatalf("https://allowed.test: exit %d, %q", code, out)
	}
	began := time.Now()
	out, code = sh(t, sb.ID, "curl -sS --max-time 5 --cacert /tmp/ca.pem --resolve denied.test:443:"+shared+" https://denied.test/")
	if code == 0 || strings.Contains(out, "host=") {
		t.Fatalf("https://denied.test at the shared address got through: %q", out)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("TLS refusal took %s", d)
	}
	waitEvent(t, sb.ID, "TLS to denied.test")
	// An address literal has no server name to allow it.
	if out, code = sh(t, sb.ID, "curl -sS --max-time 5 -k https://"+shared+"/"); code == 0 {
		t.Fatalf("https to an address literal got through: %q", out)
	}
}

// The gateway's services live in the server process; a restarted server
// brings them back for the sandboxes it adopts.
func TestEgressDomainRulesSurviveServerRestart(t *testing.T) {
	requireServer(t)
	w := env.web
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{
		AllowInternet: boolPtr(false), Allow: []string{"allowed.test"},
	}})
	if addrs, out := lookup(t, sb.ID, "allowed.test", ""); len(addrs) != 1 {
		t.Fatalf("allowed.test before the restart: %v\n%s", addrs, out)
	}
	restartServer(t)
	if addrs, out := lookup(t, sb.ID, "allowed.test", ""); len(addrs) != 1 || addrs[0] != w.SharedAddr.String() {
		t.Fatalf("allowed.test after the restart: %v\n%s", addrs, out)
	}
	if addrs, _ := lookup(t, sb.ID, "other.test", ""); len(addrs) != 0 {
		t.Fatalf("other.test resolved after the restart: %v", addrs)
	}
	requireBody(t, get(t, sb.ID, "allowed.test", "allowed.test", 80), nettest.WebBody("allowed.test", "", w.SharedAddr))
	requireRefused(t, get(t, sb.ID, "denied.test", w.SharedAddr.String(), 80), "Host: denied.test after the restart")
	waitEvent(t, sb.ID, "HTTP to denied.test")
}
