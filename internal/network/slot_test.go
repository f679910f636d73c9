package network

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// testSlots is the namespace directory of this package's tests, opened
// by TestMain for root.
var testSlots *Namespaces

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "space-network-test-")
	if err == nil {
		testSlots, err = OpenNamespaces(filepath.Join(dir, "netns"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "network tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := testSlots.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "network tests:", err)
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network slots need root")
	}
}

// listenIn opens a TCP listener inside the named namespace, standing in for
// the agent the runtime would run there.
func listenIn(t *testing.T, ns Namespace, addr string) net.Listener {
	t.Helper()
	h, err := ns.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	done := make(chan net.Listener, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			t.Error(err)
			done <- nil
			return
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	l := <-done
	if l == nil {
		t.FailNow()
	}
	return l
}

func TestSlotDialReachesSandboxNamespaceOnly(t *testing.T) {
	requireRoot(t)
	s, err := testSlots.Create("test" + time.Now().Format("150405.000")[7:])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Destroy() })
	if !s.Exists() {
		t.Fatal("slot does not exist after Create")
	}

	l := listenIn(t, s.Sandbox, net.JoinHostPort(SandboxAddr, "49983"))
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = c.Write([]byte("pong"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.DialContext(ctx, "tcp", net.JoinHostPort(SandboxAddr, "49983"))
	if err != nil {
		t.Fatalf("dial agent address from gateway namespace: %v", err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "pong" {
		t.Fatalf("read %q, want pong", got)
	}

	// The host's own namespace has no route to the sandbox address.
	d := net.Dialer{Timeout: 300 * time.Millisecond}
	if c, err := d.Dial("tcp", net.JoinHostPort(SandboxAddr, "49983")); err == nil {
		c.Close()
		t.Fatal("sandbox address reachable from the host namespace")
	}

	if err := s.Prepare(); err != nil {
		t.Fatalf("Prepare on a configured slot must be idempotent: %v", err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	if s.Exists() {
		t.Fatal("slot still exists after Destroy")
	}
	if err := s.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}
