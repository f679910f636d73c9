package template

import (
	"context"
	"fmt"
	"slices"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// A template is built for the backends its recipe names. The rootfs
// volume is every backend's source and gVisor's artifact as it is; a
// backend that boots from something else (the microVM's ext4 image and
// initramfs) makes it from the finished rootfs through its
// runtime.ImageBuilder, into a read-only volume of its own beside the
// rootfs.

// ArtifactVolume is the volume holding backend name's artifact of
// template id.
func ArtifactVolume(id, name string) string { return nodeapi.ArtifactVolume(rootfsVolume(id), name) }

// artifactVolumes are the artifact volumes any template id may have.
func artifactVolumes(id string) []string {
	var out []string
	for _, name := range runtime.Names() {
		if name != runtime.GVisor {
			out = append(out, ArtifactVolume(id, name))
		}
	}
	return out
}

// checkRuntimes refuses a recipe asking for a backend this server does not
// have: a template silently built without the artifact asked for would
// fail only at the first create.
func (m *Manager) checkRuntimes(names []string) error {
	for _, name := range names {
		if name == runtime.GVisor && m.cfg.Runtimes == nil {
			continue
		}
		if _, ok := m.cfg.Runtimes[name]; !ok {
			return fmt.Errorf("recipe: runtime: the %s runtime is not available on this server (it has %s)", name, m.availableRuntimes())
		}
	}
	return nil
}

func (m *Manager) availableRuntimes() string {
	if m.cfg.Runtimes == nil {
		return runtime.GVisor
	}
	var names []string
	for name := range m.cfg.Runtimes {
		names = append(names, name)
	}
	slices.Sort(names)
	return fmt.Sprint(names)
}

// artifactBuilders are the backends among names that make an artifact of
// their own, in the recipe's order.
func (m *Manager) artifactBuilders(names []string) []string {
	var out []string
	for _, name := range names {
		if m.cfg.Runtimes[name] != nil {
			out = append(out, name)
		}
	}
	return out
}

// prepareArtifacts has each backend that needs one make its artifact of
// the finished, read-only rootfs volume. On failure the artifacts made so
// far are removed.
func (m *Manager) prepareArtifacts(ctx context.Context, p *buildPlan, rootfs string, step func(string)) (err error) {
	vols := m.cfg.Volumes
	var made []string
	defer func() {
		if err != nil {
			for _, v := range made {
				_ = vols.Delete(v)
			}
		}
	}()
	for _, name := range m.artifactBuilders(p.recipe.Runtime.Names()) {
		step("make the " + name + " runtime's image")
		vol := ArtifactVolume(p.id, name)
		if err := vols.Delete(vol); err != nil {
			return err
		}
		out, err := vols.Create(vol)
		if err != nil {
			return fmt.Errorf("%s image: %w", name, err)
		}
		made = append(made, vol)
		if err := m.cfg.Runtimes[name].PrepareTemplate(ctx, vols.Path(rootfs), out); err != nil {
			return fmt.Errorf("%s image: %w", name, err)
		}
		if err := vols.Sync(vol); err != nil {
			return err
		}
		if err := vols.SetReadOnly(vol, true); err != nil {
			return err
		}
	}
	return nil
}
