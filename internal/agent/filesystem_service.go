package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/agent/gen/filesystempb/filesystempbconnect"
	"github.com/space-platform/space/internal/dirlist"
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
	if err := asUser(u, func() error { return mkdirAllOwned(path, u) }); err != nil {
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
	if err := refuseRoot("move", src); err != nil {
		return nil, err
	}
	if err := refuseRoot("move onto", dst); err != nil {
		return nil, err
	}
	err = asUser(u, func() error {
		if _, err := os.Lstat(src); err != nil {
			return err
		}
		if err := mkdirAllOwned(filepath.Dir(dst), u); err != nil {
			return err
		}
		return os.Rename(src, dst)
	})
	if err != nil {
		return nil, fsError("move", err)
	}
	info, err := s.agent.entryInfo(dst)
	if err != nil {
		return nil, fsError("stat moved entry", err)
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: info}), nil
}

func (s *filesystemService) Remove(_ context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	u, path, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := refuseRoot("remove", path); err != nil {
		return nil, err
	}
	// Like envd: recursive, and removing a missing path is not an error.
	if err := asUser(u, func() error { return os.RemoveAll(path) }); err != nil {
		return nil, fsError("remove", err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

// refuseRoot refuses to op the sandbox's root directory (a path that
// resolves to "/"): removing it would empty the whole filesystem as far as
// the user may, and renaming it cannot succeed; either is the client's
// mistake (400), not the agent's failure.
func refuseRoot(op, path string) error {
	if path == "/" {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cannot %s / (the sandbox's root directory)", op))
	}
	return nil
}

// maxListDirEntries bounds an E2B ListDir answer, which envd returns in
// one message: past it the agent would hold (and the client decode) an
// answer of unbounded size. Larger trees are listed in pages through the
// agent's GET /list (the space API's GET .../files?cursor=).
const maxListDirEntries = 50_000

// ListDir lists entries up to depth levels below path (0 is treated as 1:
// direct children), children of each directory sorted by name like envd.
// Symlinked directories are not descended into, so link cycles cannot
// loop. A tree of more than maxListDirEntries entries is refused with
// resource_exhausted rather than truncated, so no client mistakes a part
// for the whole.
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
	// Each level holds an open directory; past dirlist.MaxDepth (64) the
	// depth is clipped, which for a real tree changes nothing.
	depth := min(max(int(req.Msg.GetDepth()), 1), dirlist.MaxDepth)
	var entries []*filesystempb.EntryInfo
	err = s.walk(ctx, root, depth, func(path string, fi fs.FileInfo) error {
		if len(entries) == maxListDirEntries {
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"list dir: %s holds more than %d entries; list it in pages (GET /v1/sandboxes/{id}/files?path=...&cursor=...)", root, maxListDirEntries))
		}
		entries = append(entries, s.agent.entryInfoFrom(path, fi))
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(entries, func(a, b *filesystempb.EntryInfo) int { return comparePreOrder(a.GetPath(), b.GetPath()) })
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: entries}), nil
}

// comparePreOrder orders paths component by component, which is pre-order
// with each directory's children sorted by name ("a", "a/b", "a-c").
func comparePreOrder(a, b string) int {
	for {
		ha, ta, moreA := strings.Cut(a, "/")
		hb, tb, moreB := strings.Cut(b, "/")
		if c := strings.Compare(ha, hb); c != 0 {
			return c
		}
		switch {
		case !moreA && !moreB:
			return 0
		case !moreA:
			return -1
		case !moreB:
			return 1
		}
		a, b = ta, tb
	}
}

// walk visits the tree below dir, reading each directory in chunks so
// that a huge directory is never held twice (names and entries).
func (s *filesystemService) walk(ctx context.Context, dir string, depth int, visit func(string, fs.FileInfo) error) error {
	if err := ctx.Err(); err != nil {
		return connect.NewError(connect.CodeCanceled, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fsError("read dir", err)
	}
	defer f.Close()
	for {
		children, err := f.ReadDir(256)
		for _, child := range children {
			path := filepath.Join(dir, child.Name())
			fi, err := child.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while listing
			}
			if err != nil {
				return fsError("stat", err)
			}
			if err := visit(path, fi); err != nil {
				return err
			}
			if depth > 1 && fi.IsDir() {
				if err := s.walk(ctx, path, depth-1, visit); err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(children) == 0) {
			return nil
		}
		if err != nil {
			return fsError("read dir", err)
		}
	}
}
