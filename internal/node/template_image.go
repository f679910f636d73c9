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
	ImageDir    string `json:"-"`
}

// Resources a template is booted with. A restored sandbox keeps the CPU
// count and memory size its kernel saw at boot; the host enforces each
// sandbox's own limits through its cgroup.
var templateBootLimits = runtime.Limits{VCPUs: 1, MemoryMB: 2048, Pids: 4096}

const imageMetaFile = "meta.json"

func (n *Node) templateImageDir(templateID string) string {
	return filepath.Join(n.cfg.ImagesDir, "templates", templateID)
}

func templateImageVolume(templateID string) string { return "templates/" + templateID + "-booted" }

// templateLock serialises work on one template's image.
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

// PrepareTemplate makes the template's pre-booted image now rather than at
// the template's first warm create.
func (n *Node) PrepareTemplate(ctx context.Context, tpl TemplateSpec) error {
	if err := checkTemplate(tpl); err != nil {
		return err
	}
	_, err := n.templateImage(ctx, tpl)
	return err
}

// templateImage returns the template's pre-booted image, booting and
// capturing it first if there is none yet.
func (n *Node) templateImage(ctx context.Context, tpl TemplateSpec) (*TemplateImage, error) {
	l := n.templateLock(tpl.ID)
	l.Lock()
	defer l.Unlock()
	if img, err := n.loadTemplateImage(tpl.ID); err == nil {
		return img, nil
	}
	return n.bootTemplateImage(ctx, tpl)
}

func (n *Node) loadTemplateImage(templateID string) (*TemplateImage, error) {
	dir := n.templateImageDir(templateID)
	data, err := os.ReadFile(filepath.Join(dir, imageMetaFile))
	if err != nil {
		return nil, err
	}
	var img TemplateImage
	if err := json.Unmarshal(data, &img); err != nil {
		return nil, fmt.Errorf("template image %s: %w", templateID, err)
	}
	if !imageComplete(dir) || !n.cfg.Volumes.Exists(img.Volume) {
		return nil, fmt.Errorf("template image %s is incomplete", templateID)
	}
	if img.AgentDigest != n.agentDigest {
		return nil, fmt.Errorf("template image %s was booted with another agent", templateID)
	}
	img.ImageDir = dir
	return &img, nil
}

// bootTemplateImage boots the template in a throwaway sandbox, waits for
// its start command and ready check, captures it, and removes the sandbox.
func (n *Node) bootTemplateImage(ctx context.Context, tpl TemplateSpec) (*TemplateImage, error) {
	if err := n.dropTemplateImage(tpl.ID); err != nil {
		return nil, err
	}
	bootID := "tpl" + tpl.ID[:min(len(tpl.ID), 17)]
	token := randomHex(32)
	if err := n.create(ctx, CreateSpec{ID: bootID, Template: tpl, AccessToken: token, Limits: templateBootLimits}); err != nil {
		return nil, fmt.Errorf("boot template %s: %w", tpl.ID, err)
	}
	defer func() {
		if err := n.release(context.WithoutCancel(ctx), bootID); err != nil {
			n.log.Error("remove template boot sandbox", "template", tpl.ID, "err", err)
		}
	}()
	dir := n.templateImageDir(tpl.ID)
	img := &TemplateImage{TemplateID: tpl.ID, Volume: templateImageVolume(tpl.ID), Token: token, CreatedAt: time.Now().UTC(),
		AgentDigest: n.agentDigest, ImageDir: dir}
	if err := n.capture(ctx, bootID, img.Volume, dir); err != nil {
		return nil, fmt.Errorf("capture template %s: %w", tpl.ID, err)
	}
	data, _ := json.Marshal(img)
	if err := writeFileSync(filepath.Join(dir, imageMetaFile), data); err != nil {
		return nil, fmt.Errorf("template image %s: %w", tpl.ID, err)
	}
	n.log.Info("template image ready", "template", tpl.ID)
	return img, nil
}

// TemplateImages lists the templates whose pre-booted image is complete.
func (n *Node) TemplateImages(context.Context) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(n.cfg.ImagesDir, "templates"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list template images: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && imageComplete(filepath.Join(n.cfg.ImagesDir, "templates", e.Name())) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// DropTemplateImage removes a template's image (the template was deleted
// or its image is stale). Sandboxes restored from it keep running: their
// volumes are independent snapshots.
func (n *Node) DropTemplateImage(_ context.Context, templateID string) error {
	if err := checkTemplateID(templateID); err != nil {
		return err
	}
	l := n.templateLock(templateID)
	l.Lock()
	defer l.Unlock()
	err := n.dropTemplateImage(templateID)
	n.collectAgents()
	return err
}

func (n *Node) dropTemplateImage(templateID string) error {
	var errs []error
	if err := os.RemoveAll(n.templateImageDir(templateID)); err != nil {
		errs = append(errs, err)
	}
	if err := n.cfg.Volumes.Delete(templateImageVolume(templateID)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drop template image %s: %w", templateID, err)
	}
	return nil
}

// createFromImage starts a sandbox as a restore of its template's image,
// then gives it its own identity.
func (n *Node) createFromImage(ctx context.Context, img *TemplateImage, spec CreateSpec, id Identity) error {
	err := n.resumeFrom(ctx, RestoreSpec{
		ID: spec.ID, FromVolume: img.Volume, Limits: spec.Limits, DiskMB: spec.DiskMB,
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
