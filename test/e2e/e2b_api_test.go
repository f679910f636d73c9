package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"
)

// Python 2.21's Sandbox.connect() sends envd requests with X-Access-Token
// only; the proxy finds the sandbox by its token. Host routing reaches the
// same agent, and the internal /init route is closed.
func TestE2BProxyRouting(t *testing.T) {
	sb := e2bCreate(t, "minimal", nil)
	tokenOnly := http.Header{"X-Access-Token": {sb.EnvdAccessToken}}
	resp := connectUnary(t, "/filesystem.Filesystem/Stat", map[string]string{"path": "/tmp"}, tokenOnly)
	if resp.status != http.StatusOK || !strings.Contains(string(resp.body), `"FILE_TYPE_DIRECTORY"`) {
		t.Fatalf("Stat with only X-Access-Token: %d %s", resp.status, resp.body)
	}
	connectUnary(t, "/filesystem.Filesystem/Stat", map[string]string{"path": "/tmp"}, http.Header{"X-Access-Token": {"nope"}}).
		wantError(t, http.StatusBadRequest, "matches no sandbox")
	proxyRequest(t, http.MethodGet, "/health", "", nil, nil).wantError(t, http.StatusBadRequest, "E2b-Sandbox-Id")

	// A wrong token with the routing headers reaches the agent, which
	// refuses it as envd does.
	wrong := envdHeaders(sb, "49983")
	wrong.Set("X-Access-Token", "wrong")
	if resp := connectUnary(t, "/process.Process/List", map[string]any{}, wrong); resp.status != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d %s", resp.status, resp.body)
	}
	noToken := envdHeaders(sb, "49983")
	noToken.Del("X-Access-Token")
	if resp := connectUnary(t, "/process.Process/List", map[string]any{}, noToken); resp.status != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s (the proxy must not add the sandbox's token)", resp.status, resp.body)
	}

	for _, p := range []string{"/init", "//init", "/./init"} {
		proxyRequest(t, http.MethodPost, p, "application/json", strings.NewReader(`{"accessToken":"mine"}`), envdHeaders(sb, "49983")).
			wantError(t, http.StatusForbidden, "internal")
	}

	// Host routing: <port>-<id>.<domain>, no headers.
	req, _ := http.NewRequest(http.MethodGet, env.srv.ProxyURL()+"/health", nil)
	req.Host = "49983-" + sb.SandboxID + ".sbx.example.test"
	if resp := do(t, req); resp.status != http.StatusNoContent {
		t.Fatalf("host-routed /health: %d %s", resp.status, resp.body)
	}

	// Another port: a web server in the sandbox, by header and by host.
	execOK(t, sb.SandboxID, `mkdir -p /tmp/www && echo served > /tmp/www/index.html && (busybox httpd -p 8080 -h /tmp/www &) && sleep 0.3`)
	resp = proxyRequest(t, http.MethodGet, "/index.html", "", nil, envdHeaders(sb, "8080"))
	if resp.status != http.StatusOK || string(resp.body) != "served\n" {
		t.Fatalf("port 8080 by headers: %d %q", resp.status, resp.body)
	}
	req, _ = http.NewRequest(http.MethodGet, env.srv.ProxyURL()+"/index.html", nil)
	req.Host = "8080-" + sb.SandboxID + ".sbx.example.test"
	if resp := do(t, req); resp.status != http.StatusOK || string(resp.body) != "served\n" {
		t.Fatalf("port 8080 by host: %d %q", resp.status, resp.body)
	}
	proxyRequest(t, http.MethodGet, "/", "", nil, envdHeaders(sb, "8081")).wantError(t, http.StatusBadGateway, "8081")

	// An unknown sandbox is "not running" to the SDKs: 502.
	unknown := envdHeaders(sb, "49983")
	unknown.Set("E2b-Sandbox-Id", "nosuchsandbox0000000")
	proxyRequest(t, http.MethodGet, "/health", "", nil, unknown).wantError(t, http.StatusBadGateway, "not found")
}

// Output of a streaming RPC reaches the client as it is produced, not when
// the stream ends; Connect-Timeout-Ms bounds the process.
func TestE2BProxyStreamsPromptly(t *testing.T) {
	sb := e2bCreate(t, "minimal", nil)
	h := envdHeaders(sb, "49983")
	_, msgs := connectStream(t, "/process.Process/Start", map[string]any{
		"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "echo first; sleep 1.5; echo second"}},
	}, h)
	var firstAt, endAt time.Duration
	for _, m := range msgs {
		ev, _ := m.payload["event"].(map[string]any)
		if data, ok := ev["data"].(map[string]any); ok && firstAt == 0 {
			if b, _ := base64.StdEncoding.DecodeString(fmt.Sprint(data["stdout"])); string(b) == "first\n" {
				firstAt = m.at
			}
		}
		if _, ok := ev["end"]; ok {
			endAt = m.at
		}
	}
	if firstAt == 0 || endAt-firstAt < time.Second {
		t.Fatalf("first output at %v, end at %v: output was not streamed", firstAt, endAt)
	}

	h.Set("Connect-Timeout-Ms", "500")
	_, msgs = connectStream(t, "/process.Process/Start", map[string]any{
		"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "sleep 30"}},
	}, h)
	last := msgs[len(msgs)-1]
	errInfo, _ := last.payload["error"].(map[string]any)
	if last.flags != 2 || errInfo["code"] != "deadline_exceeded" || last.at > 10*time.Second {
		t.Fatalf("Connect-Timeout-Ms: last envelope %+v", last)
	}
}

// Status codes and error bodies the SDKs depend on, and refused options.
func TestE2BAPIErrors(t *testing.T) {
	requireServer(t)
	req, _ := http.NewRequest(http.MethodGet, env.srv.E2BURL()+"/v2/sandboxes", nil)
	do(t, req).wantError(t, http.StatusUnauthorized, "API key")
	req, _ = http.NewRequest(http.MethodGet, env.srv.E2BURL()+"/v2/sandboxes", nil)
	req.Header.Set("X-API-Key", "e2b_0000000000000000000000000000000000000000")
	do(t, req).wantError(t, http.StatusUnauthorized, "invalid")
	// Authorization: Bearer is accepted too.
	req, _ = http.NewRequest(http.MethodGet, env.srv.E2BURL()+"/v2/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer "+env.srv.AdminKey)
	if resp := do(t, req); resp.status != http.StatusOK {
		t.Fatalf("bearer: %d %s", resp.status, resp.body)
	}

	for _, c := range []struct {
		body, mentions string
	}{
		{`{"templateID":"minimal","mcp":{"github":{}}}`, "mcp"},
		{`{"templateID":"minimal","volumeMounts":[{"name":"v","path":"/proc"}]}`, "/proc"},
		{`{"templateID":"minimal","volumeMounts":{"name":"v"}}`, "volumeMounts"},
		{`{"templateID":"minimal","iam":{"tokens":{"a":{}}}}`, "iam"},
		{`{"templateID":"minimal","network":{"maskRequestHost":"x example"}}`, "network.mask_request_host"},
		{`{"templateID":"minimal","network":{"egressProxy":{"address":"p.example:1080"}}}`, "network.egressProxy"},
		{`{"templateID":"minimal","network":{"allowOut":"1.2.3.4"}}`, "network.allowOut"},
		{`{"templateID":"minimal","network":{"denyOut":["10.0.0.0/8"],"allowOut":["10.1.2.3"]}}`, "deny rule wins"},
		{`{"templateID":"minimal","network":{"allowOut":["not a rule"]}}`, "not a rule"},
		{`{"templateID":"minimal","timeout":-1}`, "timeout"},
		{`{"timeout":60}`, "templateID"},
		{``, "empty"},
		{`{"templateID":`, "malformed"},
		{`{"templateID":"minimal","envVars":{"A=B":"c"}}`, "env"},
	} {
		e2bRequest(t, http.MethodPost, "/sandboxes", c.body, nil).wantError(t, http.StatusBadRequest, c.mentions)
	}
	e2bRequest(t, http.MethodPost, "/v2/sandboxes", `{"templateID":"no-such-template-v9"}`, nil).
		wantError(t, http.StatusNotFound, "no-such-template-v9")
	// Empty options ask for nothing and are accepted (checked by create
	// in other tests); null is the same.
	for _, path := range []string{"/sandboxes/nosuchsandbox", "/sandboxes/nosuchsandbox/metrics"} {
		e2bRequest(t, http.MethodGet, path, nil, nil).wantError(t, http.StatusNotFound, "nosuchsandbox")
	}
	for _, path := range []string{"/sandboxes/nosuchsandbox/pause", "/sandboxes/nosuchsandbox/connect", "/v2/sandboxes/nosuchsandbox/connect", "/sandboxes/nosuchsandbox/fork", "/sandboxes/nosuchsandbox/snapshots"} {
		e2bRequest(t, http.MethodPost, path, `{}`, nil).wantError(t, http.StatusNotFound, "nosuchsandbox")
	}
	e2bRequest(t, http.MethodPost, "/sandboxes/nosuchsandbox/timeout", `{"timeout":10}`, nil).wantError(t, http.StatusNotFound, "nosuchsandbox")
	e2bRequest(t, http.MethodDelete, "/templates/nosuchsnapshot", nil, nil).wantError(t, http.StatusNotFound, "nosuchsnapshot")
	e2bRequest(t, http.MethodGet, "/nope", nil, nil).wantError(t, http.StatusNotFound, "/nope")
	e2bRequest(t, http.MethodPut, "/sandboxes", nil, nil).wantError(t, http.StatusMethodNotAllowed, "PUT")
	e2bRequest(t, http.MethodGet, "/v2/sandboxes?state=stopped", nil, nil).wantError(t, http.StatusBadRequest, "state")
	e2bRequest(t, http.MethodGet, "/v2/sandboxes?limit=0", nil, nil).wantError(t, http.StatusBadRequest, "limit")
	e2bRequest(t, http.MethodGet, "/v2/sandboxes?nextToken=garbage", nil, nil).wantError(t, http.StatusBadRequest, "nextToken")
}

// JS 2.51 sends API bodies chunked, without Content-Length, to the v2
// endpoints; v2 sandboxes always get a token. Empty unsupported options
// (null, {}, []) ask for nothing and are accepted.
func TestE2BCreateV2Chunked(t *testing.T) {
	requireServer(t)
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"templateID":"minimal",`))
		pw.Write([]byte(`"mcp":null,"volumeMounts":[],"network":{"allowPublicTraffic":true},"autoResume":{"enabled":false}}`))
		pw.Close()
	}()
	resp := e2bRequest(t, http.MethodPost, "/v2/sandboxes", pr, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("chunked v2 create: %d %s", resp.status, resp.body)
	}
	var sb e2bSandbox
	resp.json(t, &sb)
	t.Cleanup(func() { e2bRequest(t, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil) })
	if sb.EnvdAccessToken == "" || sb.ClientID == "" {
		t.Fatalf("v2 create: %s", resp.body)
	}
	var detail struct {
		Lifecycle struct {
			AutoResume bool   `json:"autoResume"`
			OnTimeout  string `json:"onTimeout"`
		} `json:"lifecycle"`
	}
	e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID, nil, nil).json(t, &detail)
	if detail.Lifecycle.AutoResume || detail.Lifecycle.OnTimeout != "kill" {
		t.Fatalf("lifecycle %+v", detail.Lifecycle)
	}
}

// GET /v2/sandboxes: metadata and state filters, and X-Next-Token only
// while more pages follow.
func TestE2BListFiltersAndPaging(t *testing.T) {
	suite := fmt.Sprintf("list-%d", time.Now().UnixNano())
	var ids []string
	for i := 0; i < 3; i++ {
		sb := e2bCreate(t, "minimal", map[string]any{"metadata": map[string]string{"suite": suite, "n": fmt.Sprint(i)}})
		ids = append(ids, sb.SandboxID)
	}
	filter := url.QueryEscape(url.Values{"suite": {suite}}.Encode())
	var seen []string
	token := ""
	for pages := 1; ; pages++ {
		path := "/v2/sandboxes?metadata=" + filter + "&state=running,paused&limit=2"
		if token != "" {
			path += "&nextToken=" + url.QueryEscape(token)
		}
		resp := e2bRequest(t, http.MethodGet, path, nil, nil)
		var page []map[string]any
		resp.json(t, &page)
		for _, s := range page {
			for _, k := range []string{"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion"} {
				if _, ok := s[k]; !ok {
					t.Fatalf("listed sandbox lacks %s: %v", k, s)
				}
			}
			seen = append(seen, s["sandboxID"].(string))
		}
		token = resp.header.Get("X-Next-Token")
		if pages == 1 && (len(page) != 2 || token == "") {
			t.Fatalf("first page: %d items, token %q", len(page), token)
		}
		if token == "" {
			break
		}
		if pages > 3 {
			t.Fatal("paging does not end")
		}
	}
	sort.Strings(seen)
	sort.Strings(ids)
	if strings.Join(seen, ",") != strings.Join(ids, ",") {
		t.Fatalf("pages listed %v, want %v", seen, ids)
	}
	filter2 := url.QueryEscape(url.Values{"suite": {suite}, "n": {"1"}}.Encode())
	var one []map[string]any
	e2bRequest(t, http.MethodGet, "/v2/sandboxes?metadata="+filter2, nil, nil).json(t, &one)
	if len(one) != 1 {
		t.Fatalf("two metadata keys matched %d sandboxes", len(one))
	}
	var paused []map[string]any
	resp := e2bRequest(t, http.MethodGet, "/v2/sandboxes?metadata="+filter+"&state=paused", nil, nil)
	resp.json(t, &paused)
	if len(paused) != 0 || resp.header.Get("X-Next-Token") != "" {
		t.Fatalf("paused filter: %s", resp.body)
	}
}

// pause (our durable suspend) then connect: 204, 409 the second time,
// state paused in get and list, connect 201 (resumed) then 200, with files
// and a running process intact. Timeout: 204 and a later endAt.
func TestE2BPauseConnectTimeout(t *testing.T) {
	sb := e2bCreate(t, "minimal", nil)
	h := envdHeaders(sb, "49983")
	execOK(t, sb.SandboxID, `echo kept > /tmp/kept.txt; (sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.2; done' &)`)

	var before struct {
		EndAt time.Time `json:"endAt"`
	}
	e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID, nil, nil).json(t, &before)
	if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/timeout", `{"timeout":3600}`, nil); resp.status != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", resp.status, resp.body)
	}
	var after struct {
		EndAt time.Time `json:"endAt"`
	}
	e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID, nil, nil).json(t, &after)
	if !after.EndAt.After(before.EndAt.Add(50 * time.Minute)) {
		t.Fatalf("endAt %v → %v after timeout 3600", before.EndAt, after.EndAt)
	}

	if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
	e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", `{}`, nil).wantError(t, http.StatusConflict, "already paused")
	var detail map[string]any
	e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID, nil, nil).json(t, &detail)
	if detail["state"] != "paused" {
		t.Fatalf("state after pause: %v", detail["state"])
	}
	// A paused sandbox keeps its metrics history; reading it must not
	// resume it.
	if resp := e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID+"/metrics", nil, nil); resp.status != http.StatusOK {
		t.Fatalf("metrics of a paused sandbox: %d %s", resp.status, resp.body)
	}
	e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID, nil, nil).json(t, &detail)
	if detail["state"] != "paused" {
		t.Fatalf("state after reading the metrics of a paused sandbox: %v", detail["state"])
	}

	resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", `{"timeout": 300}`, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("connect to a paused sandbox: %d %s", resp.status, resp.body)
	}
	var resumed e2bSandbox
	resp.json(t, &resumed)
	if resumed.SandboxID != sb.SandboxID || resumed.EnvdAccessToken != sb.EnvdAccessToken || resumed.ClientID == "" {
		t.Fatalf("connect answered %s", resp.body)
	}
	if resp := e2bRequest(t, http.MethodPost, "/v2/sandboxes/"+sb.SandboxID+"/connect", `{}`, nil); resp.status != http.StatusOK {
		t.Fatalf("connect to a running sandbox: %d %s", resp.status, resp.body)
	}
	got := proxyRequest(t, http.MethodGet, "/files?path=%2Ftmp%2Fkept.txt", "", nil, h)
	if string(got.body) != "kept\n" {
		t.Fatalf("file after pause/connect: %d %q", got.status, got.body)
	}
	first := execOK(t, sb.SandboxID, "cat /tmp/counter")
	time.Sleep(500 * time.Millisecond)
	if second := execOK(t, sb.SandboxID, "cat /tmp/counter"); second == first {
		t.Fatalf("the background process did not survive pause/connect (counter stuck at %s)", first)
	}
}

// fork (our branch), metrics, and snapshots: create, list, start a sandbox
// from one, delete it.
func TestE2BForkMetricsSnapshots(t *testing.T) {
	sb := e2bCreate(t, "minimal", map[string]any{"metadata": map[string]string{"origin": "fork-test"}})
	execOK(t, sb.SandboxID, "echo from-source > /tmp/origin.txt")

	// The node samples a new sandbox within about a second, then every 5 s.
	var metrics []map[string]any
	var resp e2bResponse
	for deadline := time.Now().Add(10 * time.Second); len(metrics) == 0; time.Sleep(200 * time.Millisecond) {
		resp = e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID+"/metrics", nil, nil)
		resp.json(t, &metrics)
		if resp.status != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("metrics: %d %s", resp.status, resp.body)
		}
	}
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "diskUsed", "diskTotal"} {
		if _, ok := metrics[0][k]; !ok {
			t.Fatalf("metric lacks %s: %v", k, metrics[0])
		}
	}
	if metrics[0]["memTotal"].(float64) <= 0 || metrics[0]["cpuCount"].(float64) < 1 {
		t.Fatalf("metric values: %v", metrics[0])
	}

	resp = e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/fork", `{"timeout":120,"count":2}`, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("fork: %d %s", resp.status, resp.body)
	}
	var forks []struct {
		Sandbox *e2bSandbox       `json:"sandbox"`
		Error   map[string]any    `json:"error"`
		Extra   map[string]string `json:"-"`
	}
	resp.json(t, &forks)
	if len(forks) != 2 {
		t.Fatalf("fork answered %s", resp.body)
	}
	for _, f := range forks {
		if f.Sandbox == nil || f.Error != nil {
			t.Fatalf("fork entry %s", resp.body)
		}
		branch := *f.Sandbox
		t.Cleanup(func() { e2bRequest(t, http.MethodDelete, "/sandboxes/"+branch.SandboxID, nil, nil) })
		if branch.SandboxID == sb.SandboxID || branch.EnvdAccessToken == sb.EnvdAccessToken {
			t.Fatalf("branch shares the source's identity: %+v", branch)
		}
		got := proxyRequest(t, http.MethodGet, "/files?path=%2Ftmp%2Forigin.txt", "", nil, envdHeaders(branch, "49983"))
		if got.status != http.StatusOK || string(got.body) != "from-source\n" {
			t.Fatalf("file in the branch (answered running): %d %q", got.status, got.body)
		}
	}

	resp = e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/snapshots", `{"name":"before-change"}`, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", resp.status, resp.body)
	}
	var snap struct {
		SnapshotID string   `json:"snapshotID"`
		Names      []string `json:"names"`
	}
	resp.json(t, &snap)
	if snap.SnapshotID == "" || len(snap.Names) != 1 || snap.Names[0] != "before-change" {
		t.Fatalf("snapshot answered %s", resp.body)
	}
	var listed []struct {
		SnapshotID string `json:"snapshotID"`
	}
	e2bRequest(t, http.MethodGet, "/snapshots?sandboxID="+sb.SandboxID, nil, nil).json(t, &listed)
	if len(listed) != 1 || listed[0].SnapshotID != snap.SnapshotID {
		t.Fatalf("snapshots of %s: %v", sb.SandboxID, listed)
	}
	execOK(t, sb.SandboxID, "echo changed > /tmp/origin.txt")
	fromSnap := e2bCreate(t, snap.SnapshotID+":default", nil)
	got := proxyRequest(t, http.MethodGet, "/files?path=%2Ftmp%2Forigin.txt", "", nil, envdHeaders(fromSnap, "49983"))
	if string(got.body) != "from-source\n" {
		t.Fatalf("sandbox from snapshot: %d %q", got.status, got.body)
	}
	if resp := e2bRequest(t, http.MethodDelete, "/templates/"+snap.SnapshotID, nil, nil); resp.status != http.StatusNoContent {
		t.Fatalf("delete snapshot: %d %s", resp.status, resp.body)
	}
	e2bRequest(t, http.MethodDelete, "/templates/"+snap.SnapshotID, nil, nil).wantError(t, http.StatusNotFound, snap.SnapshotID)
}

// E2B's egress options become space's policy: allow_internet_access and
// denyOut 0.0.0.0/0 close the internet, allowOut opens addresses and
// domains, and the sandbox detail reports them back.
func TestE2BNetworkOptions(t *testing.T) {
	requireServer(t)
	resp := e2bRequest(t, http.MethodPost, "/sandboxes",
		`{"templateID":"minimal","allow_internet_access":true,"network":{"denyOut":["0.0.0.0/0","192.0.2.0/24"],"allowOut":["198.51.100.7","example.com"]}}`, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	var created struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(resp.body, &created); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), created.SandboxID) })
	sb, err := env.client.GetSandbox(testContext(t), created.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	n := sb.Network
	if n == nil || n.AllowInternet == nil || *n.AllowInternet ||
		strings.Join(n.Allow, " ") != "198.51.100.7/32 example.com" || strings.Join(n.Deny, " ") != "192.0.2.0/24" {
		t.Fatalf("space policy of an E2B sandbox: %+v", n)
	}
	detail := e2bRequest(t, http.MethodGet, "/sandboxes/"+created.SandboxID, nil, nil)
	var d struct {
		AllowInternetAccess bool `json:"allowInternetAccess"`
		Network             struct {
			AllowOut []string `json:"allowOut"`
			DenyOut  []string `json:"denyOut"`
		} `json:"network"`
	}
	if err := json.Unmarshal(detail.body, &d); err != nil {
		t.Fatal(err)
	}
	if d.AllowInternetAccess || len(d.Network.AllowOut) != 2 || len(d.Network.DenyOut) != 1 {
		t.Fatalf("E2B detail: %s", detail.body)
	}
}
