package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

func TestNodeList(t *testing.T) {
	useServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/nodes" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		writeJSONForTest(w, http.StatusOK, apiv1.NodeList{Nodes: []apiv1.Node{
			{ID: "n1", Address: "http://n1:7071", State: "ready", VCPUs: 8, VCPUsCommitted: 3, MemoryMB: 16384,
				MemoryCommittedMB: 1536, MemoryFreeMB: 9000, DiskFreeMB: 70000, Sandboxes: 3, LastHeartbeat: time.Now().Add(-2 * time.Second)},
			{ID: "n2", State: "unreachable", Reason: "no heartbeat for 40s"},
		}})
	}))
	code, out, errOut := runMain(t, "", "node", "ls")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out)
	}
	for i, want := range [][]string{
		{"ID", "STATE", "SANDBOXES", "VCPUS", "MEMORY", "MB", "FREE", "MB", "DISK", "FREE", "MB", "HEARTBEAT", "ADDRESS", "REASON"},
		{"n1", "ready", "3", "3/8", "1536/16384", "9000", "70000", "2s", "ago", "http://n1:7071", "-"},
		{"n2", "unreachable", "0", "0/0", "0/0", "0", "0", "-", "-", "no", "heartbeat", "for", "40s"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d = %q, want %q", i, got, want)
		}
	}
}

func TestNodeActions(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	useServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/nodes/bad"):
			writeJSONForTest(w, http.StatusConflict, apiv1.Error{Code: 409, Message: "node bad is lost and cannot be drained"})
		case r.Method == http.MethodDelete && r.URL.Query().Get("force") == "true":
			writeJSONForTest(w, http.StatusOK, apiv1.Node{ID: "n1", State: "lost", Reason: "removed with force"})
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSONForTest(w, http.StatusOK, apiv1.Node{ID: "n1", State: "cordoned"})
		}
	}))
	for _, tt := range []struct {
		args          []string
		code          int
		out, errOut   string
		wantRequested []string
	}{
		{[]string{"node", "cordon", "n1", "n2"}, 0, "n1\nn2\n", "", []string{"POST /v1/nodes/n1/cordon", "POST /v1/nodes/n2/cordon"}},
		{[]string{"node", "uncordon", "n1"}, 0, "n1\n", "", []string{"POST /v1/nodes/n1/uncordon"}},
		{[]string{"node", "drain", "bad", "n1"}, 1, "n1\n", "space: node bad is lost and cannot be drained\n", []string{"POST /v1/nodes/bad/drain", "POST /v1/nodes/n1/drain"}},
		{[]string{"node", "remove", "n1"}, 0, "n1\n", "", []string{"DELETE /v1/nodes/n1"}},
		{[]string{"node", "remove", "--force", "n1"}, 0, "n1\n", "space: node n1 is lost: removed with force\n", []string{"DELETE /v1/nodes/n1?force=true"}},
		{[]string{"node", "remove", "n1", "--force"}, 0, "n1\n", "space: node n1 is lost: removed with force\n", []string{"DELETE /v1/nodes/n1?force=true"}},
	} {
		mu.Lock()
		seen = nil
		mu.Unlock()
		code, out, errOut := runMain(t, "", tt.args...)
		mu.Lock()
		got := strings.Join(seen, ", ")
		mu.Unlock()
		if code != tt.code || out != tt.out || errOut != tt.errOut || got != strings.Join(tt.wantRequested, ", ") {
			t.Errorf("space %q: exit %d stdout %q stderr %q requests %q", tt.args, code, out, errOut, got)
		}
	}
}

func writeJSONForTest(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	data, _ := json.Marshal(v)
	io.WriteString(w, string(data))
}

func TestNodeAndControlPlaneFlags(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SPACE_CLUSTER_TOKEN", "")
	cp := "--control-plane=http://cp.example:7070"
	tests := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{args: []string{"node"}, code: 2, inStderr: "Usage: space node COMMAND"},
		{args: []string{"node", "-h"}, code: 0, inStdout: "run the node service"},
		{args: []string{"node", "run", "-h"}, code: 0, inStdout: "-cluster-token-file"},
		{args: []string{"node", "cordon"}, code: 2, inStderr: "node cordon needs at least one node ID"},
		{args: []string{"node", "--data-dir", dir}, code: 2, inStderr: "space node needs --control-plane URL"},
		{args: []string{"node", "--control-plane", "cp:7070"}, code: 2, inStderr: `--control-plane "cp:7070" is not an http:// or https:// URL`},
		{args: []string{"node", "--control-plane", "http://cp-a:7070,cp-b:7070"}, code: 2, inStderr: `--control-plane "cp-b:7070" is not an http:// or https:// URL`},
		{args: []string{"node", cp, "--heartbeat-interval", "0s"}, code: 2, inStderr: "--heartbeat-interval must be positive"},
		{args: []string{"node", cp, "--listen", "7071"}, code: 2, inStderr: `--listen "7071" is not host:port`},
		{args: []string{"node", cp, "--listen", ":7071"}, code: 2, inStderr: "give --advertise URL"},
		{args: []string{"node", cp, "--listen", "0.0.0.0:7071"}, code: 2, inStderr: "give --advertise URL"},
		{args: []string{"node", cp, "--advertise", "n1:7071"}, code: 2, inStderr: `--advertise "n1:7071" is not an http://`},
		{args: []string{"node", cp, "--uplink-pool", "10.0.0.0"}, code: 2, inStderr: "--uplink-pool"},
		{args: []string{"node", cp}, code: 1, inStderr: "no cluster token: give --cluster-token-file or set SPACE_CLUSTER_TOKEN"},
		{args: []string{"node", cp, "--cluster-token-file", empty}, code: 1, inStderr: "is empty"},
		{args: []string{"node", cp, "--cluster-token-file", token, "--tls-ca", notPEM}, code: 1, inStderr: "holds no PEM certificate"},
		{args: []string{"node", cp, "--cluster-token-file", token, "--id", "Node_1"}, code: 2, inStderr: `--id: invalid node: node id "Node_1" must be`},
		{args: []string{"node", "run", cp, "--cluster-token-file", token, "--tls-cert", "c.pem"}, code: 2, inStderr: "--tls-cert and --tls-key go together"},

		{args: []string{"control-plane"}, code: 2, inStderr: "space control-plane needs --store postgres://"},
		{args: []string{"control-plane", "--store", "mysql://u:pw@db/space"}, code: 2, inStderr: "--store must be a postgres:// or postgresql:// URL"},
		{args: []string{"control-plane", "--store", "postgres://db/space", "--heartbeat-timeout", "0s"}, code: 2, inStderr: "--heartbeat-timeout must be positive"},
		{args: []string{"control-plane", "--store", "postgres://db/space"}, code: 1, inStderr: "no cluster token"},
		{args: []string{"control-plane", "--store", "postgresql://db/space", "--cluster-token-file", token, "--tls-ca", notPEM}, code: 1, inStderr: "holds no PEM certificate"},
	}
	for _, tt := range tests {
		code, out, errOut := runMain(t, "", tt.args...)
		if code != tt.code || !strings.Contains(out, tt.inStdout) || !strings.Contains(errOut, tt.inStderr) {
			t.Errorf("space %q: code %d (want %d)\nstdout: %s\nstderr: %s", tt.args, code, tt.code, out, errOut)
		}
		if strings.Contains(errOut, "pw@") {
			t.Errorf("space %q printed the store's password: %s", tt.args, errOut)
		}
	}
	t.Setenv("SPACE_CLUSTER_TOKEN", "from-env")
	// The token is read (no "no cluster token"), then the CA is checked.
	if code, _, errOut := runMain(t, "", "node", cp, "--tls-ca", notPEM); code != 1 || !strings.Contains(errOut, "holds no PEM certificate") {
		t.Errorf("token from the environment: code %d, %s", code, errOut)
	}
}
