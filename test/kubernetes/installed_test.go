package kubernetes_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// installed is a chart installed on a real cluster by
// scripts/test-kubernetes.sh, reached through its Services.
type installed struct {
	namespace, release string
	values             []string // the helm arguments of the install, for the upgrade
	api                *client.Client
	apiURL             string
	adminKey           string
}

func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("kubectl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func logf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf("%s "+format, append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// TestInstalledChart runs the cluster flow through the Services of an
// installed chart: create, exec, session re-attach, files, branch,
// suspend/resume, the refused drain of the one node, a control-plane pod
// deleted and a helm upgrade during request loops that must lose nothing,
// and a node pod restart that keeps its sandboxes. It needs
// SPACE_KUBE_E2E=1, KUBECONFIG and kubectl on PATH, which
// scripts/test-kubernetes.sh provides; uninstalling and the host's
// leftovers are checked by the script.
func TestInstalledChart(t *testing.T) {
	if os.Getenv("SPACE_KUBE_E2E") != "1" {
		t.Skip("needs an installed chart: run scripts/test-kubernetes.sh")
	}
	in := installed{namespace: env("SPACE_KUBE_NAMESPACE", "space"), release: env("SPACE_KUBE_RELEASE", "space")}
	in.values = strings.Fields(os.Getenv("SPACE_KUBE_VALUES"))
	secret := kubectl(t, "-n", in.namespace, "get", "secret", in.release+"-secrets", "-o", "jsonpath={.data.admin-key}")
	key, err := base64.StdEncoding.DecodeString(secret)
	if err != nil {
		t.Fatal(err)
	}
	in.adminKey = string(key)
	ip := kubectl(t, "-n", in.namespace, "get", "svc", in.release+"-api", "-o", "jsonpath={.spec.clusterIP}")
	in.apiURL = "http://" + ip + ":7070"
	in.api = client.New(in.apiURL, in.adminKey)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	nodeID := waitNodeReady(ctx, t, in.api)
	logf(t, "node %s is ready, through the Service at %s", nodeID, in.apiURL)

	sb := createRunning(ctx, t, in.api)
	if res, err := in.api.Exec(ctx, sb.ID, apiv1.ExecRequest{Cmd: []string{"echo", "hi"}}); err != nil || strings.TrimSpace(res.Stdout) != "hi" {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	if _, err := in.api.WriteFile(ctx, sb.ID, "/tmp/kept.txt", strings.NewReader("kept across everything")); err != nil {
		t.Fatalf("write a file: %v", err)
	}
	wantFile(ctx, t, in.api, sb.ID, "/tmp/kept.txt", "kept across everything")
	logf(t, "created %s, exec and files work", sb.ID)

	sessionReattach(ctx, t, in.api, sb.ID)
	logf(t, "a session re-attached from offset 0 lost no output")

	branches, err := in.api.Branch(ctx, sb.ID, 1)
	if err != nil || len(branches) != 1 {
		t.Fatalf("branch: %v, %v", branches, err)
	}
	branch := branches[0]
	if _, err := in.api.WaitSandbox(ctx, branch.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
		t.Fatalf("branch %s: %v", branch.ID, err)
	}
	wantFile(ctx, t, in.api, branch.ID, "/tmp/kept.txt", "kept across everything")
	logf(t, "branch %s holds the file", branch.ID)

	if _, err := in.api.Suspend(ctx, branch.ID); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if got, err := in.api.WaitSandbox(ctx, branch.ID, apiv1.StateSuspended, 2*time.Minute); err != nil {
		t.Fatalf("suspended: %+v, %v", got, err)
	}
	if _, err := in.api.Resume(ctx, branch.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := in.api.WaitSandbox(ctx, branch.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	wantFile(ctx, t, in.api, branch.ID, "/tmp/kept.txt", "kept across everything")
	logf(t, "suspend and resume of %s kept its file", branch.ID)

	_, err = in.api.DrainNode(ctx, nodeID)
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "no other node is ready") {
		t.Fatalf("drain of the only node: %v, want 409 saying there is no target", err)
	}
	if n, err := in.api.GetNode(ctx, nodeID); err != nil || n.State != apiv1.NodeReady {
		t.Fatalf("after a refused drain the node is %+v, %v; want ready", n, err)
	}
	logf(t, "the drain of the only node was refused: %v", err)

	cpPods := func() []string {
		return strings.Fields(kubectl(t, "-n", in.namespace, "get", "pods", "-l", "app.kubernetes.io/component=control-plane,app.kubernetes.io/instance="+in.release,
			"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"))
	}
	pods := cpPods()
	if len(pods) < 2 {
		t.Fatalf("control-plane pods %v, want 2", pods)
	}
	lost := requestLoop(ctx, t, in, sb.ID, 40*time.Second, func() {
		logf(t, "deleting control-plane pod %s", pods[0])
		kubectl(t, "-n", in.namespace, "delete", "pod", pods[0], "--wait=false")
	})
	if lost != "" {
		t.Fatalf("requests lost while a control-plane pod was deleted: %s", lost)
	}
	kubectl(t, "-n", in.namespace, "rollout", "status", "deployment/"+in.release+"-control-plane", "--timeout=3m")
	logf(t, "a deleted control-plane pod lost no request")

	nodePods := func() string {
		return kubectl(t, "-n", in.namespace, "get", "pods", "-l", "app.kubernetes.io/component=node,app.kubernetes.io/instance="+in.release, "-o", "jsonpath={.items[*].metadata.name}")
	}
	nodePodBefore := nodePods()
	lost = requestLoop(ctx, t, in, sb.ID, 90*time.Second, func() {
		args := append([]string{"upgrade", in.release, chartDir(t), "--namespace", in.namespace}, in.values...)
		args = append(args, "--set", "sandboxes.defaultTimeoutS=600", "--wait", "--timeout", "5m")
		logf(t, "helm upgrade with sandboxes.defaultTimeoutS=600")
		if out, err := helm(t, args...); err != nil {
			t.Errorf("helm upgrade: %v: %s", err, out)
		}
		logf(t, "helm upgrade done")
	})
	if lost != "" {
		t.Fatalf("requests lost during helm upgrade: %s", lost)
	}
	args := kubectl(t, "-n", in.namespace, "get", "deployment", in.release+"-control-plane", "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	if !strings.Contains(args, "--default-timeout-s=600") {
		t.Fatalf("the upgrade did not reach the control plane: %s", args)
	}
	if after := nodePods(); after != nodePodBefore {
		t.Fatalf("an upgrade of a control-plane value restarted the node pod (%s, now %s)", nodePodBefore, after)
	}
	logf(t, "helm upgrade rolled the control plane and lost no request")

	nodePod := nodePods()
	logf(t, "deleting node pod %s", nodePod)
	kubectl(t, "-n", in.namespace, "delete", "pod", nodePod)
	kubectl(t, "-n", in.namespace, "rollout", "status", "daemonset/"+in.release+"-node", "--timeout=3m")
	waitNodeReady(ctx, t, in.api)
	for _, id := range []string{sb.ID, branch.ID} {
		got, err := in.api.GetSandbox(ctx, id)
		if err != nil || got.State != apiv1.StateRunning {
			t.Fatalf("sandbox %s after the node pod restarted: %+v, %v", id, got, err)
		}
		wantFile(ctx, t, in.api, id, "/tmp/kept.txt", "kept across everything")
	}
	logf(t, "the restarted node pod adopted its sandboxes")
	// The sandboxes stay: the uninstall must remove them.
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func waitNodeReady(ctx context.Context, t *testing.T, api *client.Client) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		nodes, err := api.ListNodes(ctx)
		if err == nil && len(nodes) == 1 && nodes[0].State == apiv1.NodeReady && len(nodes[0].Templates) > 0 {
			return nodes[0].ID
		}
		if msg := fmt.Sprintf("%+v %v", nodes, err); msg != last {
			logf(t, "waiting for one ready node with a template: %s", msg)
			last = msg
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("no ready node: %s", last)
	return ""
}

func createRunning(ctx context.Context, t *testing.T, api *client.Client) *apiv1.Sandbox {
	t.Helper()
	sb, err := api.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", TimeoutS: 3600})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if sb, err = api.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
		t.Fatalf("sandbox %s did not start: %v", sb.ID, err)
	}
	return sb
}

func wantFile(ctx context.Context, t *testing.T, api *client.Client, id, path, want string) {
	t.Helper()
	rc, err := api.ReadFile(ctx, id, path)
	if err != nil {
		t.Fatalf("read %s in %s: %v", path, id, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || string(got) != want {
		t.Fatalf("%s in %s: %q, %v; want %q", path, id, got, err, want)
	}
}

// sessionReattach starts a command that prints numbered lines for a few
// seconds, reads some, drops the stream, and attaches again from offset 0
// after the command ended: all of its output must be there, in order.
func sessionReattach(ctx context.Context, t *testing.T, api *client.Client, id string) {
	t.Helper()
	sess, err := api.CreateSession(ctx, id, apiv1.CreateSessionRequest{Cmd: []string{"sh", "-c", "for i in $(seq 1 30); do echo line-$i; sleep 0.1; done"}})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	first, err := api.Attach(ctx, id, sess.ID, 0)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	ev, err := first.Next()
	first.Close()
	if err != nil || !bytes.Contains(ev.Data, []byte("line-1")) {
		t.Fatalf("first output: %+v, %v", ev, err)
	}
	time.Sleep(4 * time.Second)
	again, err := api.Attach(ctx, id, sess.ID, 0)
	if err != nil {
		t.Fatalf("re-attach: %v", err)
	}
	defer again.Close()
	var out bytes.Buffer
	for {
		ev, err := again.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("re-attached stream: %v", err)
		}
		out.Write(ev.Data)
	}
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if out.String() != want.String() {
		t.Fatalf("re-attached output:\n%s\nwant:\n%s", out.String(), want.String())
	}
}

// requestLoop sends requests through the API Service, each on a
// connection of its own (as independent clients would), for d and until 5 s
// after during (started after d/4) returns: a sandbox read and an exec in
// turn, a few a second. It returns a description of the requests that failed, "" when
// none did.
func requestLoop(ctx context.Context, t *testing.T, in installed, id string, d time.Duration, during func()) string {
	t.Helper()
	fresh := client.New(in.apiURL, in.adminKey, client.WithHTTPClient(&http.Client{
		Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second,
	}))
	var sent, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	// The loop runs for d, and at least 5 s past the end of during.
	start := time.Now()
	var duringDone atomic.Int64
	running := func() bool {
		end := duringDone.Load()
		return time.Since(start) < d || end == 0 || time.Now().UnixNano() < end+int64(5*time.Second)
	}
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; running(); i++ {
				var err error
				if (i+w)%2 == 0 {
					_, err = fresh.GetSandbox(ctx, id)
				} else {
					var res *apiv1.ExecResult
					res, err = fresh.Exec(ctx, id, apiv1.ExecRequest{Cmd: []string{"true"}})
					if err == nil && res.ExitCode != 0 {
						err = fmt.Errorf("exit %d", res.ExitCode)
					}
				}
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s %v", time.Now().UTC().Format("15:04:05.000"), err))
					mu.Unlock()
				}
				time.Sleep(100 * time.Millisecond)
			}
		}(w)
	}
	time.Sleep(d / 4)
	during()
	duringDone.Store(time.Now().UnixNano())
	wg.Wait()
	logf(t, "request loop: %d sent, %d failed", sent.Load(), failed.Load())
	if failed.Load() == 0 {
		if sent.Load() < 20 {
			return fmt.Sprintf("only %d requests were sent", sent.Load())
		}
		return ""
	}
	return fmt.Sprintf("%d of %d: %s", failed.Load(), sent.Load(), strings.Join(failures, "; "))
}
