// Package e2e drives a real space server (started in-process) with real
// gVisor sandboxes, btrfs volumes and network namespaces, through the public
// Go client and the CLI binary. It needs root and the tools that
// scripts/install-deps.sh installs.
package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/internal/pgtest"
	"github.com/space-platform/space/internal/server"
	"github.com/space-platform/space/internal/storage"
	"github.com/space-platform/space/internal/template"
	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// env is the server every test shares.
var env struct {
	srv      *server.Server
	cfg      server.Config
	client   *client.Client
	dataDir  string
	binDir   string
	repoRoot string
	skip     string
	// web is the fake internet with names that the server's resolver
	// asks (cfg.DNSUpstream); see egress_dns_test.go.
	web *nettest.Web
	// noMicroVM says why the server has no microvm runtime (no QEMU or
	// guest kernel on this host); empty when it has one.
	noMicroVM string
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	if os.Geteuid() != 0 {
		env.skip = "end-to-end tests need root (namespaces, mounts, cgroups)"
		return pgtest.Main(m), nil
	}
	root, err := repoRoot()
	if err != nil {
		return 1, err
	}
	env.repoRoot = root
	env.binDir, err = os.MkdirTemp("", "space-e2e-bin-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(env.binDir)
	for _, b := range []struct{ out, pkg string }{{"space-agent", "./cmd/space-agent"}, {"space", "./cmd/space"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(env.binDir, b.out), b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 1, fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	env.dataDir = os.Getenv("SPACE_TEST_DATA_DIR")
	if env.dataDir == "" {
		if env.dataDir, err = os.MkdirTemp("/var/tmp", "space-e2e-"); err != nil {
			return 1, err
		}
	}
	cfg := server.DefaultConfig()
	cfg.DataDir = env.dataDir
	cfg.Listen = "127.0.0.1:0"
	cfg.E2BListen = "127.0.0.1:0"   // E2B API (e2b_*_test.go)
	cfg.ProxyListen = "127.0.0.1:0" // sandbox proxy (e2b_*_test.go)
	cfg.AgentPath = filepath.Join(env.binDir, "space-agent")
	cfg.RunscPath = filepath.Join(root, ".tools", "bin", "runsc")
	cfg.BuildTemplates = nil // built below, synchronously
	cfg.PoolSizes = nil      // tests that want a pool set one
	cfg.VolumeImageBytes = 16 << 30
	// Small, so that templates_test.go can exceed it cheaply.
	cfg.MaxTemplateArchiveBytes = e2eMaxArchive
	// Small, so that sessions_test.go can print past a journal (memory
	// tail and spill) cheaply.
	cfg.SessionSpillLimit = e2eSessionSpill
	// The registries of e2b_tpl_test.go serve on the loopback.
	cfg.TemplateRegistryPrivate = true
	cfg.Defaults.Template = "minimal"
	cfg.Defaults.Retention = time.Hour
	// Rolling snapshots every few seconds, so that the tests of them wait
	// seconds, not the default floor's minute (e2eSnapshotInterval).
	cfg.Defaults.MinSnapshotInterval = e2eSnapshotInterval * time.Second
	// The microvm runtime beside gVisor where the host has QEMU and the
	// guest kernel (scripts/install-deps.sh); under TCG, which every host
	// has, so that a run does not wait for a KVM probe.
	// The quick tier's smoke set is gVisor's alone.
	if flag.Parse(); testing.Short() {
		env.noMicroVM = testtier.FullOnly + "the microVM backend"
	} else if env.noMicroVM = microVMMissing(root); env.noMicroVM == "" {
		cfg.Runtimes = []string{"gvisor", "microvm"}
		cfg.Accel = "tcg"
	}
	cfg.Progress = os.Stderr
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Named per process, in the first free range: another e2e run on the
	// machine must not lose its fake web to this one.
	removeStaleWebs()
	for _, subnet := range []string{"192.88.99.0/24", "192.52.193.0/24", "192.175.49.0/24", "192.31.196.0/24"} {
		if env.web, err = nettest.StartWeb(fmt.Sprintf("e%d", os.Getpid()%100000), netip.MustParsePrefix(subnet)); err == nil {
			break
		}
	}
	if err != nil {
		return 1, err
	}
	defer env.web.Close()
	// The fake web's names, and the package registries' for template
	// builds (registrydns_test.go).
	dnsAddr, stopDNS, err := startRegistryDNS(env.web.DNS)
	if err != nil {
		return 1, err
	}
	defer stopDNS()
	cfg.DNSUpstream = dnsAddr
	// Credential injection verifies the fake web's HTTPS servers.
	cfg.EgressCAFile = filepath.Join(env.binDir, "web-ca.pem")
	if err := os.WriteFile(cfg.EgressCAFile, env.web.CAPEM, 0o644); err != nil {
		return 1, err
	}
	// Builds are kept across runs, by template ID (scripts/test.sh
	// rebuilds a template only when its recipe, the builder or the CA
	// changes): the egress CA, which every template trusts and its ID
	// covers, is the same in every run for that.
	cfg.TemplateBuildCache = filepath.Join(root, ".tools", "cache", "e2e-templates")
	if err := seedEgressCA(filepath.Join(root, ".tools", "cache", "e2e-ca"), filepath.Join(env.dataDir, "ca")); err != nil {
		return 1, err
	}
	env.cfg = cfg
	if err := startServer(); err != nil {
		return 1, err
	}
	if err := buildBuiltin("minimal"); err != nil {
		return 1, err
	}
	code := pgtest.Main(m) // stops the PostgreSQL cluster tests may start
	cleanup()
	return code, nil
}

// seedEgressCA gives a new data directory's egress CA (dst) the one kept
// in cache, made there on first use.
func seedEgressCA(cache, dst string) error {
	if _, err := credentials.LoadOrCreateCA(cache); err != nil {
		return err
	}
	files, err := os.ReadDir(cache)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(cache, f.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, f.Name()), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// buildBuiltin builds a built-in template unless it is already there.
func buildBuiltin(name string) error {
	recipe, ok := template.Builtin(name)
	if !ok {
		return fmt.Errorf("no built-in template %q", name)
	}
	if _, err := env.srv.Templates().Build(context.Background(), name, recipe, template.Source{}, os.Stderr); err != nil {
		return fmt.Errorf("build template %s: %w", name, err)
	}
	// Built on the node; a control plane that learns of its node's
	// templates from heartbeats (one house's) lists it at the next one.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		tpl, err := env.client.GetTemplate(context.Background(), name)
		if err == nil && tpl.State == apiv1.TemplateReady {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("template %s built, but the API does not list it ready: %+v, %v", name, tpl, err)
		}
	}
}

func startServer() error {
	srv, err := server.Start(context.Background(), env.cfg)
	if err != nil {
		return err
	}
	env.srv = srv
	env.client = client.New(srv.URL, srv.AdminKey)
	return nil
}

// restartServer stops the shared server and starts it again on the same
// data directory, as an operator's restart would.
func restartServer(t *testing.T) {
	t.Helper()
	if err := env.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := startServer(); err != nil {
		t.Fatal(err)
	}
}

// cleanup deletes every sandbox and leaves no mount or file behind, unless
// SPACE_TEST_KEEP is set for debugging.
func cleanup() {
	ctx := context.Background()
	if list, err := env.client.ListSandboxes(ctx, client.ListOptions{}); err == nil {
		for _, sb := range list {
			_ = env.client.DeleteSandbox(ctx, sb.ID)
		}
	}
	_ = env.srv.Shutdown(ctx)
	if os.Getenv("SPACE_TEST_KEEP") != "" || os.Getenv("SPACE_TEST_DATA_DIR") != "" {
		return
	}
	releaseDataDir(env.dataDir)
	_ = os.RemoveAll(env.dataDir)
}

// releaseDataDir unmounts everything a server mounted under its data
// directory and detaches the loop device of its volume image.
func releaseDataDir(dir string) {
	killRuntimes(dir)
	storage.UnmountUnder(dir)
	_ = exec.Command("sh", "-c", "losetup -j "+filepath.Join(dir, "volumes.img")+" | cut -d: -f1 | xargs -r losetup -d").Run()
}

// killRuntimes kills sandbox processes of a server's data directory that
// are still running (a failed test may leave some behind), so that nothing
// holds its volumes when they are unmounted.
func killRuntimes(dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !(strings.Contains(string(b), dir+"/runtime/") || strings.Contains(string(b), dir+"/microvm/")) {
			continue
		}
		if pid, err := strconv.Atoi(strings.Split(p, "/")[2]); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	time.Sleep(100 * time.Millisecond)
}

// microVMMissing says what the host lacks for the microvm runtime, ""
// when it has everything.
func microVMMissing(root string) string {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return "no qemu-system-x86_64 (scripts/install-deps.sh installs it)"
	}
	if _, err := os.Stat(filepath.Join(root, ".tools", "microvm", "current", "vmlinuz")); err != nil {
		return "no microVM guest kernel under .tools/microvm (scripts/install-deps.sh fetches it)"
	}
	return ""
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for ; dir != "/"; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("go.mod not found above the working directory")
}

// requireServer skips t where the shared server cannot run (not root),
// and in the quick tier unless t is a smoke test (smoke_test.go).
func requireServer(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
	requireFullTier(t)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newSandbox creates a sandbox in one house (the shared server), waits
// until it runs and deletes it when the test ends.
func newSandbox(t *testing.T, req apiv1.CreateSandboxRequest) *apiv1.Sandbox {
	t.Helper()
	requireServer(t)
	return oneHouse().sandbox(t, req)
}

// execOK runs a shell command and fails the test unless it exits 0.
func execOK(t *testing.T, id, script string) string {
	t.Helper()
	res, err := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stdout %q, stderr %q", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// collect attaches to a session and returns its whole output and exit code.
func collect(t *testing.T, id, sid string) (string, int) {
	t.Helper()
	stream, err := env.client.Attach(testContext(t), id, sid, 0)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	defer stream.Close()
	var out strings.Builder
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			t.Fatal("stream ended without an exit event")
		}
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		switch ev.Type {
		case apiv1.EventExit:
			return out.String(), ev.ExitCode
		default:
			out.Write(ev.Data)
		}
	}
}

// removeStaleWebs tears down the fake webs of e2e runs that were killed
// before their cleanup (named e<pid>, as below): each holds one of the
// three ranges, and three of them would fail every later run at start.
func removeStaleWebs() {
	names, err := nettest.WebNames()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return
	}
	for _, name := range names {
		pid, err := strconv.Atoi(strings.TrimPrefix(name, "e"))
		if err != nil || !strings.HasPrefix(name, "e") {
			continue
		}
		if !e2eProcessAlive(pid) {
			nettest.RemoveWeb(name)
		}
	}
}

// e2eProcessAlive reports whether a process whose pid is pid modulo
// 100000 (the fake web's name keeps no more) is an e2e test binary.
func e2eProcessAlive(pid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell: keep it
	}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n%100000 != pid {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), "e2e.test") {
			return true
		}
	}
	return false
}

// groupSlots bounds the package's parallel group to three tests at a
// time beside TestE2BJSSDKs, which takes no slot: the group's longest
// test starts with it, instead of waiting for a slot behind tests that
// take the cores it needs (scripts/test.sh's -parallel lets every
// parallel test of the package start at once; which ones go test then
// runs first is up to its scheduler). The group is CPU-bound: more at a
// time only stretches each (docs/testing.md).
var groupSlots = make(chan struct{}, 3)

// inParallelGroup is t.Parallel for the tests of the parallel group but
// TestE2BJSSDKs: it waits for one of groupSlots, held until the test and
// its subtests end.
func inParallelGroup(t *testing.T) {
	t.Helper()
	t.Parallel()
	groupSlots <- struct{}{}
	t.Cleanup(func() { <-groupSlots })
}
