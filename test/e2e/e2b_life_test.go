package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// lifeTemplate builds (once: the same recipe is the same template) one of
// the recipes the JS suite shares, compat/e2b-js/lib/<name>.yaml.
func lifeTemplate(t *testing.T, name string) string {
	t.Helper()
	recipe, err := os.ReadFile(filepath.Join(env.repoRoot, "compat", "e2b-js", "lib", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.CreateTemplate(testContext(t), apiv1.CreateTemplateRequest{Recipe: string(recipe)}); err != nil {
		t.Fatalf("create template %s: %v", name, err)
	}
	return waitTemplate(t, name).Name
}

// bootState is what tells one boot of a sandbox from another.
type bootState struct{ bootID, starts, file, sleepers string }

// readBootState reads it once the start command has run starts times: it
// runs in the background (the template has no ready check), so its line in
// /home/user/starts and its sleeper may come a moment after a create or a
// resume answers.
func readBootState(t *testing.T, id string, starts int) bootState {
	t.Helper()
	want := strconv.Itoa(starts)
	st := readBootStateOnce(t, id)
	for deadline := time.Now().Add(10 * time.Second); st.starts != want && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		st = readBootStateOnce(t, id)
	}
	return st
}

func readBootStateOnce(t *testing.T, id string) bootState {
	t.Helper()
	out := execOK(t, id, `cat /proc/sys/kernel/random/boot_id; echo "|"; wc -l < /home/user/starts; echo "|"; cat /home/user/keep.txt 2>/dev/null; echo "|"; ps -o args | grep -c '^sleep 2147483647' || true`)
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
	tpl := lifeTemplate(t, "life-booted")
	sb := e2bCreate(t, tpl, map[string]any{"timeout": 300})
	execOK(t, sb.SandboxID, `echo kept > /home/user/keep.txt && { sleep 2147483647 >/dev/null 2>&1 & }`)
	before := readBootState(t, sb.SandboxID, 1)
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
	after := readBootState(t, sb.SandboxID, 2)
	if after.bootID == before.bootID || after.starts != "2" || after.file != "kept" || after.sleepers != "1" {
		t.Fatalf("after connect: %+v, before %+v; want a new boot id, a second start, the file, only the start command's sleeper", after, before)
	}
	if got, err := env.client.GetSandbox(testContext(t), sb.SandboxID); err != nil || got.State != apiv1.StateRunning || got.DiskOnly {
		t.Fatalf("after connect: %+v, %v", got, err)
	}

	// Native: POST /v1/sandboxes/{id}/suspend {"keep_memory": false}.
	execOK(t, sb.SandboxID, `echo again >> /home/user/keep.txt`)
	sess, err := env.client.CreateSession(testContext(t), sb.SandboxID, apiv1.CreateSessionRequest{Cmd: []string{"sleep", "600"}, Tag: "before"})
	if err != nil {
		t.Fatal(err)
	}
	keep := false
	susp, err := env.client.SuspendWith(testContext(t), sb.SandboxID, apiv1.SuspendRequest{KeepMemory: &keep})
	if err != nil || susp.State != apiv1.StateSuspended || !susp.DiskOnly {
		t.Fatalf("native suspend without memory: %+v, %v", susp, err)
	}
	if _, err := env.client.Resume(testContext(t), sb.SandboxID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	// The sessions the node followed went with the memory.
	if _, err := env.client.GetSession(testContext(t), sb.SandboxID, sess.ID); !client.IsNotFound(err) {
		t.Fatalf("session %s after a resume without memory: %v, want 404", sess.ID, err)
	}
	third := readBootState(t, sb.SandboxID, 3)
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
	if kept := readBootState(t, sb.SandboxID, 3); kept.bootID != third.bootID || kept.starts != "3" {
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

// e2bMetric is E2B's SandboxMetric.
type e2bMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       uint64  `json:"memUsed"`
	MemTotal      uint64  `json:"memTotal"`
	MemCache      *uint64 `json:"memCache"`
	DiskUsed      uint64  `json:"diskUsed"`
	DiskTotal     uint64  `json:"diskTotal"`
}

func e2bMetrics(t *testing.T, id, query string) []e2bMetric {
	t.Helper()
	resp := e2bRequest(t, http.MethodGet, "/sandboxes/"+id+"/metrics"+query, nil, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("metrics%s: %d %s", query, resp.status, resp.body)
	}
	var out []e2bMetric
	resp.json(t, &out)
	return out
}

// The server keeps each sandbox's history (its node samples it every 5 s)
// and GET /sandboxes/{id}/metrics?start=&end= answers the samples inside
// the range, as the SDKs' getMetrics({start, end}) asks: none for a range
// before the sandbox existed, the same on the native API, and a paused
// sandbox keeps its history without being resumed by the read.
func TestE2BMetricsHistoryAndRanges(t *testing.T) {
	// Waits for the node's samples: alongside the other parallel tests.
	inParallelGroup(t)
	created := time.Now()
	sb := e2bCreate(t, "minimal", nil)
	var all []e2bMetric
	deadline := time.Now().Add(30 * time.Second)
	for all = e2bMetrics(t, sb.SandboxID, ""); len(all) < 3; all = e2bMetrics(t, sb.SandboxID, "") {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d samples: %+v", len(all), all)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for i, m := range all {
		ts, err := time.Parse(time.RFC3339, m.Timestamp)
		if err != nil || ts.Unix() != m.TimestampUnix || ts.Before(created.Add(-time.Second).Truncate(time.Second)) || ts.After(time.Now()) {
			t.Fatalf("sample %d timestamp %q/%d (created %s): %v", i, m.Timestamp, m.TimestampUnix, created, err)
		}
		if m.CPUCount < 1 || m.MemTotal == 0 || m.MemUsed > m.MemTotal || m.MemCache == nil || m.DiskTotal == 0 || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
			t.Fatalf("sample %d: %+v", i, m)
		}
		// 5 s apart, give or take a busy host's scheduling.
		if i > 0 && m.TimestampUnix-all[i-1].TimestampUnix < 3 {
			t.Fatalf("samples %d and %d are %d s apart; the history has 5 s resolution: %+v", i-1, i, m.TimestampUnix-all[i-1].TimestampUnix, all)
		}
	}
	second := all[1].TimestampUnix
	if got := e2bMetrics(t, sb.SandboxID, fmt.Sprintf("?start=%d&end=%d", second, second)); len(got) != 1 || got[0].TimestampUnix != second {
		t.Fatalf("range [%d, %d]: %+v, want the one sample of that second", second, second, got)
	}
	if got := e2bMetrics(t, sb.SandboxID, fmt.Sprintf("?start=%d", second)); len(got) < 2 || got[0].TimestampUnix != second {
		t.Fatalf("from %d on: %+v", second, got)
	}
	if got := e2bMetrics(t, sb.SandboxID, fmt.Sprintf("?end=%d", all[0].TimestampUnix)); len(got) != 1 {
		t.Fatalf("up to the first sample: %+v", got)
	}
	before := created.Unix()
	if got := e2bMetrics(t, sb.SandboxID, fmt.Sprintf("?start=%d&end=%d", before-7200, before-3600)); len(got) != 0 {
		t.Fatalf("a range before the sandbox existed: %+v", got)
	}
	if got := e2bMetrics(t, sb.SandboxID, fmt.Sprintf("?start=%d&end=%d", before+7200, before+9000)); len(got) != 0 {
		t.Fatalf("a range in the future: %+v", got)
	}
	for _, q := range []string{"?start=abc", "?start=-1", "?end=1.5", fmt.Sprintf("?start=%d&end=%d", second, second-10), "?start=99999999999999999", "?end=253402300800"} {
		e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID+"/metrics"+q, nil, nil).wantError(t, http.StatusBadRequest, "")
	}

	// The native API serves the same history.
	var native apiv1.MetricsList
	resp := rawNative(t, http.MethodGet, "/v1/sandboxes/"+sb.SandboxID+"/metrics", "")
	resp.json(t, &native)
	if resp.status != http.StatusOK || len(native.Metrics) < 3 || native.IntervalS != 5 || native.RetentionS != 3600 ||
		native.Metrics[1].Time.Unix() != second {
		t.Fatalf("native metrics: %d %s", resp.status, resp.body)
	}
	q := url.Values{"start": {created.Add(-2 * time.Hour).Format(time.RFC3339)}, "end": {created.Add(-time.Hour).Format(time.RFC3339)}}
	resp = rawNative(t, http.MethodGet, "/v1/sandboxes/"+sb.SandboxID+"/metrics?"+q.Encode(), "")
	if resp.json(t, &native); resp.status != http.StatusOK || len(native.Metrics) != 0 {
		t.Fatalf("native metrics before the sandbox existed: %d %s", resp.status, resp.body)
	}
	for _, bad := range []string{"?start=yesterday", "?end=1700000000", "?start=1969-01-01T00:00:00Z"} {
		rawNative(t, http.MethodGet, "/v1/sandboxes/"+sb.SandboxID+"/metrics"+bad, "").wantError(t, http.StatusBadRequest, "")
	}

	// GET /sandboxes/metrics: the latest sample of each sandbox named.
	resp = e2bRequest(t, http.MethodGet, "/sandboxes/metrics?sandbox_ids="+sb.SandboxID+",nosuchsandbox", nil, nil)
	var many struct {
		Sandboxes map[string]e2bMetric `json:"sandboxes"`
	}
	if resp.json(t, &many); resp.status != http.StatusOK || len(many.Sandboxes) != 1 || many.Sandboxes[sb.SandboxID].TimestampUnix < second {
		t.Fatalf("metrics of many: %d %s", resp.status, resp.body)
	}
	e2bRequest(t, http.MethodGet, "/sandboxes/metrics", nil, nil).wantError(t, http.StatusBadRequest, "sandbox_ids")

	// Paused: the history stays, and reading it does not resume it.
	if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
	if got := e2bMetrics(t, sb.SandboxID, ""); len(got) < 3 {
		t.Fatalf("history of a paused sandbox: %+v", got)
	}
	if got, err := env.client.GetSandbox(testContext(t), sb.SandboxID); err != nil || got.State != apiv1.StateSuspended {
		t.Fatalf("after reading metrics of a paused sandbox: %+v, %v", got, err)
	}
}

// The mcp create option: a template whose recipe declares mcp.gateway
// takes it, and the SDK's next step (mcp-gateway --config as root with
// GATEWAY_ACCESS_TOKEN) starts the gateway, reached through the proxy on
// port 50005 at /mcp with that token. Templates without a gateway, the
// SDKs' default mcp-gateway template (space has none) and malformed
// options are 400s, and bad mcp.gateway paths fail the recipe.
func TestE2BMCPGateway(t *testing.T) {
	tpl := lifeTemplate(t, "life-mcp")
	servers := map[string]any{"exa": map[string]string{"apiKey": "k-123"}}
	resp := e2bRequest(t, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": tpl, "mcp": servers, "timeout": 120}, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("create with mcp: %d %s", resp.status, resp.body)
	}
	var sb e2bSandbox
	resp.json(t, &sb)
	t.Cleanup(func() { e2bRequest(t, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil) })

	config, _ := json.Marshal(servers)
	res, err := env.client.Exec(testContext(t), sb.SandboxID, apiv1.ExecRequest{
		Cmd: []string{"/bin/bash", "-l", "-c", "mcp-gateway --config '" + string(config) + "'"}, User: "root",
		Env: map[string]string{"GATEWAY_ACCESS_TOKEN": "gw-token"},
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("mcp-gateway --config: %+v, %v", res, err)
	}
	h := envdHeaders(sb, "50005")
	h.Set("Authorization", "Bearer gw-token")
	got := proxyRequest(t, http.MethodPost, "/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`), h)
	if got.status != http.StatusOK || !strings.Contains(string(got.body), `"apiKey":"k-123"`) {
		t.Fatalf("the gateway at :50005/mcp: %d %s", got.status, got.body)
	}
	h.Set("Authorization", "Bearer wrong")
	if got := proxyRequest(t, http.MethodPost, "/mcp", "application/json", strings.NewReader(`{}`), h); got.status != http.StatusUnauthorized {
		t.Fatalf("the gateway with a wrong token: %d %s", got.status, got.body)
	}
	if token := execOK(t, sb.SandboxID, "cat /etc/mcp-gateway/.token 2>&1 || true"); strings.Contains(token, "gw-token") {
		t.Fatalf("the gateway's token is readable by the sandbox's user: %q", token)
	}

	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"templateID": "minimal", "mcp": servers}, "provides no MCP gateway"},
		{map[string]any{"templateID": "minimal", "mcp": map[string]any{}}, "provides no MCP gateway"},
		{map[string]any{"templateID": "mcp-gateway", "mcp": servers}, "no built-in mcp-gateway template"},
		{map[string]any{"templateID": tpl, "mcp": "exa"}, "mcp must be an object"},
		{map[string]any{"templateID": tpl, "mcp": []string{"exa"}}, "mcp must be an object"},
	} {
		e2bRequest(t, http.MethodPost, "/sandboxes", c.body, nil).wantError(t, http.StatusBadRequest, c.want)
	}
	// A gateway the built template lacks fails the build, not the create.
	missing := "name: life-mcp-missing\nfrom: template:minimal\nmcp:\n  gateway: /usr/local/bin/mcp-gateway\n"
	if _, err := env.client.CreateTemplate(testContext(t), apiv1.CreateTemplateRequest{Recipe: missing}); err != nil {
		t.Fatalf("create template without its gateway: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DeleteTemplate(context.Background(), "life-mcp-missing") })
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got, err := env.client.GetTemplate(testContext(t), "life-mcp-missing")
		if err != nil {
			t.Fatal(err)
		}
		if got.State == apiv1.TemplateFailed {
			if !strings.Contains(got.Reason, "mcp.gateway: /usr/local/bin/mcp-gateway is not an executable file") {
				t.Fatalf("build without the gateway failed for another reason: %s", got.Reason)
			}
			break
		}
		if got.State == apiv1.TemplateReady || time.Now().After(deadline) {
			t.Fatalf("template without its gateway: %+v", got)
		}
	}
	for _, gw := range []string{"/opt/gw/mcp-gateway", "usr/local/bin/mcp-gateway", "/usr/local/bin/gateway", "/usr/local/bin/../bin/mcp-gateway", ""} {
		recipe := "name: life-mcp-bad\nfrom: template:minimal\nmcp:\n  gateway: \"" + gw + "\"\n"
		if _, err := env.client.CreateTemplate(testContext(t), apiv1.CreateTemplateRequest{Recipe: recipe}); err == nil || !strings.Contains(err.Error(), "mcp.gateway") {
			t.Fatalf("recipe with mcp.gateway %q: %v, want a 400 naming mcp.gateway", gw, err)
		}
	}
}

// In each house, the node keeps a sandbox's metrics history and the
// control plane reads it (over the node protocol in a cluster) through
// the native API, none for a range before the sandbox existed; a suspend
// without memory stops the runtime on the node and the resume boots the
// disk there afresh: a new boot id, the file kept. (The E2B routes'
// ranges and pause are TestE2BMetricsHistoryAndRanges and
// TestE2BPauseWithoutMemoryBootsFresh, in one house.)
func TestMetricsHistoryAndSuspendWithoutMemory(t *testing.T) {
	inEachHouse(t, func(t *testing.T, h *house) {
		ctx := testContext(t)
		cl := h.admin()
		sb := h.sandbox(t, apiv1.CreateSandboxRequest{})
		var list *apiv1.MetricsList
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			if list, err = cl.Metrics(ctx, sb.ID, time.Time{}, time.Time{}); err != nil {
				t.Fatalf("metrics: %v", err)
			}
			if len(list.Metrics) >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("metrics through the API after 20 s: %+v", list)
			}
		}
		if m := list.Metrics[0]; m.CPUCount < 1 || m.MemTotal == 0 || m.Time.Before(sb.CreatedAt.Truncate(time.Second)) {
			t.Fatalf("sample %+v (created %s)", m, sb.CreatedAt)
		}
		if old, err := cl.Metrics(ctx, sb.ID, sb.CreatedAt.Add(-2*time.Hour), sb.CreatedAt.Add(-time.Hour)); err != nil || len(old.Metrics) != 0 {
			t.Fatalf("metrics before the sandbox existed: %+v, %v", old, err)
		}

		boot := func() string {
			return h.run(t, sb.ID, "", "cat /proc/sys/kernel/random/boot_id; cat /home/user/f.txt")
		}
		h.run(t, sb.ID, "", "echo on-disk > /home/user/f.txt")
		before := boot()
		keep := false
		if s, err := cl.SuspendWith(ctx, sb.ID, apiv1.SuspendRequest{KeepMemory: &keep}); err != nil || !s.DiskOnly {
			t.Fatalf("suspend without memory: %+v, %v", s, err)
		}
		if _, err := cl.Resume(ctx, sb.ID); err != nil {
			t.Fatalf("resume: %v", err)
		}
		after := boot()
		if before == after || !strings.HasSuffix(after, "on-disk\n") {
			t.Fatalf("before %q, after %q: want a new boot id and the file", before, after)
		}
	})
}

// lifecycle.onTimeout {action: pause, keepMemory: false} (autoPause with
// autoPauseMemory false): the timeout's pause keeps only the disk, and
// connect boots it afresh.
func TestE2BTimeoutPauseWithoutMemory(t *testing.T) {
	tpl := lifeTemplate(t, "life-booted")
	sb := e2bCreate(t, tpl, map[string]any{"timeout": 3, "autoPause": true, "autoPauseMemory": false})
	first := readBootState(t, sb.SandboxID, 1)
	got, err := env.client.WaitSandbox(testContext(t), sb.SandboxID, apiv1.StateSuspended, time.Minute)
	if err != nil || !got.DiskOnly || !strings.HasPrefix(got.Reason, "timeout") || got.Lifecycle.KeepMemory == nil || *got.Lifecycle.KeepMemory {
		t.Fatalf("after the timeout: %+v, %v; want suspended for the timeout, disk only", got, err)
	}
	resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 300}, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("connect: %d %s", resp.status, resp.body)
	}
	if again := readBootState(t, sb.SandboxID, 2); again.bootID == first.bootID || again.starts != "2" {
		t.Fatalf("after connect: %+v, before %+v", again, first)
	}
}

// A sandbox suspended without memory stays so across a server restart
// (no image to look for, its root volume kept by the sweep), and any call
// addressed to it (native auto-resume) boots its disk afresh.
func TestSuspendWithoutMemorySurvivesServerRestart(t *testing.T) {
	tpl := lifeTemplate(t, "life-booted")
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: tpl})
	execOK(t, sb.ID, "echo kept > /home/user/keep.txt")
	before := readBootState(t, sb.ID, 1)
	keep := false
	if _, err := env.client.SuspendWith(testContext(t), sb.ID, apiv1.SuspendRequest{KeepMemory: &keep}); err != nil {
		t.Fatal(err)
	}
	restartServer(t)
	got, err := env.client.GetSandbox(testContext(t), sb.ID)
	if err != nil || got.State != apiv1.StateSuspended || !got.DiskOnly {
		t.Fatalf("after the restart: %+v, %v", got, err)
	}
	after := readBootState(t, sb.ID, 2) // auto-resumes it
	if after.bootID == before.bootID || after.file != "kept" || after.starts != "2" {
		t.Fatalf("after the restart and auto-resume: %+v, before %+v", after, before)
	}
}
