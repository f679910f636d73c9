package nodeapitest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/sandboxid"
)

// testPersistentVolumes makes a persistent volume, edits its files without
// a sandbox, and (on a real node) mounts it into two sandboxes that see
// each other's writes; a sandbox that mounts a missing volume, or at a
// reserved path, is refused.
func testPersistentVolumes(t *testing.T, h Harness) {
	pv, ok := h.Node.(nodeapi.PersistentVolumes)
	if !ok {
		t.Skip("the node keeps no persistent volumes")
	}
	ctx := caseContext(t, h)
	name := nodeapi.VolumeName("vol-" + strings.ToLower(sandboxid.New()))
	if err := pv.CreateVolume(ctx, name, 16); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = h.Node.DeleteVolume(ctx, name)
	})
	if err := pv.CreateVolume(ctx, name, 16); !errors.Is(err, nodeapi.ErrExists) {
		t.Fatalf("create the volume again: %v, want ErrExists", err)
	}
	if err := pv.CreateVolume(ctx, "persistent/../x", 1); !errors.Is(err, nodeapi.ErrInvalidName) {
		t.Fatalf("create persistent/../x: %v, want ErrInvalidName", err)
	}
	// Without Parents a missing directory is a 404; with it, made.
	if _, err := pv.WriteVolumeFile(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/d/e/f.txt"}, strings.NewReader("x")); agentStatus(err) != http.StatusNotFound {
		t.Fatalf("write below a missing directory: %v, want 404", err)
	}
	e, err := pv.WriteVolumeFile(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/d/e/f.txt", Parents: true}, strings.NewReader("from the api"))
	if err != nil || e.GetSize() != int64(len("from the api")) || e.GetPath() != "/d/e/f.txt" {
		t.Fatalf("write: %v %v", e, err)
	}
	if got, _ := readVolumeFile(ctx, t, h, name, "/d/e/f.txt"); got != "from the api" {
		t.Fatalf("read back %q", got)
	}
	if _, err := pv.EditVolume(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/d/g", Op: nodeapi.VolumeMkdir}); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	if _, err := pv.EditVolume(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/d/g", Op: nodeapi.VolumeMkdir}); agentStatus(err) != http.StatusConflict {
		t.Fatalf("mkdir of an existing directory: %v, want 409", err)
	}
	if e, err := pv.EditVolume(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/../../d/g", Op: nodeapi.VolumeStat}); err != nil || e.GetName() != "g" {
		t.Fatalf("stat through ..: %v %v", e, err)
	}
	if _, err := pv.EditVolume(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/d/g", Op: nodeapi.VolumeRemove}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := pv.EditVolume(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/d/g", Op: nodeapi.VolumeStat}); agentStatus(err) != http.StatusNotFound {
		t.Fatalf("stat of a removed path: %v, want 404", err)
	}
	if _, err := pv.EditVolume(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/", Op: nodeapi.VolumeRemove}); agentStatus(err) != http.StatusBadRequest {
		t.Fatalf("remove the top directory: %v, want 400", err)
	}
	if n, err := pv.VolumeUsage(ctx, name); err != nil || n < int64(len("from the api")) {
		t.Fatalf("usage %d, %v", n, err)
	}
	// Past the size limit (16 MiB) a write fails as out of space.
	big := strings.NewReader(strings.Repeat("z", 17<<20))
	if _, err := pv.WriteVolumeFile(ctx, nodeapi.VolumeEdit{Volume: name, Path: "/big"}, big); agentStatus(err) != http.StatusInsufficientStorage {
		t.Fatalf("write past the limit: %v, want 507", err)
	}

	id := sandboxid.New()
	spec := createSpec(h, id, token())
	spec.Mounts = []nodeapi.VolumeMount{{Volume: nodeapi.VolumeName("vol-missing"), Path: "/mnt/data"}}
	if err := h.Node.Create(ctx, nodeapi.CreateRequest{Spec: spec}); err == nil {
		destroyLater(t, h, id)
		t.Fatal("a sandbox mounted a volume that does not exist")
	}
	spec.Mounts = []nodeapi.VolumeMount{{Volume: name, Path: "/proc/x"}}
	if err := h.Node.Create(ctx, nodeapi.CreateRequest{Spec: spec}); err == nil {
		destroyLater(t, h, id)
		t.Fatal("a sandbox mounted a volume inside /proc")
	}
	if !h.Real {
		return
	}
	a, b := mounted(ctx, t, h, name, "/mnt/data"), mounted(ctx, t, h, name, "/home/user/shared")
	if got := readFile(ctx, t, a, "/mnt/data/d/e/f.txt"); got != "from the api" {
		t.Fatalf("sandbox reads %q through the mount", got)
	}
	writeFile(ctx, t, a, "/mnt/data/from-a.txt", "written by a")
	if got := readFile(ctx, t, b, "/home/user/shared/from-a.txt"); got != "written by a" {
		t.Fatalf("the other sandbox reads %q", got)
	}
	if got, _ := readVolumeFile(ctx, t, h, name, "/from-a.txt"); got != "written by a" {
		t.Fatalf("the node reads %q", got)
	}
}

// mounted starts a sandbox that mounts volume at p.
func mounted(ctx context.Context, t *testing.T, h Harness, volume, p string) sandbox {
	t.Helper()
	id, tok := sandboxid.New(), token()
	spec := createSpec(h, id, tok)
	spec.Mounts = []nodeapi.VolumeMount{{Volume: volume, Path: p}}
	if err := h.Node.Create(ctx, nodeapi.CreateRequest{Spec: spec}); err != nil {
		t.Fatalf("create %s mounting the volume: %v", id, err)
	}
	destroyLater(t, h, id)
	return sandbox{id: id, token: tok, Sandbox: handle(ctx, t, h, id)}
}

func agentStatus(err error) int {
	var ae *nodeapi.AgentError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}
