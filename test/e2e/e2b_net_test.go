package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/pkg/apiv1"
)

// The E2B network tests replay the SDKs' requests for network rules,
// network updates, maskRequestHost and secrets (e2b 2.45/2.51:
// SandboxNetworkConfig, SandboxNetworkUpdateConfig, NewSecret, Secret)
// against sandboxes on the fake web (env.web), never the real internet.

// e2bNetDetail is the part of SandboxDetail these tests read.
type e2bNetDetail struct {
	AllowInternetAccess bool `json:"allowInternetAccess"`
	Network             struct {
		AllowPublicTraffic bool                         `json:"allowPublicTraffic"`
		AllowOut           []string                     `json:"allowOut"`
		DenyOut            []string                     `json:"denyOut"`
		MaskRequestHost    string                       `json:"maskRequestHost"`
		Rules              map[string][]json.RawMessage `json:"rules"`
	} `json:"network"`
}

func e2bNetInfo(t *testing.T, id string) (e2bNetDetail, string) {
	t.Helper()
	resp := e2bRequest(t, http.MethodGet, "/sandboxes/"+id, nil, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, resp.status, resp.body)
	}
	var d e2bNetDetail
	resp.json(t, &d)
	return d, string(resp.body)
}

// e2bUpdateNetwork sends PUT /sandboxes/{id}/network as the SDKs do and
// wants 204.
func e2bUpdateNetwork(t *testing.T, id string, body any) {
	t.Helper()
	if resp := e2bRequest(t, http.MethodPut, "/sandboxes/"+id+"/network", body, nil); resp.status != http.StatusNoContent {
		t.Fatalf("update network of %s with %v: %d %s, want 204", id, body, resp.status, resp.body)
	}
}

// pinWebNames writes the fake web's names into the sandbox's /etc/hosts
// and its CA into /tmp/web-ca.pem: the gateway judges names itself, so
// what the sandbox resolves is not what these tests are about.
func pinWebNames(t *testing.T, id string) {
	t.Helper()
	runIn(t, id, "root", fmt.Sprintf("printf '%s %s\\n%s %s\\n%s %s\\n' >> /etc/hosts && cat > /tmp/web-ca.pem <<'EOF'\n%sEOF\nchmod 644 /tmp/web-ca.pem",
		env.web.SharedAddr, nettest.AllowedName, env.web.SharedAddr, nettest.DeniedName, env.web.OtherAddr, nettest.OtherName, env.web.CAPEM))
}

// curlIn runs curl in the sandbox as user and reports its output and
// whether it succeeded. A refusal must come at once, never as a timeout.
func curlIn(t *testing.T, id, args string) (string, bool) {
	t.Helper()
	began := time.Now()
	res, err := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "curl -sS --fail-with-body -m 10 " + args}, TimeoutS: 60})
	if err != nil {
		t.Fatalf("exec curl %s: %v", args, err)
	}
	if res.ExitCode != 0 && time.Since(began) > 5*time.Second {
		t.Errorf("curl %s failed only after %s (a drop, not a refusal?): %s", args, time.Since(began), res.Stderr)
	}
	return res.Stdout + res.Stderr, res.ExitCode == 0
}

func requireWeb(t *testing.T, id, host string, addr netip.Addr) {
	t.Helper()
	out, ok := curlIn(t, id, "http://"+host+"/")
	if want := nettest.WebBody(host, "", addr); !ok || out != want {
		t.Fatalf("sandbox %s fetching http://%s/: ok=%v %q, want %q", id, host, ok, out, want)
	}
}

func requireNoWeb(t *testing.T, id, target string) {
	t.Helper()
	if out, ok := curlIn(t, id, target); ok {
		t.Fatalf("sandbox %s reached %s: %q", id, target, out)
	}
}

// PUT /sandboxes/{id}/network changes a running sandbox's egress at once:
// a denied address fails from inside, an allowed name works with the rest
// closed, and an empty update restores the default. The detail reports
// each state; bad updates are refused and change nothing.
func TestE2BNetworkUpdate(t *testing.T) {
	requireServer(t)
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	sb := e2bCreate(t, "base", nil)
	pinWebNames(t, sb.SandboxID)
	requireWeb(t, sb.SandboxID, nettest.AllowedName, env.web.SharedAddr)
	requireWeb(t, sb.SandboxID, nettest.OtherName, env.web.OtherAddr)

	// Deny one address (the SDK's updateNetwork({ denyOut: [...] })).
	other := env.web.OtherAddr.String() + "/32"
	e2bUpdateNetwork(t, sb.SandboxID, map[string]any{"denyOut": []string{other}})
	requireNoWeb(t, sb.SandboxID, "http://"+nettest.OtherName+"/")
	requireNoWeb(t, sb.SandboxID, "http://"+net.JoinHostPort(env.web.OtherAddr.String(), nettest.PlainPort)+"/")
	requireWeb(t, sb.SandboxID, nettest.AllowedName, env.web.SharedAddr)
	if d, _ := e2bNetInfo(t, sb.SandboxID); !d.AllowInternetAccess || !slices.Equal(d.Network.DenyOut, []string{other}) || len(d.Network.AllowOut) != 0 {
		t.Errorf("detail after denying %s: %+v", other, d)
	}

	// Only a domain: everything else closed (E2B's denyOut 0.0.0.0/0).
	e2bUpdateNetwork(t, sb.SandboxID, map[string]any{"allowOut": []string{nettest.AllowedName}, "denyOut": []string{"0.0.0.0/0"}})
	requireWeb(t, sb.SandboxID, nettest.AllowedName, env.web.SharedAddr)
	requireNoWeb(t, sb.SandboxID, "http://"+nettest.OtherName+"/")
	// The same address under a name that is not allowed goes nowhere.
	requireNoWeb(t, sb.SandboxID, "http://"+nettest.DeniedName+"/")
	if d, _ := e2bNetInfo(t, sb.SandboxID); d.AllowInternetAccess || !slices.Equal(d.Network.AllowOut, []string{nettest.AllowedName}) {
		t.Errorf("detail after allowing only %s: %+v", nettest.AllowedName, d)
	}

	// allow_internet_access false with a CIDR allowed.
	e2bUpdateNetwork(t, sb.SandboxID, map[string]any{"allow_internet_access": false, "allowOut": []string{env.web.OtherAddr.String()}})
	requireWeb(t, sb.SandboxID, nettest.OtherName, env.web.OtherAddr)
	requireNoWeb(t, sb.SandboxID, "http://"+nettest.AllowedName+"/")

	// Refused updates change nothing.
	for _, bad := range []struct {
		body, says string
	}{
		{`{"egressProxy":{"address":"proxy.example.com:1080"}}`, "egressProxy"},
		{`{"denyOut":["not an address!"]}`, "deny"},
		{`{"allowOut":["192.88.99.10"],"denyOut":["192.88.99.0/24"]}`, "covers"},
		{`{"denyOut":"0.0.0.0/0"}`, "malformed"},
		{`{"rules":{"*":[{"transform":{"headers":{"A":"b"}}}]}}`, "host"},
		{`{"rules":{"allowed.test":[{"transform":{"headers":{"Host":"evil.test"}}}]}}`, "Host"},
		{`{"rules":{"allowed.test":[{"transform":{"headers":{"A":"${e2b.secrets.no-such-secret}"}}}]}}`, "no-such-secret"},
		{`{`, "malformed"},
	} {
		e2bRequest(t, http.MethodPut, "/sandboxes/"+sb.SandboxID+"/network", bad.body, nil).wantError(t, http.StatusBadRequest, bad.says)
	}
	e2bRequest(t, http.MethodPut, "/sandboxes/"+sb.SandboxID+"/network", strings.Repeat(" ", 2<<20), nil).wantError(t, http.StatusRequestEntityTooLarge, "larger")
	e2bRequest(t, http.MethodPut, "/sandboxes/zz0missing0sandbox00/network", `{}`, nil).wantError(t, http.StatusNotFound, "zz0missing0sandbox00")
	requireWeb(t, sb.SandboxID, nettest.OtherName, env.web.OtherAddr)
	requireNoWeb(t, sb.SandboxID, "http://"+nettest.AllowedName+"/")

	// Clearing: every field omitted is the default again.
	e2bUpdateNetwork(t, sb.SandboxID, map[string]any{})
	requireWeb(t, sb.SandboxID, nettest.AllowedName, env.web.SharedAddr)
	requireWeb(t, sb.SandboxID, nettest.OtherName, env.web.OtherAddr)
	if d, _ := e2bNetInfo(t, sb.SandboxID); !d.AllowInternetAccess || len(d.Network.AllowOut)+len(d.Network.DenyOut) != 0 || d.Network.Rules != nil {
		t.Errorf("detail after clearing: %+v", d)
	}

	// A killed sandbox's network is not found.
	if resp := e2bRequest(t, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil); resp.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", resp.status, resp.body)
	}
	e2bRequest(t, http.MethodPut, "/sandboxes/"+sb.SandboxID+"/network", `{}`, nil).wantError(t, http.StatusNotFound, sb.SandboxID)
}

// e2bSecret is E2B's Secret.
type e2bSecret struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int               `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

func randomSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "e2e-net-secret-" + hex.EncodeToString(b)
}

// A rule's header reaches the fake upstream, filled from a secret stored
// through E2B's /secrets, while the sandbox cannot read the secret; a new
// version of the secret is sent at once; rules can be replaced and
// cleared on the running sandbox, and a secret in use cannot be deleted.
func TestE2BNetworkRulesInjectSecrets(t *testing.T) {
	requireServer(t)
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	value := randomSecret(t)
	created := e2bRequest(t, http.MethodPost, "/secrets", map[string]any{"name": "E2E-Net-Token", "value": value, "metadata": map[string]string{"purpose": "e2e"}}, nil)
	if created.status != http.StatusCreated {
		t.Fatalf("create secret: %d %s", created.status, created.body)
	}
	var sec e2bSecret
	created.json(t, &sec)
	t.Cleanup(func() { e2bRequest(t, http.MethodDelete, "/secrets/"+sec.SecretID, nil, nil) })
	if sec.Name != "e2e-net-token" || !strings.HasPrefix(sec.SecretID, "sec_") || sec.CurrentVersion != 1 || sec.Metadata["purpose"] != "e2e" || sec.CreatedAt.IsZero() {
		t.Fatalf("created secret: %s", created.body)
	}
	if strings.Contains(string(created.body), value) {
		t.Fatalf("the create answer shows the value: %s", created.body)
	}
	e2bRequest(t, http.MethodPost, "/secrets", map[string]any{"name": "e2e-net-token", "value": "x"}, nil).wantError(t, http.StatusConflict, "already exists")
	for _, ref := range []string{sec.SecretID, sec.Name, "E2E-NET-TOKEN"} {
		var got e2bSecret
		resp := e2bRequest(t, http.MethodGet, "/secrets/"+ref, nil, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("get secret %s: %d %s", ref, resp.status, resp.body)
		}
		if resp.json(t, &got); got.SecretID != sec.SecretID {
			t.Errorf("get %s: %+v", ref, got)
		}
	}
	var listed []e2bSecret
	list := e2bRequest(t, http.MethodGet, "/secrets", nil, nil)
	if list.json(t, &listed); list.status != http.StatusOK || !slices.ContainsFunc(listed, func(s e2bSecret) bool { return s.SecretID == sec.SecretID }) {
		t.Fatalf("list: %d %s", list.status, list.body)
	}

	host := nettest.AllowedName
	sb := e2bCreate(t, "base", map[string]any{"network": map[string]any{
		"rules": map[string]any{host: []any{map[string]any{"transform": map[string]any{"headers": map[string]string{
			"Authorization": "Bearer ${e2b.secrets.e2e-net-token}", "X-Team": "net",
		}}}}},
	}})
	pinWebNames(t, sb.SandboxID)
	d, detail := e2bNetInfo(t, sb.SandboxID)
	if len(d.Network.Rules[host]) != 1 || !strings.Contains(string(d.Network.Rules[host][0]), `"Bearer ${e2b.secrets.e2e-net-token}"`) {
		t.Errorf("detail shows the rules as %v", d.Network.Rules)
	}
	if strings.Contains(detail, value) {
		t.Fatalf("the detail shows the secret: %s", detail)
	}

	// The sandbox trusts space's egress CA; the gateway adds the header.
	fetchWith := func(want map[string]string) {
		t.Helper()
		out, ok := curlIn(t, sb.SandboxID, "https://"+host+"/")
		if wantBody := nettest.WebBody(host, host, env.web.SharedAddr); !ok || out != wantBody {
			t.Fatalf("https://%s/ through the gateway: ok=%v %q, want %q", host, ok, out, wantBody)
		}
		up := env.web.LastRequest(host)
		if up == nil || up.TLS == nil {
			t.Fatalf("the upstream got no TLS request for %s", host)
		}
		for k, v := range want {
			if got := up.Header.Get(k); got != v {
				t.Errorf("upstream saw %s %q, want %q", k, got, v)
			}
		}
	}
	fetchWith(map[string]string{"Authorization": "Bearer " + value, "X-Team": "net"})
	// What the sandbox sees of its own request has no secret in it.
	if out, _ := curlIn(t, sb.SandboxID, "-v https://"+host+"/ 2>&1"); strings.Contains(out, value) {
		t.Fatalf("curl -v in the sandbox shows the secret: %s", out)
	}
	res := scanSandbox(t, sb.SandboxID, value)
	t.Logf("scanned %d processes, %d bytes of environment, %d bytes of memory, %d files", res.Stats["procs"], res.Stats["env"], res.Stats["mem"], res.Stats["files"])
	if where := res.Found[value]; len(where) > 0 {
		t.Fatalf("the secret is inside the sandbox: %v", where)
	}
	if res.Stats["files"] < 1000 || res.Stats["mem"] == 0 {
		t.Fatalf("the scan is blind: %v", res.Stats)
	}

	// In use: not deleted. A new version is sent from the next request.
	e2bRequest(t, http.MethodDelete, "/secrets/"+sec.SecretID, nil, nil).wantError(t, http.StatusConflict, sb.SandboxID)
	value2 := randomSecret(t)
	updated := e2bRequest(t, http.MethodPost, "/secrets/"+sec.SecretID, map[string]any{"value": value2}, nil)
	var sec2 e2bSecret
	if updated.json(t, &sec2); updated.status != http.StatusOK || sec2.CurrentVersion != 2 || sec2.SecretID != sec.SecretID || sec2.Metadata["purpose"] != "e2e" {
		t.Fatalf("update: %d %s", updated.status, updated.body)
	}
	fetchWith(map[string]string{"Authorization": "Bearer " + value2})

	// Replaced on the running sandbox: only the new rule applies.
	e2bUpdateNetwork(t, sb.SandboxID, map[string]any{"rules": map[string]any{host: []any{map[string]any{"transform": map[string]any{"headers": map[string]string{"X-Other": "literal-v2"}}}}}})
	fetchWith(map[string]string{"Authorization": "", "X-Team": "", "X-Other": "literal-v2"})

	// Cleared: the sandbox talks to the upstream itself (TLS is not
	// terminated, so it needs the fake web's CA), nothing is added, and
	// the secret is free to go.
	e2bUpdateNetwork(t, sb.SandboxID, map[string]any{})
	if out, ok := curlIn(t, sb.SandboxID, "--cacert /tmp/web-ca.pem https://"+host+"/"); !ok {
		t.Fatalf("https://%s/ after clearing the rules: %s", host, out)
	}
	if up := env.web.LastRequest(host); up == nil || up.Header.Get("X-Other") != "" || up.Header.Get("Authorization") != "" {
		t.Fatalf("after clearing the rules the upstream saw %+v", up)
	}
	if resp := e2bRequest(t, http.MethodDelete, "/secrets/"+sec.SecretID, nil, nil); resp.status != http.StatusNoContent {
		t.Fatalf("delete an unused secret: %d %s", resp.status, resp.body)
	}
	e2bRequest(t, http.MethodGet, "/secrets/"+sec.SecretID, nil, nil).wantError(t, http.StatusNotFound, sec.SecretID)
	e2bRequest(t, http.MethodPost, "/secrets/"+sec.SecretID, `{"value":"x"}`, nil).wantError(t, http.StatusNotFound, sec.SecretID)
}

// A key of a project: literal rules work, rules naming stored secrets and
// secret writes need an admin key, and it lists only its project's
// secrets.
func TestE2BNetworkRulesProjectKey(t *testing.T) {
	requireServer(t)
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	tn := newTenant(t, "net")
	as := http.Header{"X-Api-Key": {tn.secretKeys[0]}}
	admin := e2bRequest(t, http.MethodPost, "/secrets", map[string]any{"name": "e2e-net-admin", "value": randomSecret(t)}, nil)
	if admin.status != http.StatusCreated {
		t.Fatalf("admin creates a secret: %d %s", admin.status, admin.body)
	}
	t.Cleanup(func() { e2bRequest(t, http.MethodDelete, "/secrets/e2e-net-admin", nil, nil) })

	e2bRequest(t, http.MethodPost, "/secrets", `{"name":"mine","value":"v"}`, as).wantError(t, http.StatusForbidden, "admin key")
	if list := e2bRequest(t, http.MethodGet, "/secrets", nil, as); list.status != http.StatusOK || strings.TrimSpace(string(list.body)) != "[]" {
		t.Fatalf("the project's list: %d %s, want []", list.status, list.body)
	}
	e2bRequest(t, http.MethodGet, "/secrets/e2e-net-admin", nil, as).wantError(t, http.StatusNotFound, "e2e-net-admin")
	withSecret := `{"templateID":"base","network":{"rules":{"allowed.test":[{"transform":{"headers":{"Authorization":"${e2b.secrets.e2e-net-admin}"}}}]}}}`
	e2bRequest(t, http.MethodPost, "/sandboxes", withSecret, as).wantError(t, http.StatusForbidden, "admin key")

	literal := e2bRequest(t, http.MethodPost, "/sandboxes", `{"templateID":"base","timeout":120,"network":{"rules":{"allowed.test":[{"transform":{"headers":{"X-Literal":"from-a-project-key"}}}]}}}`, as)
	if literal.status != http.StatusCreated {
		t.Fatalf("create with a literal rule: %d %s", literal.status, literal.body)
	}
	var sb e2bSandbox
	literal.json(t, &sb)
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), sb.SandboxID) })
	pinWebNames(t, sb.SandboxID)
	if out, ok := curlIn(t, sb.SandboxID, "https://"+nettest.AllowedName+"/"); !ok {
		t.Fatalf("through the gateway: %s", out)
	}
	if up := env.web.LastRequest(nettest.AllowedName); up == nil || up.Header.Get("X-Literal") != "from-a-project-key" {
		t.Fatalf("upstream saw %+v", up)
	}
	// Updating with a secret is refused, and changes nothing.
	e2bRequest(t, http.MethodPut, "/sandboxes/"+sb.SandboxID+"/network", `{"rules":{"allowed.test":[{"transform":{"headers":{"A":"${e2b.secrets.e2e-net-admin}"}}}]}}`, as).wantError(t, http.StatusForbidden, "admin key")
	curlIn(t, sb.SandboxID, "https://"+nettest.AllowedName+"/")
	if up := env.web.LastRequest(nettest.AllowedName); up == nil || up.Header.Get("X-Literal") != "from-a-project-key" || up.Header.Get("A") != "" {
		t.Fatalf("after a refused update the upstream saw %+v", up)
	}
}

// maskRequestHost is the Host the sandbox's services get through the
// proxy, ${PORT} filled in; without it they get the client's.
func TestE2BMaskRequestHost(t *testing.T) {
	requireServer(t)
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	const hostEcho = `import http.server as h
class H(h.BaseHTTPRequestHandler):
    def do_GET(s):
        b = ("host=%s xfh=%s" % (s.headers.get("Host"), s.headers.get("X-Forwarded-Host"))).encode()
        s.send_response(200); s.send_header("Content-Length", str(len(b))); s.end_headers(); s.wfile.write(b)
h.HTTPServer(("0.0.0.0", 8000), H).serve_forever()
`
	serve := func(id string) string {
		t.Helper()
		runIn(t, id, "", "cat > /tmp/echo.py <<'EOF'\n"+hostEcho+"EOF\nsetsid nohup python3 /tmp/echo.py >/dev/null 2>&1 < /dev/null &")
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp := portRequest(t, id, "8000", "/", true, "")
			if resp.status == http.StatusOK {
				return string(resp.body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the echo server in %s never answered: %d %s", id, resp.status, resp.body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	masked := e2bCreate(t, "base", map[string]any{"network": map[string]any{"maskRequestHost": "localhost:${PORT}"}})
	proxyHost := strings.TrimPrefix(env.srv.ProxyURL(), "http://")
	if got, want := serve(masked.SandboxID), "host=localhost:8000 xfh="+proxyHost; got != want {
		t.Errorf("masked sandbox's service got %q, want %q", got, want)
	}
	if d, _ := e2bNetInfo(t, masked.SandboxID); d.Network.MaskRequestHost != "localhost:${PORT}" {
		t.Errorf("detail: maskRequestHost %q", d.Network.MaskRequestHost)
	}
	// Chosen at create: an update neither needs nor changes it.
	e2bUpdateNetwork(t, masked.SandboxID, map[string]any{})
	if got := string(portRequest(t, masked.SandboxID, "8000", "/", true, "").body); !strings.HasPrefix(got, "host=localhost:8000 ") {
		t.Errorf("after a network update: %q", got)
	}

	plain := e2bCreate(t, "base", nil)
	if got := serve(plain.SandboxID); !strings.HasPrefix(got, "host="+proxyHost+" ") {
		t.Errorf("unmasked sandbox's service got %q, want the client's Host %s", got, proxyHost)
	}
	for _, bad := range []string{`"a b"`, `"x\r\nEvil: 1"`, `"a/b"`, `5`} {
		e2bRequest(t, http.MethodPost, "/sandboxes", `{"templateID":"base","network":{"maskRequestHost":`+bad+`}}`, nil).wantError(t, http.StatusBadRequest, "ask")
	}
}

// netJSEnv is what compat/e2b-js/test/net-*.test.mjs need of the fake web:
// its names and addresses, its CA, and SPACE_TEST_WEB_INSPECT, a URL
// answering ?host=NAME with what the web's servers last received for NAME
// (method, target, headers; 404 when nothing), which a sandbox cannot
// reach but the suite can.
func netJSEnv(t *testing.T) []string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// With uri, the last request for that target: the SDK suites run
		// side by side and ask for the same host.
		host, uri := r.URL.Query().Get("host"), r.URL.Query().Get("uri")
		up := env.web.LastRequest(host)
		if uri != "" {
			up = env.web.LastRequestFor(host, uri)
		}
		if up == nil {
			http.Error(w, "no request for that host", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"method": up.Method, "uri": up.RequestURI, "headers": up.Header, "tls": up.TLS != nil})
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return []string{
		"SPACE_TEST_WEB_INSPECT=http://" + l.Addr().String() + "/last",
		"SPACE_TEST_WEB_ALLOWED_NAME=" + nettest.AllowedName,
		"SPACE_TEST_WEB_DENIED_NAME=" + nettest.DeniedName,
		"SPACE_TEST_WEB_OTHER_NAME=" + nettest.OtherName,
		"SPACE_TEST_WEB_SHARED_ADDR=" + env.web.SharedAddr.String(),
		"SPACE_TEST_WEB_OTHER_ADDR=" + env.web.OtherAddr.String(),
		"SPACE_TEST_WEB_CA=" + string(env.web.CAPEM),
	}
}
