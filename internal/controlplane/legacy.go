package controlplane

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/store"
)

// Versions before the node contract recorded checkpoint images by their
// path on the host (image_dir); images are named on the node now, and the
// name of such an image is its path below the old images directory. The
// records are converted once, when Recover loads them, so existing data
// directories keep their suspended sandboxes and snapshots.

// legacyImage converts a recorded image path to its name; "" when there
// was none, or when the path is not below Config.LegacyImagesDir (the
// image cannot be found then).
func (cp *ControlPlane) legacyImage(dir string) string {
	if dir == "" {
		return ""
	}
	root := cp.cfg.LegacyImagesDir
	rel, err := filepath.Rel(root, dir)
	if root == "" || err != nil || strings.HasPrefix(rel, "..") {
		cp.log.Warn("recorded image is not in the images directory; dropped", "image", dir, "images_dir", root)
		return ""
	}
	name := filepath.ToSlash(rel)
	if nodeapi.ValidName(name) != nil {
		cp.log.Warn("recorded image has no valid name; dropped", "image", dir)
		return ""
	}
	return name
}

// convertLegacyImages converts the image paths of the sandboxes in all (as
// loaded) and of every snapshot, and persists what changed.
func (cp *ControlPlane) convertLegacyImages(all []Sandbox) error {
	for i := range all {
		s := &all[i]
		changed := false
		if s.LegacyImageDir != "" {
			if s.Image == "" {
				s.Image = cp.legacyImage(s.LegacyImageDir)
			}
			s.LegacyImageDir, changed = "", true
		}
		if src := s.Source; src != nil && src.LegacyImageDir != "" {
			c := *src
			if c.Image == "" {
				c.Image = cp.legacyImage(c.LegacyImageDir)
			}
			c.LegacyImageDir = ""
			s.Source, changed = &c, true
		}
		if changed {
			if err := cp.cfg.Store.Put(sandboxBucket, s.ID, *s); err != nil {
				return fmt.Errorf("convert the image of sandbox %s: %w", s.ID, err)
			}
		}
	}
	snaps, err := store.All[Snapshot](cp.cfg.Store, snapshotBucket)
	if err != nil {
		return err
	}
	for _, snap := range snaps {
		if snap.LegacyImageDir == "" {
			continue
		}
		if snap.Image == "" {
			snap.Image = cp.legacyImage(snap.LegacyImageDir)
		}
		snap.LegacyImageDir = ""
		if err := cp.cfg.Store.Put(snapshotBucket, snapshotKey(snap.SandboxID, snap.Name), snap); err != nil {
			return fmt.Errorf("convert the image of snapshot %s: %w", snap.ID, err)
		}
	}
	return nil
}
