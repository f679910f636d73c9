package kubetest

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const goodDocs = `# a comment-only document first, as helm template writes
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: kubetest-ns
data:
  mode: dry
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: kubetest-ns
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: example.invalid/web:1
        # space's node container is privileged; the server must allow it
        securityContext: {privileged: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kubetest-reader
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get]
`

func TestDryRunApply(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if err := c.DryRunApply(ctx, []byte(goodDocs)); err != nil {
		t.Fatalf("valid manifests refused: %v", err)
	}
	// The namespace is created for real, the objects only in a dry run.
	if _, err := c.Do(ctx, http.MethodGet, "/api/v1/namespaces/kubetest-ns", "", nil); err != nil {
		t.Fatalf("namespace kubetest-ns was not created: %v", err)
	}
	_, err := c.Do(ctx, http.MethodGet, "/api/v1/namespaces/kubetest-ns/configmaps/settings", "", nil)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound {
		t.Fatalf("dry-run ConfigMap exists or the lookup failed otherwise: %v", err)
	}

	// A Deployment whose selector does not match its template is invalid;
	// the error must name it.
	bad := strings.Replace(goodDocs, "labels: {app: web}", "labels: {app: other}", 1)
	err = c.DryRunApply(ctx, []byte(bad))
	if err == nil {
		t.Fatal("a Deployment whose selector does not match its pod labels was accepted")
	}
	if !strings.Contains(err.Error(), "Deployment kubetest-ns/web") || !strings.Contains(err.Error(), "HTTP 422") {
		t.Fatalf("refusal does not name the object or is not a validation error: %v", err)
	}

	// A field the schema does not have is refused (apply validates strictly).
	typo := strings.Replace(goodDocs, "data:\n  mode: dry", "data:\n  mode: dry\nspec: {}", 1)
	if err := c.DryRunApply(ctx, []byte(typo)); err == nil || !strings.Contains(err.Error(), "ConfigMap kubetest-ns/settings") {
		t.Fatalf("a ConfigMap with an unknown field: want a refusal naming it, got %v", err)
	}

	// A kind the server does not serve is reported before anything is sent.
	unknown := "apiVersion: example.invalid/v1\nkind: Widget\nmetadata:\n  name: w\n"
	if err := c.DryRunApply(ctx, []byte(unknown)); err == nil || !strings.Contains(err.Error(), "Widget w") {
		t.Fatalf("an unserved kind: want an error naming it, got %v", err)
	}
}

// TestKubeconfig checks that the kubeconfig file works for a client that is
// not this package: helm lists releases through it.
func TestKubeconfig(t *testing.T) {
	helm := Helm(t)
	c := Start(t)
	out, err := exec.Command(helm, "version", "--short").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), HelmVersion) {
		t.Fatalf("helm version: %v: %s (want %s)", err, out, HelmVersion)
	}
	out, err = exec.Command(helm, "list", "--all-namespaces", "--kubeconfig", c.Kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("helm list through %s: %v: %s", c.Kubeconfig, err, out)
	}
	if !strings.Contains(string(out), "NAME") {
		t.Fatalf("helm list printed no table: %s", out)
	}
}

func TestSplitYAML(t *testing.T) {
	objs, err := SplitYAML([]byte(goodDocs + "---\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.String())
	}
	want := "ConfigMap kubetest-ns/settings,Deployment kubetest-ns/web,ClusterRole kubetest-reader"
	if strings.Join(got, ",") != want {
		t.Fatalf("objects %v, want %s", got, want)
	}
	if _, err := SplitYAML([]byte("apiVersion: v1\nkind: ConfigMap\n")); err == nil {
		t.Fatal("a document without metadata.name was accepted")
	}
}
