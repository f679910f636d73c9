package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/space-platform/space/internal/nodeapi"
)

// Checkpoint images are named by the control plane ("<sandbox>/suspend",
// "<sandbox>/snapshots/<id>", "<sandbox>/branches/<id>") and live under
// the node's images directory by that name. Template images live apart,
// under templatesDir, and are not checkpoint images: no name reaches them.
const (
	templatesDir  = "templates"
	partialSuffix = ".partial"
)

// imagePath resolves a checkpoint image's name under the images directory.
func (n *Node) imagePath(name string) (string, error) {
	if err := nodeapi.ValidName(name); err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	first, _, _ := strings.Cut(name, "/")
	if first == templatesDir || strings.HasSuffix(name, partialSuffix) {
		return "", fmt.Errorf("image: %w: %q is reserved", nodeapi.ErrInvalidName, name)
	}
	return filepath.Join(n.cfg.ImagesDir, filepath.FromSlash(name)), nil
}

// Image reports whether a checkpoint image is complete and how big it is.
func (n *Node) Image(_ context.Context, name string) (nodeapi.ImageInfo, error) {
	dir, err := n.imagePath(name)
	if err != nil {
		return nodeapi.ImageInfo{}, err
	}
	return nodeapi.ImageInfo{Complete: imageComplete(dir), SizeBytes: dirSize(dir)}, nil
}

func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// Images lists the checkpoint images the node holds, complete or torn: a
// directory that holds files (an image holds no directories), or the
// scratch directory of a checkpoint that never finished (listed by the
// name it was meant for).
func (n *Node) Images(context.Context) ([]string, error) {
	seen, checked := map[string]bool{}, map[string]bool{}
	root := n.cfg.ImagesDir
	add := func(dir string) {
		rel, _ := filepath.Rel(root, dir)
		name, _ := strings.CutSuffix(filepath.ToSlash(rel), partialSuffix)
		seen[name] = true
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case p == root:
			return nil
		case !d.IsDir():
			// Only a directory of files: one that also holds directories
			// (a sandbox's, its snapshots') is no image, whatever else
			// lies in it.
			if dir := filepath.Dir(p); dir != root && !checked[dir] {
				checked[dir] = true
				if isLeaf(dir) {
					add(dir)
				}
			}
			return nil
		case filepath.Dir(p) == root && d.Name() == templatesDir:
			return fs.SkipDir
		case strings.HasSuffix(d.Name(), partialSuffix) || imageComplete(p):
			add(p)
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// isLeaf reports whether dir holds no directories.
func isLeaf(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() {
			return false
		}
	}
	return true
}

// DeleteImage removes a checkpoint image (and the scratch directory of a
// checkpoint into it that never finished), then the directories above it
// that it leaves empty (<sandbox>/snapshots, <sandbox>), so that no empty
// directory outlives what it held. A missing image is not an error.
func (n *Node) DeleteImage(_ context.Context, name string) error {
	dir, err := n.imagePath(name)
	if err != nil {
		return err
	}
	for _, d := range []string{dir, dir + partialSuffix} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("delete image %s: %w", name, err)
		}
	}
	root := n.cfg.ImagesDir + string(filepath.Separator)
	for p := filepath.Dir(dir); strings.HasPrefix(p, root); p = filepath.Dir(p) {
		if os.Remove(p) != nil {
			break // not empty, so neither is what holds it
		}
	}
	n.collectAgents()
	return nil
}

// pruneImageDirs removes the directories under the images directory that
// hold nothing (what a crash between a delete and its parents' removal
// leaves), deepest first. Template images are not looked at.
func (n *Node) pruneImageDirs() error {
	entries, err := os.ReadDir(n.cfg.ImagesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != templatesDir {
			pruneEmpty(filepath.Join(n.cfg.ImagesDir, e.Name()))
		}
	}
	return nil
}

// pruneEmpty removes dir if, once its empty subdirectories are removed, it
// holds nothing; it reports whether dir is gone.
func pruneEmpty(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	left := len(entries)
	for _, e := range entries {
		if e.IsDir() && pruneEmpty(filepath.Join(dir, e.Name())) {
			left--
		}
	}
	return left == 0 && os.Remove(dir) == nil
}
