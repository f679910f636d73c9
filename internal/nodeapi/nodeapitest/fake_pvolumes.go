package nodeapitest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/nodeapi"
)

// The fake's persistent volumes are trees among its volumes, with a size
// limit checked on every write. Mounts are recorded (Mounts) but not
// joined into the sandboxes' trees: the real node's bind mounts are what
// the e2e tests check.

var _ nodeapi.PersistentVolumes = (*Fake)(nil)

func (f *Fake) CreateVolume(ctx context.Context, name string, diskMB int) error {
	var err error
	nerr := f.named("create volume", name, func() {
		if !strings.HasPrefix(name, "persistent/") {
			err = fmt.Errorf("%w: %q is not a persistent volume", nodeapi.ErrInvalidName, name)
			return
		}
		if _, ok := f.volumes[name]; ok {
			err = fmt.Errorf("create volume %s: %w", name, nodeapi.ErrExists)
			return
		}
		f.volumes[name] = &tree{nodes: map[string]*fnode{"/": {dir: true, mtime: time.Now()}}}
		if f.volumeLimits == nil {
			f.volumeLimits = map[string]int64{}
		}
		f.volumeLimits[name] = int64(diskMB) << 20
	})
	if nerr != nil {
		return nerr
	}
	return err
}

func (f *Fake) VolumeUsage(ctx context.Context, name string) (int64, error) {
	var vol *tree
	if err := f.named("volume usage", name, func() { vol = f.volumes[name] }); err != nil {
		return 0, err
	}
	if vol == nil {
		return 0, agentErr(http.StatusNotFound, "volume is gone")
	}
	return vol.size(), nil
}

func (f *Fake) WriteVolumeFile(ctx context.Context, req nodeapi.VolumeEdit, r io.Reader) (e *filesystempb.EntryInfo, err error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", req.Path, err)
	}
	f.mu.Lock()
	limit := f.volumeLimits[req.Volume]
	f.mu.Unlock()
	err = f.inVolume("write volume file", req.Volume, req.Path, func(t *tree, p string) error {
		if n, ok := t.nodes[p]; ok && n.dir {
			return agentErr(http.StatusBadRequest, "%s exists and is not a regular file", p)
		}
		if err := f.parentLocked(t, p, req.Parents); err != nil {
			return err
		}
		var used int64
		for q, n := range t.nodes {
			if q != p {
				used += int64(len(n.data))
			}
		}
		if limit > 0 && used+int64(len(data)) > limit {
			return agentErr(http.StatusInsufficientStorage, "%s in volume: the volume is full (its size limit is reached)", p)
		}
		t.nodes[p] = &fnode{data: data, mtime: time.Now()}
		e = t.entry(p, t.nodes[p])
		return nil
	})
	return e, err
}

func (f *Fake) parentLocked(t *tree, p string, parents bool) error {
	if parents {
		return t.mkdirAllLocked(path.Dir(p))
	}
	n, ok := t.nodes[path.Dir(p)]
	if !ok {
		return missing(path.Dir(p))
	}
	if !n.dir {
		return agentErr(http.StatusBadRequest, "%s is not a directory", path.Dir(p))
	}
	return nil
}

func (f *Fake) EditVolume(ctx context.Context, req nodeapi.VolumeEdit) (e *filesystempb.EntryInfo, err error) {
	err = f.inVolume("edit volume", req.Volume, req.Path, func(t *tree, p string) error {
		switch req.Op {
		case nodeapi.VolumeMkdir:
			if n, ok := t.nodes[p]; ok {
				if !n.dir || !req.Parents {
					return agentErr(http.StatusConflict, "%s already exists", p)
				}
			} else {
				if err := f.parentLocked(t, p, req.Parents); err != nil {
					return err
				}
				t.nodes[p] = &fnode{dir: true, mtime: time.Now()}
			}
		case nodeapi.VolumeRemove:
			if p == "/" {
				return agentErr(http.StatusBadRequest, "the volume's top directory cannot be removed")
			}
			if _, ok := t.nodes[p]; !ok {
				return missing(p)
			}
			for q := range t.nodes {
				if q == p || strings.HasPrefix(q, p+"/") {
					delete(t.nodes, q)
				}
			}
			return nil
		case nodeapi.VolumeStat, nodeapi.VolumeChattr:
			if _, ok := t.nodes[p]; !ok {
				return missing(p)
			}
		default:
			return agentErr(http.StatusBadRequest, "unknown volume operation %q", req.Op)
		}
		e = t.entry(p, t.nodes[p])
		return nil
	})
	return e, err
}

// Mounts reports the volume mounts a sandbox was last started or restored
// with.
func (f *Fake) Mounts(id string) []nodeapi.VolumeMount {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mounts[id]
}

// mountLocked checks a sandbox's mounts as the node does and records
// them; f.mu is held.
func (f *Fake) mountLocked(id string, mounts []nodeapi.VolumeMount) error {
	if err := nodeapi.CheckMounts(mounts); err != nil {
		return agentErr(http.StatusBadRequest, "%s", err.Error())
	}
	for _, m := range mounts {
		if _, ok := f.volumes[m.Volume]; !ok {
			return agentErr(http.StatusConflict, "volume %s is gone; it cannot be mounted at %s", path.Base(m.Volume), m.Path)
		}
	}
	if f.mounts == nil {
		f.mounts = map[string][]nodeapi.VolumeMount{}
	}
	f.mounts[id] = mounts
	return nil
}
