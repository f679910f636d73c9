package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// bootedTemplate is a minimal template whose start command records every
// start in /home/user/starts, so a test sees whether a resume booted afresh.
const bootedTemplate = `
name: life-booted
from: template:minimal
start: "sh -c 'date +%s >> /home/user/starts; exec sleep 2147483647'"
`

func lifeBootedTemplate(t *testing.T) string {
	t.Helper()
	if _, err := env.client.CreateTemplate(testContext(t), apiv1.CreateTemplateRequest{Recipe: bootedTemplate}); err != nil {
		t.Fatalf("create template: %v", err)
	}
	return waitTemplate(t, "life-booted").Name
}

// bootState is what tells one boot of a sandbox from another.
type bootState struct{ bootID, starts, file, sleepers string }

func readBootState(t *testing.T, id string) bootState {
	t.Helper()
	out := execOK(t, id, `cat /proc/sys/kernel/random/boot_id; echo "|"; wc -l < /home/user/starts; echo "|"; cat /home/user/keep.txt; echo "|"; ps -o args | grep -c '^sleep 2147483647' || true`)
	parts := strings.Split(out, "|")
	if len(parts) != 4 {
		t.Fatalf("boot state of %s: %q", id, out)
	}
	return bootState{strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), strings.TrimSpace(parts[2]), strings.TrimSpace(parts[3])}
}

// The Python SDK's pause(keep_memory=False) and JS's pause({keepMemory:
// false}) send {"memory": false}: memory is dropped, the disk kept, and
// connect boots the sandbox afresh: a new kernel boot id, the template's
// start command run again, the files as they were, old processes gone.
// The native suspend does the same with keep_memory false.
func TestE2BPauseWithoutMemoryBootsFresh(t *testing.T) {
	tpl := lifeBootedTemplate(t)
	sb := e2bCreate(t, tpl, map[string]any{"timeout": 300})
	execOK(t, sb.SandboxID, `echo kept > /home/user/keep.txt && { sleep 2147483647 >/dev/null 2>&1 & }`)
	before := readBootState(t, sb.SandboxID)
	if before.bootID == "" || before.starts != "1" || before.file != "kept" || before.sleepers != "2" {
		t.Fatalf("before the pause: %+v (want one start, the file, two sleepers)", before)
	}

	resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", map[string]any{"memory": false}, nil)
	if resp.status != http.StatusNoContent {
		t.Fatalf("pause without memory: %d %s", resp.status, resp.body)
	}
	got, err := env.client.GetSandbox(testContext(t), sb.SandboxID)
	if err != nil || got.State != apiv1.StateSuspended || !got.DiskOnly {
		t.Fatalf("after the pause: %+v, %v; want suspended with disk_only", got, err)
	}
	// A second pause answers 409 as E2B does (the SDK returns false).
	e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", map[string]any{"memory": false}, nil).
		wantError(t, http.StatusConflict, "already paused")

	resp = e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 300}, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("connect: %d %s", resp.status, resp.body)
	}
	after := readBootState(t, sb.SandboxID)
	if after.bootID == before.bootID || after.starts != "2" || after.file != "kept" || after.sleepers != "1" {
		t.Fatalf("after connect: %+v, before %+v; want a new boot id, a second start, the file, only the start command's sleeper", after, before)
	}
	if got, err := env.client.GetSandbox(testContext(t), sb.SandboxID); err != nil || got.State != apiv1.StateRunning || got.DiskOnly {
		t.Fatalf("after connect: %+v, %v", got, err)
	}

	// Native: POST /v1/sandboxes/{id}/suspend {"keep_memory": false}.
	execOK(t, sb.SandboxID, `echo again >> /home/user/keep.txt`)
	keep := false
	susp, err := env.client.SuspendWith(testContext(t), sb.SandboxID, apiv1.SuspendRequest{KeepMemory: &keep})
	if err != nil || susp.State != apiv1.StateSuspended || !susp.DiskOnly {
		t.Fatalf("native suspend without memory: %+v, %v", susp, err)
	}
	if _, err := env.client.Resume(testContext(t), sb.SandboxID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	third := readBootState(t, sb.SandboxID)
	if third.bootID == after.bootID || third.starts != "3" || third.file != "kept\nagain" {
		t.Fatalf("after the native resume: %+v", third)
	}
	// A suspend that keeps memory still keeps it: same boot, same start.
	if _, err := env.client.Suspend(testContext(t), sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Resume(testContext(t), sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if kept := readBootState(t, sb.SandboxID); kept.bootID != third.bootID || kept.starts != "3" {
		t.Fatalf("a suspend keeping memory booted afresh: %+v, before %+v", kept, third)
	}
}

// Malformed suspend bodies and create options that cannot go together are
// clear 400s, and nothing is suspended by them.
func TestSuspendWithoutMemoryRefusesBadInput(t *testing.T) {
	sb := e2bCreate(t, "minimal", nil)
	for _, body := range []string{`{"keep_memory": "no"}`, `{"keepMemory": false}`, `[1]`, `{"keep_memory": false} x`} {
		resp := rawNative(t, http.MethodPost, "/v1/sandboxes/"+sb.SandboxID+"/suspend", body)
		resp.wantError(t, http.StatusBadRequest, "")
	}
	e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", map[string]any{"memory": "no"}, nil).
		wantError(t, http.StatusBadRequest, "malformed JSON")
	if got, err := env.client.GetSandbox(testContext(t), sb.SandboxID); err != nil || got.State != apiv1.StateRunning {
		t.Fatalf("after refused suspends: %+v, %v", got, err)
	}
	resp := e2bRequest(t, http.MethodPost, "/v2/sandboxes", map[string]any{
		"templateID": "minimal", "autoPause": true, "autoPauseMemory": false, "autoResume": map[string]any{"enabled": true},
	}, nil)
	resp.wantError(t, http.StatusBadRequest, "autoResume")
	resp = e2bRequest(t, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "minimal", "autoPauseMemory": false}, nil)
	resp.wantError(t, http.StatusBadRequest, "autoPause")
}

// rawNative sends body verbatim to the native API with the admin key.
func rawNative(t *testing.T, method, path, body string) e2bResponse {
	t.Helper()
	r := raw(t, env.srv.URL, env.srv.AdminKey, method, path, body)
	return e2bResponse{status: r.status, header: r.header, body: r.body}
}
