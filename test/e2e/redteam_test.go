package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/internal/redteam"
	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
)

// The whole red-team battery against the shared server: every attempt
// must be blocked (or skipped for a feature the server does not have
// yet); an escape or an attempt that could not run fails the test by
// name. The attacker's allowed address and an address outside its policy
// are a fake internet on this machine.
//
// It runs in the parallel group: its attempts mostly wait on sandboxes
// (about half of the cores idle when it ran alone), and every check it
// makes is its own (its canaries, listener, fake internet and
// sandboxes), so the SDK suites beside it change none of its verdicts.
func TestRedteam(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "builds the base template and runs 60+ attempts")
	inParallelGroup(t)
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	runRedteam(t, redteam.Config{Template: "base"}, 40, 10*time.Minute)
}

// vmBase is the base template built for both runtimes (from it): the battery's
// scripts need its bash, python3 and curl.
const vmBase = "vm-base"

// The battery with every sandbox a microVM guest (TCG here) of 128 MiB
// unless an attempt needs more: the guest's own surface too (its kernel,
// fw_cfg, vsock, its disk, its power switch, QEMU's sockets and process
// on the host). The whole battery takes about 10 minutes in emulated
// guests, beyond what the default suite can spend: by default it plays
// the attempts on what a guest adds or changes (vmSurface), and all of
// them with SPACE_MICROVM_REDTEAM=1.
func TestMicroVMRedteam(t *testing.T) {
	requireServer(t)
	if env.noMicroVM != "" {
		t.Skip(env.noMicroVM)
	}
	testtier.Full(t, "builds the base template for microVMs and boots guests")
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	if _, err := env.client.GetTemplate(ctx, vmBase); err != nil {
		if _, err := env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: vmBase, Recipe: "from: template:base\nruntime: [gvisor, microvm]\n"}); err != nil {
			t.Fatalf("create template: %v", err)
		}
	}
	waitTemplate(t, vmBase)
	cfg := redteam.Config{Template: vmBase, Runtime: "microvm", MemoryMB: 128,
		// Python and the tools start slowly in an emulated guest.
		AttemptTimeout: 3 * time.Minute}
	least := 40
	if os.Getenv("SPACE_MICROVM_REDTEAM") == "" {
		cfg.Names, least = vmSurface, len(vmSurface)
	}
	report := runRedteam(t, cfg, least, 45*time.Minute)
	if report.Runtime != "microvm" {
		t.Errorf("the battery ran on %q", report.Runtime)
	}
}

// vmSurface are the attempts on what a guest has that a gVisor sandbox
// has not, or has otherwise: its own kernel, devices, disk and power
// switch, the QEMU process and sockets on the host, its channel to the
// agent, and its neighbours reached through them.
var vmSurface = []string{
	"fw_cfg items from the host",
	"vsock to the host (CID 2) and other guests",
	"write the root disk past its end",
	"QEMU's QMP and agent sockets on the host",
	"load a kernel module",
	"read /dev/mem, /dev/kmem, /dev/port",
	"guest poweroff",
	"see the victim sandbox's processes and files",
	"call the victim's agent or the host proxy",
	"the victim's uplink and agent port",
	"services on the gateway",
	"API keys and tokens in env, files and /run",
}

// runRedteam plays the battery with cfg against the shared server, with a
// fake internet for the network attempts, and fails the test by the name
// of every attempt that escaped or could not run, and when fewer than
// least attempts ran.
func runRedteam(t *testing.T, cfg redteam.Config, least int, timeout time.Duration) *redteam.Report {
	t.Helper()
	inet := nettest.StartInternet(t, "redteam", netip.MustParsePrefix("192.94.77.0/24"))
	unallowed := "192.94.77.20"
	if out, err := exec.Command("ip", "-n", inet.Namespace, "addr", "add", unallowed+"/24", "dev", "eth0").CombinedOutput(); err != nil {
		t.Fatalf("second fake internet address: %v\n%s", err, out)
	}
	l := nettest.ListenIn(t, inet.Namespace, net.JoinHostPort(unallowed, "80"))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, nettest.Greeting) })}
	go srv.Serve(l)
	t.Cleanup(func() { _ = srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	cfg.URL, cfg.APIKey, cfg.DataDir = env.srv.URL, env.srv.AdminKey, env.dataDir
	cfg.Reach = net.JoinHostPort(inet.ServerAddr.String(), "80")
	cfg.Unallowed = net.JoinHostPort(unallowed, "80")
	// The names the harness's fake DNS serves once the DNS gateway
	// exists; until then the DNS attempts report themselves skipped.
	cfg.AllowedName, cfg.DeniedName, cfg.RebindName = "allowed.test", "denied.test", "rebind.test"
	cfg.Progress = func(r redteam.Result) {
		t.Logf("%-8s %-11s %-55s %5.1fs %s", r.Outcome, r.Category, r.Name, r.Seconds, r.Evidence)
	}
	report, err := redteam.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("red team run: %v", err)
	}
	t.Logf("%d attempts on %s in %s: %d blocked, %d escaped, %d errors, %d skipped", len(report.Results), report.Runtime, time.Since(began).Round(time.Second),
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
	if len(report.Results) < least {
		t.Errorf("only %d attempts ran, want at least %d", len(report.Results), least)
	}
	var failures []string
	for _, r := range report.Failures() {
		failures = append(failures, string(r.Outcome)+" "+r.Name+": "+r.Evidence)
	}
	if len(failures) > 0 {
		t.Errorf("%d attempts failed:\n%s", len(failures), strings.Join(failures, "\n"))
	}
	return report
}

// The server section (space redteam --only server) against the shared
// server, with the key of a fresh project held to two sandboxes and
// 1,536 MiB (issue #31 used one and 512 MiB, which no build fits): every
// check must hold. The registry probes
// report skipped here: the harness lets recipes pull from its loopback
// registry (--template-registry-private).
func TestRedteamServerSection(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "uploads a gzip bomb, floods sessions and output, storms builds")
	ctx := testContext(t)
	project := fmt.Sprintf("redteam-%d", time.Now().UnixNano()%1e9)
	key, err := env.client.CreateKey(ctx, apiv1.CreateKeyRequest{Name: project, Project: project})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.RevokeKey(context.Background(), key.ID) })
	// Room for one sandbox of 512 MiB and one build (1,024 MiB), so that
	// the bomb is built and meets the template disk bound (256 MiB here,
	// not the 4 GiB of a build), and the storm meets the sandbox count.
	two, memory, templateDisk := 2, 1536, 256
	if _, err := env.client.SetProjectQuota(ctx, project, apiv1.QuotaSettings{MaxSandboxes: &two, MaxMemoryMB: &memory, MaxTemplateDiskMB: &templateDisk}); err != nil {
		t.Fatal(err)
	}
	report, err := redteam.RunServer(ctx, redteam.ServerConfig{URL: env.srv.URL, APIKey: key.Key,
		Progress: func(r redteam.Result) { t.Logf("%-6s %-40s %5.1fs %s", r.Outcome, r.Name, r.Seconds, r.Evidence) }})
	if err != nil {
		t.Fatalf("server section: %v", err)
	}
	for _, n := range report.Notes {
		t.Errorf("note: %s", n) // something it made could not be deleted
	}
	for _, r := range report.Failures() {
		t.Errorf("%s %s: %s", r.Outcome, r.Name, r.Evidence)
	}
}
