package template

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// recordingDial records the addresses the registry guard lets through and
// fails each the way an unreachable host would, never connecting.
type recordingDial struct {
	mu    sync.Mutex
	addrs []string
	err   error
}

func (d *recordingDial) dial(_ context.Context, _, address string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addrs = append(d.addrs, address)
	return nil, d.err
}

func (d *recordingDial) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.addrs
	d.addrs = nil
	return a
}

// Every destination sandbox egress blocks (and the carrier-grade NAT,
// IETF, benchmarking and reserved ranges among them) is refused without a
// connection, with the same message a public registry that does not answer
// gets, so that refusals cannot be told from closed ports.
func TestRegistryGuardRefusesNonPublicAlike(t *testing.T) {
	rec := &recordingDial{err: syscall.ECONNREFUSED}
	c := RegistryConfig{dial: rec.dial}
	reason := func(ref string) string {
		t.Helper()
		_, err := c.resolveRemote(context.Background(), ref, nil)
		if err == nil {
			t.Fatalf("%s: resolved", ref)
		}
		msg, ok := strings.CutPrefix(err.Error(), "image ")
		if !ok {
			t.Fatalf("%s: %v", ref, err)
		}
		_, reason, _ := strings.Cut(msg, ": ")
		return reason
	}

	want := reason("8.8.8.8:5000/team/app:1")
	if got := rec.take(); len(got) == 0 || got[0] != "8.8.8.8:5000" {
		t.Fatalf("public registry: dialled %v, want 8.8.8.8:5000", got)
	}
	if !strings.Contains(want, "could not be reached") {
		t.Fatalf("unreachable public registry: %q", want)
	}
	rec.err = errors.New("i/o timeout")
	if got := reason("9.9.9.9/team/app:1"); got != want {
		t.Errorf("timed-out registry: %q, want %q", got, want)
	}
	rec.take()

	for _, host := range []string{
		"100.64.0.1", "100.127.255.254", // carrier-grade NAT
		"192.0.0.8",                // IETF protocol assignments
		"198.18.0.1", "198.19.2.3", // benchmarking
		"240.0.0.1", "255.255.255.255", // reserved, broadcast
		"10.0.0.1:5000", "172.16.4.4", "192.168.1.1", // RFC 1918
		"127.0.0.1:5000", "0.0.0.0", "169.254.169.254", "224.0.0.1",
		"[::1]:5000", "[fd00::1]", "[fe80::1]", "[::ffff:10.0.0.1]", "[2002:a00:1::1]", "[64:ff9b::a00:1]",
		"localhost:5000",
	} {
		if got := reason(host + "/team/app:1"); got != want {
			t.Errorf("%s: %q, want %q", host, got, want)
		}
		if got := rec.take(); len(got) > 0 {
			t.Errorf("%s: dialled %v", host, got)
		}
	}
}
