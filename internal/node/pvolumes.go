package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/storage"
)

// Persistent volumes are subvolumes under persistent/ with a qgroup limit
// of their own. They are never snapshotted with a sandbox: a sandbox's
// root volume and a persistent volume are separate subvolumes, and a bind
// mount is not part of the root volume's snapshot. Every file operation
// goes through an os.Root of the volume, so no path a client names (nor
// a symlink a sandbox planted) leads outside it.

// volumeRootMode is the mode of a new volume's top directory: every user
// of every sandbox mounting it may write there (E2B's SDKs act as "user",
// not root).
const volumeRootMode = 0o777

// CreateVolume makes an empty persistent volume limited to diskMB MiB.
func (n *Node) CreateVolume(_ context.Context, name string, diskMB int) error {
	if err := checkPersistent(name); err != nil {
		return err
	}
	if n.cfg.Volumes.Exists(name) {
		return fmt.Errorf("create volume %s: %w", name, nodeapi.ErrExists)
	}
	p, err := n.cfg.Volumes.Create(name)
	if err != nil {
		return err
	}
	if diskMB > 0 {
		if err := n.cfg.Volumes.SetLimit(name, int64(diskMB)<<20); err != nil {
			if !errors.Is(err, storage.ErrNoLimits) {
				_ = n.cfg.Volumes.Delete(name)
				return fmt.Errorf("create volume %s: %w", name, err)
			}
			n.log.Warn("volume size limit not enforced by this storage backend", "volume", name)
		}
	}
	if err := os.Chmod(p, volumeRootMode); err != nil {
		_ = n.cfg.Volumes.Delete(name)
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	return nil
}

// VolumeUsage reports the bytes a persistent volume holds.
func (n *Node) VolumeUsage(_ context.Context, name string) (int64, error) {
	if err := checkPersistent(name); err != nil {
		return 0, err
	}
	if !n.cfg.Volumes.Exists(name) {
		return 0, &AgentError{Status: http.StatusNotFound, Message: "volume is gone"}
	}
	return n.cfg.Volumes.Usage(name)
}

// WriteVolumeFile writes a regular file of a persistent volume.
func (n *Node) WriteVolumeFile(_ context.Context, req nodeapi.VolumeEdit, r io.Reader) (*filesystempb.EntryInfo, error) {
	root, rel, err := n.persistentRoot(req)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if rel == "." {
		return nil, &AgentError{Status: http.StatusBadRequest, Message: "/ is the volume's top directory, not a file"}
	}
	if err := n.parents(root, rel, req); err != nil {
		return nil, err
	}
	if fi, err := root.Lstat(rel); err == nil && !fi.Mode().IsRegular() {
		return nil, &AgentError{Status: http.StatusBadRequest, Message: req.Path + " exists and is not a regular file"}
	}
	mode := os.FileMode(0o644)
	if req.Mode != nil {
		mode = os.FileMode(*req.Mode & 0o7777)
	}
	// Written beside the file and renamed over it: a write that fails
	// (the volume full, the client gone) leaves the old file as it was
	// and nothing half-written that would hold the volume's room.
	tmp := path.Join(path.Dir(rel), ".space-upload-"+randomHex(8))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return nil, pvolumeError(req.Path, err)
	}
	_, err = io.Copy(f, r)
	if err == nil {
		// Durable before the answer, as the sandbox files API is.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(tmp, mode) // exact, not under the umask
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		_ = root.Remove(tmp)
		// The freed room counts against the qgroup only once the
		// transaction commits.
		_ = n.cfg.Volumes.Sync(req.Volume)
		return nil, pvolumeError(req.Path, err)
	}
	if err := chattr(root, rel, nodeapi.VolumeEdit{UID: req.UID, GID: req.GID, Path: req.Path}); err != nil {
		return nil, err
	}
	return statEntry(root, rel, req.Path)
}

// EditVolume makes a directory, removes a path, changes owner and mode,
// or describes a path.
func (n *Node) EditVolume(_ context.Context, req nodeapi.VolumeEdit) (*filesystempb.EntryInfo, error) {
	root, rel, err := n.persistentRoot(req)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	switch req.Op {
	case nodeapi.VolumeStat:
		return statEntry(root, rel, req.Path)
	case nodeapi.VolumeMkdir:
		if rel == "." {
			return statEntry(root, rel, req.Path)
		}
		if err := n.parents(root, rel, req); err != nil {
			return nil, err
		}
		mode := os.FileMode(0o755)
		if req.Mode != nil {
			mode = os.FileMode(*req.Mode & 0o7777)
		}
		if err := root.Mkdir(rel, mode); err != nil {
			fi, serr := root.Lstat(rel)
			if !errors.Is(err, fs.ErrExist) || !req.Parents || serr != nil || !fi.IsDir() {
				if errors.Is(err, fs.ErrExist) {
					return nil, &AgentError{Status: http.StatusConflict, Message: req.Path + " already exists"}
				}
				return nil, pvolumeError(req.Path, err)
			}
		} else if req.Mode != nil {
			// Mkdir's mode passes through the umask; the asked mode is exact.
			_ = root.Chmod(rel, mode)
		}
		if err := chattr(root, rel, nodeapi.VolumeEdit{UID: req.UID, GID: req.GID, Path: req.Path}); err != nil {
			return nil, err
		}
		return statEntry(root, rel, req.Path)
	case nodeapi.VolumeRemove:
		if rel == "." {
			return nil, &AgentError{Status: http.StatusBadRequest, Message: "the volume's top directory cannot be removed; delete the volume instead"}
		}
		if _, err := root.Lstat(rel); err != nil {
			return nil, pvolumeError(req.Path, err)
		}
		if err := root.RemoveAll(rel); err != nil {
			return nil, pvolumeError(req.Path, err)
		}
		return nil, nil
	case nodeapi.VolumeChattr:
		if _, err := root.Lstat(rel); err != nil {
			return nil, pvolumeError(req.Path, err)
		}
		if err := chattr(root, rel, req); err != nil {
			return nil, err
		}
		return statEntry(root, rel, req.Path)
	}
	return nil, &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("unknown volume operation %q", req.Op)}
}

// parents checks (or, with req.Parents, makes) the directory rel goes in.
func (n *Node) parents(root *os.Root, rel string, req nodeapi.VolumeEdit) error {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	if req.Parents {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return pvolumeError(req.Path, err)
		}
		return nil
	}
	fi, err := root.Stat(dir)
	if err != nil {
		return pvolumeError(path.Dir(req.Path), err)
	}
	if !fi.IsDir() {
		return &AgentError{Status: http.StatusBadRequest, Message: path.Dir(req.Path) + " is not a directory"}
	}
	return nil
}

// chattr applies the owner and mode a request asks for.
func chattr(root *os.Root, rel string, req nodeapi.VolumeEdit) error {
	if req.UID != nil || req.GID != nil {
		uid, gid := -1, -1
		if req.UID != nil {
			uid = int(*req.UID)
		}
		if req.GID != nil {
			gid = int(*req.GID)
		}
		if err := root.Lchown(rel, uid, gid); err != nil {
			return pvolumeError(req.Path, err)
		}
	}
	if req.Mode != nil {
		if err := root.Chmod(rel, os.FileMode(*req.Mode&0o7777)); err != nil {
			return pvolumeError(req.Path, err)
		}
	}
	return nil
}

// statEntry describes rel (without following a final symlink).
func statEntry(root *os.Root, rel, p string) (*filesystempb.EntryInfo, error) {
	fi, err := root.Lstat(rel)
	if err != nil {
		return nil, pvolumeError(p, err)
	}
	e := volumeEntry(cleanAbs(p), fi)
	if fi.Mode()&os.ModeSymlink != 0 {
		if t, err := root.Readlink(rel); err == nil {
			e.SymlinkTarget = &t
		}
	}
	fillOwner(e, fi)
	return e, nil
}

func cleanAbs(p string) string { return path.Clean("/" + p) }

// persistentRoot opens a persistent volume for a file operation.
func (n *Node) persistentRoot(req nodeapi.VolumeEdit) (*os.Root, string, error) {
	if err := checkPersistent(req.Volume); err != nil {
		return nil, "", err
	}
	if !strings.HasPrefix(req.Path, "/") || strings.ContainsRune(req.Path, 0) || len(req.Path) > 4096 {
		return nil, "", &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("volume paths must be absolute, at most 4096 bytes, without NUL: %.64q", req.Path)}
	}
	if !n.cfg.Volumes.Exists(req.Volume) {
		return nil, "", &AgentError{Status: http.StatusNotFound, Message: "volume is gone"}
	}
	root, err := os.OpenRoot(n.cfg.Volumes.Path(req.Volume))
	if err != nil {
		n.log.Error("open persistent volume", "volume", req.Volume, "err", err)
		return nil, "", errors.New("cannot open the volume")
	}
	rel := strings.TrimPrefix(path.Clean(req.Path), "/")
	if rel == "" {
		rel = "."
	}
	return root, rel, nil
}

// pvolumeError describes a failed operation on a volume by the client's
// path only, never the node's.
func pvolumeError(p string, err error) error {
	var pe *fs.PathError
	msg := "failed"
	if errors.As(err, &pe) {
		msg = pe.Err.Error()
	} else if le := (*os.LinkError)(nil); errors.As(err, &le) {
		msg = le.Err.Error()
	}
	status := http.StatusBadRequest
	switch {
	case errors.Is(err, fs.ErrNotExist):
		status = http.StatusNotFound
	case errors.Is(err, fs.ErrExist):
		status = http.StatusConflict
	case isNoSpace(err):
		status = http.StatusInsufficientStorage
		msg = "the volume is full (its size limit is reached)"
	}
	return &AgentError{Status: status, Message: fmt.Sprintf("%s in volume: %s", p, msg)}
}

// checkPersistent refuses a name that is not a persistent volume's.
func checkPersistent(name string) error {
	if err := nodeapi.ValidName(name); err != nil {
		return err
	}
	if !strings.HasPrefix(name, "persistent/") || strings.Count(name, "/") != 1 {
		return fmt.Errorf("%w: %q is not a persistent volume", nodeapi.ErrInvalidName, name)
	}
	return nil
}

// runtimeMounts resolves a sandbox's volume mounts to host directories and
// makes their mount points inside its root volume (through an os.Root, so
// a symlink in the sandbox's filesystem cannot send the mkdir elsewhere).
// A backend that boots a disk image (runtime.BlockRootfs) has no tree on
// the host to make them in: its guest makes them in its own filesystem.
func (n *Node) runtimeMounts(backend runtime.Runtime, rootVolume string, mounts []nodeapi.VolumeMount) ([]runtime.Mount, error) {
	if len(mounts) == 0 {
		return nil, nil
	}
	if err := nodeapi.CheckMounts(mounts); err != nil {
		return nil, &AgentError{Status: http.StatusBadRequest, Message: err.Error()}
	}
	var out []runtime.Mount
	if _, block := backend.(runtime.BlockRootfs); block {
		for _, m := range mounts {
			if !n.cfg.Volumes.Exists(m.Volume) {
				return nil, volumeGone(m)
			}
			out = append(out, runtime.Mount{Source: n.cfg.Volumes.Path(m.Volume), Destination: m.Path, ReadOnly: m.ReadOnly})
		}
		return out, nil
	}
	rootfs, err := os.OpenRoot(n.cfg.Volumes.Path(rootVolume))
	if err != nil {
		return nil, fmt.Errorf("open root volume for mount points: %w", err)
	}
	defer rootfs.Close()
	for _, m := range mounts {
		if !n.cfg.Volumes.Exists(m.Volume) {
			return nil, volumeGone(m)
		}
		rel := strings.TrimPrefix(m.Path, "/")
		if err := rootfs.MkdirAll(rel, 0o755); err != nil {
			return nil, &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("cannot make the mount point %s: %v", m.Path, unwrapPath(err))}
		}
		// MkdirAll follows symlinks inside the root; the mount point
		// itself must be a real directory, not a link the runtime would
		// resolve on its own.
		if fi, err := rootfs.Lstat(rel); err != nil || !fi.IsDir() {
			return nil, &AgentError{Status: http.StatusBadRequest, Message: fmt.Sprintf("the mount point %s is not a directory", m.Path)}
		}
		out = append(out, runtime.Mount{Source: n.cfg.Volumes.Path(m.Volume), Destination: m.Path, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

func volumeGone(m nodeapi.VolumeMount) error {
	return &AgentError{Status: http.StatusConflict, Message: fmt.Sprintf("volume %s is gone; it cannot be mounted at %s", path.Base(m.Volume), m.Path)}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// fillOwner records the entry's numeric owner and group (a volume has no
// passwd file to name them by).
func fillOwner(e *filesystempb.EntryInfo, fi fs.FileInfo) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = strconv.FormatUint(uint64(st.Uid), 10)
		e.Group = strconv.FormatUint(uint64(st.Gid), 10)
	}
}

// isNoSpace reports a write refused for want of room: the volume's qgroup
// limit (EDQUOT) or a full filesystem (ENOSPC).
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.ENOSPC)
}
