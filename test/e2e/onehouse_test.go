package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// `space serve` (one house, issue #30) runs the cluster's control plane
// and the cluster's node in one process: its node has a stable id of its
// own and is reached by calls; a sandbox, its files and its snapshot
// outlive a kill -9; a template builds through the node contract.
func TestOneHouseServe(t *testing.T) {
	s := newCrashServer(t, false)
	ctx := testContext(t)

	nodes, err := s.client.ListNodes(ctx)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %+v, %v", nodes, err)
	}
	idFile, err := os.ReadFile(filepath.Join(s.dataDir, "node-id"))
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	if node.ID != strings.TrimSpace(string(idFile)) || node.Address != "inproc://"+node.ID || node.State != "ready" {
		t.Fatalf("the node: %+v, want the id of its node-id file, in process, ready", node)
	}

	sb, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Metadata: map[string]string{"house": "one"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.WriteFile(ctx, sb.ID, "/home/user/kept.txt", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CreateSnapshot(ctx, sb.ID, "before"); err != nil {
		t.Fatal(err)
	}

	// A template built through the control plane's catalog, on the node.
	if _, err := s.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: "hello", Recipe: "from: minimal\nrun:\n  - echo hi from the build > /hello\n"}); err != nil {
		t.Fatal(err)
	}
	lines := followTemplateLog(ctx, t, s.client, "hello")
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "echo hi from the build") }) {
		t.Fatalf("the build's log: %q", lines)
	}
	if tpl, err := s.client.GetTemplate(ctx, "hello"); err != nil || tpl.State != apiv1.TemplateReady {
		t.Fatalf("template after its log ended: %+v, %v", tpl, err)
	}
	hello, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.WaitSandbox(ctx, hello.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := readFile(ctx, t, s.client, hello.ID, "/hello"); got != "hi from the build\n" {
		t.Fatalf("a sandbox of the built template reads %q", got)
	}

	s.kill()
	s.start()
	got, err := s.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata["house"] != "one" || got.Node != node.ID {
		t.Fatalf("after a kill -9: %+v, want its metadata, on node %s", got, node.ID)
	}
	if content := readFile(ctx, t, s.client, sb.ID, "/home/user/kept.txt"); content != "kept" {
		t.Fatalf("file after a kill -9 = %q", content)
	}
	if snaps, err := s.client.ListSnapshots(ctx, sb.ID); err != nil || len(snaps) != 1 || snaps[0].Name != "before" {
		t.Fatalf("snapshots after a kill -9 = %+v, %v", snaps, err)
	}
	if _, err := s.client.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	execOK2(t, s.client, sb.ID) // resumes it
	for _, id := range []string{sb.ID, hello.ID} {
		if err := s.client.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	s.kill()
}

// A data dir that serve wrote before one house (the previous release,
// built from this repository's history) opens with serve, nothing lost
// (issue #30, item 3): its admin key, a project's key, a secret, a
// project template, a running sandbox with its file and snapshot, and a
// suspended one, which resumes; its node is the one of its node-id file.
func TestOneHouseUpgradesServesDataDir(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "builds the previous release and starts and kills separate servers")
	space, agent := previousRelease(t)
	base := t.TempDir()
	s := &crashServer{t: t, dataDir: filepath.Join(base, "data"), listen: freePort(t), binary: space, agent: agent}
	s.start()
	t.Cleanup(func() { s.stop(base) })
	ctx := testContext(t)
	running, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Metadata: map[string]string{"upgrade": "running"}})
	if err != nil {
		t.Fatal(err)
	}
	suspended, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running.ID, suspended.ID} {
		if _, err := s.client.WaitSandbox(ctx, id, apiv1.StateRunning, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.WriteFile(ctx, id, "/home/user/kept.txt", strings.NewReader("kept by "+id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.client.CreateSnapshot(ctx, running.ID, "before"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Suspend(ctx, suspended.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: "hello", Recipe: "from: minimal\nrun:\n  - echo hi from the build > /hello\n"}); err != nil {
		t.Fatal(err)
	}
	followTemplateLog(ctx, t, s.client, "hello")
	tpl, err := s.client.GetTemplate(ctx, "hello")
	if err != nil || tpl.State != apiv1.TemplateReady {
		t.Fatalf("template before the upgrade: %+v, %v", tpl, err)
	}
	if _, _, err := s.client.SetSecret(ctx, "UPGRADE_SECRET", "kept"); err != nil {
		t.Fatal(err)
	}
	key, err := s.client.CreateKey(ctx, apiv1.CreateKeyRequest{Name: "upgrade", Project: "upgrade"})
	if err != nil {
		t.Fatal(err)
	}
	adminKey, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}

	s.kill()
	s.binary, s.agent = "", ""
	s.start()
	if after, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key")); err != nil || string(after) != string(adminKey) {
		t.Fatalf("admin.key after the upgrade: %q, %v; want serve's", after, err)
	}
	nodes, err := s.client.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].ID == "local" || nodes[0].Address != "inproc://"+nodes[0].ID {
		t.Fatalf("nodes after the upgrade (with serve's admin key): %+v, %v", nodes, err)
	}
	got, err := s.client.WaitSandbox(ctx, running.ID, apiv1.StateRunning, time.Minute)
	if err != nil || got.Metadata["upgrade"] != "running" || got.Node != nodes[0].ID {
		t.Fatalf("the running sandbox after the upgrade: %+v, %v (want it on %s)", got, err, nodes[0].ID)
	}
	if snaps, err := s.client.ListSnapshots(ctx, running.ID); err != nil || len(snaps) != 1 || snaps[0].Name != "before" {
		t.Fatalf("snapshots after the upgrade: %+v, %v", snaps, err)
	}
	if sb, err := s.client.GetSandbox(ctx, suspended.ID); err != nil || sb.State != apiv1.StateSuspended {
		t.Fatalf("the suspended sandbox after the upgrade: %+v, %v", sb, err)
	}
	for _, id := range []string{running.ID, suspended.ID} { // the suspended one resumes to answer
		if content := readFile(ctx, t, s.client, id, "/home/user/kept.txt"); content != "kept by "+id {
			t.Fatalf("%s's file after the upgrade: %q", id, content)
		}
	}
	if after, err := s.client.GetTemplate(ctx, "hello"); err != nil || after.State != apiv1.TemplateReady || after.ID != tpl.ID {
		t.Fatalf("template after the upgrade: %+v, %v (was %s)", after, err, tpl.ID)
	}
	hello, err := s.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.WaitSandbox(ctx, hello.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := readFile(ctx, t, s.client, hello.ID, "/hello"); got != "hi from the build\n" {
		t.Fatalf("a sandbox of the imported template reads %q", got)
	}
	if secrets, err := s.client.ListSecrets(ctx); err != nil || !slices.ContainsFunc(secrets, func(s apiv1.Secret) bool { return s.Name == "UPGRADE_SECRET" }) {
		t.Fatalf("secrets after the upgrade: %+v, %v", secrets, err)
	}
	if _, err := client.New(s.client.BaseURL(), key.Key).ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("the project's key after the upgrade: %v", err)
	}
	for _, id := range []string{running.ID, suspended.ID, hello.ID} {
		if err := s.client.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// beforeOneHouse is the last commit whose `space serve` ran serve's own
// catalog, E2B build files and node "local" (issue #30): the release a
// data dir upgrades from.
const beforeOneHouse = "74ed21b400a1c83a1b364590627390c7fc7a2fa4"

// previousRelease builds space and space-agent of beforeOneHouse from the
// repository's history, once per machine (scripts/build-revision.sh).
func previousRelease(t *testing.T) (space, agent string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.repoRoot, "scripts", "build-revision.sh"), beforeOneHouse)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build the release before one house (%s): %v\n%s", beforeOneHouse[:12], err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	return filepath.Join(dir, "space"), filepath.Join(dir, "space-agent")
}
