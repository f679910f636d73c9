package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// E2B's semantics on the wire (issue 13, items 1–4 and 7), in the shapes
// the SDKs send and read.

// e2bNotFound is the exact body of E2B's proxy for a sandbox it cannot
// route to.
func e2bNotFound(id string) string {
	return `{"sandboxId":"` + id + `","message":"The sandbox was not found","code":502}` + "\n"
}

// wantNotFound checks a proxy answer is E2B's not-found, byte for byte.
func wantNotFound(t *testing.T, what string, resp e2bResponse, id string) {
	t.Helper()
	if resp.status != http.StatusBadGateway || string(resp.body) != e2bNotFound(id) {
		t.Fatalf("%s: %d %q, want 502 %q", what, resp.status, resp.body, e2bNotFound(id))
	}
	if ct := resp.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("%s: Content-Type %q", what, ct)
	}
}

// e2bState is a sandbox's state as GET /sandboxes/{id} reports it.
func e2bState(t *testing.T, id string) (state string, autoResume bool) {
	t.Helper()
	var d struct {
		State     string `json:"state"`
		Lifecycle struct {
			AutoResume *bool `json:"autoResume"`
		} `json:"lifecycle"`
	}
	resp := e2bRequest(t, http.MethodGet, "/sandboxes/"+id, nil, nil)
	resp.json(t, &d)
	if d.Lifecycle.AutoResume == nil {
		t.Fatalf("detail without lifecycle.autoResume: %s", resp.body)
	}
	return d.State, *d.Lifecycle.AutoResume
}

func e2bPause(t *testing.T, id string) {
	t.Helper()
	if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+id+"/pause", `{}`, nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause %s: %d %s", id, resp.status, resp.body)
	}
}

// Created through the E2B API without autoResume, a paused sandbox stays
// paused whatever reaches its envd (the SDK's isRunning() health check
// included): every port answers E2B's not-found 502, with or without the
// access token. connect resumes it. autoResume.enabled: true wakes on
// traffic; the native API keeps its default (on).
func TestE2BSemAutoResume(t *testing.T) {
	sb := e2bCreate(t, "minimal", nil)
	if _, auto := e2bState(t, sb.SandboxID); auto {
		t.Fatal("E2B create without autoResume: lifecycle.autoResume true, want false (E2B's default)")
	}
	execOK(t, sb.SandboxID, "echo kept > /tmp/kept.txt")
	e2bPause(t, sb.SandboxID)
	h := envdHeaders(sb, "49983")
	wantNotFound(t, "envd /health of a paused sandbox", proxyRequest(t, http.MethodGet, "/health", "", nil, h), sb.SandboxID)
	wantNotFound(t, "a Connect RPC", connectUnary(t, "/process.Process/List", map[string]any{}, h), sb.SandboxID)
	wantNotFound(t, "GET /files", proxyRequest(t, http.MethodGet, "/files?path=%2Ftmp%2Fkept.txt", "", nil, h), sb.SandboxID)
	noToken := envdHeaders(sb, "49983")
	noToken.Del("X-Access-Token")
	wantNotFound(t, "envd without a token", proxyRequest(t, http.MethodGet, "/health", "", nil, noToken), sb.SandboxID)
	wantNotFound(t, "the code interpreter's port", proxyRequest(t, http.MethodGet, "/health", "", nil, envdHeaders(sb, "49999")), sb.SandboxID)
	if state, _ := e2bState(t, sb.SandboxID); state != "paused" {
		t.Fatalf("state after traffic: %s, want paused (not woken)", state)
	}
	if got, err := env.client.GetSandbox(testContext(t), sb.SandboxID); err != nil || got.State != apiv1.StateSuspended {
		t.Fatalf("native state after traffic: %+v, %v", got, err)
	} else if got.Lifecycle.AutoResume || got.Lifecycle.IdleSuspendS != -1 {
		// Nothing would wake it from an idle suspend.
		t.Fatalf("native lifecycle of an E2B sandbox without autoResume: %+v, want auto_resume false, idle_suspend_s -1", got.Lifecycle)
	}

	if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":300}`, nil); resp.status != http.StatusCreated {
		t.Fatalf("connect: %d %s", resp.status, resp.body)
	}
	if resp := proxyRequest(t, http.MethodGet, "/files?path=%2Ftmp%2Fkept.txt", "", nil, h); resp.status != 200 || string(resp.body) != "kept\n" {
		t.Fatalf("file after connect: %d %q", resp.status, resp.body)
	}

	auto := e2bCreate(t, "minimal", map[string]any{"autoPause": true, "autoResume": map[string]any{"enabled": true}})
	if _, on := e2bState(t, auto.SandboxID); !on {
		t.Fatal("autoResume.enabled: true: lifecycle.autoResume false")
	}
	e2bPause(t, auto.SandboxID)
	if resp := proxyRequest(t, http.MethodGet, "/health", "", nil, envdHeaders(auto, "49983")); resp.status != http.StatusNoContent {
		t.Fatalf("envd /health of an auto-resumable paused sandbox: %d %s, want 204 (woken)", resp.status, resp.body)
	}
	if state, _ := e2bState(t, auto.SandboxID); state != "running" {
		t.Fatalf("auto-resumable sandbox after traffic: %s, want running", state)
	}

	native := newSandbox(t, apiv1.CreateSandboxRequest{})
	if !native.Lifecycle.AutoResume {
		t.Fatal("native create without auto_resume: lifecycle auto_resume false, want the documented default (true)")
	}
}

// fillMemory makes a sandbox's checkpoint take a while, so that a test can
// catch it in the middle of a suspend.
func fillMemory(t *testing.T, id string) {
	t.Helper()
	execOK(t, id, "dd if=/dev/urandom of=/tmp/fill bs=1M count=96 2>/dev/null")
}

// A request that reaches an auto-resumable sandbox while it is being
// suspended waits for the suspend to finish and resumes it (here three
// at once, envd and a Connect RPC); the pause itself still answers 204.
func TestE2BSemTrafficDuringSuspend(t *testing.T) {
	sb := e2bCreate(t, "minimal", map[string]any{"autoPause": true, "autoResume": map[string]any{"enabled": true}, "metadata": map[string]string{"k": "v"}})
	execOK(t, sb.SandboxID, "echo during > /tmp/during.txt")
	fillMemory(t, sb.SandboxID)
	h := envdHeaders(sb, "49983")

	paused := make(chan e2bResponse, 1)
	go func() {
		paused <- e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", `{}`, nil)
	}()
	ctx := testContext(t)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		got, err := env.client.GetSandbox(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == apiv1.StateSuspending {
			break
		}
		if got.State == apiv1.StateSuspended || time.Now().After(deadline) {
			t.Fatalf("never saw the suspend in progress (state %s); the test needs a slower checkpoint", got.State)
		}
	}
	var wg sync.WaitGroup
	answers := make([]e2bResponse, 3)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 2 {
				answers[i] = connectUnary(t, "/process.Process/List", map[string]any{}, h)
				return
			}
			answers[i] = proxyRequest(t, http.MethodGet, "/files?path=%2Ftmp%2Fduring.txt", "", nil, h)
		}()
	}
	wg.Wait()
	for i, a := range answers[:2] {
		if a.status != http.StatusOK || string(a.body) != "during\n" {
			t.Fatalf("request %d during the suspend: %d %q, want 200 (it waits, then resumes)", i, a.status, a.body)
		}
	}
	if answers[2].status != http.StatusOK {
		t.Fatalf("Connect RPC during the suspend: %d %s", answers[2].status, answers[2].body)
	}
	if p := <-paused; p.status != http.StatusNoContent {
		t.Fatalf("the pause: %d %s", p.status, p.body)
	}
	if state, _ := e2bState(t, sb.SandboxID); state != "running" {
		t.Fatalf("state after the traffic: %s, want running", state)
	}
}

// listIDs lists /v2/sandboxes with query q page by page (limit each) and
// returns the ids in the order they came and the number of pages.
func listIDs(t *testing.T, q url.Values, limit int, between func(page int)) ([]string, int) {
	t.Helper()
	var ids []string
	token := ""
	for page := 1; ; page++ {
		qq := url.Values{}
		for k, v := range q {
			qq[k] = v
		}
		qq.Set("limit", fmt.Sprint(limit))
		if token != "" {
			qq.Set("nextToken", token)
		}
		resp := e2bRequest(t, http.MethodGet, "/v2/sandboxes?"+qq.Encode(), nil, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("list %s: %d %s", qq.Encode(), resp.status, resp.body)
		}
		var items []struct {
			SandboxID string `json:"sandboxID"`
			StartedAt string `json:"startedAt"`
		}
		resp.json(t, &items)
		for _, s := range items {
			ids = append(ids, s.SandboxID)
		}
		if token = resp.header.Get("X-Next-Token"); token == "" {
			return ids, page
		}
		if len(items) != limit {
			t.Fatalf("page %d of %d items has a next token", page, len(items))
		}
		if page > 20 {
			t.Fatal("paging does not end")
		}
		if between != nil {
			between(page)
		}
	}
}

// GET /v2/sandboxes lists newest first, honours order=asc|desc, and pages
// by nextToken without repeating or skipping a sandbox, for running,
// paused and mixed states, also when states change and sandboxes go
// between pages.
func TestE2BSemListOrder(t *testing.T) {
	suite := fmt.Sprintf("order-%d", time.Now().UnixNano())
	var made []string // oldest first
	for i := 0; i < 4; i++ {
		sb := e2bCreate(t, "minimal", map[string]any{"metadata": map[string]string{"suite": suite}})
		made = append(made, sb.SandboxID)
	}
	e2bPause(t, made[1])
	e2bPause(t, made[2])
	newest := slices.Clone(made)
	slices.Reverse(newest)
	q := func(kv ...string) url.Values {
		v := url.Values{"metadata": {url.Values{"suite": {suite}}.Encode()}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	for _, c := range []struct {
		name  string
		q     url.Values
		limit int
		want  []string
	}{
		{"default", q(), 100, newest},
		{"default, by one", q(), 1, newest},
		{"desc, by three", q("order", "desc"), 3, newest},
		{"asc, by one", q("order", "asc"), 1, made},
		{"asc, by three", q("order", "asc"), 3, made},
		{"running", q("state", "running"), 1, []string{made[3], made[0]}},
		{"paused, asc", q("state", "paused", "order", "asc"), 1, []string{made[1], made[2]}},
		{"mixed", q("state", "running,paused"), 2, newest},
	} {
		got, pages := listIDs(t, c.q, c.limit, nil)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if wantPages := max(1, (len(c.want)+c.limit-1)/c.limit); pages != wantPages {
			t.Errorf("%s: %d pages, want %d", c.name, pages, wantPages)
		}
	}

	// Between pages: the one listed first is killed, a paused one not
	// yet listed is resumed, and a new sandbox is created (newer than the
	// token, so not on later pages).
	var late string
	got, _ := listIDs(t, q(), 1, func(page int) {
		if page != 1 {
			return
		}
		if resp := e2bRequest(t, http.MethodDelete, "/sandboxes/"+made[3], nil, nil); resp.status != http.StatusNoContent {
			t.Fatalf("kill: %d %s", resp.status, resp.body)
		}
		if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+made[1]+"/connect", `{}`, nil); resp.status != http.StatusCreated {
			t.Fatalf("connect: %d %s", resp.status, resp.body)
		}
		late = e2bCreate(t, "minimal", map[string]any{"metadata": map[string]string{"suite": suite}}).SandboxID
	})
	if !slices.Equal(got, newest) {
		t.Fatalf("pages with changes between them: %v, want %v", got, newest)
	}
	if now, _ := listIDs(t, q(), 100, nil); !slices.Equal(now, []string{late, made[2], made[1], made[0]}) {
		t.Fatalf("after the changes: %v", now)
	}

	// A token is bound to its order; order takes asc or desc only.
	first := e2bRequest(t, http.MethodGet, "/v2/sandboxes?"+q("limit", "1").Encode(), nil, nil)
	token := first.header.Get("X-Next-Token")
	if token == "" {
		t.Fatalf("no token: %s", first.body)
	}
	e2bRequest(t, http.MethodGet, "/v2/sandboxes?"+q("order", "asc", "nextToken", token).Encode(), nil, nil).
		wantError(t, http.StatusBadRequest, "other order")
	e2bRequest(t, http.MethodGet, "/v2/sandboxes?"+q("order", "newest").Encode(), nil, nil).
		wantError(t, http.StatusBadRequest, "order must be asc or desc")
	e2bRequest(t, http.MethodGet, "/v2/sandboxes?"+q("nextToken", strings.Repeat("A", 10000)).Encode(), nil, nil).
		wantError(t, http.StatusBadRequest, "nextToken")
}

// Through the proxy an unknown sandbox, a killed one, and one that ended
// some other way answer E2B's not-found on envd's port and any other:
// 502 {"sandboxId","message":"The sandbox was not found","code":502}.
func TestE2BSemProxyNotFound(t *testing.T) {
	sb := e2bCreate(t, "minimal", nil)
	if resp := e2bRequest(t, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil); resp.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", resp.status, resp.body)
	}
	for _, port := range []string{"49983", "49999", "8080"} {
		wantNotFound(t, "killed sandbox, port "+port, proxyRequest(t, http.MethodGet, "/health", "", nil, envdHeaders(sb, port)), sb.SandboxID)
	}
	unknown := envdHeaders(sb, "49983")
	unknown.Set("E2b-Sandbox-Id", "nosuchsandbox0000000")
	wantNotFound(t, "unknown sandbox", proxyRequest(t, http.MethodGet, "/health", "", nil, unknown), "nosuchsandbox0000000")
	// Host routing answers the same.
	req, _ := http.NewRequest(http.MethodGet, env.srv.ProxyURL()+"/health", nil)
	req.Host = "49983-nosuchsandbox0000000.sbx.example.test"
	wantNotFound(t, "unknown sandbox by host", do(t, req), "nosuchsandbox0000000")
}

// GET /templates/aliases/{alias}: what Template.exists() and the
// template builder ask. A template the key can use is 200 {templateID,
// public}; an unknown one, another project's, or an unknown tag is 404
// with E2B's message; what cannot be a name is 400.
func TestE2BSemTemplateAliases(t *testing.T) {
	for _, c := range []struct {
		alias, body string
		status      int
	}{
		{"base", `{"templateID":"base","public":true}`, 200},
		{"minimal:default", `{"templateID":"minimal","public":true}`, 200},
	} {
		resp := e2bRequest(t, http.MethodGet, "/templates/aliases/"+c.alias, nil, nil)
		if resp.status != c.status || strings.TrimSpace(string(resp.body)) != c.body {
			t.Fatalf("alias %s: %d %s, want %d %s", c.alias, resp.status, resp.body, c.status, c.body)
		}
	}
	e2bRequest(t, http.MethodGet, "/templates/aliases/no-such-template", nil, nil).wantError(t, http.StatusNotFound, "template 'no-such-template' not found")
	e2bRequest(t, http.MethodGet, "/templates/aliases/base:v9", nil, nil).wantError(t, http.StatusNotFound, "tag 'v9' does not exist")
	for _, bad := range []string{"Base", "a%2Fb", "..%2F..%2Fetc", strings.Repeat("x", 200), "%00"} {
		resp := e2bRequest(t, http.MethodGet, "/templates/aliases/"+bad, nil, nil)
		resp.wantError(t, http.StatusBadRequest, "Invalid alias format")
		if strings.Contains(string(resp.body), "/var/") || strings.Contains(string(resp.body), "/tmp/") {
			t.Fatalf("alias %q: a host path in %s", bad, resp.body)
		}
	}
	resp := e2bRequest(t, http.MethodGet, "/templates/aliases/base", nil, http.Header{"X-Api-Key": {"e2b_" + strings.Repeat("0", 40)}})
	resp.wantError(t, http.StatusUnauthorized, "invalid API key")
}

// BenchmarkE2BCreatePooled compares, in one run, a create through the E2B
// API as Sandbox.create() sends it (JS 2.45's POST /sandboxes body, timed
// until its 201 is read) with a native pooled create of the same
// template (until its answer, the sandbox running), both served from the
// template's warm pool. Samples alternate, and which goes first too, so
// that both see the same machine; before each the pool is full and
// settled. It reports both p50s and their ratio (the target is ≤ 1.5).
// SPACE_BENCH_TEMPLATE picks the template (minimal by default; base is
// what the SDKs create). Run it with
//
//	go test -run XXX -bench E2BCreatePooled -benchtime 40x ./test/e2e/
func BenchmarkE2BCreatePooled(b *testing.B) {
	requireBenchServer(b)
	ctx := benchContext(b)
	tpl := "minimal"
	if v := os.Getenv("SPACE_BENCH_TEMPLATE"); v != "" {
		tpl = v
	}
	if _, err := env.client.SetTemplatePool(ctx, tpl, 1); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = env.client.SetTemplatePool(context.Background(), tpl, 0) })
	ready := func() {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
			t, err := env.client.GetTemplate(ctx, tpl)
			if err == nil && t.Pool != nil && t.Pool.Ready >= 1 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("pool did not fill: %+v, %v", t, err)
			}
		}
		// The refill and the last delete finish their work off the
		// create's path, for both alike.
		time.Sleep(300 * time.Millisecond)
	}
	nativeCreate := func() time.Duration {
		start := time.Now()
		sb, err := env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: tpl})
		took := time.Since(start)
		if err != nil || sb.State != apiv1.StateRunning {
			b.Fatalf("native pooled create: %+v, %v", sb, err)
		}
		if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil && !client.IsNotFound(err) {
			b.Fatal(err)
		}
		return took
	}
	body := `{"templateID":"` + tpl + `","timeout":300,"secure":true,"allow_internet_access":true,"autoPause":false,"metadata":{},"envVars":{}}`
	e2bCreate := func() time.Duration {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.srv.E2BURL()+"/sandboxes", strings.NewReader(body))
		req.Header.Set("X-API-KEY", env.srv.AdminKey)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var created struct {
			SandboxID string `json:"sandboxID"`
		}
		err = json.NewDecoder(resp.Body).Decode(&created)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil || resp.StatusCode != http.StatusCreated {
			b.Fatalf("E2B create: %d, %v", resp.StatusCode, err)
		}
		if err := env.client.DeleteSandbox(ctx, created.SandboxID); err != nil && !client.IsNotFound(err) {
			b.Fatal(err)
		}
		return took
	}
	var native, e2b []time.Duration
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			ready()
			native = append(native, nativeCreate())
		}
		ready()
		e2b = append(e2b, e2bCreate())
		if i%2 == 1 {
			ready()
			native = append(native, nativeCreate())
		}
	}
	p50 := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(native), "native-p50-ms")
	b.ReportMetric(p50(e2b), "e2b-p50-ms")
	b.ReportMetric(p50(e2b)/p50(native), "e2b/native")
}
