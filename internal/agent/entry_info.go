package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
)

// entryInfo describes path without following a final symlink. A symlink is
// reported with the type of its target (FILE for a dangling link) and
// symlink_target set: Python SDK 2.21 drops entries of unknown type, so
// FILE_TYPE_SYMLINK is never sent. Metadata (metadata.go) is the file's
// own, or a symlink's target's.
func (a *Agent) entryInfo(path string) (*filesystempb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return a.entryInfoFrom(path, fi), nil
}

func (a *Agent) entryInfoFrom(path string, fi fs.FileInfo) *filesystempb.EntryInfo {
	info := &filesystempb.EntryInfo{
		Name:         filepath.Base(path),
		Path:         path,
		Type:         fileTypeOf(fi.Mode()),
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
		Metadata:     readMetadata(path),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.Owner = a.users.userName(st.Uid)
		info.Group = a.users.groupName(st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		info.Type = filesystempb.FileType_FILE_TYPE_FILE
		if target, err := os.Readlink(path); err == nil {
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(path), target)
			}
			target = filepath.Clean(target)
			info.SymlinkTarget = &target
		}
		if targetInfo, err := os.Stat(path); err == nil {
			info.Type = fileTypeOf(targetInfo.Mode())
		}
	}
	return info
}

func fileTypeOf(m fs.FileMode) filesystempb.FileType {
	if m.IsDir() {
		return filesystempb.FileType_FILE_TYPE_DIRECTORY
	}
	return filesystempb.FileType_FILE_TYPE_FILE
}

// fsError maps filesystem errors to the Connect codes the SDKs check
// (not_found for exists(), already_exists for makeDir()).
func fsError(op string, err error) error {
	wrapped := fmt.Errorf("%s: %w", op, err)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeNotFound, wrapped)
	case errors.Is(err, fs.ErrExist):
		return connect.NewError(connect.CodeAlreadyExists, wrapped)
	case errors.Is(err, fs.ErrPermission):
		return connect.NewError(connect.CodePermissionDenied, wrapped)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EXDEV):
		return connect.NewError(connect.CodeInvalidArgument, wrapped)
	case errors.Is(err, syscall.EBUSY):
		// A mount point (/proc, /dev, a volume): in use, not broken.
		return connect.NewError(connect.CodeFailedPrecondition, wrapped)
	case errors.Is(err, syscall.ENOSPC):
		return connect.NewError(connect.CodeResourceExhausted, wrapped)
	default:
		return connect.NewError(connect.CodeInternal, wrapped)
	}
}

// chownToUser gives a created file or directory to u. Without root (tests)
// chown fails with EPERM; the agent then leaves ownership as is.
func chownToUser(path string, u *userAccount) error {
	err := os.Lchown(path, int(u.UID), int(u.GID))
	if err != nil && !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

// mkdirAllOwned is os.MkdirAll that chowns every directory it creates to u.
func mkdirAllOwned(dir string, u *userAccount) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("mkdir %s: %w", dir, syscall.ENOTDIR)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAllOwned(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	return chownToUser(dir, u)
}
