package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/processpb"
)

// initAgent posts body to /init authenticated with token.
func initAgent(t *testing.T, env *testEnv, token string, body map[string]any) {
	t.Helper()
	resp := postInit(t, env, token, body)
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("init: %d %s", resp.StatusCode, b)
	}
}

func postInit(t *testing.T, env *testEnv, token string, body map[string]any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, env.baseURL+"/init", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(accessTokenHeader, token)
	}
	resp, err := env.h1Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func get(t *testing.T, env *testEnv, path, token string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, env.baseURL+path, nil)
	if token != "" {
		req.Header.Set(accessTokenHeader, token)
	}
	resp, err := env.h2cClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func assertJSONError(t *testing.T, resp *http.Response, body []byte, status int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d (%s)", resp.StatusCode, status, body)
	}
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Code != status || e.Message == "" {
		t.Errorf("error body %q", body)
	}
}

func TestInitRekeysSandbox(t *testing.T) {
	env := newTestEnv(t)
	const newToken = "rotated-token-2"

	resp := postInit(t, env, "", map[string]any{"accessToken": "hijack"})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("init without current token: %d", resp.StatusCode)
	}
	initAgent(t, env, testToken, map[string]any{
		"accessToken":    newToken,
		"envVars":        map[string]string{"SANDBOX_VAR": "v1"},
		"defaultUser":    "tester",
		"defaultWorkdir": env.userHome,
		"hostname":       "ignored-in-tests",
		"entropy":        "AAECAwQ=",
		"timestamp":      "2026-01-02T03:04:05Z",
	})

	// The old token is rejected everywhere now.
	resp2, body := get(t, env, "/envs", testToken)
	assertJSONError(t, resp2, body, http.StatusUnauthorized)
	_, err := env.processClient(clientOptions{}).List(context.Background(), connect.NewRequest(&processpb.ListRequest{}))
	if connectCode(err) != connect.CodeUnauthenticated {
		t.Errorf("old token on RPC: %v", err)
	}
	if resp := postInit(t, env, testToken, map[string]any{}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("init with old token: %d", resp.StatusCode)
	}

	// The new token works, and the defaults apply.
	resp2, body = get(t, env, "/envs", newToken)
	var envs map[string]string
	if resp2.StatusCode != http.StatusOK || json.Unmarshal(body, &envs) != nil || envs["SANDBOX_VAR"] != "v1" {
		t.Errorf("envs: %d %s", resp2.StatusCode, body)
	}
	res := run(t, env.processClient(clientOptions{token: newToken}), shell(`echo "$SANDBOX_VAR $(id -u) $(pwd)"`))
	if got := string(res.stdout); got != "v1 65534 "+env.userHome+"\n" {
		t.Errorf("process after init: %q", got)
	}
}

func TestUnsecuredSandboxNeedsNoToken(t *testing.T) {
	env := newTestEnv(t, func(c *Config) { c.AccessToken = "" })
	run(t, env.processClient(clientOptions{token: "-"}), shell("true"))
	if resp, body := get(t, env, "/envs", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("envs: %d %s", resp.StatusCode, body)
	}
	// Securing it later through /init.
	initAgent(t, env, "", map[string]any{"accessToken": "now-secure"})
	if resp, body := get(t, env, "/envs", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("envs after securing: %d %s", resp.StatusCode, body)
	}
}

func TestHealthMetricsAndAuthOnPlainRoutes(t *testing.T) {
	env := newTestEnv(t)
	if resp, _ := get(t, env, "/health", ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("health: %d", resp.StatusCode)
	}
	resp, body := get(t, env, "/metrics", "")
	assertJSONError(t, resp, body, http.StatusUnauthorized)
	resp, body = get(t, env, "/envs", "wrong")
	assertJSONError(t, resp, body, http.StatusUnauthorized)

	resp, body = get(t, env, "/metrics", testToken)
	var m map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &m) != nil {
		t.Fatalf("metrics: %d %s", resp.StatusCode, body)
	}
	for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "disk_used", "disk_total"} {
		if _, ok := m[k]; !ok {
			t.Errorf("metrics lacks %s: %s", k, body)
		}
	}
	if m["mem_total"].(float64) <= 0 || m["disk_total"].(float64) <= 0 {
		t.Errorf("metrics values: %s", body)
	}
}
