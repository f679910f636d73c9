package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/metrics"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// nodesServer is an API over a real registry in a real store, with an
// admin key and a key of project "team".
type nodesServer struct {
	url, admin, project string
	reg                 *cluster.Registry
}

// openKeys opens a key registry in a fresh store.
func openKeys(t *testing.T) (*auth.Keys, store.Store) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys, err := auth.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	return keys, st
}

func newNodesServer(t *testing.T, withRegistry bool) *nodesServer {
	t.Helper()
	keys, st := openKeys(t)
	_, admin, err := keys.Create("admin", "default", true)
	if err != nil {
		t.Fatal(err)
	}
	_, proj, err := keys.Create("team", "team", false)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := cluster.New(cluster.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Keys: keys, Metrics: metrics.NewRegistry()}
	if withRegistry {
		cfg.Nodes = reg
	}
	srv := httptest.NewServer(New(cfg))
	t.Cleanup(srv.Close)
	return &nodesServer{url: srv.URL, admin: admin, project: proj, reg: reg}
}

// call sends a request with key and returns the status and body.
func (s *nodesServer) call(t *testing.T, key, method, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// wantError checks an error answer: status, the JSON shape, and a
// message containing want.
func wantError(t *testing.T, method, path string, status int, body []byte, wantStatus int, want string) {
	t.Helper()
	var e apiv1.Error
	if status != wantStatus || json.Unmarshal(body, &e) != nil || e.Code != wantStatus || !strings.Contains(e.Message, want) {
		t.Errorf("%s %s = %d %s, want %d with a message containing %q", method, path, status, body, wantStatus, want)
	}
}

func decodeNode(t *testing.T, body []byte) apiv1.Node {
	t.Helper()
	var n apiv1.Node
	if err := json.Unmarshal(body, &n); err != nil {
		t.Fatalf("decode node %s: %v", body, err)
	}
	return n
}

var nodeRoutes = [][2]string{
	{"GET", "/v1/nodes"},
	{"GET", "/v1/nodes/n1"},
	{"POST", "/v1/nodes/n1/cordon"},
	{"POST", "/v1/nodes/n1/uncordon"},
	{"POST", "/v1/nodes/n1/drain"},
	{"DELETE", "/v1/nodes/n1?force=true"},
}

func TestNodesRoutesNeedAnAdminKey(t *testing.T) {
	s := newNodesServer(t, true)
	if _, err := s.reg.Register("n1", "http://n1:7071", nodeapi.Info{Sandboxes: 1}); err != nil {
		t.Fatal(err)
	}
	for _, r := range nodeRoutes {
		status, body := s.call(t, s.project, r[0], r[1])
		wantError(t, r[0], r[1], status, body, http.StatusForbidden, "needs an admin key")
		status, body = s.call(t, "", r[0], r[1])
		wantError(t, r[0], r[1], status, body, http.StatusUnauthorized, "missing API key")
	}
	// Nothing changed.
	if n, err := s.reg.Get("n1"); err != nil || n.State != cluster.Ready {
		t.Fatalf("after refused calls: %+v, %v", n, err)
	}
}

func TestNodesList(t *testing.T) {
	s := newNodesServer(t, true)
	status, body := s.call(t, s.admin, "GET", "/v1/nodes")
	if status != http.StatusOK || strings.TrimSpace(string(body)) != `{"nodes":[]}` {
		t.Fatalf("empty list = %d %s", status, body)
	}
	info := nodeapi.Info{VCPUs: 8, MemoryMB: 16384, DiskMB: 100000, Sandboxes: 3, MemoryFreeMB: 9000, DiskFreeMB: 70000,
		VCPUsCommitted: 3, MemoryCommittedMB: 1536, Templates: []string{"tpl-1", "tpl-2"}, TemplateImages: []string{"tpl-1"},
		Pools: map[string]nodeapi.PoolStatus{"tpl-1": {Size: 2, Ready: 1}}}
	for _, id := range []string{"n2", "n1"} {
		if _, err := s.reg.Register(id, "https://"+id+".example:7071", info); err != nil {
			t.Fatal(err)
		}
	}
	status, body = s.call(t, s.admin, "GET", "/v1/nodes")
	var list apiv1.NodeList
	if status != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Nodes) != 2 {
		t.Fatalf("list = %d %s", status, body)
	}
	n := list.Nodes[0]
	if n.ID != "n1" || n.Address != "https://n1.example:7071" || n.State != "ready" || n.VCPUs != 8 || n.MemoryMB != 16384 ||
		n.DiskMB != 100000 || n.Sandboxes != 3 || n.MemoryFreeMB != 9000 || n.DiskFreeMB != 70000 || n.VCPUsCommitted != 3 ||
		n.MemoryCommittedMB != 1536 || len(n.Templates) != 2 || len(n.TemplateImages) != 1 || n.Pools["tpl-1"].Ready != 1 || n.LastHeartbeat.IsZero() {
		t.Fatalf("first node = %+v", n)
	}
	status, body = s.call(t, s.admin, "GET", "/v1/nodes/n2")
	if status != http.StatusOK || decodeNode(t, body).ID != "n2" {
		t.Fatalf("get = %d %s", status, body)
	}
}

func TestNodesUnknownAndMalformedIDs(t *testing.T) {
	s := newNodesServer(t, true)
	for _, r := range nodeRoutes[1:] {
		status, body := s.call(t, s.admin, r[0], r[1])
		wantError(t, r[0], r[1], status, body, http.StatusNotFound, "node not found: n1")
		path := strings.Replace(r[1], "n1", "Bad_ID", 1)
		status, body = s.call(t, s.admin, r[0], path)
		wantError(t, r[0], path, status, body, http.StatusBadRequest, `node id "Bad_ID" must be`)
	}
}

func TestNodesTransitions(t *testing.T) {
	s := newNodesServer(t, true)
	if _, err := s.reg.Register("n1", "http://n1:7071", nodeapi.Info{Sandboxes: 2}); err != nil {
		t.Fatal(err)
	}
	// The only node: its sandboxes have nowhere to go.
	status, body := s.call(t, s.admin, "POST", "/v1/nodes/n1/drain")
	wantError(t, "POST", "/v1/nodes/n1/drain", status, body, http.StatusConflict, "no other node is ready")
	if _, err := s.reg.Register("n2", "http://n2:7071", nodeapi.Info{}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		method, path string
		status       int
		state        string
	}{
		{"POST", "/v1/nodes/n1/cordon", http.StatusOK, "cordoned"},
		{"POST", "/v1/nodes/n1/uncordon", http.StatusOK, "ready"},
		{"POST", "/v1/nodes/n1/drain", http.StatusAccepted, "draining"},
		{"POST", "/v1/nodes/n1/cordon", http.StatusConflict, "draining"},
		{"DELETE", "/v1/nodes/n1", http.StatusConflict, "draining"},
		{"DELETE", "/v1/nodes/n1?force=yes", http.StatusBadRequest, "draining"},
		{"DELETE", "/v1/nodes/n1?force=true", http.StatusOK, "lost"},
		{"POST", "/v1/nodes/n1/uncordon", http.StatusConflict, "lost"},
		{"POST", "/v1/nodes/n1/drain", http.StatusConflict, "lost"},
	}
	for _, st := range steps {
		status, body := s.call(t, s.admin, st.method, st.path)
		if status != st.status {
			t.Fatalf("%s %s = %d %s, want %d", st.method, st.path, status, body, st.status)
		}
		if status < 300 {
			if n := decodeNode(t, body); n.State != st.state {
				t.Fatalf("%s %s answered state %s, want %s", st.method, st.path, n.State, st.state)
			}
		} else {
			wantError(t, st.method, st.path, status, body, st.status, "")
		}
		if n, err := s.reg.Get("n1"); err != nil || string(n.State) != st.state {
			t.Fatalf("after %s %s: %+v, %v, want %s", st.method, st.path, n, err, st.state)
		}
	}
	status, body = s.call(t, s.admin, "DELETE", "/v1/nodes/n1")
	if status != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("remove of a lost node = %d %s, want 204", status, body)
	}
	status, body = s.call(t, s.admin, "GET", "/v1/nodes/n1")
	wantError(t, "GET", "/v1/nodes/n1", status, body, http.StatusNotFound, "node not found")
}

func TestNodesWithoutRegistry(t *testing.T) {
	s := newNodesServer(t, false)
	for _, r := range nodeRoutes {
		status, body := s.call(t, s.admin, r[0], r[1])
		wantError(t, r[0], r[1], status, body, http.StatusNotImplemented, "no registry of nodes")
	}
}
