package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/agent/gen/filesystempb/filesystempbconnect"
)

// filesystemService implements filesystem.Filesystem. Paths are resolved
// against the selected user's home; created entries belong to that user.
type filesystemService struct {
	agent *Agent
}

var _ filesystempbconnect.FilesystemHandler = (*filesystemService)(nil)

// resolve returns the request's user and p made absolute.
func (s *filesystemService) resolve(req connect.AnyRequest, p string) (*userAccount, string, error) {
	u, err := s.agent.userForRPC(req.Header())
	if err != nil {
		return nil, "", err
	}
	abs, err := resolvePath(p, u)
	if err != nil {
		return nil, "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	return u, abs, nil
}

func (s *filesystemService) Stat(_ context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	_, path, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	info, err := s.agent.entryInfo(path)
	if err != nil {
		return nil, fsError("stat", err)
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: info}), nil
}

func (s *filesystemService) MakeDir(_ context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	u, path, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("make dir: %s already exists", path))
	}
	if err := mkdirAllOwned(path, u); err != nil {
		return nil, fsError("make dir", err)
	}
	info, err := s.agent.entryInfo(path)
	if err != nil {
		return nil, fsError("stat new dir", err)
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: info}), nil
}

func (s *filesystemService) Move(_ context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	u, src, err := s.resolve(req, req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := resolvePath(req.Msg.GetDestination(), u)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if _, err := os.Lstat(src); err != nil {
		return nil, fsError("move", err)
	}
	if err := mkdirAllOwned(filepath.Dir(dst), u); err != nil {
		return nil, fsError("move", err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, fsError("move", err)
	}
	info, err := s.agent.entryInfo(dst)
	if err != nil {
		return nil, fsError("stat moved entry", err)
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: info}), nil
}

func (s *filesystemService) Remove(_ context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	_, path, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	// Like envd: recursive, and removing a missing path is not an error.
	if err := os.RemoveAll(path); err != nil {
		return nil, fsError("remove", err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

// ListDir lists entries up to depth levels below path (0 is treated as 1:
// direct children). Symlinked directories are not descended into, so link
// cycles cannot loop.
func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	_, root, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fsError("list dir", err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("list dir: %s is not a directory", root))
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	var entries []*filesystempb.EntryInfo
	err = s.walk(ctx, root, depth, func(path string, fi fs.FileInfo) {
		entries = append(entries, s.agent.entryInfoFrom(path, fi))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: entries}), nil
}

func (s *filesystemService) walk(ctx context.Context, dir string, depth int, visit func(string, fs.FileInfo)) error {
	if err := ctx.Err(); err != nil {
		return connect.NewError(connect.CodeCanceled, err)
	}
	children, err := os.ReadDir(dir)
	if err != nil {
		return fsError("read dir", err)
	}
	for _, child := range children {
		path := filepath.Join(dir, child.Name())
		fi, err := child.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listing
		}
		if err != nil {
			return fsError("stat", err)
		}
		visit(path, fi)
		if depth > 1 && fi.IsDir() {
			if err := s.walk(ctx, path, depth-1, visit); err != nil {
				return err
			}
		}
	}
	return nil
}
