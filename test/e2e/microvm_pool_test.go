package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// vmDefaultTemplate is a minimal-based template whose only (so default)
// runtime is microvm: its warm pool holds microVM guests.
const vmDefaultTemplate = "vm-micro"

// Warm creates on microvm are restores of a microVM image of the create's
// own size, on a template whose default runtime is gVisor as on one whose
// default is microvm; a microvm template's pool of one is claimed. Each
// sandbox comes up with its own identity: its id as hostname and
// SPACE_SANDBOX_ID, an access token its agent takes and another sandbox's
// refuses, and the memory its create asked for.
func TestMicroVMWarmCreatesAndPool(t *testing.T) {
	both := requireVMTemplate(t, vmTemplate, "gvisor", "microvm")

	// Not the template's default runtime, and not the pool's limits: a
	// restore of the microVM image of 1 vCPU and 128 MiB.
	w := newVMSandbox(t, apiv1.CreateSandboxRequest{Template: vmTemplate, Runtime: "microvm", MemoryMB: 128, VCPUs: 1})
	requireVMIdentity(t, w, 128)
	requireRestoredFrom(t, w, both.ID)
	if !templateImageOf(both.ID + "@microvm-1cpu-128mb") {
		t.Fatalf("no microVM image of %s of 1 vCPU and 128 MiB after a warm create", vmTemplate)
	}
	if err := env.client.DeleteSandbox(testContext(t), w.ID); err != nil {
		t.Fatal(err)
	}

	// A pool of one on a template whose default is microvm.
	vm := requireVMTemplate(t, vmDefaultTemplate, "microvm")
	setTemplatePool(t, vmDefaultTemplate, 1)
	t.Cleanup(func() { _, _ = env.client.SetTemplatePool(context.Background(), vmDefaultTemplate, 0) })
	a, err := env.client.CreateSandbox(testContext(t), apiv1.CreateSandboxRequest{Template: vmDefaultTemplate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), a.ID) })
	if a.State != apiv1.StateRunning {
		t.Fatalf("a create of the pooled template answered %s; want running (claimed)", a.State)
	}
	requireVMIdentity(t, a, a.MemoryMB)
	// Drained, the pool leaves the next create a warm restore of the same
	// image, with another identity.
	setTemplatePool(t, vmDefaultTemplate, 0)
	b := newVMSandbox(t, apiv1.CreateSandboxRequest{Template: vmDefaultTemplate})
	requireVMIdentity(t, b, b.MemoryMB)
	requireRestoredFrom(t, a, vm.ID)
	requireRestoredFrom(t, b, vm.ID)
	if !templateImageOf(fmt.Sprintf("%s@microvm-%dcpu-%dmb", vm.ID, b.VCPUs, b.MemoryMB)) {
		t.Fatalf("no microVM image of %s of the default size", vmDefaultTemplate)
	}
	if a.AccessToken == b.AccessToken {
		t.Fatal("two sandboxes restored from one image share an access token")
	}
	if got := agentEnvs(t, b.ID, a.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("%s's agent answered %d to another sandbox's token; want 401", b.ID, got)
	}
}

// requireRestoredFrom checks a microvm sandbox is a restore of the
// template's image: its kernel was booted for the template's boot sandbox
// (named "tpl" and the template id's start on the kernel command line,
// which a guest keeps for life), not for it.
func requireRestoredFrom(t *testing.T, sb *apiv1.Sandbox, templateID string) {
	t.Helper()
	cmdline := execOK(t, sb.ID, "cat /proc/cmdline")
	if !strings.Contains(cmdline, "=tpl"+templateID[:17]) || strings.Contains(cmdline, sb.ID) {
		t.Fatalf("%s's kernel was booted with %q; want the template image's boot (a warm create)", sb.ID, cmdline)
	}
}

// newVMSandbox creates a sandbox and waits until it runs: longer than
// newSandbox, as a first warm create of a size boots the template's image
// of it under TCG first.
func newVMSandbox(t *testing.T, req apiv1.CreateSandboxRequest) *apiv1.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	sb, err := env.client.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), sb.ID) })
	running, err := env.client.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 5*time.Minute)
	if err != nil {
		t.Fatalf("wait for sandbox %s: %v", sb.ID, err)
	}
	return running
}

// requireVMIdentity checks a running microvm sandbox is a TCG guest of
// memoryMB (its kernel's MemTotal a little less), with its own id as
// hostname and SPACE_SANDBOX_ID, and an agent that takes its token.
func requireVMIdentity(t *testing.T, sb *apiv1.Sandbox, memoryMB int) {
	t.Helper()
	if sb.Runtime != "microvm" || sb.Isolation != "microvm-tcg" {
		t.Fatalf("%s: runtime %q, isolation %q; want microvm under TCG", sb.ID, sb.Runtime, sb.Isolation)
	}
	out := execOK(t, sb.ID, `echo "$SPACE_SANDBOX_ID $(hostname) $(awk '/^MemTotal/ {print $2}' /proc/meminfo)"`)
	f := strings.Fields(out)
	if len(f) != 3 || f[0] != sb.ID || f[1] != sb.ID {
		t.Fatalf("%s sees itself as %q; want its id as SPACE_SANDBOX_ID and hostname", sb.ID, out)
	}
	// The guest's kernel keeps some of its RAM (some 48 MiB of 128 for
	// Debian's: its image, initramfs and page tables).
	if kb, _ := strconv.Atoi(f[2]); kb > memoryMB*1024 || kb < (memoryMB-64)*1024 {
		t.Fatalf("%s has MemTotal %s kB; want a guest of %d MiB", sb.ID, f[2], memoryMB)
	}
	if got := agentEnvs(t, sb.ID, sb.AccessToken); got != http.StatusOK {
		t.Fatalf("%s's agent answered %d to its own token", sb.ID, got)
	}
}

// agentEnvs asks a sandbox's agent, through the proxy, for /envs (which
// takes the sandbox's access token only) with token, and returns the status.
func agentEnvs(t *testing.T, id, token string) int {
	t.Helper()
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", id)
	h.Set("E2b-Sandbox-Port", "49983")
	h.Set("X-Access-Token", token)
	return proxyRequest(t, http.MethodGet, "/envs", "", nil, h).status
}
