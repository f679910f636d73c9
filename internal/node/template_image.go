package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/internal/runtime"
)

// TemplateImage is a template booted once (agent up, start command running,
// ready check passed) and checkpointed. A new sandbox is a restore of it onto
// a copy-on-write snapshot of the booted filesystem, not a boot.
type TemplateImage struct {
	TemplateID string    `json:"template_id"`
	Volume     string    `json:"volume"`
	Token      string    `json:"token"`
	CreatedAt  time.Time `json:"created_at"`
	// AgentDigest is the sha256 of the agent binary the image was booted
	// with (its memory holds that agent). An image of another agent is
	// booted anew: restored onto a different binary, the agent does not
	// come up, and it would not be the agent (and envd version) the node
	// now claims.
	AgentDigest string `json:"agent_digest,omitempty"`
	// Runtime is the backend that booted it (empty in images from before
	// there were several: the template's default).
	Runtime string `json:"runtime,omitempty"`
	// Limits are the guest's, on a bootSized backend: every sandbox
	// restored from the image has them.
	Limits   *runtime.Limits `json:"limits,omitempty"`
	ImageDir string          `json:"-"`
}

// Resources a template is booted with. A restored sandbox keeps the CPU
// count and memory size its kernel saw at boot; the host enforces each
// sandbox's own limits through its cgroup. A backend whose restores keep
// the boot's size outright (bootSized) boots at the sandboxes' own size.
var templateBootLimits = runtime.Limits{VCPUs: 1, MemoryMB: 2048, Pids: 4096}

// bootSized is a backend whose restored sandbox runs with the CPUs and
// memory its image was booted with, whatever the restore asks (a VM's RAM
// and CPUs are part of the machine its state describes). Its template
// images are booted at the size of the sandboxes restored from them, one
// image per size.
type bootSized interface{ RestoreKeepsBootLimits() bool }

// maxSizedImages bounds the guest sizes a template keeps images of on a
// bootSized backend: creates choose their size, and each new one would
// otherwise leave an image on disk. A create of a further size boots;
// pool refills (whose size the operator sets) are not bounded.
const maxSizedImages = 4

const imageMetaFile = "meta.json"

// imageKey names one pre-booted image of a template: the backend that
// booted it and, on a bootSized backend, the guest size it was booted at.
type imageKey struct {
	template string
	runtime  string
	vcpus    int
	memoryMB int
	// legacy is the default backend's unsized image, at the place every
	// template image had before there were several: its directory is the
	// template id, its volume the id and "-booted".
	legacy bool
}

// imageKeyFor is the image a sandbox of tpl on backend rt with limits is
// restored from.
func (n *Node) imageKeyFor(tpl TemplateSpec, rt string, limits runtime.Limits) imageKey {
	k := imageKey{template: tpl.ID, runtime: rt}
	if b, ok := n.cfg.Runtimes[rt].(bootSized); ok && b.RestoreKeepsBootLimits() {
		k.vcpus, k.memoryMB = max(limits.VCPUs, 1), limits.MemoryMB
		return k
	}
	k.legacy = rt == tpl.DefaultRuntime()
	return k
}

// suffix tells the key's image apart from the template's other images.
// '@' is in no template id (nodeapi.ValidName), so no id's legacy image
// is another's keyed one.
func (k imageKey) suffix() string {
	if k.legacy {
		return ""
	}
	s := "@" + k.runtime
	if k.memoryMB > 0 {
		s += fmt.Sprintf("-%dcpu-%dmb", k.vcpus, k.memoryMB)
	}
	return s
}

func (k imageKey) String() string { return k.template + k.suffix() }

// bootLimits are the limits the key's image is booted with.
func (k imageKey) bootLimits() runtime.Limits {
	if k.memoryMB > 0 {
		return runtime.Limits{VCPUs: k.vcpus, MemoryMB: k.memoryMB, Pids: templateBootLimits.Pids}
	}
	return templateBootLimits
}

func (n *Node) templateImageDir(k imageKey) string {
	return filepath.Join(n.cfg.ImagesDir, templatesDir, k.template+k.suffix())
}

func templateImageVolume(k imageKey) string {
	v := templatesDir + "/" + k.template + "-booted"
	if !k.legacy {
		v += "-" + k.suffix()[1:]
	}
	return v
}

// keysOnDisk are the keys of the template's image directories, complete
// or not; templateID "" lists every template's. A directory without '@'
// is a legacy image.
func (n *Node) keysOnDisk(templateID string) ([]imageKey, error) {
	entries, err := os.ReadDir(filepath.Join(n.cfg.ImagesDir, templatesDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list template images: %w", err)
	}
	var keys []imageKey
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), partialSuffix) {
			continue
		}
		id, rest, keyed := strings.Cut(e.Name(), "@")
		if templateID != "" && id != templateID {
			continue
		}
		k := imageKey{template: id, legacy: !keyed}
		if keyed {
			rt, size, _ := strings.Cut(rest, "-")
			k.runtime = rt
			if size != "" {
				if _, err := fmt.Sscanf(size, "%dcpu-%dmb", &k.vcpus, &k.memoryMB); err != nil || k.String() != e.Name() {
					continue // not a name this node makes
				}
			}
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// templateLock serialises work on one template's images.
func (n *Node) templateLock(templateID string) *sync.Mutex {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.templateLocks == nil {
		n.templateLocks = map[string]*sync.Mutex{}
	}
	l, ok := n.templateLocks[templateID]
	if !ok {
		l = &sync.Mutex{}
		n.templateLocks[templateID] = l
	}
	return l
}

// PrepareTemplate makes the template's pre-booted image on its default
// backend now rather than at the template's first warm create. A
// bootSized default backend gets none: the size its creates and pools
// ask for is not known yet.
func (n *Node) PrepareTemplate(ctx context.Context, tpl TemplateSpec) error {
	if err := checkTemplate(tpl); err != nil {
		return err
	}
	k := n.imageKeyFor(tpl, tpl.DefaultRuntime(), templateBootLimits)
	if k.memoryMB > 0 {
		return nil
	}
	_, err := n.templateImage(ctx, tpl, k, true)
	return err
}

// errTooManySizes refuses a further guest size's image (maxSizedImages).
var errTooManySizes = errors.New("the template has images of as many guest sizes as a node keeps")

// templateImage returns the template's pre-booted image of key k, booting
// and capturing it first if there is none yet. Unless unbounded, a new
// size of a bootSized backend is refused past maxSizedImages.
func (n *Node) templateImage(ctx context.Context, tpl TemplateSpec, k imageKey, unbounded bool) (*TemplateImage, error) {
	l := n.templateLock(tpl.ID)
	l.Lock()
	defer l.Unlock()
	if img, err := n.loadTemplateImage(k); err == nil {
		return img, nil
	}
	if k.memoryMB > 0 && !unbounded {
		keys, err := n.keysOnDisk(tpl.ID)
		if err != nil {
			return nil, err
		}
		sizes := 0
		for _, o := range keys {
			if o.runtime == k.runtime && o.memoryMB > 0 && o != k {
				sizes++
			}
		}
		if sizes >= maxSizedImages {
			return nil, fmt.Errorf("template image %s: %w", k, errTooManySizes)
		}
	}
	return n.bootTemplateImage(ctx, tpl, k)
}

func (n *Node) loadTemplateImage(k imageKey) (*TemplateImage, error) {
	dir := n.templateImageDir(k)
	data, err := os.ReadFile(filepath.Join(dir, imageMetaFile))
	if err != nil {
		return nil, err
	}
	var img TemplateImage
	if err := json.Unmarshal(data, &img); err != nil {
		return nil, fmt.Errorf("template image %s: %w", k, err)
	}
	if !imageComplete(dir) || !n.cfg.Volumes.Exists(img.Volume) {
		return nil, fmt.Errorf("template image %s is incomplete", k)
	}
	if img.AgentDigest != n.agentDigest {
		return nil, fmt.Errorf("template image %s was booted with another agent", k)
	}
	// A legacy image of a template whose default backend is bootSized
	// was booted at no sandbox's size; and an image is restored by the
	// backend that took it only.
	if rt, err := imageRuntime(dir); err != nil || rt != k.runtime {
		return nil, fmt.Errorf("template image %s was taken by the %s runtime", k, rt)
	}
	img.Runtime, img.ImageDir = k.runtime, dir
	return &img, nil
}

// bootTemplateImage boots the template in a throwaway sandbox on k's
// backend, waits for its start command and ready check, captures it, and
// removes the sandbox.
func (n *Node) bootTemplateImage(ctx context.Context, tpl TemplateSpec, k imageKey) (*TemplateImage, error) {
	if err := n.dropTemplateImage(k); err != nil {
		return nil, err
	}
	// One boot at a time per template (templateLock): the id is the
	// template's.
	bootID := "tpl" + tpl.ID[:min(len(tpl.ID), 17)]
	token := randomHex(32)
	limits := k.bootLimits()
	if err := n.create(ctx, CreateSpec{ID: bootID, Template: tpl, AccessToken: token, Limits: limits, Runtime: k.runtime}); err != nil {
		return nil, fmt.Errorf("boot template %s: %w", k, err)
	}
	defer func() {
		if err := n.release(context.WithoutCancel(ctx), bootID); err != nil {
			n.log.Error("remove template boot sandbox", "template", tpl.ID, "err", err)
		}
	}()
	dir := n.templateImageDir(k)
	img := &TemplateImage{TemplateID: tpl.ID, Runtime: k.runtime, Volume: templateImageVolume(k), Token: token,
		CreatedAt: time.Now().UTC(), AgentDigest: n.agentDigest, ImageDir: dir}
	if k.memoryMB > 0 {
		img.Limits = &limits
	}
	if err := n.capture(ctx, bootID, img.Volume, dir); err != nil {
		return nil, fmt.Errorf("capture template %s: %w", k, err)
	}
	data, _ := json.Marshal(img)
	if err := writeFileSync(filepath.Join(dir, imageMetaFile), data); err != nil {
		return nil, fmt.Errorf("template image %s: %w", k, err)
	}
	n.log.Info("template image ready", "template", tpl.ID, "image", k.String())
	return img, nil
}

// TemplateImages lists the templates with a complete pre-booted image, of
// any backend.
func (n *Node) TemplateImages(context.Context) ([]string, error) {
	keys, err := n.keysOnDisk("")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		if imageComplete(n.templateImageDir(k)) && !slices.Contains(out, k.template) {
			out = append(out, k.template)
		}
	}
	return out, nil
}

// DropTemplateImage removes a template's images, of every backend (the
// template was deleted or its images are stale). Sandboxes restored from
// them keep running: their volumes are independent snapshots.
func (n *Node) DropTemplateImage(_ context.Context, templateID string) error {
	if err := checkTemplateID(templateID); err != nil {
		return err
	}
	l := n.templateLock(templateID)
	l.Lock()
	defer l.Unlock()
	keys, err := n.keysOnDisk(templateID)
	errs := []error{err}
	// The legacy image's volume, even where its directory is gone.
	if !slices.Contains(keys, imageKey{template: templateID, legacy: true}) {
		keys = append(keys, imageKey{template: templateID, legacy: true})
	}
	for _, k := range keys {
		errs = append(errs, n.dropTemplateImage(k))
	}
	n.collectAgents()
	return errors.Join(errs...)
}

func (n *Node) dropTemplateImage(k imageKey) error {
	var errs []error
	if err := os.RemoveAll(n.templateImageDir(k)); err != nil {
		errs = append(errs, err)
	}
	if err := n.cfg.Volumes.Delete(templateImageVolume(k)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drop template image %s: %w", k, err)
	}
	return nil
}

// createFromImage starts a sandbox as a restore of its template's image,
// then gives it its own identity.
func (n *Node) createFromImage(ctx context.Context, img *TemplateImage, spec CreateSpec, id Identity) error {
	err := n.resumeFrom(ctx, RestoreSpec{
		ID: spec.ID, Runtime: img.Runtime, FromVolume: img.Volume, Limits: spec.Limits, DiskMB: spec.DiskMB,
		AccessToken: img.Token, NewIdentity: &id, Network: spec.Network,
	}, img.ImageDir)
	if err != nil {
		if cerr := n.release(context.WithoutCancel(ctx), spec.ID); cerr != nil {
			n.log.Error("cleanup after failed restore", "sandbox", spec.ID, "err", cerr)
		}
	}
	return err
}

func writeFileSync(path string, data []byte) error {
	return writeFileStream(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
