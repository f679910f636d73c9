package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/template"
)

// e2bTemplates builds templates from E2B's build API with the server's
// catalog (e2b.Templates). A build's record (its name, tags and, once
// triggered, the template ID it built) is a JSON file under
// <DataDir>/e2b/builds, so build status survives a restart. Uploaded file
// archives are kept per project under <DataDir>/cache/e2b-files, by the
// hash the SDK names them by: a project never sees another's uploads,
// and the template ID hashes their content, not that name.
type e2bTemplates struct {
	cat      catalog
	buildDir string
	filesDir string
	// filesBudget bounds a project's uploaded files; past it the least
	// recently used go (never one younger than filesGrace, which a build
	// may be about to read).
	filesBudget int64

	mu     sync.Mutex
	builds map[string]e2b.TemplateBuild // by build ID
}

var _ e2b.Templates = (*e2bTemplates)(nil)

// filesGrace is how long an uploaded archive is safe from eviction after
// its upload or last use.
const filesGrace = time.Hour

// newE2BTemplates opens the build records; maxUpload is the bound of one
// upload, and a project keeps four times as much (at least 1 GiB).
func newE2BTemplates(cat catalog, dataDir string, maxUpload int64) (*e2bTemplates, error) {
	if maxUpload <= 0 {
		maxUpload = e2b.DefaultMaxTemplateFiles
	}
	t := &e2bTemplates{cat: cat, buildDir: filepath.Join(dataDir, "e2b", "builds"),
		filesDir: filepath.Join(dataDir, "cache", "e2b-files"), builds: map[string]e2b.TemplateBuild{},
		filesBudget: max(4*maxUpload, 1<<30)}
	if err := os.MkdirAll(t.buildDir, 0o700); err != nil {
		return nil, fmt.Errorf("e2b template builds: %w", err)
	}
	entries, err := os.ReadDir(t.buildDir)
	if err != nil {
		return nil, fmt.Errorf("e2b template builds: %w", err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(t.buildDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("e2b template builds: %w", err)
		}
		var b e2b.TemplateBuild
		if err := json.Unmarshal(data, &b); err != nil || b.ID+".json" != e.Name() {
			continue // a torn write of a build never started
		}
		t.builds[b.ID] = b
	}
	return t, nil
}

// save persists a build record (write and rename: never torn).
func (t *e2bTemplates) save(b e2b.TemplateBuild) error {
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	tmp := filepath.Join(t.buildDir, "."+b.ID+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("save build %s: %w", b.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(t.buildDir, b.ID+".json")); err != nil {
		return fmt.Errorf("save build %s: %w", b.ID, err)
	}
	return nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (t *e2bTemplates) NewBuild(scope project.Scope, name string, tags []string) (e2b.TemplateBuild, error) {
	if _, builtin := t.cat.m.Names()[name]; builtin {
		return e2b.TemplateBuild{}, fmt.Errorf("%w: the name %s belongs to a built-in template; choose another", e2b.ErrBadTemplate, name)
	}
	b := e2b.TemplateBuild{ID: newUUID(), Name: name, Project: scope.Owner(), Tags: tags, CreatedAt: time.Now().UTC()}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropWaiting(b.Project)
	if err := t.save(b); err != nil {
		return e2b.TemplateBuild{}, err
	}
	t.builds[b.ID] = b
	return b, nil
}

// maxWaitingBuilds bounds a project's builds requested but never
// triggered: past it the oldest goes, so requests alone cannot fill the
// disk with records.
const maxWaitingBuilds = 100

// dropWaiting makes room for one more waiting build of proj. Caller
// holds t.mu.
func (t *e2bTemplates) dropWaiting(proj string) {
	var waiting []e2b.TemplateBuild
	for _, b := range t.builds {
		if b.Project == proj && b.TemplateID == "" {
			waiting = append(waiting, b)
		}
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].CreatedAt.Before(waiting[j].CreatedAt) })
	for len(waiting) >= maxWaitingBuilds {
		_ = os.Remove(filepath.Join(t.buildDir, waiting[0].ID+".json"))
		delete(t.builds, waiting[0].ID)
		waiting = waiting[1:]
	}
}

func (t *e2bTemplates) Build(scope project.Scope, buildID string) (e2b.TemplateBuild, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.builds[buildID]
	if !ok || b.Project != scope.Owner() {
		return e2b.TemplateBuild{}, fmt.Errorf("build %q: %w", buildID, e2b.ErrTemplateNotFound)
	}
	return b, nil
}

// filesPath is where the project's archive hash is kept; the project's
// directory is a digest of its name, so no name makes a path.
func (t *e2bTemplates) filesPath(proj, hash string) string {
	sum := sha256.Sum256([]byte(proj))
	return filepath.Join(t.filesDir, hex.EncodeToString(sum[:8]), hash)
}

// HasFiles also marks the archive used, keeping it from eviction.
func (t *e2bTemplates) HasFiles(scope project.Scope, hash string) bool {
	p := t.filesPath(scope.Owner(), hash)
	now := time.Now()
	return os.Chtimes(p, now, now) == nil
}

// evict removes the project's least recently used archives (but keep and
// those used within filesGrace) while the project holds more than the
// budget.
func (t *e2bTemplates) evict(dir, keep string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		size int64
		used time.Time
	}
	var files []file
	var total int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		files = append(files, file{filepath.Join(dir, e.Name()), info.Size(), info.ModTime()})
		total += info.Size()
	}
	sort.Slice(files, func(i, j int) bool { return files[i].used.Before(files[j].used) })
	for _, f := range files {
		if total <= t.filesBudget {
			return
		}
		if f.path == keep || time.Since(f.used) < filesGrace {
			continue
		}
		if os.Remove(f.path) == nil {
			total -= f.size
		}
	}
}

func (t *e2bTemplates) StageFiles(scope project.Scope, hash string, r io.Reader, limit int64) error {
	dst := t.filesPath(scope.Owner(), hash)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("stage files: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".upload-*")
	if err != nil {
		return fmt.Errorf("stage files: %w", err)
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: receiving the files: %v", e2b.ErrBadTemplate, err)
	case n > limit:
		return fmt.Errorf("%w: the files are larger than %d bytes, the most this server takes per copy", template.ErrArchiveTooLarge, limit)
	}
	// Complete uploads only: present means usable.
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("stage files: %w", err)
	}
	t.evict(filepath.Dir(dst), dst)
	return nil
}

func (t *e2bTemplates) StartBuild(scope project.Scope, buildID string, r *template.Recipe, registry *template.RegistryAuth, steps []int) (e2b.TemplateBuild, error) {
	b, err := t.Build(scope, buildID)
	if err != nil {
		return b, err
	}
	if b.TemplateID != "" {
		return b, fmt.Errorf("%w: build %s was started already; request a new build", e2b.ErrBadTemplate, buildID)
	}
	src := template.Source{Registry: registry, Archives: map[string]string{}}
	for i, st := range r.Steps {
		if st.Copy == nil {
			continue
		}
		if !t.HasFiles(scope, st.Copy.Archive) {
			return b, fmt.Errorf("%w: steps: copy %s: its files (hash %s) were not uploaded", e2b.ErrBadTemplate, st.Copy.Src, st.Copy.Archive)
		}
		src.Archives[st.Copy.Archive] = t.filesPath(scope.Owner(), r.Steps[i].Copy.Archive)
	}
	tpl, err := t.cat.submit(scope, b.Name, r, src)
	switch {
	case errors.Is(err, api.ErrBadRecipe), errors.Is(err, api.ErrHostPathsForbidden):
		return b, fmt.Errorf("%w: %s", e2b.ErrBadTemplate, strings.TrimPrefix(err.Error(), api.ErrBadRecipe.Error()+": "))
	case err != nil:
		return b, err
	}
	for _, tag := range b.Tags {
		if err := t.cat.m.Point(scope.Owner()+"/"+b.Name+":"+tag, tpl.ID); err != nil {
			return b, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b.TemplateID, b.Steps = tpl.ID, steps
	if err := t.save(b); err != nil {
		return b, err
	}
	t.builds[b.ID] = b
	return b, nil
}

func (t *e2bTemplates) Status(scope project.Scope, b e2b.TemplateBuild, from int) (string, string, []string, error) {
	rec, err := t.cat.m.Get(b.TemplateID)
	if err != nil {
		return "", "", nil, fmt.Errorf("template of build %s: %w", b.ID, e2b.ErrTemplateNotFound)
	}
	e := entry{t: rec, canonical: scope.Owner() + "/" + b.Name, owner: scope.Owner(), display: b.Name}
	lines, _, err := t.cat.m.Logs(b.TemplateID, from)
	if err != nil {
		return "", "", nil, err
	}
	for i := range lines {
		lines[i] = t.cat.scrub(e, lines[i])
	}
	return rec.State, t.cat.scrub(e, rec.Reason), lines, nil
}

func (t *e2bTemplates) Owns(scope project.Scope, name string) bool {
	if _, ok := t.cat.m.Names()[scope.Owner()+"/"+name]; ok {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.builds {
		if b.Project == scope.Owner() && b.Name == name {
			return true
		}
	}
	return false
}

// buildOf is the latest build of the project's name that built id.
func (t *e2bTemplates) buildOf(proj, name, id string) (e2b.TemplateBuild, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var found e2b.TemplateBuild
	ok := false
	for _, b := range t.builds {
		if b.Project == proj && b.Name == name && b.TemplateID == id && (!ok || b.CreatedAt.After(found.CreatedAt)) {
			found, ok = b, true
		}
	}
	return found, ok
}

func (t *e2bTemplates) Tags(scope project.Scope, name string) ([]e2b.TemplateTag, error) {
	prefix := scope.Owner() + "/" + name + ":"
	var out []e2b.TemplateTag
	for cn, id := range t.cat.m.Names() {
		tag, ok := strings.CutPrefix(cn, prefix)
		if !ok {
			continue
		}
		tt := e2b.TemplateTag{Tag: tag}
		if b, ok := t.buildOf(scope.Owner(), name, id); ok {
			tt.BuildID, tt.CreatedAt = b.ID, b.CreatedAt
		}
		out = append(out, tt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out, nil
}

func (t *e2bTemplates) AssignTags(scope project.Scope, target string, tags []string) (string, error) {
	name, tag, _ := strings.Cut(target, ":")
	cn := scope.Owner() + "/" + name
	if tag != "" {
		cn += ":" + tag
	}
	id, ok := t.cat.m.Names()[cn]
	if !ok {
		return "", fmt.Errorf("template %q: %w", target, e2b.ErrTemplateNotFound)
	}
	for _, tg := range tags {
		if err := t.cat.m.Point(scope.Owner()+"/"+name+":"+tg, id); err != nil {
			return "", err
		}
	}
	b, _ := t.buildOf(scope.Owner(), name, id)
	return b.ID, nil
}

func (t *e2bTemplates) RemoveTags(scope project.Scope, name string, tags []string) error {
	for _, tg := range tags {
		if err := t.cat.m.Unpoint(scope.Owner() + "/" + name + ":" + tg); err != nil {
			if errors.Is(err, template.ErrNotFound) {
				return fmt.Errorf("tag %q of template %q: %w", tg, name, e2b.ErrTemplateNotFound)
			}
			return err
		}
	}
	return nil
}

func (t *e2bTemplates) Delete(scope project.Scope, name string) error {
	if _, ok := t.cat.m.Names()[scope.Owner()+"/"+name]; !ok || strings.ContainsAny(name, "/:") {
		return fmt.Errorf("template %q: %w", name, e2b.ErrTemplateNotFound)
	}
	if err := mapE2BDelete(t.cat.Delete(scope, name)); err != nil {
		return err
	}
	// Its builds go with it, as in E2B.
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, b := range t.builds {
		if b.Project == scope.Owner() && b.Name == name {
			_ = os.Remove(filepath.Join(t.buildDir, id+".json"))
			delete(t.builds, id)
		}
	}
	return nil
}
