package controlplane

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/sandboxid"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/pkg/apiv1"
)

// Persistent volumes outlive sandboxes. One lives on one node (a btrfs
// subvolume with a qgroup limit there) and every sandbox that mounts it is
// placed on that node; a drain leaves such sandboxes, and snapshots taken
// of them, where they are. Mounts are bind mounts of the live volume:
// snapshots and branches never copy a volume, a branch (or a sandbox
// started from a snapshot) mounts the same volumes at the same paths as
// its source, and a volume cannot be deleted while a sandbox that has not
// stopped mounts it.

const volumeBucket = "volumes"

// Bounds of a volume's size.
const (
	defaultVolumeMB = 10 << 10
	minVolumeMB     = 16
	// maxVolumeMB bounds a volume where the node's disk is not known.
	maxVolumeMB = 16 << 20
)

var volumeNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// Volume is the control plane's record of a persistent volume.
type Volume struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Project   string    `json:"project,omitempty"`
	SizeMB    int       `json:"size_mb"`
	Node      string    `json:"node,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Token authorizes the volume's file API alone (E2B's volume token).
	Token string `json:"token"`
}

// Mount is a volume a sandbox mounts, as its record keeps it.
type Mount struct {
	Volume   string `json:"volume"` // the volume's id
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// VolumeStore is what the files API of a volume needs of its node: the
// persistent volume operations and the node's readers of volumes.
type VolumeStore interface {
	nodeapi.PersistentVolumes
	ReadVolumeFile(ctx context.Context, volume, path string) (io.ReadCloser, *filesystempb.EntryInfo, error)
	ListVolumeDir(ctx context.Context, volume, path string, opts nodeapi.ListOptions) (nodeapi.DirPage, error)
}

// CreateVolume makes a volume of the scope's project on a node that has
// room for it.
func (cp *ControlPlane) CreateVolume(ctx context.Context, scope project.Scope, req apiv1.CreateVolumeRequest) (Volume, error) {
	if !volumeNamePattern.MatchString(req.Name) {
		return Volume{}, invalid("volume name %.70q: use 1 to 63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", req.Name)
	}
	if strings.HasPrefix(req.Name, "vol-") {
		return Volume{}, invalid("volume names starting with vol- are reserved for volume ids")
	}
	if req.SizeMB == 0 {
		req.SizeMB = defaultVolumeMB
	}
	if req.SizeMB < minVolumeMB || req.SizeMB > maxVolumeMB {
		return Volume{}, invalid("size_mb must be between %d and %d, got %d", minVolumeMB, maxVolumeMB, req.SizeMB)
	}
	unlock, err := cp.cfg.Store.Lock(ctx, "volumes")
	if err != nil {
		return Volume{}, fmt.Errorf("create volume: %w", err)
	}
	defer unlock()
	owner := scope.Owner()
	if _, err := cp.volumeByName(owner, req.Name); err == nil {
		return Volume{}, &StateError{ID: req.Name, State: "taken", Want: "create another volume by that name (delete it first)", Kind: "volume name"}
	}
	if err := cp.checkVolumeQuota(owner, req.SizeMB); err != nil {
		return Volume{}, err
	}
	nodeID, err := cp.place(cluster.PlaceRequest{DiskMB: req.SizeMB})
	if err != nil {
		return Volume{}, err
	}
	n, err := cp.node(nodeID, "")
	if err != nil {
		return Volume{}, err
	}
	pv, ok := n.(nodeapi.PersistentVolumes)
	if !ok {
		return Volume{}, fmt.Errorf("node %s keeps no persistent volumes: %w", nodeID, ErrCapacity)
	}
	v := Volume{
		ID: "vol-" + strings.ToLower(sandboxid.New()), Name: req.Name, Project: owner, SizeMB: req.SizeMB,
		Node: nodeID, CreatedAt: time.Now().UTC(), Token: newToken(),
	}
	if err := pv.CreateVolume(ctx, nodeapi.VolumeName(v.ID), v.SizeMB); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %s", v.Name, cp.cfg.HostPaths.String(err.Error()))
	}
	if err := cp.cfg.Store.Put(volumeBucket, v.ID, v); err != nil {
		_ = n.DeleteVolume(context.WithoutCancel(ctx), nodeapi.VolumeName(v.ID))
		return Volume{}, fmt.Errorf("record volume %s: %w", v.Name, err)
	}
	return v, nil
}

// Volumes lists the volumes the scope sees, by name.
func (cp *ControlPlane) Volumes(scope project.Scope) ([]Volume, error) {
	all, err := store.All[Volume](cp.cfg.Store, volumeBucket)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	var out []Volume
	for _, v := range all {
		if scope.Sees(v.Project) {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name == out[j].Name {
			return out[i].ID < out[j].ID
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// ResolveVolume finds a volume by id, or by name in the scope's project;
// one the scope does not see is not found.
func (cp *ControlPlane) ResolveVolume(scope project.Scope, ref string) (Volume, error) {
	var v Volume
	if err := cp.cfg.Store.Get(volumeBucket, ref, &v); err == nil {
		if scope.Sees(v.Project) {
			return v, nil
		}
		return Volume{}, volumeNotFound(ref)
	} else if !errors.Is(err, store.ErrNotFound) {
		return Volume{}, fmt.Errorf("volume %s: %w", ref, err)
	}
	return cp.volumeByName(scope.Owner(), ref)
}

// VolumeByToken finds the volume a volume token authorizes.
func (cp *ControlPlane) VolumeByToken(id, token string) (Volume, error) {
	var v Volume
	if err := cp.cfg.Store.Get(volumeBucket, id, &v); err != nil || token == "" ||
		subtle.ConstantTimeCompare([]byte(v.Token), []byte(token)) != 1 {
		return Volume{}, volumeNotFound(id)
	}
	return v, nil
}

func (cp *ControlPlane) volumeByName(owner, name string) (Volume, error) {
	all, err := store.All[Volume](cp.cfg.Store, volumeBucket)
	if err != nil {
		return Volume{}, fmt.Errorf("look up volume %s: %w", name, err)
	}
	for _, v := range all {
		if v.Name == name && project.Of(v.Project) == project.Of(owner) {
			return v, nil
		}
	}
	return Volume{}, volumeNotFound(name)
}

func volumeNotFound(ref string) error {
	return fmt.Errorf("volume %.70q: %w", ref, ErrNotFound)
}

// DeleteVolume deletes a volume and everything in it, unless a sandbox
// that has not stopped mounts it.
func (cp *ControlPlane) DeleteVolume(ctx context.Context, scope project.Scope, ref string) error {
	unlock, err := cp.cfg.Store.Lock(ctx, "volumes")
	if err != nil {
		return fmt.Errorf("delete volume: %w", err)
	}
	defer unlock()
	v, err := cp.ResolveVolume(scope, ref)
	if err != nil {
		return err
	}
	if users := cp.MountedBy(v.ID); len(users) > 0 {
		return &StateError{ID: v.Name, Kind: "volume", State: "mounted by sandbox " + strings.Join(users, ", "),
			Want: "delete it (kill those sandboxes first)"}
	}
	n, err := cp.node(v.Node, "")
	if err != nil {
		return err
	}
	if err := n.DeleteVolume(ctx, nodeapi.VolumeName(v.ID)); err != nil {
		return fmt.Errorf("delete volume %s: %s", v.Name, cp.cfg.HostPaths.String(err.Error()))
	}
	if err := cp.cfg.Store.Delete(volumeBucket, v.ID); err != nil {
		return fmt.Errorf("forget volume %s: %w", v.Name, err)
	}
	return nil
}

// MountedBy lists the sandboxes, not stopped, that mount volume id.
func (cp *ControlPlane) MountedBy(id string) []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []string
	for _, r := range cp.sandboxes {
		if terminal(r.State) {
			continue
		}
		for _, m := range r.Mounts {
			if m.Volume == id {
				out = append(out, r.ID)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// VolumeUsage reports the bytes a volume holds, from its node.
func (cp *ControlPlane) VolumeUsage(ctx context.Context, v Volume) (int64, error) {
	st, err := cp.VolumeStore(v)
	if err != nil {
		return 0, err
	}
	return st.VolumeUsage(ctx, nodeapi.VolumeName(v.ID))
}

// VolumeStore is the node of volume v, for its files API.
func (cp *ControlPlane) VolumeStore(v Volume) (VolumeStore, error) {
	n, err := cp.node(v.Node, "")
	if err != nil {
		return nil, err
	}
	st, ok := n.(VolumeStore)
	if !ok {
		return nil, fmt.Errorf("node %s keeps no persistent volumes", cp.nodeID(v.Node))
	}
	return st, nil
}

// VolumeAPI is the public view of a volume.
func (cp *ControlPlane) VolumeAPI(v Volume, used *int64) apiv1.Volume {
	users := cp.MountedBy(v.ID)
	if users == nil {
		users = []string{}
	}
	return apiv1.Volume{
		ID: v.ID, Name: v.Name, Project: project.Of(v.Project), SizeMB: v.SizeMB, UsedBytes: used,
		Node: cp.nodeID(v.Node), CreatedAt: v.CreatedAt, MountedBy: users,
	}
}

// resolveMounts turns a create request's volume mounts into the record's,
// checking each volume is one of project owner's and each path one a
// volume may be mounted at. node is the node every volume lives on, which
// the sandbox must run on ("" without mounts).
func (cp *ControlPlane) resolveMounts(owner string, req []apiv1.VolumeMount) (mounts []Mount, node string, err error) {
	if len(req) == 0 {
		return nil, "", nil
	}
	if len(req) > nodeapi.MaxMounts {
		return nil, "", invalid("at most %d volume mounts, got %d", nodeapi.MaxMounts, len(req))
	}
	scope := project.Scope{Project: owner}
	var check []nodeapi.VolumeMount
	for _, m := range req {
		if err := nodeapi.CheckMountPath(m.Path); err != nil {
			return nil, "", invalid("%v", err)
		}
		v, err := cp.ResolveVolume(scope, m.Volume)
		if err != nil {
			return nil, "", err
		}
		if node != "" && !cp.sameNode(node, v.Node) {
			return nil, "", invalid("volumes %s and %s live on different nodes; one sandbox can only mount volumes of one node", mounts[0].Name, v.Name)
		}
		node = v.Node
		mounts = append(mounts, Mount{Volume: v.ID, Name: v.Name, Path: m.Path, ReadOnly: m.ReadOnly})
		check = append(check, nodeapi.VolumeMount{Volume: nodeapi.VolumeName(v.ID), Path: m.Path})
	}
	if err := nodeapi.CheckMounts(check); err != nil {
		return nil, "", invalid("%v", err)
	}
	return mounts, cp.nodeID(node), nil
}

// checkMountsExist refuses to start a copy (from a snapshot) whose
// source mounted a volume deleted since.
func (cp *ControlPlane) checkMountsExist(mounts []Mount) error {
	for _, m := range mounts {
		var v Volume
		if err := cp.cfg.Store.Get(volumeBucket, m.Volume, &v); err != nil {
			return &StateError{ID: m.Name, Kind: "volume", State: "deleted", Want: fmt.Sprintf("be mounted at %s again (the snapshot's sandbox mounted it)", m.Path)}
		}
	}
	return nil
}

// nodeMounts is what the node mounts for s.
func nodeMounts(ms []Mount) []nodeapi.VolumeMount {
	var out []nodeapi.VolumeMount
	for _, m := range ms {
		out = append(out, nodeapi.VolumeMount{Volume: nodeapi.VolumeName(m.Volume), Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

// mountsAPI is the public view of a sandbox's mounts.
func mountsAPI(ms []Mount) []apiv1.VolumeMount {
	var out []apiv1.VolumeMount
	for _, m := range ms {
		out = append(out, apiv1.VolumeMount{Volume: m.Volume, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

// createMounting is Create for a sandbox that mounts volumes: it runs on
// the volumes' node, booted (a pooled or pre-booted sandbox was made
// without the mounts). The volumes lock is held from resolving the mounts
// to recording the sandbox, so that a delete of a volume either sees the
// sandbox or happens before it.
func (cp *ControlPlane) createMounting(scope project.Scope, req apiv1.CreateSandboxRequest) (Sandbox, error) {
	tpl, tplName, err := cp.cfg.Templates.Resolve(scope, req.Template)
	if err != nil {
		return Sandbox{}, err
	}
	if err := chooseRuntime(&req, tpl, tplName); err != nil {
		return Sandbox{}, err
	}
	if err := cp.allowCreates(scope.Owner(), 1); err != nil {
		return Sandbox{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	unlock, err := cp.cfg.Store.Lock(ctx, "volumes")
	if err != nil {
		return Sandbox{}, fmt.Errorf("create sandbox: %w", err)
	}
	defer unlock()
	mounts, pin, err := cp.resolveMounts(scope.Owner(), req.VolumeMounts)
	if err != nil {
		return Sandbox{}, err
	}
	nodeID, err := cp.place(cluster.PlaceRequest{
		Template: tpl.ID, VCPUs: req.VCPUs, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Node: pin, Runtime: req.Runtime,
	})
	if err != nil {
		return Sandbox{}, err
	}
	n, err := cp.node(nodeID, "")
	if err != nil {
		return Sandbox{}, err
	}
	isolation, err := cp.isolation(nodeID, req.Runtime)
	if err != nil {
		return Sandbox{}, err
	}
	r, err := cp.admit(scope.Owner(), req, tplName, tpl.ID, func(s *Sandbox) {
		s.Node, s.Isolation = nodeID, isolation
		s.Mounts = mounts
	})
	if err != nil {
		return Sandbox{}, err
	}
	cp.launch(r, func(ctx context.Context, s Sandbox) error { return cp.startFromTemplate(ctx, n, s, tpl) })
	return cp.snapshot(r), nil
}
