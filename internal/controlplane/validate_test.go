package controlplane

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

func TestCheckEnvAndMetadata(t *testing.T) {
	many := map[string]string{}
	for i := range maxMetaEntries + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"good env", CheckEnv(map[string]string{"PATH": "/bin", "EMPTY": "", "UTF": "é"})},
		{"good metadata", CheckMetadata(map[string]string{"team": "a", "k": strings.Repeat("v", maxMetaValLen)})},
	} {
		if c.err != nil {
			t.Errorf("%s refused: %v", c.name, c.err)
		}
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"= in env name", CheckEnv(map[string]string{"A=B": "c"})},
		{"empty env name", CheckEnv(map[string]string{"": "c"})},
		{"NUL in env name", CheckEnv(map[string]string{"A\x00": "c"})},
		{"NUL in env value", CheckEnv(map[string]string{"A": "b\x00"})},
		{"invalid UTF-8 env value", CheckEnv(map[string]string{"A": "\xff"})},
		{"invalid UTF-8 env name", CheckEnv(map[string]string{"\xff": "a"})},
		{"huge env value", CheckEnv(map[string]string{"A": strings.Repeat("x", maxEnvValueLen+1)})},
		{"NUL in metadata value", CheckMetadata(map[string]string{"a": "\x00"})},
		{"invalid UTF-8 metadata key", CheckMetadata(map[string]string{"\xfe": "a"})},
		{"long metadata key", CheckMetadata(map[string]string{strings.Repeat("k", maxMetaKeyLen+1): "a"})},
		{"long metadata value", CheckMetadata(map[string]string{"k": strings.Repeat("v", maxMetaValLen+1)})},
		{"too many metadata entries", CheckMetadata(many)},
	} {
		if !errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
}

// The floor of snapshot_interval_s is the operator's, a minute unless set.
func TestSnapshotIntervalFloor(t *testing.T) {
	for _, c := range []struct {
		floor    time.Duration
		interval int
		ok       bool
	}{
		{0, 59, false}, {0, 60, true}, {0, 0, true},
		{5 * time.Second, 4, false}, {5 * time.Second, 5, true},
		{1500 * time.Millisecond, 1, false}, {1500 * time.Millisecond, 2, true},
	} {
		cp := newTestCPWith(t, Config{Defaults: Defaults{MinSnapshotInterval: c.floor, VCPUs: 1, MemoryMB: 256, DiskMB: 1024, TimeoutS: 60}}, t.TempDir(), newFakeNode())
		req := apiv1.CreateSandboxRequest{Template: "tpl", SnapshotIntervalS: c.interval}
		err := cp.checkRequest("p", &req)
		if c.ok && err != nil {
			t.Errorf("floor %s, interval %d: %v", c.floor, c.interval, err)
		}
		if !c.ok && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "at least")) {
			t.Errorf("floor %s, interval %d: %v, want ErrInvalid naming the floor", c.floor, c.interval, err)
		}
	}
}

// A record that names no node (an older version's) is on serve's one
// node, and on none in a cluster.
func TestNodeOfRecordsWithoutANode(t *testing.T) {
	fn := newFakeNode()
	serve := newTestCPWith(t, Config{}, t.TempDir(), fn)
	cluster := newTestCPWith(t, Config{Nodes: struct{ Nodes }{OneNode("local", fn)}}, t.TempDir(), fn)
	// One house: serve's node has an id of its own; records of serve's
	// node by its old name are on it.
	oneHouse := newTestCPWith(t, Config{Nodes: struct{ Nodes }{OneNode("host-1a2b3c", fn)}, LocalNode: "host-1a2b3c"}, t.TempDir(), fn)
	for _, c := range []struct {
		cp         *ControlPlane
		node, want string
	}{
		{serve, "", "local"}, {serve, "n2", "n2"}, {cluster, "", ""}, {cluster, "n2", "n2"}, {cluster, "local", "local"},
		{oneHouse, "", "host-1a2b3c"}, {oneHouse, "local", "host-1a2b3c"}, {oneHouse, "n2", "n2"},
	} {
		if got := c.cp.NodeOf(Sandbox{Node: c.node}); got != c.want {
			t.Errorf("NodeOf a record naming %q: %q, want %q", c.node, got, c.want)
		}
	}
}
