package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// runIn runs a script in the sandbox as user and returns stdout, failing
// the test unless it exits 0.
func runIn(t *testing.T, id, user, script string) string {
	t.Helper()
	res, err := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, User: user, TimeoutS: 170})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d\nstdout %s\nstderr %s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// scanScript looks for needles (given hex-encoded, so that the command
// line carries no secret) in every process's environment, command line and
// memory, and in every file outside /proc, /sys and /dev. It skips its own
// process, which holds the decoded needles. It prints one JSON object:
// where each needle was found and how much it read.
const scanScript = `
import ctypes, json, os, subprocess, sys
needles = [bytes.fromhex(h) for h in sys.argv[1:]]
found = {n.decode(): [] for n in needles}
stats = {"env": 0, "mem": 0, "files": 0, "procs": 0}
me = str(os.getpid())
# A child with the sandbox's environment, as any command has: the
# placeholder in its environ and memory is the scan's control.
child = subprocess.Popen(["sleep", "120"])
# Memory is read with process_vm_readv: /proc/<pid>/mem gave nothing under gVisor.
libc = ctypes.CDLL(None, use_errno=True)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
CHUNK = 1 << 20
buf = ctypes.create_string_buffer(CHUNK + 256)
def vm_read(pid, at, n):
    local, remote = iovec(ctypes.addressof(buf), n), iovec(at, n)
    got = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    return buf.raw[:got] if got > 0 else b""
def look(where, data):
    for n in needles:
        if n in data:
            found[n.decode()].append(where)
def read_all(path):
    with open(path, "rb") as f:
        return f.read()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or pid == me:
        continue
    stats["procs"] += 1
    for part in ("environ", "cmdline"):
        try:
            data = read_all("/proc/%s/%s" % (pid, part))
            stats["env"] += len(data)
            look("/proc/%s/%s" % (pid, part), data)
        except OSError:
            pass
    try:
        maps = read_all("/proc/%s/maps" % pid).decode().splitlines()
    except OSError:
        continue
    for line in maps:
        span, perms = line.split()[:2]
        if not perms.startswith("r"):
            continue
        lo, hi = (int(x, 16) for x in span.split("-"))
        for at in range(lo, hi, CHUNK):
            data = vm_read(int(pid), at, min(CHUNK + 256, hi - at))
            if data:
                stats["mem"] += len(data)
                look("/proc/%s/mem %s" % (pid, span), data)
for root, dirs, files in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for name in files:
        path = os.path.join(root, name)
        try:
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            data = read_all(path)
        except OSError:
            continue
        stats["files"] += 1
        look(path, data)
child.kill()
print(json.dumps({"found": found, "stats": stats}))
`

type scanResult struct {
	Found map[string][]string `json:"found"`
	Stats map[string]int64    `json:"stats"`
}

// scanSandbox runs scanScript as root in the sandbox.
func scanSandbox(t *testing.T, id string, needles ...string) scanResult {
	t.Helper()
	args := []string{"python3", "-c", scanScript}
	for _, n := range needles {
		args = append(args, hex.EncodeToString([]byte(n)))
	}
	res, err := env.client.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: args, User: "root", TimeoutS: 170})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	var out scanResult
	if res.ExitCode != 0 || json.Unmarshal([]byte(res.Stdout), &out) != nil {
		t.Fatalf("scan: exit %d\nstdout %s\nstderr %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	return out
}

// A credential rule, in each house: the gateway of the sandbox's node
// adds the secret to requests to the bound host, which receives them over
// TLS verified against the house's egress CA (which every node's
// templates trust, so a template has one id on every node); a host
// without a rule gets the placeholder as it is, its TLS not even
// terminated; the sandbox's environment holds only the placeholder, and
// nothing the API says shows the secret. In a cluster the node asks the
// control plane for the rules and the secret when the sandbox connects,
// and a node that does not run the sandbox is refused its secret.
// (TestCredentialSecretsNowhereInTheSandbox looks through all of a
// sandbox's memory and files, in one house.)
func TestCredentialInjection(t *testing.T) {
	inEachHouse(t, func(t *testing.T, h *house) {
		ctx := testContext(t)
		cl := h.admin()
		if h.cluster != nil {
			clusterNodesTrustWeb(t, h.cluster)
		}
		tpl, err := cl.GetTemplate(ctx, "minimal")
		if err != nil {
			t.Fatal(err)
		}
		ca := h.egressCA(t)
		getter := buildHTTPSGet(t)
		token, apiKey := h.secret(t, "E2E_TOKEN"), h.secret(t, "E2E_API_KEY")
		host, other := nettest.AllowedName, nettest.OtherName
		rules := []apiv1.CredentialRule{
			{Host: host, Header: "Authorization", Value: "Bearer ${E2E_TOKEN}"},
			{Host: host, Env: "API_KEY", Secret: "E2E_API_KEY"},
		}
		var ids []string
		h.onEachNode(t, func(node string) {
			sb := h.sandbox(t, apiv1.CreateSandboxRequest{Credentials: rules})
			ids = append(ids, sb.ID)
			placeholder := sb.Env["API_KEY"]
			if !strings.HasPrefix(placeholder, "space-secret-placeholder-") {
				t.Fatalf("API_KEY in the sandbox's env is %q, want a placeholder", placeholder)
			}
			if len(sb.Credentials) != 2 || sb.Credentials[0].Value != "Bearer ${E2E_TOKEN}" || sb.Credentials[1].Secret != "E2E_API_KEY" {
				t.Errorf("sandbox JSON shows the rules as %+v", sb.Credentials)
			}
			if sb.TemplateID != tpl.ID {
				t.Errorf("sandbox on %s runs template %s, want %s", node, sb.TemplateID, tpl.ID)
			}
			// The template trusts the house's CA.
			if installed := h.run(t, sb.ID, "root", "cat /usr/local/share/ca-certificates/space-egress-ca.crt"); strings.TrimSpace(installed) != strings.TrimSpace(string(ca)) {
				t.Errorf("sandbox on %s trusts\n%s\nnot the egress CA of %s\n%s", node, installed, h.name, ca)
			}
			// Names are pinned in /etc/hosts: the gateway decides by the
			// TLS server name and resolves it itself, so the sandbox's own
			// resolver is not what this test is about.
			h.run(t, sb.ID, "root", fmt.Sprintf("echo '%s %s' >> /etc/hosts; echo '%s %s' >> /etc/hosts",
				env.web.SharedAddr, host, env.web.OtherAddr, other))
			// A client that verifies the gateway's leaf with the sandbox's
			// trust store (minimal's busybox wget verifies nothing).
			f, err := os.Open(getter)
			if err != nil {
				t.Fatal(err)
			}
			_, err = cl.WriteFile(ctx, sb.ID, "/tmp/httpsget", f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			target := "/v1/models?sb=" + sb.ID + "&key="
			body := h.run(t, sb.ID, "", fmt.Sprintf(`chmod +x /tmp/httpsget && /tmp/httpsget "https://%s%s$API_KEY"`, host, target))
			if want := nettest.WebBody(host, host, env.web.SharedAddr); body != want {
				t.Fatalf("on %s, through the gateway: got %q, want %q", node, body, want)
			}
			up := env.web.LastRequestFor(host, target+apiKey)
			if up == nil || up.TLS == nil || up.TLS.ServerName != host {
				t.Fatalf("on %s: the upstream did not get the sandbox's request over TLS for %s with the placeholder replaced: %+v", node, host, up)
			}
			if got := up.Header.Get("Authorization"); got != "Bearer "+token {
				t.Errorf("on %s: upstream saw Authorization %q, want the injected secret", node, got)
			}
			if got := up.Header.Get("X-Api-Key"); got != apiKey {
				t.Errorf("on %s: upstream saw X-Api-Key %q, want the placeholder replaced by the secret", node, got)
			}
			// Another host gets the placeholder as it is: it has no rule,
			// so its TLS is not terminated (the client verifies the fake
			// web's own CA: Go reads SSL_CERT_FILE).
			h.run(t, sb.ID, "", "cat > /tmp/web-ca.pem <<'EOF'\n"+string(env.web.CAPEM)+"EOF\n")
			h.run(t, sb.ID, "", fmt.Sprintf(`SSL_CERT_FILE=/tmp/web-ca.pem /tmp/httpsget "https://%s/?sb=%s&key=$API_KEY"`, other, sb.ID))
			up = env.web.LastRequestFor(other, "/?sb="+sb.ID+"&key="+placeholder)
			if up == nil {
				t.Fatalf("%s got no request with the placeholder as it is", other)
			}
			if got := up.Header.Get("X-Api-Key"); got != placeholder || up.Header.Get("Authorization") != "" {
				t.Errorf("%s, which has no rule, saw X-Api-Key %q, Authorization %q", other, got, up.Header.Get("Authorization"))
			}
			// The sandbox holds only the placeholder.
			if vars := h.run(t, sb.ID, "", "env"); strings.Contains(vars, apiKey) || strings.Contains(vars, token) || !strings.Contains(vars, "API_KEY="+placeholder) {
				t.Errorf("on %s, the sandbox's environment: %s", node, vars)
			}
		})

		// Nor does anything the API says about the sandboxes.
		var views []any
		for _, id := range ids {
			got, err := cl.GetSandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			events, err := cl.Events(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			views = append(views, got, events)
		}
		secrets, err := cl.ListSecrets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		shown, _ := json.Marshal(append(views, secrets))
		for _, secret := range []string{token, apiKey} {
			if strings.Contains(string(shown), secret) {
				t.Fatalf("the API shows a secret: %s", shown)
			}
		}
		if h.cluster != nil {
			// A node asking for a sandbox it does not run is refused.
			rpc := h.cluster.dialRPC(t)
			if _, err := rpc.Secret(ctx, "e2e", ids[0], "E2E_TOKEN"); err == nil {
				t.Error("a node that does not run the sandbox read its secret")
			}
		}
	})
}

// The secrets of a sandbox's credential rules are nowhere inside it: not
// in any process's environment or memory, not in any file; and Python's
// own TLS stack trusts the egress CA too (SSL_CERT_FILE). In one house
// only: the scan needs base's python3, which a cluster's nodes would
// build from debootstrap (their CA differs from the e2e server's, so the
// build cache has no copy), and what it checks is the sandbox's, the same
// whichever house placed it.
func TestCredentialSecretsNowhereInTheSandbox(t *testing.T) {
	requireServer(t)
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	h := oneHouse()
	token, apiKey := h.secret(t, "E2E_TOKEN"), h.secret(t, "E2E_API_KEY")
	host := nettest.AllowedName
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "base", Credentials: []apiv1.CredentialRule{
		{Host: host, Header: "Authorization", Value: "Bearer ${E2E_TOKEN}"},
		{Host: host, Env: "API_KEY", Secret: "E2E_API_KEY"},
	}})
	placeholder := sb.Env["API_KEY"]
	runIn(t, sb.ID, "root", fmt.Sprintf("echo '%s %s' >> /etc/hosts", env.web.SharedAddr, host))
	// curl and Python, with the template's trust store.
	body := runIn(t, sb.ID, "", fmt.Sprintf(`curl -sS --fail-with-body -H "X-Api-Key: $API_KEY" "https://%s/v1/models?scan=%s"`, host, sb.ID))
	if want := nettest.WebBody(host, host, env.web.SharedAddr); body != want {
		t.Fatalf("curl through the gateway: got %q, want %q", body, want)
	}
	if up := env.web.LastRequestFor(host, "/v1/models?scan="+sb.ID); up == nil || up.Header.Get("X-Api-Key") != apiKey || up.Header.Get("Authorization") != "Bearer "+token {
		t.Fatalf("the upstream did not get the secrets: %+v", up)
	}
	py := runIn(t, sb.ID, "", fmt.Sprintf(`python3 -c 'import urllib.request; print(urllib.request.urlopen("https://%s/").read().decode())'`, host))
	if !strings.Contains(py, "sni="+host) {
		t.Errorf("python through the gateway: %q", py)
	}

	// Nothing in the sandbox holds either secret. The placeholder is the
	// control: it is in the environment and memory of processes, so a scan
	// that cannot see them fails here instead of passing blindly.
	res := scanSandbox(t, sb.ID, token, apiKey, placeholder)
	t.Logf("scanned %d processes, %d bytes of environment, %d bytes of memory, %d files", res.Stats["procs"], res.Stats["env"], res.Stats["mem"], res.Stats["files"])
	for _, secret := range []string{token, apiKey} {
		if where := res.Found[secret]; len(where) > 0 {
			t.Errorf("a secret is inside the sandbox: %v", where)
		}
	}
	var inEnv, inMem bool
	for _, where := range res.Found[placeholder] {
		inEnv = inEnv || strings.HasSuffix(where, "/environ")
		inMem = inMem || strings.Contains(where, "/mem ")
	}
	if !inEnv || !inMem || res.Stats["files"] < 1000 {
		t.Fatalf("the scan is blind: placeholder in environ %v, in memory %v, %d files read (found %v)", inEnv, inMem, res.Stats["files"], res.Found[placeholder])
	}
}

func TestSecretsAPI(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	oneHouse().secret(t, "E2E_API_SECRET")
	if _, created, err := env.client.SetSecret(ctx, "E2E_API_SECRET", "replaced-value"); err != nil || created {
		t.Fatalf("replace: created=%v err=%v", created, err)
	}
	list, err := env.client.ListSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list {
		found = found || s.Name == "E2E_API_SECRET"
	}
	if !found {
		t.Fatalf("list: %+v", list)
	}
	requireStatus := func(what string, err error, status int, inMessage string) {
		t.Helper()
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != status || !strings.Contains(apiErr.Message, inMessage) {
			t.Errorf("%s: %v, want %d mentioning %q", what, err, status, inMessage)
		}
	}
	_, _, err = env.client.SetSecret(ctx, "bad.name", "v")
	requireStatus("bad name", err, http.StatusBadRequest, "bad.name")
	_, _, err = env.client.SetSecret(ctx, "EMPTY", "")
	requireStatus("empty value", err, http.StatusBadRequest, "EMPTY")
	requireStatus("delete unknown", env.client.DeleteSecret(ctx, "E2E_NO_SUCH"), http.StatusNotFound, "E2E_NO_SUCH")

	_, err = env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Credentials: []apiv1.CredentialRule{
		{Host: "api.example.com", Header: "Authorization", Value: "Bearer ${E2E_NO_SUCH}"},
	}})
	requireStatus("rule naming an unknown secret", err, http.StatusBadRequest, "E2E_NO_SUCH")
	_, err = env.client.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Credentials: []apiv1.CredentialRule{
		{Host: "api.example.com", Header: "Content-Length", Value: "${E2E_API_SECRET}"},
	}})
	requireStatus("rule setting a framing header", err, http.StatusBadRequest, "Content-Length")

	// A key that is not admin may neither read secrets nor bind them.
	key, err := env.client.CreateKey(ctx, apiv1.CreateKeyRequest{Name: "e2e-credentials"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.RevokeKey(context.Background(), key.ID) })
	user := client.New(env.srv.URL, key.Key)
	_, err = user.ListSecrets(ctx)
	requireStatus("list with a user key", err, http.StatusForbidden, "admin")
	_, err = user.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Credentials: []apiv1.CredentialRule{
		{Host: "attacker.example", Header: "X-Leak", Value: "${E2E_API_SECRET}"},
	}})
	requireStatus("rules with a user key", err, http.StatusForbidden, "admin")

	// A secret a live sandbox uses stays until the sandbox is gone.
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Credentials: []apiv1.CredentialRule{
		{Host: "api.example.com", Env: "TOKEN", Secret: "E2E_API_SECRET"},
	}})
	requireStatus("delete in use", env.client.DeleteSecret(ctx, "E2E_API_SECRET"), http.StatusConflict, sb.ID)
	if err := env.client.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.client.DeleteSecret(ctx, "E2E_API_SECRET"); err != nil {
		t.Fatalf("delete after the sandbox went: %v", err)
	}
}

// httpsGetSource is a static HTTPS client for sandboxes without one: it
// GETs its argument with X-Api-Key set to $API_KEY, verifying the server
// with the system trust store (the template's bundle), and prints the
// body.
const httpsGetSource = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	req, err := http.NewRequest("GET", os.Args[1], nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("X-Api-Key", os.Getenv("API_KEY"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	os.Stdout.Write(body)
	if resp.StatusCode != 200 {
		fmt.Fprintln(os.Stderr, resp.Status)
		os.Exit(1)
	}
}
`

// buildHTTPSGet builds httpsGetSource, statically, and returns its path.
func buildHTTPSGet(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(httpsGetSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "httpsget")
	cmd := exec.Command("go", "build", "-o", out, "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the HTTPS client: %v\n%s", err, msg)
	}
	return out
}
