// Package kubernetes_test checks the Helm chart (deploy/helm/space): what
// it renders with default and other values, that a real kube-apiserver
// accepts every object it makes (server-side dry-run), and that the
// manifest for kubectl users (deploy/kubernetes/space.yaml) is the chart's
// current rendering. With SPACE_KUBE_E2E=1 it also runs the end-to-end flow
// against an installed chart (scripts/test-kubernetes.sh sets that up).
package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/space-platform/space/internal/kubetest"
)

func moduleRoot(t testing.TB) string {
	t.Helper()
	root, err := kubetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func chartDir(t testing.TB) string { return filepath.Join(moduleRoot(t), "deploy", "helm", "space") }

// helm runs helm with a private home, so that no user's repositories or
// plugins take part.
func helm(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(kubetest.Helm(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// templateArgs render the chart as release "space" in namespace "space"
// for the Kubernetes release kube-apiserver is (helm's own default is
// older than the chart's kubeVersion).
func templateArgs(t testing.TB) []string {
	return []string{"template", "space", chartDir(t), "--namespace", "space", "--kube-version", kubetest.Version}
}

// render is `helm template` of the chart as release "space" in namespace
// "space" with the given --set/--values arguments.
func render(t testing.TB, args ...string) []byte {
	t.Helper()
	out, err := helm(t, append(templateArgs(t), args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// object is one rendered document.
type object map[string]any

func parse(t testing.TB, docs []byte) []object {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(docs))
	var out []object
	for {
		var o object
		err := dec.Decode(&o)
		if err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("rendered YAML: %v", err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

func find(t testing.TB, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind && get(o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

func has(objs []object, kind string) bool {
	for _, o := range objs {
		if o["kind"] == kind {
			return true
		}
	}
	return false
}

// get walks maps by key and lists by index ("0").
func get(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case object:
			v = x[p]
		case []any:
			var i int
			if _, err := fmt.Sscan(p, &i); err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func args(o object) string {
	var out []string
	for _, a := range get(o, "spec", "template", "spec", "containers", "0", "args").([]any) {
		out = append(out, fmt.Sprint(a))
	}
	return strings.Join(out, " ")
}

func TestChartDefaults(t *testing.T) {
	objs := parse(t, render(t))
	cp := find(t, objs, "Deployment", "space-control-plane")
	if get(cp, "spec", "replicas") != 2 {
		t.Errorf("control plane replicas %v, want 2", get(cp, "spec", "replicas"))
	}
	if get(cp, "spec", "strategy", "rollingUpdate", "maxUnavailable") != 0 {
		t.Error("a rolling update may take a replica away before its successor is ready")
	}
	c := get(cp, "spec", "template", "spec", "containers", "0")
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if get(c, probe, "httpGet", "path") != "/healthz" {
			t.Errorf("control plane %s: %v", probe, get(c, probe))
		}
	}
	if get(c, "lifecycle", "preStop", "sleep", "seconds") == nil {
		t.Error("no preStop delay: a terminating replica would drop requests kube-proxy still sends it")
	}
	if a := args(cp); !strings.Contains(a, "--admin-key-file=/etc/space/admin-key") || !strings.Contains(a, "--cluster-token-file=") {
		t.Errorf("control plane args: %s", a)
	}
	if get(c, "env", "0", "name") != "SPACE_STORE" || get(c, "env", "0", "valueFrom", "secretKeyRef", "name") != "space-postgresql" {
		t.Errorf("the store URL must come from the PostgreSQL Secret: %v", get(c, "env"))
	}
	pdb := find(t, objs, "PodDisruptionBudget", "space-control-plane")
	if get(pdb, "spec", "minAvailable") != 1 {
		t.Errorf("PDB: %v", get(pdb, "spec"))
	}

	ds := find(t, objs, "DaemonSet", "space-node")
	pod := get(ds, "spec", "template", "spec")
	if get(pod, "nodeSelector", "space.dev/node") != "true" || get(pod, "hostNetwork") != true || get(pod, "hostPID") != true {
		t.Errorf("node pod: selector %v, hostNetwork %v, hostPID %v", get(pod, "nodeSelector"), get(pod, "hostNetwork"), get(pod, "hostPID"))
	}
	if get(pod, "containers", "0", "securityContext", "privileged") != true {
		t.Error("the node container is not privileged")
	}
	if get(pod, "containers", "0", "env", "0", "valueFrom", "fieldRef", "fieldPath") != "status.podIP" {
		t.Error("the node does not learn its pod IP from the downward API")
	}
	if a := args(ds); !strings.Contains(a, "--advertise=http://$(POD_IP):7071") || !strings.Contains(a, "--control-plane=http://space-api.space.svc:7070") {
		t.Errorf("node args: %s", a)
	}
	mounts := map[string]string{}
	for _, m := range get(pod, "containers", "0", "volumeMounts").([]any) {
		mounts[fmt.Sprint(get(m, "mountPath"))] = fmt.Sprint(get(m, "mountPropagation"))
	}
	for path, prop := range map[string]string{"/var/lib/space": "Bidirectional", "/run/netns": "Bidirectional", "/sys/fs/cgroup": "<nil>", "/dev": "<nil>"} {
		if got, ok := mounts[path]; !ok || got != prop {
			t.Errorf("node mount %s: %q (present %v), want propagation %s", path, got, ok, prop)
		}
	}

	for _, svc := range []string{"space-api", "space-e2b", "space-proxy", "space-postgresql"} {
		find(t, objs, "Service", svc)
	}
	find(t, objs, "StatefulSet", "space-postgresql")
	secret := find(t, objs, "Secret", "space-secrets")
	if key := fmt.Sprint(get(secret, "stringData", "admin-key")); !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Errorf("generated admin key %q is not an E2B-format key", key)
	}
	if tok := fmt.Sprint(get(secret, "stringData", "cluster-token")); len(tok) < 32 {
		t.Errorf("generated cluster token %q is short", tok)
	}
	hook := find(t, objs, "Job", "space-uninstall")
	if get(hook, "metadata", "annotations", "helm.sh/hook") != "pre-delete" {
		t.Error("the uninstall Job is not a pre-delete hook")
	}
	if has(objs, "Ingress") || has(objs, "ServiceMonitor") {
		t.Error("Ingress or ServiceMonitor rendered by default")
	}
	// Two renders generate different secrets: nothing is a fixed default.
	again := find(t, parse(t, render(t)), "Secret", "space-secrets")
	if get(again, "stringData", "cluster-token") == get(secret, "stringData", "cluster-token") {
		t.Error("the generated cluster token is the same in two renders")
	}
}

// nonDefault are values an operator of a production install sets.
var nonDefault = []string{
	"--set", "controlPlane.replicas=3",
	"--set", "postgresql.enabled=false",
	"--set", "externalDatabase.existingSecret=space-db", "--set", "externalDatabase.key=url",
	"--set", "existingSecret=space-keys",
	"--set", "domain=sandbox.example.com",
	"--set", "ingress.enabled=true", "--set", "ingress.className=nginx", "--set", "ingress.tlsSecret=space-tls",
	"--set", "ingress.nativeAPIHost=space.example.com",
	"--set", "serviceMonitor.enabled=true",
	"--set", "controlPlane.pools=minimal=2",
	"--set", "node.uplinkPool=10.230.0.0/16", "--set", "node.buildTemplates=minimal",
	"--set", "egress.allowPrivate=10.1.0.0/16",
	"--set", "sandboxes.idleSuspendS=600", "--set", "sandboxes.retention=1h",
	"--set", "image.repository=registry.example.com/space", "--set", "image.tag=1.2.3",
}

func TestChartValues(t *testing.T) {
	objs := parse(t, render(t, nonDefault...))
	cp := find(t, objs, "Deployment", "space-control-plane")
	if get(cp, "spec", "replicas") != 3 {
		t.Errorf("replicas %v", get(cp, "spec", "replicas"))
	}
	c := get(cp, "spec", "template", "spec", "containers", "0")
	if get(c, "image") != "registry.example.com/space:1.2.3" {
		t.Errorf("image %v", get(c, "image"))
	}
	if ref := get(c, "env", "0", "valueFrom", "secretKeyRef"); get(ref, "name") != "space-db" || get(ref, "key") != "url" {
		t.Errorf("external DSN reference %v", ref)
	}
	for _, want := range []string{"--domain=sandbox.example.com", "--pool=minimal=2", "--idle-suspend-s=600", "--retention=1h"} {
		if !strings.Contains(args(cp), want) {
			t.Errorf("control plane args lack %s: %s", want, args(cp))
		}
	}
	ds := find(t, objs, "DaemonSet", "space-node")
	for _, want := range []string{"--uplink-pool=10.230.0.0/16", "--build-templates=minimal", "--allow-private=10.1.0.0/16"} {
		if !strings.Contains(args(ds), want) {
			t.Errorf("node args lack %s: %s", want, args(ds))
		}
	}
	if has(objs, "StatefulSet") || has(objs, "Secret") {
		t.Error("PostgreSQL or a Secret rendered although external ones are named")
	}
	ing := find(t, objs, "Ingress", "space")
	hosts := []string{}
	for _, r := range get(ing, "spec", "rules").([]any) {
		hosts = append(hosts, fmt.Sprintf("%v->%v", get(r, "host"), get(r, "http", "paths", "0", "backend", "service", "name")))
	}
	if got := strings.Join(hosts, " "); got != "api.sandbox.example.com->space-e2b space.example.com->space-api *.sandbox.example.com->space-proxy" {
		t.Errorf("ingress rules: %s", got)
	}
	find(t, objs, "ServiceMonitor", "space")
}

func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"adminKey=not-a-key"}, "adminKey must be e2b_"},
		{[]string{"adminKey=e2b_" + strings.Repeat("A", 40)}, "adminKey must be e2b_"},
		{[]string{"ingress.enabled=true"}, "ingress.enabled needs domain"},
		{[]string{"postgresql.enabled=false"}, "set externalDatabase.existingSecret"},
	} {
		var a []string
		for _, s := range tc.set {
			a = append(a, "--set", s)
		}
		_, err := helm(t, append(templateArgs(t), a...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %v: %v, want a refusal saying %q", tc.set, err, tc.want)
		}
	}
}

// kubectlRendering is how deploy/kubernetes/space.yaml is made: the chart's
// defaults, but with Secrets the operator creates (a committed file must
// hold no generated secret).
var kubectlRendering = []string{"--set", "existingSecret=space-secrets", "--set", "postgresql.existingSecret=space-postgresql"}

func TestKubectlManifestIsCurrent(t *testing.T) {
	want := render(t, kubectlRendering...)
	path := filepath.Join(moduleRoot(t), "deploy", "kubernetes", "space.yaml")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(got, []byte("---")); i < 0 || !bytes.Equal(got[i:], want[bytes.Index(want, []byte("---")):]) {
		t.Fatalf("deploy/kubernetes/space.yaml is not the chart's rendering; regenerate it with scripts/render-manifest.sh")
	}
}

// serviceMonitorCRD is enough of prometheus-operator's CRD for the API
// server to know the kind; the chart's ServiceMonitor is checked against
// the object schema (metadata, apiVersion) and accepted fields.
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {plural: servicemonitors, singular: servicemonitor, kind: ServiceMonitor, listKind: ServiceMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
`

func TestChartDryRunOnKubeAPIServer(t *testing.T) {
	k := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := k.Do(ctx, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/yaml", []byte(serviceMonitorCRD)); err != nil {
		t.Fatalf("create the ServiceMonitor CRD: %v", err)
	}
	// The CRD's kind is served a moment after it is created.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := k.Do(ctx, "GET", "/apis/monitoring.coreos.com/v1/servicemonitors", "", nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ServiceMonitor kind not served: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for name, values := range map[string][]string{"defaults": nil, "non-default values": nonDefault, "kubectl manifest": kubectlRendering} {
		if err := k.DryRunApply(ctx, render(t, values...)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The dry run is a real check: an object the API server refuses fails.
	bad := bytes.Replace(render(t), []byte("minAvailable: 1"), []byte("minAvailable: [1]"), 1)
	if err := k.DryRunApply(ctx, bad); err == nil {
		t.Error("a PodDisruptionBudget with a list for minAvailable passed the dry run")
	}
}
