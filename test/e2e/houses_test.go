package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// A house is one topology a behaviour runs on: the shared `space serve`
// (one house: the control plane and its node in one process) or a
// cluster (control planes and nodes, each a process of its own, on
// PostgreSQL). A behaviour that both must show is written once, as a
// function of its house, and run in each by inEachHouse: one test per
// behaviour, not a serve test and its cluster twin (issue #30).
type house struct {
	name string
	// e2bURLs are the house's E2B APIs, one per control plane.
	e2bURLs []string
	// cluster is the cluster's processes; nil in one house.
	cluster *testCluster
}

// oneHouse is the shared server as a house.
func oneHouse() *house {
	return &house{name: "one house", e2bURLs: []string{env.srv.E2BURL()}}
}

// admin is a client of the house's admin key: in one house the shared
// server's of now (a test may have restarted it).
func (h *house) admin() *client.Client {
	if h.cluster == nil {
		return env.client
	}
	return h.cluster.client
}

// inEachHouse runs behaviour in one house (the shared server) and in a
// cluster started for it (two control planes with their E2B APIs, two
// nodes), as subtests named for each.
func inEachHouse(t *testing.T, behaviour func(t *testing.T, h *house)) {
	t.Helper()
	t.Run("one-house", func(t *testing.T) {
		requireServer(t)
		behaviour(t, oneHouse())
	})
	t.Run("cluster", func(t *testing.T) {
		c := startClusterWith(t, clusterSpec{replicas: 2, uplinks: clusterUplinks, heartbeatTimeout: 6 * time.Second, e2b: true})
		behaviour(t, &house{name: "cluster", e2bURLs: c.e2bURLs, cluster: c})
	})
}

// nodes are the IDs of the house's nodes.
func (h *house) nodes(t *testing.T) []string {
	t.Helper()
	ns, err := h.admin().ListNodes(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range ns {
		ids = append(ids, n.ID)
	}
	return ids
}

// onEachNode calls fn once for each node of the house, with every other
// node cordoned meanwhile, so that what fn creates is placed there.
func (h *house) onEachNode(t *testing.T, fn func(node string)) {
	t.Helper()
	ids := h.nodes(t)
	ctx := testContext(t)
	for _, id := range ids {
		for _, other := range ids {
			if other != id {
				if _, err := h.admin().CordonNode(ctx, other); err != nil {
					t.Fatal(err)
				}
			}
		}
		fn(id)
		for _, other := range ids {
			if other != id {
				if _, err := h.admin().UncordonNode(ctx, other); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// sandbox creates a sandbox in the house (minimal unless req names a
// template), waits until it runs and deletes it when the test ends.
func (h *house) sandbox(t *testing.T, req apiv1.CreateSandboxRequest) *apiv1.Sandbox {
	t.Helper()
	ctx := testContext(t)
	if req.Template == "" {
		req.Template = "minimal"
	}
	sb, err := h.admin().CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("create sandbox in %s: %v", h.name, err)
	}
	t.Cleanup(func() {
		if err := h.admin().DeleteSandbox(context.Background(), sb.ID); err != nil && !client.IsNotFound(err) {
			t.Errorf("delete sandbox %s: %v", sb.ID, err)
		}
	})
	running, err := h.admin().WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute)
	if err != nil {
		t.Fatalf("wait for sandbox %s: %v", sb.ID, err)
	}
	running.AccessToken = sb.AccessToken
	return running
}

// run runs a script as user in a sandbox of the house and returns its
// stdout, failing unless it exits 0.
func (h *house) run(t *testing.T, id, user, script string) string {
	t.Helper()
	res, err := h.admin().Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, User: user, TimeoutS: 60})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: %+v, %v", script, id, res, err)
	}
	return res.Stdout
}

// templateEverywhere waits until the template is ready and every node of
// the house holds it (built on one, shipped to the others).
func (h *house) templateEverywhere(t *testing.T, name string) *apiv1.Template {
	t.Helper()
	ctx := testContext(t)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		tpl, err := h.admin().GetTemplate(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if tpl.State == apiv1.TemplateFailed {
			t.Fatalf("template %s failed in %s: %s", name, h.name, tpl.Reason)
		}
		ns, err := h.admin().ListNodes(ctx)
		if tpl.State == apiv1.TemplateReady && err == nil && holdEverywhere(ns, tpl.ID) {
			return tpl
		}
		if time.Now().After(deadline) {
			t.Fatalf("template %s in %s: %+v, on nodes %+v (%v)", name, h.name, tpl, ns, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// holdEverywhere says whether every node is ready and holds the template.
func holdEverywhere(ns []apiv1.Node, templateID string) bool {
	for _, n := range ns {
		if n.State != "ready" || !slices.Contains(n.Templates, templateID) {
			return false
		}
	}
	return len(ns) > 0
}

// volume creates a volume of the admin key's project, named name and a
// suffix of this run (a kept data directory may hold an earlier run's),
// and deletes it when the test ends (after the test's sandboxes, which
// are deleted first: cleanups run last-registered first, so register
// sandboxes after this).
func (h *house) volume(t *testing.T, name string, sizeMB int) *apiv1.Volume {
	t.Helper()
	name = fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%1e9)
	v, err := h.admin().CreateVolume(testContext(t), apiv1.CreateVolumeRequest{Name: name, SizeMB: sizeMB})
	if err != nil {
		t.Fatalf("create volume %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := h.admin().DeleteVolume(context.Background(), v.ID); err != nil && !client.IsNotFound(err) {
			t.Errorf("delete volume %s: %v", v.ID, err)
		}
	})
	return v
}

// secret stores a fresh random secret of the admin's project under name
// and removes it when the test ends (after its sandboxes, which are
// deleted first).
func (h *house) secret(t *testing.T, name string) string {
	t.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	value := "e2e-secret-" + hex.EncodeToString(b)
	if _, created, err := h.admin().SetSecret(testContext(t), name, value); err != nil || !created {
		t.Fatalf("set secret %s in %s: created=%v err=%v", name, h.name, created, err)
	}
	t.Cleanup(func() { _ = h.admin().DeleteSecret(context.Background(), name) })
	return value
}

// egressCA is the certificate (PEM) of the house's egress CA, which its
// nodes' templates trust: one house keeps it in its data directory, a
// cluster's control plane hands it to its nodes.
func (h *house) egressCA(t *testing.T) []byte {
	t.Helper()
	if h.cluster == nil {
		pem, err := os.ReadFile(filepath.Join(env.dataDir, "ca", "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		return pem
	}
	pem, err := h.cluster.dialRPC(t).EgressCA(testContext(t), "e2e")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pem.CA()
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM()
}

// projectKey makes an API key of project and returns it once every
// control plane of the house takes it (a replica learns of a key by
// following the store).
func (h *house) projectKey(t *testing.T, project string) string {
	t.Helper()
	k, err := h.admin().CreateKey(testContext(t), apiv1.CreateKeyRequest{Name: project, Project: project})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.admin().RevokeKey(context.Background(), k.ID) })
	for _, u := range h.e2bURLs {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if r := raw(t, u, k.Key, http.MethodGet, "/v2/sandboxes", ""); r.status != http.StatusUnauthorized {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never took the key of %s", u, project)
			}
		}
	}
	return k.Key
}
