package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/clusterrpc"
	"github.com/space-platform/space/internal/network/nettest"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// In a cluster, every node's templates trust the one egress CA the
// control plane keeps (so a template has one id on every node), and a
// credential rule injects its secret into a sandbox's HTTPS request on
// either node, as under serve (TestCredentialInjection): the node asks the
// control plane for the rules and the secret when the sandbox connects.
func TestClusterCredentials(t *testing.T) {
	c := startCluster(t, 2)
	ctx := testContext(t)
	cl := c.client

	// The nodes verify the fake web's servers with its CA: startCluster
	// started them without it, so each is started again with it (its
	// templates stay: the CA it fetches again is the same).
	webCA := filepath.Join(c.base, "web-ca.pem")
	if err := os.WriteFile(webCA, env.web.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.nodes {
		p.kill()
		p.args = append(p.args, "--egress-ca-file", webCA)
		p.start()
	}
	tpl, err := cl.GetTemplate(ctx, "minimal")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, p := range c.nodes {
		for {
			data, _ := os.ReadFile(p.log)
			if bytes.Count(data, []byte(" listening on ")) >= 2 {
				if bytes.Contains(data, []byte("rebuilding template")) {
					t.Fatalf("%s rebuilt a template after its restart: the CA it fetched again differs", p.name)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not come back", p.name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// One template id on both nodes, after the restart too.
	for {
		ns, err := cl.ListNodes(ctx)
		if err == nil && len(ns) == 2 && c.allHold(ns, tpl.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes do not both hold minimal %s: %+v (%v)", tpl.ID, ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The cluster's CA, as the control plane hands it to nodes.
	token, err := os.ReadFile(filepath.Join(c.base, "cluster.token"))
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := clusterrpc.Dial(cl.BaseURL(), strings.TrimSpace(string(token)), clusterrpc.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rpc.Close()
	pem, err := rpc.EgressCA(ctx, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pem.CA()
	if err != nil {
		t.Fatal(err)
	}
	// Nodes keep it in memory only.
	for _, dir := range c.dirs {
		if _, err := os.Stat(filepath.Join(dir, "ca")); !os.IsNotExist(err) {
			t.Errorf("node data dir %s has a CA directory (%v)", dir, err)
		}
	}

	getter := buildHTTPSGet(t)
	b := make([]byte, 16)
	rand.Read(b)
	secret := "e2e-cluster-secret-" + hex.EncodeToString(b)
	if _, _, err := cl.SetSecret(ctx, "E2E_CLUSTER_TOKEN", secret); err != nil {
		t.Fatal(err)
	}
	host := nettest.AllowedName
	rules := []apiv1.CredentialRule{
		{Host: host, Header: "Authorization", Value: "Bearer ${E2E_CLUSTER_TOKEN}"},
		{Host: host, Env: "API_KEY", Secret: "E2E_CLUSTER_TOKEN"},
	}
	// Sandboxes until each node runs one.
	onNode := map[string]*apiv1.Sandbox{}
	for i := 0; len(onNode) < 2; i++ {
		if i == 6 {
			t.Fatalf("6 sandboxes, all on %v", slices.Collect(maps.Keys(onNode)))
		}
		sb, err := cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", Credentials: rules})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if sb, err = cl.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
			t.Fatalf("wait for %s: %v", sb.ID, err)
		}
		if _, ok := onNode[sb.Node]; !ok {
			onNode[sb.Node] = sb
		}
	}

	for node, sb := range onNode {
		if sb.TemplateID != tpl.ID {
			t.Errorf("sandbox on %s runs template %s, want %s", node, sb.TemplateID, tpl.ID)
		}
		// The template trusts the cluster's CA.
		installed := clusterRun(t, cl, sb.ID, "root", "cat /usr/local/share/ca-certificates/space-egress-ca.crt")
		if installed != string(ca.CertPEM()) {
			t.Errorf("sandbox on %s trusts\n%s\nnot the cluster's egress CA\n%s", node, installed, ca.CertPEM())
		}
		clusterRun(t, cl, sb.ID, "root", fmt.Sprintf("echo '%s %s' >> /etc/hosts", env.web.SharedAddr, host))
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
		body := clusterRun(t, cl, sb.ID, "", fmt.Sprintf(`chmod +x /tmp/httpsget && /tmp/httpsget "https://%s/v1/models?sb=%s&key=$API_KEY"`, host, sb.ID))
		if want := nettest.WebBody(host, host, env.web.SharedAddr); body != want {
			t.Fatalf("on %s, through the gateway: got %q, want %q", node, body, want)
		}
		up := env.web.LastRequest(host)
		if up == nil || up.TLS == nil || up.TLS.ServerName != host || !strings.Contains(up.RequestURI, "sb="+sb.ID) {
			t.Fatalf("on %s: the upstream did not get the sandbox's request over TLS for %s: %+v", node, host, up)
		}
		if got := up.Header.Get("Authorization"); got != "Bearer "+secret {
			t.Errorf("on %s: upstream saw Authorization %q, want the injected secret", node, got)
		}
		if got := up.Header.Get("X-Api-Key"); got != secret || !strings.Contains(up.RequestURI, "key="+secret) {
			t.Errorf("on %s: upstream saw X-Api-Key %q and target %q, want the placeholder replaced", node, got, up.RequestURI)
		}
		// The sandbox holds only the placeholder.
		if vars := clusterRun(t, cl, sb.ID, "", "env"); strings.Contains(vars, secret) || !strings.Contains(vars, "API_KEY=space-secret-placeholder-") {
			t.Errorf("on %s, the sandbox's environment: %s", node, vars)
		}
		got, err := cl.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if view, _ := json.Marshal(got); bytes.Contains(view, []byte(secret)) {
			t.Errorf("the API shows the secret: %s", view)
		}
	}

	// A node asking for another node's sandbox is refused.
	var ids []string
	for _, sb := range onNode {
		ids = append(ids, sb.ID)
	}
	if _, err := rpc.Secret(ctx, "e2e", ids[0], "E2E_CLUSTER_TOKEN"); err == nil {
		t.Error("a node that does not run the sandbox read its secret")
	}
	for _, id := range ids {
		if err := cl.DeleteSandbox(context.Background(), id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
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

// clusterRun runs a script as user in a sandbox of the cluster and
// returns its stdout, failing unless it exits 0.
func clusterRun(t *testing.T, cl *client.Client, id, user, script string) string {
	t.Helper()
	res, err := cl.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, User: user, TimeoutS: 60})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: %+v, %v", script, id, res, err)
	}
	return res.Stdout
}
