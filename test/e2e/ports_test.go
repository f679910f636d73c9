package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// portRequest asks the sandbox proxy for path on a sandbox's port, routed
// by host (<port>-<id>.<domain>) or, with byHeaders, by the E2B routing
// headers on a bare address; token, if any, is the traffic access token.
func portRequest(t *testing.T, id, port, path string, byHeaders bool, token string) e2bResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, env.srv.ProxyURL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if byHeaders {
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", port)
	} else {
		req.Host = port + "-" + id + ".sbx.example.test"
	}
	if token != "" {
		req.Header.Set("E2b-Traffic-Access-Token", token)
	}
	return do(t, req)
}

// serveWeb starts busybox httpd on port 8080 in the sandbox and waits
// until the proxy reaches it (with token, when the sandbox needs one).
func serveWeb(t *testing.T, id, token string) {
	t.Helper()
	execOK(t, id, `mkdir -p /tmp/www && echo served > /tmp/www/index.html && busybox httpd -p 8080 -h /tmp/www`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp := portRequest(t, id, "8080", "/index.html", true, token)
		if resp.status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the web server in %s never answered through the proxy: %d %s", id, resp.status, resp.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func requireServed(t *testing.T, what string, resp e2bResponse) {
	t.Helper()
	if resp.status != http.StatusOK || string(resp.body) != "served\n" {
		t.Fatalf("%s: %d %q, want 200 \"served\"", what, resp.status, resp.body)
	}
}

// A port of a public sandbox is reachable through the proxy by host and
// by header routing, with no token.
func TestPortsPublicByHostAndHeaders(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	if sb.TrafficAccessToken != "" || sb.Network == nil || sb.Network.AllowPublicTraffic == nil || !*sb.Network.AllowPublicTraffic {
		t.Fatalf("a sandbox created without a choice is not public: token %q, network %+v", sb.TrafficAccessToken, sb.Network)
	}
	serveWeb(t, sb.ID, "")
	requireServed(t, "by host", portRequest(t, sb.ID, "8080", "/index.html", false, ""))
	requireServed(t, "by headers", portRequest(t, sb.ID, "8080", "/index.html", true, ""))

	// A client speaking HTTP/2 without TLS (prior knowledge) is served
	// too; the HTTP/1.1 service behind the proxy does not notice.
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, env.srv.ProxyURL()+"/index.html", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "8080-" + sb.ID + ".sbx.example.test"
	resp, err := (&http.Client{Transport: h2c}).Do(req)
	if err != nil {
		t.Fatalf("HTTP/2 through the proxy: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || string(body) != "served\n" {
		t.Fatalf("HTTP/2 through the proxy: %s %d %q", resp.Proto, resp.StatusCode, body)
	}
}

// With allow_public_traffic false, ports take only requests carrying the
// sandbox's traffic token, which is not passed on to the service; envd's
// port still takes only the access token; the choice is fixed; each
// branch gets a token of its own.
func TestPortsRequireTrafficToken(t *testing.T) {
	ctx := testContext(t)
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Network: &apiv1.NetworkPolicy{AllowPublicTraffic: boolPtr(false)}})
	token := sb.TrafficAccessToken
	if token == "" || sb.Network == nil || sb.Network.AllowPublicTraffic == nil || *sb.Network.AllowPublicTraffic {
		t.Fatalf("private sandbox: token %q, network %+v", token, sb.Network)
	}
	serveWeb(t, sb.ID, token)
	for _, byHeaders := range []bool{false, true} {
		how := map[bool]string{false: "by host", true: "by headers"}[byHeaders]
		portRequest(t, sb.ID, "8080", "/index.html", byHeaders, "").wantError(t, http.StatusForbidden, "E2b-Traffic-Access-Token")
		portRequest(t, sb.ID, "8080", "/index.html", byHeaders, token+"x").wantError(t, http.StatusForbidden, "does not match")
		portRequest(t, sb.ID, "8080", "/index.html", byHeaders, sb.AccessToken).wantError(t, http.StatusForbidden, "does not match")
		requireServed(t, how+" with the token", portRequest(t, sb.ID, "8080", "/index.html", byHeaders, token))
	}

	// The token stays with the proxy: a service sees the request without it.
	execOK(t, sb.ID, `(printf 'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok' | nc -l -p 8081 > /tmp/request 2>&1 &)`)
	var resp e2bResponse
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp = portRequest(t, sb.ID, "8081", "/seen", true, token); resp.status == http.StatusOK || time.Now().After(deadline) {
			break
		}
	}
	if resp.status != http.StatusOK || string(resp.body) != "ok" {
		t.Fatalf("nc service: %d %q", resp.status, resp.body)
	}
	var request string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(request, "\r\n\r\n") && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		request = execOK(t, sb.ID, "cat /tmp/request")
	}
	if !strings.Contains(request, "GET /seen") || strings.Contains(request, token) || strings.Contains(strings.ToLower(request), "traffic-access-token") {
		t.Fatalf("the service received:\n%s", request)
	}

	// envd's port takes the access token only; the traffic token is no
	// substitute for it.
	envd := e2bSandbox{SandboxID: sb.ID, EnvdAccessToken: sb.AccessToken}
	noToken := envdHeaders(envd, "49983")
	noToken.Del("X-Access-Token")
	noToken.Set("E2b-Traffic-Access-Token", token)
	if resp := connectUnary(t, "/process.Process/List", map[string]any{}, noToken); resp.status != http.StatusUnauthorized {
		t.Fatalf("envd without X-Access-Token: %d %s", resp.status, resp.body)
	}
	proxyRequest(t, http.MethodGet, "/files?path=/etc/hostname", "", nil, noToken).wantError(t, http.StatusUnauthorized, "")
	if resp := connectUnary(t, "/process.Process/List", map[string]any{}, envdHeaders(envd, "49983")); resp.status != http.StatusOK {
		t.Fatalf("envd with X-Access-Token: %d %s", resp.status, resp.body)
	}

	// Chosen at create time: the policy read back may be sent again, but
	// the choice cannot be changed.
	if _, err := env.client.SetNetwork(ctx, sb.ID, *sb.Network); err != nil {
		t.Fatalf("sending the policy in effect back: %v", err)
	}
	_, err := env.client.SetNetwork(ctx, sb.ID, apiv1.NetworkPolicy{AllowPublicTraffic: boolPtr(true)})
	if status := apiStatus(err); status != http.StatusBadRequest || !strings.Contains(err.Error(), "create") {
		t.Fatalf("making a private sandbox public: %v", err)
	}
	requireServed(t, "after the refused change", portRequest(t, sb.ID, "8080", "/index.html", false, token))

	branches, err := env.client.Branch(ctx, sb.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	branch := branches[0]
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), branch.ID) })
	if _, err := env.client.WaitSandbox(ctx, branch.ID, apiv1.StateRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	if branch.TrafficAccessToken == "" || branch.TrafficAccessToken == token {
		t.Fatalf("branch token %q, source's %q: want a new one", branch.TrafficAccessToken, token)
	}
	// The web server came along in the branch's memory.
	portRequest(t, branch.ID, "8080", "/index.html", false, token).wantError(t, http.StatusForbidden, "does not match")
	requireServed(t, "branch with its own token", portRequest(t, branch.ID, "8080", "/index.html", false, branch.TrafficAccessToken))
}

// The E2B API creates sandboxes with private traffic and hands out their
// token as E2B does.
func TestPortsE2BTrafficToken(t *testing.T) {
	private := e2bCreate(t, "minimal", map[string]any{"network": map[string]any{"allowPublicTraffic": false}})
	resp := e2bRequest(t, http.MethodGet, "/sandboxes/"+private.SandboxID, nil, nil)
	var detail struct {
		Network struct {
			AllowPublicTraffic *bool `json:"allowPublicTraffic"`
		} `json:"network"`
	}
	resp.json(t, &detail)
	if detail.Network.AllowPublicTraffic == nil || *detail.Network.AllowPublicTraffic {
		t.Fatalf("detail of a private sandbox: %s", resp.body)
	}
	sb, err := env.client.GetSandbox(testContext(t), private.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	// The create response carried the token (e2bCreate keeps only the
	// fields every SDK needs; connect returns the same view).
	connect := e2bRequest(t, http.MethodPost, "/sandboxes/"+private.SandboxID+"/connect", map[string]any{"timeout": 300}, nil)
	var view struct {
		TrafficAccessToken *string `json:"trafficAccessToken"`
	}
	connect.json(t, &view)
	if sb.TrafficAccessToken == "" || view.TrafficAccessToken == nil || *view.TrafficAccessToken != sb.TrafficAccessToken {
		t.Fatalf("trafficAccessToken %v, the sandbox's %q: %s", view.TrafficAccessToken, sb.TrafficAccessToken, connect.body)
	}
	serveWeb(t, sb.ID, sb.TrafficAccessToken)
	portRequest(t, sb.ID, "8080", "/index.html", true, "").wantError(t, http.StatusForbidden, "traffic access token")

	public := e2bCreate(t, "minimal", map[string]any{"network": map[string]any{"allowPublicTraffic": true}})
	connect = e2bRequest(t, http.MethodPost, "/sandboxes/"+public.SandboxID+"/connect", map[string]any{"timeout": 300}, nil)
	view.TrafficAccessToken = nil
	connect.json(t, &view)
	if view.TrafficAccessToken != nil {
		t.Fatalf("a public sandbox got a traffic token: %s", connect.body)
	}
	e2bRequest(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "minimal", "network": map[string]any{"allowPublicTraffic": "no"}}, nil).
		wantError(t, http.StatusBadRequest, "allowPublicTraffic")
}

// apiStatus is the HTTP status of an API error, 0 for anything else.
func apiStatus(err error) int {
	if apiErr, ok := err.(*client.APIError); ok {
		return apiErr.StatusCode
	}
	return 0
}
