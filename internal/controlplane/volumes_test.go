package controlplane

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// The cluster nodes of these tests keep persistent volumes as names.

func (c *clusterNode) CreateVolume(_ context.Context, name string, _ int) error {
	c.record("createvolume " + name)
	c.mu.Lock()
	c.volumes[name] = true
	c.mu.Unlock()
	return nil
}

func (c *clusterNode) VolumeUsage(context.Context, string) (int64, error) { return 0, nil }

func (c *clusterNode) WriteVolumeFile(context.Context, nodeapi.VolumeEdit, io.Reader) (*filesystempb.EntryInfo, error) {
	return &filesystempb.EntryInfo{}, nil
}

func (c *clusterNode) EditVolume(context.Context, nodeapi.VolumeEdit) (*filesystempb.EntryInfo, error) {
	return &filesystempb.EntryInfo{}, nil
}

func mountReq(mounts ...apiv1.VolumeMount) apiv1.CreateSandboxRequest {
	req := createReq
	req.VolumeMounts = mounts
	return req
}

// A volume lives on one node: every sandbox that mounts it is placed
// there, whatever placement would have chosen, a drain leaves those
// sandboxes where they are, and the volume cannot be deleted while one of
// them has not stopped.
func TestVolumesPinPlacementAndStayOnDrain(t *testing.T) {
	tn := newTestNodes("n1", "n2", "n3")
	cp := newClusterCP(t, tn, nil)
	ctx := context.Background()
	team := project.In("team")
	v, err := cp.CreateVolume(ctx, team, apiv1.CreateVolumeRequest{Name: "data", SizeMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if tn.get(v.Node).called("createvolume "+nodeapi.VolumeName(v.ID)) != 1 {
		t.Fatalf("volume %s not made on its node %s", v.ID, v.Node)
	}
	other, err := cp.CreateVolume(ctx, team, apiv1.CreateVolumeRequest{Name: "other", SizeMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if other.Node == v.Node {
		t.Fatalf("both volumes on %s; the test needs two nodes", v.Node)
	}
	var ids []string
	for range 4 {
		s, err := cp.Create(team, mountReq(apiv1.VolumeMount{Volume: "data", Path: "/mnt/data"}))
		if err != nil {
			t.Fatal(err)
		}
		s = waitRunning(t, cp, s.ID)
		if s.Node != v.Node || len(s.Mounts) != 1 || s.Mounts[0].Volume != v.ID {
			t.Fatalf("sandbox mounting the volume: node %s mounts %+v; want node %s", s.Node, s.Mounts, v.Node)
		}
		ids = append(ids, s.ID)
	}
	if _, err := cp.Create(team, mountReq(apiv1.VolumeMount{Volume: "data", Path: "/a"}, apiv1.VolumeMount{Volume: "other", Path: "/b"})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("volumes of two nodes in one sandbox: %v, want invalid", err)
	}
	if _, err := cp.Create(project.In("strangers"), mountReq(apiv1.VolumeMount{Volume: v.ID, Path: "/a"})); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another project mounts the volume by id: %v, want not found", err)
	}
	if _, err := cp.ResolveVolume(project.In("strangers"), "data"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another project resolves the volume by name: %v", err)
	}
	var se *StateError
	if err := cp.DeleteVolume(ctx, team, "data"); !errors.As(err, &se) || !strings.Contains(err.Error(), ids[0]) {
		t.Fatalf("delete of a mounted volume: %v, want a state error naming the sandboxes", err)
	}

	err = cp.DrainNode(ctx, v.Node)
	var de *DrainError
	if !errors.As(err, &de) || len(de.Failed) != len(ids) {
		t.Fatalf("drain of the volume's node: %v, want the %d sandboxes left", err, len(ids))
	}
	for _, id := range ids {
		if !strings.Contains(de.Failed[id].Error(), "volumes do not move") {
			t.Fatalf("drain reason of %s: %v", id, de.Failed[id])
		}
		if s, _ := cp.Get(project.Everything, id); s.Node != v.Node || s.State != apiv1.StateRunning {
			t.Fatalf("sandbox %s after the drain: node %s, %s", id, s.Node, s.State)
		}
	}

	for _, id := range ids {
		if err := cp.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := cp.DeleteVolume(ctx, team, "data"); err != nil {
		t.Fatalf("delete once no sandbox mounts it: %v", err)
	}
	if tn.get(v.Node).called("deletevolume "+nodeapi.VolumeName(v.ID)) != 1 {
		t.Fatal("the volume's node did not delete it")
	}
	if _, err := cp.ResolveVolume(team, v.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted volume: %v", err)
	}
}

// Branches and sandboxes started from a snapshot mount what their source
// mounted; a snapshot whose volume is gone cannot start a sandbox.
func TestCopiesMountTheSourcesVolumes(t *testing.T) {
	tn := newTestNodes("n1")
	cp := newClusterCP(t, tn, nil)
	ctx := context.Background()
	v, err := cp.CreateVolume(ctx, project.Everything, apiv1.CreateVolumeRequest{Name: "shared", SizeMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	src, err := cp.Create(project.Everything, mountReq(apiv1.VolumeMount{Volume: "shared", Path: "/w"}))
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, cp, src.ID)
	brs, err := cp.Branch(ctx, src.ID, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range brs {
		if len(b.Mounts) != 1 || b.Mounts[0].Volume != v.ID || b.Mounts[0].Path != "/w" {
			t.Fatalf("branch mounts %+v", b.Mounts)
		}
	}
	if users := cp.MountedBy(v.ID); len(users) != 3 {
		t.Fatalf("mounted by %v, want the source and its 2 branches", users)
	}
	if _, err := cp.Create(project.Everything, apiv1.CreateSandboxRequest{Snapshot: "x", VolumeMounts: []apiv1.VolumeMount{{Volume: "shared", Path: "/w"}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("volume_mounts with a snapshot: %v, want invalid", err)
	}
	if err := cp.checkMountsExist([]Mount{{Volume: "vol-gone", Name: "gone", Path: "/g"}}); err == nil {
		t.Fatal("a mount of a deleted volume passed")
	}
}

// A project's volumes may hold max_volume_mb in all; a create past it is a
// quota error, and the room is the project's own.
func TestVolumeQuota(t *testing.T) {
	tn := newTestNodes("n1")
	cp := newClusterCP(t, tn, nil)
	cp.cfg.Quotas = fixedQuotas{q: project.Quota{MaxVolumeMB: 100}}
	ctx := context.Background()
	a := project.In("a")
	if _, err := cp.CreateVolume(ctx, a, apiv1.CreateVolumeRequest{Name: "one", SizeMB: 60}); err != nil {
		t.Fatal(err)
	}
	var qe *QuotaError
	if _, err := cp.CreateVolume(ctx, a, apiv1.CreateVolumeRequest{Name: "two", SizeMB: 41}); !errors.As(err, &qe) || qe.Project != "a" {
		t.Fatalf("60 + 41 MiB under a 100 MiB quota: %v, want a quota error", err)
	}
	if _, err := cp.CreateVolume(ctx, a, apiv1.CreateVolumeRequest{Name: "two", SizeMB: 40}); err != nil {
		t.Fatalf("60 + 40 MiB: %v", err)
	}
	if _, err := cp.CreateVolume(ctx, project.In("b"), apiv1.CreateVolumeRequest{Name: "one", SizeMB: 100}); err != nil {
		t.Fatalf("another project's room: %v", err)
	}
	if u := cp.Usage("a"); u.VolumeMB != 100 {
		t.Fatalf("usage of a: %+v", u)
	}
	if tn.get("n1").called("createvolume") != 3 {
		t.Fatal("a refused volume reached the node")
	}
}
