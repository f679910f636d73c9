package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/internal/redteam"
)

// The whole red-team battery against the shared server: every attempt
// must be blocked (or skipped for a feature the server does not have
// yet); an escape or an attempt that could not run fails the test by
// name. The attacker's allowed address and an address outside its policy
// are a fake internet on this machine.
func TestRedteam(t *testing.T) {
	requireServer(t)
	if testing.Short() {
		t.Skip("builds the base template and runs 60+ attempts")
	}
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	inet := nettest.StartInternet(t, "redteam", netip.MustParsePrefix("192.94.77.0/24"))
	unallowed := "192.94.77.20"
	if out, err := exec.Command("ip", "-n", inet.Namespace, "addr", "add", unallowed+"/24", "dev", "eth0").CombinedOutput(); err != nil {
		t.Fatalf("second fake internet address: %v\n%s", err, out)
	}
	l := nettest.ListenIn(t, inet.Namespace, net.JoinHostPort(unallowed, "80"))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, nettest.Greeting) })}
	go srv.Serve(l)
	t.Cleanup(func() { _ = srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	report, err := redteam.Run(ctx, redteam.Config{
		URL:       env.srv.URL,
		APIKey:    env.srv.AdminKey,
		Template:  "base",
		DataDir:   env.dataDir,
		Reach:     net.JoinHostPort(inet.ServerAddr.String(), "80"),
		Unallowed: net.JoinHostPort(unallowed, "80"),
		// The names the harness's fake DNS serves once the DNS gateway
		// exists; until then the DNS attempts report themselves skipped.
		AllowedName: "allowed.test",
		DeniedName:  "denied.test",
		RebindName:  "rebind.test",
		Progress: func(r redteam.Result) {
			t.Logf("%-8s %-11s %-55s %s", r.Outcome, r.Category, r.Name, r.Evidence)
		},
	})
	if err != nil {
		t.Fatalf("red team run: %v", err)
	}
	t.Logf("%d attempts in %s: %d blocked, %d escaped, %d errors, %d skipped", len(report.Results), time.Since(began).Round(time.Second),
		report.Count(redteam.Blocked), report.Count(redteam.Escaped), report.Count(redteam.Errored), report.Count(redteam.Skipped))
	for _, n := range report.Notes {
		// Run as root with the server's data directory, every host file
		// the battery watches must be found: one it cannot read is one
		// whose tampering would go unnoticed.
		if strings.Contains(n, "not checked") || strings.Contains(n, "none is checked") {
			t.Errorf("note: %s", n)
		} else {
			t.Logf("note: %s", n)
		}
	}
	if len(report.Results) < 40 {
		t.Errorf("only %d attempts ran", len(report.Results))
	}
	var failures []string
	for _, r := range report.Failures() {
		failures = append(failures, string(r.Outcome)+" "+r.Name+": "+r.Evidence)
	}
	if len(failures) > 0 {
		t.Errorf("%d attempts failed:\n%s", len(failures), strings.Join(failures, "\n"))
	}
}
