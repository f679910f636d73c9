package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/space-platform/space/pkg/client"
)

func runCp(ctx context.Context, args []string) error {
	fs := newFlagSet("space cp SRC DST", `
Copy a file between the local machine and a sandbox, or between sandboxes.
A sandbox path is written ID:/absolute/path; "-" is stdin (as SRC) or stdout
(as DST). When DST is a directory (a local directory, or a sandbox path
ending in "/"), the file keeps its name. Only files are copied, not
directories. A local file whose name has a colon is written ./name:x.`)
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) != 2 {
		return fs.usageErrorf("cp needs a source and a destination")
	}
	src, err := parseCopyEndpoint(positional[0])
	if err != nil {
		return fs.usageErrorf("%s", err)
	}
	dst, err := parseCopyEndpoint(positional[1])
	if err != nil {
		return fs.usageErrorf("%s", err)
	}
	if !src.remote() && !dst.remote() {
		return fs.usageErrorf("one side of cp must be a sandbox path such as ID:/path")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	return copyFile(ctx, c, src, dst)
}

// copyEndpoint is one side of a cp: a sandbox path, a local path, or "-".
type copyEndpoint struct {
	sandboxID string // empty for local paths and stdio
	path      string
	stdio     bool
}

func (e copyEndpoint) remote() bool { return e.sandboxID != "" }

func (e copyEndpoint) String() string {
	switch {
	case e.stdio:
		return "-"
	case e.remote():
		return e.sandboxID + ":" + e.path
	}
	return e.path
}

// parseCopyEndpoint reads "-", "ID:/path" or a local path. Text before the
// first colon is a sandbox ID only when it has no "/", so "./a:b" and
// "/tmp/a:b" stay local.
func parseCopyEndpoint(s string) (copyEndpoint, error) {
	if s == "-" {
		return copyEndpoint{stdio: true}, nil
	}
	if s == "" {
		return copyEndpoint{}, errors.New("empty path")
	}
	id, remotePath, found := strings.Cut(s, ":")
	if !found || id == "" || strings.Contains(id, "/") {
		return copyEndpoint{path: s}, nil
	}
	if remotePath == "" {
		return copyEndpoint{}, fmt.Errorf("%q has no path after the sandbox ID; write %s:/path", s, id)
	}
	if !strings.HasPrefix(remotePath, "/") {
		return copyEndpoint{}, fmt.Errorf("sandbox path %q must be absolute, such as %s:/%s", s, id, remotePath)
	}
	return copyEndpoint{sandboxID: id, path: remotePath}, nil
}

func copyFile(ctx context.Context, c *client.Client, src, dst copyEndpoint) error {
	in, err := openSource(ctx, c, src)
	if err != nil {
		return err
	}
	defer in.Close()
	name := path.Base(filepath.ToSlash(src.path))
	switch {
	case dst.stdio:
		if _, err := io.Copy(stdout, in); err != nil {
			return fmt.Errorf("copy %s to stdout: %w", src, err)
		}
		return nil
	case dst.remote():
		target := dst.path
		if strings.HasSuffix(target, "/") {
			if src.stdio {
				return fmt.Errorf("cannot name a file read from stdin: give %s a file name", dst)
			}
			target += name
		}
		if _, err := c.WriteFile(ctx, dst.sandboxID, target, in); err != nil {
			return fmt.Errorf("copy %s to %s:%s: %w", src, dst.sandboxID, target, err)
		}
		return nil
	default:
		return writeLocalFile(dst.path, name, in, src)
	}
}

// openSource opens the bytes to copy, refusing directories with a sentence
// that says why.
func openSource(ctx context.Context, c *client.Client, src copyEndpoint) (io.ReadCloser, error) {
	switch {
	case src.stdio:
		return io.NopCloser(stdin), nil
	case src.remote():
		body, err := c.ReadFile(ctx, src.sandboxID, src.path)
		if errors.Is(err, client.ErrIsDirectory) {
			return nil, fmt.Errorf("%s is a directory; space cp copies files only", src)
		}
		return body, err
	}
	info, err := os.Stat(src.path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return nil, fmt.Errorf("%s is a directory; space cp copies files only", src)
	}
	return os.Open(src.path)
}

// writeLocalFile writes in to target, or to target/name when target is a
// directory. A file that did not exist before is removed again on failure
// so that an interrupted download leaves nothing half-written behind.
func writeLocalFile(target, name string, in io.Reader, src copyEndpoint) error {
	if info, err := os.Stat(target); err == nil && info.IsDir() {
		target = filepath.Join(target, name)
	} else if strings.HasSuffix(target, string(filepath.Separator)) {
		return fmt.Errorf("local directory %s does not exist", target)
	}
	_, statErr := os.Stat(target)
	existed := statErr == nil
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	_, copyErr := io.Copy(out, in)
	closeErr := out.Close()
	if err := errors.Join(copyErr, closeErr); err != nil {
		if !existed {
			os.Remove(target)
		}
		return fmt.Errorf("copy %s to %s: %w", src, target, err)
	}
	return nil
}
