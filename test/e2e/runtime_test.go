package e2e

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// requireAPIError fails unless err is an API error of status whose
// message (the {"code","message"} body's) says want.
func requireAPIError(t *testing.T, what string, err error, status int, want string) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != status || !strings.Contains(apiErr.Message, want) {
		t.Fatalf("%s: %v; want a %d saying %q", what, err, status, want)
	}
}

// A create may name gvisor and runs isolated by it; one naming microvm on
// a template built for gVisor alone, or a runtime that does not exist, is
// refused saying what the template has; on a server without the microvm
// runtime a recipe for it is refused at submission; and a sandbox started from a
// snapshot keeps its source's runtime. Every sandbox reports its
// isolation.
func TestRuntimeChoice(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "minimal", Runtime: "gvisor"})
	if sb.Runtime != "gvisor" || sb.Isolation != "gvisor" {
		t.Fatalf("a create on gvisor reports runtime %q, isolation %q", sb.Runtime, sb.Isolation)
	}
	if out := execOK(t, sb.ID, "echo ok"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("exec on the gvisor sandbox: %q", out)
	}
	ctx := testContext(t)

	_, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", Runtime: "microvm"})
	requireAPIError(t, "create on microvm", err, http.StatusBadRequest, "template minimal has no microvm runtime (it has gvisor)")
	_, err = env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", Runtime: "firecracker"})
	requireAPIError(t, "create on an unknown runtime", err, http.StatusBadRequest, `unknown runtime "firecracker" (want one of gvisor, microvm)`)

	tpl, err := env.client.GetTemplate(ctx, "minimal")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tpl.Runtimes, []string{"gvisor"}) || tpl.DefaultRuntime != "gvisor" {
		t.Fatalf("minimal says runtimes %v, default %q; want gvisor alone", tpl.Runtimes, tpl.DefaultRuntime)
	}
	if env.noMicroVM != "" { // TestMicroVMLifecycle builds one where the server has it
		_, err = env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: "vm-minimal", Recipe: "from: minimal\nruntime: [microvm, gvisor]\n"})
		requireAPIError(t, "a recipe for microvm", err, http.StatusBadRequest, "the microvm runtime is not available on this server")
	}
	_, err = env.client.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: "bad-runtime", Recipe: "from: minimal\nruntime: qemu\n"})
	requireAPIError(t, "a recipe for an unknown runtime", err, http.StatusBadRequest, `unknown runtime "qemu"`)

	if _, err := env.client.CreateSnapshot(ctx, sb.ID, "rt"); err != nil {
		t.Fatal(err)
	}
	_, err = env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Snapshot: sb.ID + "/rt", Runtime: "microvm"})
	requireAPIError(t, "a microvm sandbox from a gvisor snapshot", err, http.StatusBadRequest, "taken under the gvisor runtime")
	copied := newSandbox(t, apiv1.CreateSandboxRequest{Snapshot: sb.ID + "/rt"})
	if copied.Runtime != "gvisor" || copied.Isolation != "gvisor" {
		t.Fatalf("a sandbox from a gvisor snapshot reports runtime %q, isolation %q", copied.Runtime, copied.Isolation)
	}

	// The default (no runtime named, as every E2B create) is the
	// template's: gvisor.
	plain := newSandbox(t, apiv1.CreateSandboxRequest{Template: "minimal"})
	if plain.Runtime != "gvisor" || plain.Isolation != "gvisor" {
		t.Fatalf("a create naming no runtime reports %q, %q", plain.Runtime, plain.Isolation)
	}
	list, err := env.client.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Isolation != "gvisor" {
			t.Errorf("sandbox %s reports isolation %q; every sandbox here runs under gvisor", s.ID, s.Isolation)
		}
	}
}
