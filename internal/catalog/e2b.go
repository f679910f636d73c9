package catalog

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/sandboxid"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
)

// E2BTemplates builds templates from E2B's build API on a
// cluster's control plane (e2b.Templates over catalog). Every
// replica shares what it keeps, in the store: the build records, and the
// uploaded file archives in chunks, so a build requested through one
// replica is uploaded to, triggered and followed through any other. A
// triggered build is a build of the cluster's catalog (a node builds it,
// the others receive it): the copy steps' archives stream from the store
// to the node that builds, and status, logs and tags are the catalog's.
type E2BTemplates struct {
	cat *Catalog
	// filesBudget bounds a project's uploaded files.
	filesBudget int64
}

var _ e2b.Templates = (*E2BTemplates)(nil)

const (
	// e2bBuildsBucket holds the build records (e2bBuild) by id.
	e2bBuildsBucket = "e2b_template_builds"
	// e2bFilesBucket holds each uploaded archive's record (e2bFiles) by
	// filesKey; e2bFileChunksBucket its data, by "<filesKey>/<upload>/<n>".
	e2bFilesBucket      = "e2b_template_files"
	e2bFileChunksBucket = "e2b_template_file_chunks"
	// e2bFileChunk is the size of one stored chunk.
	e2bFileChunk = 4 << 20
)

// e2bBuild is an E2B build as a cluster keeps it: the build, and
// once triggered the catalog record it started and, once that ended, its
// outcome (a later build of the name replaces the catalog's record and
// log, never this).
type e2bBuild struct {
	e2b.TemplateBuild
	// Started is the CreatedAt of the catalog record the build started.
	Started time.Time `json:"started"`
	State   string    `json:"state,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	// Ended is when a replica saw the build end.
	Ended time.Time `json:"ended,omitzero"`
}

// startedMark is TemplateID between a build's trigger and its end, when
// the template's id is known.
const startedMark = "started"

// e2bFiles is one uploaded archive in the store.
type e2bFiles struct {
	Upload string    `json:"upload"`
	Chunks int       `json:"chunks"`
	Size   int64     `json:"size"`
	Used   time.Time `json:"used"`
}

// NewE2BTemplates serves E2B's build API over cat; maxUpload bounds one
// upload of a copy step's files (e2b.DefaultMaxTemplateFiles when not
// positive); a project's uploads are evicted, least recently used first,
// past four times that (1 GiB at least).
func NewE2BTemplates(cat *Catalog, maxUpload int64) *E2BTemplates {
	if maxUpload <= 0 {
		maxUpload = e2b.DefaultMaxTemplateFiles
	}
	return &E2BTemplates{cat: cat, filesBudget: max(4*maxUpload, 1<<30)}
}

func (t *E2BTemplates) st() store.Store { return t.cat.st }

func (t *E2BTemplates) get(id string) (e2bBuild, error) {
	var b e2bBuild
	if err := t.st().Get(e2bBuildsBucket, id, &b); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return b, fmt.Errorf("build %q: %w", id, e2b.ErrTemplateNotFound)
		}
		return b, fmt.Errorf("build %q: %w", id, err)
	}
	return b, nil
}

// each reads every build record.
func (t *E2BTemplates) each(fn func(e2bBuild)) error {
	return t.st().Each(e2bBuildsBucket, func(_ string, data []byte) error {
		var b e2bBuild
		if err := json.Unmarshal(data, &b); err != nil {
			return fmt.Errorf("decode an e2b build: %w", err)
		}
		fn(b)
		return nil
	})
}

func (t *E2BTemplates) NewBuild(scope project.Scope, name string, tags []string) (e2b.TemplateBuild, error) {
	if _, builtin := template.Builtin(name); builtin {
		return e2b.TemplateBuild{}, fmt.Errorf("%w: the name %s belongs to a built-in template; choose another", e2b.ErrBadTemplate, name)
	}
	b := e2bBuild{TemplateBuild: e2b.TemplateBuild{ID: newUUID(), Name: name, Project: scope.Owner(), Tags: tags, CreatedAt: time.Now().UTC()}}
	// A project's builds requested and never triggered are bounded:
	// past maxWaitingBuilds the oldest goes.
	var waiting []e2bBuild
	if err := t.each(func(o e2bBuild) {
		if o.Project == b.Project && o.TemplateID == "" {
			waiting = append(waiting, o)
		}
	}); err != nil {
		return e2b.TemplateBuild{}, err
	}
	sort.Slice(waiting, func(i, j int) bool { return waiting[i].CreatedAt.Before(waiting[j].CreatedAt) })
	for ; len(waiting) >= maxWaitingBuilds; waiting = waiting[1:] {
		_ = t.st().Delete(e2bBuildsBucket, waiting[0].ID)
	}
	if err := t.st().Put(e2bBuildsBucket, b.ID, b); err != nil {
		return e2b.TemplateBuild{}, fmt.Errorf("record build of %s: %w", name, err)
	}
	return b.TemplateBuild, nil
}

func (t *E2BTemplates) Build(scope project.Scope, buildID string) (e2b.TemplateBuild, error) {
	b, err := t.get(buildID)
	if err != nil {
		return e2b.TemplateBuild{}, err
	}
	if b.Project != scope.Owner() {
		return e2b.TemplateBuild{}, fmt.Errorf("build %q: %w", buildID, e2b.ErrTemplateNotFound)
	}
	return b.TemplateBuild, nil
}

// filesKey names a project's archive; the project's part is a digest of
// its name, so no name makes a key of another's.
func filesKey(proj, hash string) string {
	sum := sha256.Sum256([]byte(proj))
	return hex.EncodeToString(sum[:8]) + "/" + hash
}

func chunkKey(key, upload string, n int) string { return fmt.Sprintf("%s/%s/%d", key, upload, n) }

// HasFiles also marks the archive used, keeping it from eviction.
func (t *E2BTemplates) HasFiles(scope project.Scope, hash string) bool {
	key := filesKey(scope.Owner(), hash)
	var f e2bFiles
	if err := t.st().Get(e2bFilesBucket, key, &f); err != nil {
		return false
	}
	f.Used = time.Now().UTC()
	_ = t.st().Put(e2bFilesBucket, key, f)
	return true
}

func (t *E2BTemplates) dropChunks(key string, f e2bFiles) {
	for n := range f.Chunks {
		_ = t.st().Delete(e2bFileChunksBucket, chunkKey(key, f.Upload, n))
	}
}

func (t *E2BTemplates) StageFiles(scope project.Scope, hash string, r io.Reader, limit int64) error {
	key := filesKey(scope.Owner(), hash)
	f := e2bFiles{Upload: sandboxid.New()}
	buf := make([]byte, e2bFileChunk)
	lr := io.LimitReader(r, limit+1)
	for {
		n, err := io.ReadFull(lr, buf)
		if n > 0 {
			if f.Size += int64(n); f.Size > limit {
				t.dropChunks(key, f)
				return fmt.Errorf("%w: the files are larger than %d bytes, the most this server takes per copy", template.ErrArchiveTooLarge, limit)
			}
			if perr := t.st().Put(e2bFileChunksBucket, chunkKey(key, f.Upload, f.Chunks), buf[:n]); perr != nil {
				t.dropChunks(key, f)
				return fmt.Errorf("stage files: %w", perr)
			}
			f.Chunks++
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			t.dropChunks(key, f)
			return fmt.Errorf("%w: receiving the files: %v", e2b.ErrBadTemplate, err)
		}
	}
	// The record last: present means complete. An upload it replaces
	// goes (a build streaming it then fails and is triggered again).
	var old e2bFiles
	hadOld := t.st().Get(e2bFilesBucket, key, &old) == nil
	f.Used = time.Now().UTC()
	if err := t.st().Put(e2bFilesBucket, key, f); err != nil {
		t.dropChunks(key, f)
		return fmt.Errorf("stage files: %w", err)
	}
	if hadOld && old.Upload != f.Upload {
		t.dropChunks(key, old)
	}
	t.evict(scope.Owner(), key)
	return nil
}

// evict removes the project's least recently used archives (but keep and
// those used within filesGrace) while it holds more than the budget.
func (t *E2BTemplates) evict(proj, keep string) {
	prefix := filesKey(proj, "")
	type file struct {
		key string
		f   e2bFiles
	}
	var files []file
	var total int64
	_ = t.st().Each(e2bFilesBucket, func(key string, data []byte) error {
		var f e2bFiles
		if strings.HasPrefix(key, prefix) && json.Unmarshal(data, &f) == nil {
			files = append(files, file{key, f})
			total += f.Size
		}
		return nil
	})
	sort.Slice(files, func(i, j int) bool { return files[i].f.Used.Before(files[j].f.Used) })
	for _, fl := range files {
		if total <= t.filesBudget {
			return
		}
		if fl.key == keep || time.Since(fl.f.Used) < filesGrace {
			continue
		}
		if t.st().Delete(e2bFilesBucket, fl.key) == nil {
			t.dropChunks(fl.key, fl.f)
			total -= fl.f.Size
		}
	}
}

// writeFiles streams a project's archive from the store to w.
func (t *E2BTemplates) writeFiles(proj string) func(ctx context.Context, hash string, w io.Writer) error {
	return func(ctx context.Context, hash string, w io.Writer) error {
		key := filesKey(proj, hash)
		var f e2bFiles
		if err := t.st().Get(e2bFilesBucket, key, &f); err != nil {
			return fmt.Errorf("files %s: %w", hash, err)
		}
		for n := range f.Chunks {
			if err := ctx.Err(); err != nil {
				return err
			}
			var data []byte
			if err := t.st().Get(e2bFileChunksBucket, chunkKey(key, f.Upload, n), &data); err != nil {
				return fmt.Errorf("files %s: replaced or evicted meanwhile: %w", hash, err)
			}
			if _, err := w.Write(data); err != nil {
				return err
			}
		}
		return nil
	}
}

func (t *E2BTemplates) StartBuild(scope project.Scope, buildID string, r *template.Recipe, registry *template.RegistryAuth, steps []int) (e2b.TemplateBuild, error) {
	b, err := t.get(buildID)
	if err != nil || b.Project != scope.Owner() {
		return e2b.TemplateBuild{}, fmt.Errorf("build %q: %w", buildID, e2b.ErrTemplateNotFound)
	}
	if b.TemplateID != "" {
		return b.TemplateBuild, fmt.Errorf("%w: build %s was started already; request a new build", e2b.ErrBadTemplate, buildID)
	}
	for _, st := range r.Steps {
		if st.Copy != nil && !t.HasFiles(scope, st.Copy.Archive) {
			return b.TemplateBuild, fmt.Errorf("%w: steps: copy %s: its files (hash %s) were not uploaded", e2b.ErrBadTemplate, st.Copy.Src, st.Copy.Archive)
		}
	}
	rec, _, err := t.cat.submitRecipe(scope, b.Name, r, api.TemplateBuild{}, buildInputs{files: t.writeFiles(scope.Owner()), registry: registry})
	switch {
	case errors.Is(err, api.ErrBadRecipe), errors.Is(err, api.ErrHostPathsForbidden):
		return b.TemplateBuild, fmt.Errorf("%w: %s", e2b.ErrBadTemplate, strings.TrimPrefix(err.Error(), api.ErrBadRecipe.Error()+": "))
	case errors.Is(err, api.ErrTemplateInUse):
		return b.TemplateBuild, fmt.Errorf("%w: %v", e2b.ErrTemplateInUse, err)
	case err != nil:
		return b.TemplateBuild, err
	}
	b.TemplateID, b.Steps, b.Started = startedMark, steps, rec.CreatedAt
	if err := t.st().Put(e2bBuildsBucket, b.ID, b); err != nil {
		return b.TemplateBuild, fmt.Errorf("record build %s: %w", b.ID, err)
	}
	// The tags point at the template once it is built, whether or not a
	// client follows the build. (Not among builds.running: it waits for
	// the nodes' heartbeats.)
	go func() {
		ctx := t.cat.buildContext()
		tick := time.NewTicker(logFlushInterval)
		defer tick.Stop()
		for {
			if ended, _ := t.settle(b.ID); ended {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return b.TemplateBuild, nil
}

// settle records the outcome of a triggered build once its catalog record
// ended (ready where a create can go, or failed), and points its tags at
// the template then; true once the build has ended. Any replica may
// settle a build: the Status of a build whose replica died does.
func (t *E2BTemplates) settle(id string) (bool, error) {
	b, err := t.get(id)
	if err != nil {
		return true, err
	}
	if b.State != "" || b.TemplateID == "" {
		return b.State != "", nil
	}
	key := b.Project + "/" + b.Name
	var rec builtTemplate
	if err := t.st().Get(templatesBucket, key, &rec); err != nil || !rec.CreatedAt.Equal(b.Started) {
		b.State, b.Reason = template.StateFailed, "the template was deleted or built again before this build ended"
	} else {
		if _, err := t.cat.abandoned(t.cat.buildContext(), &rec); err != nil {
			return false, err
		}
		state, reason := t.cat.builtState(rec)
		switch state {
		case template.StateBuilding:
			return false, nil
		case template.StateReady:
			for _, tag := range b.Tags {
				if err := t.cat.pointTag(rec, tag); err != nil {
					return false, err
				}
			}
			b.TemplateID = rec.Spec.ID
		}
		b.State, b.Reason = state, reason
	}
	b.Ended = time.Now().UTC()
	if err := t.st().Put(e2bBuildsBucket, b.ID, b); err != nil {
		return false, fmt.Errorf("record build %s: %w", b.ID, err)
	}
	return true, nil
}

func (t *E2BTemplates) Status(scope project.Scope, tb e2b.TemplateBuild, from int) (string, string, []string, error) {
	if _, err := t.settle(tb.ID); err != nil {
		return "", "", nil, err
	}
	b, err := t.get(tb.ID)
	if err != nil {
		return "", "", nil, err
	}
	state := b.State
	// Every replica's copy of the nodes (Config.RegistryReadCache old at most)
	// holds the template that long after one replica saw it: a
	// create through any replica then finds it ready.
	if state == "" || state == template.StateReady && time.Since(b.Ended) < t.cat.registryReadCache {
		state = template.StateBuilding
	}
	var lines []string
	if err := t.st().Get(templateLogsBucket, b.Project+"/"+b.Name, &lines); err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", "", nil, err
	}
	var rec builtTemplate
	if t.st().Get(templatesBucket, b.Project+"/"+b.Name, &rec) != nil || !rec.CreatedAt.Equal(b.Started) {
		lines = nil // the log is of a later build now
	}
	if from >= len(lines) {
		return state, b.Reason, nil, nil
	}
	return state, b.Reason, lines[max(from, 0):], nil
}

func (t *E2BTemplates) Owns(scope project.Scope, name string) bool {
	if _, ok, _ := t.cat.lookupBuilt(scope, name); ok && !strings.ContainsAny(name, "/:") {
		return true
	}
	owns := false
	_ = t.each(func(b e2bBuild) { owns = owns || b.Project == scope.Owner() && b.Name == name })
	return owns
}

// buildOf is the latest build of the project's name that built id.
func (t *E2BTemplates) buildOf(proj, name, id string) (e2bBuild, bool) {
	var found e2bBuild
	ok := false
	_ = t.each(func(b e2bBuild) {
		if b.Project == proj && b.Name == name && b.TemplateID == id && (!ok || b.CreatedAt.After(found.CreatedAt)) {
			found, ok = b, true
		}
	})
	return found, ok
}

func (t *E2BTemplates) Tags(scope project.Scope, name string) ([]e2b.TemplateTag, error) {
	all, err := t.cat.built()
	if err != nil {
		return nil, err
	}
	prefix := scope.Owner() + "/" + name + ":"
	out := []e2b.TemplateTag{}
	for _, rec := range all {
		tag, ok := strings.CutPrefix(rec.canonical(), prefix)
		if !ok {
			continue
		}
		tt := e2b.TemplateTag{Tag: tag}
		if b, ok := t.buildOf(scope.Owner(), name, rec.Spec.ID); ok {
			tt.BuildID, tt.CreatedAt = b.ID, b.CreatedAt
		}
		out = append(out, tt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out, nil
}

func (t *E2BTemplates) AssignTags(scope project.Scope, target string, tags []string) (string, error) {
	rec, ok, err := t.cat.lookupBuilt(scope, target)
	switch {
	case err != nil:
		return "", err
	case !ok || strings.Contains(target, "/") || rec.State != template.StateReady:
		return "", fmt.Errorf("template %q: %w", target, e2b.ErrTemplateNotFound)
	}
	base, _, _ := strings.Cut(target, ":")
	for _, tg := range tags {
		if err := t.cat.pointTag(builtTemplate{Project: rec.Project, Name: base, Spec: rec.Spec, State: rec.State,
			From: rec.From, SizeBytes: rec.SizeBytes, CreatedAt: rec.CreatedAt, ReadyAt: rec.ReadyAt, Node: rec.Node}, tg); err != nil {
			return "", err
		}
	}
	b, _ := t.buildOf(scope.Owner(), base, rec.Spec.ID)
	return b.ID, nil
}

func (t *E2BTemplates) RemoveTags(scope project.Scope, name string, tags []string) error {
	for _, tg := range tags {
		key := scope.Owner() + "/" + name + ":" + tg
		var rec builtTemplate
		if err := t.st().Get(templatesBucket, key, &rec); err != nil {
			return fmt.Errorf("tag %q of template %q: %w", tg, name, e2b.ErrTemplateNotFound)
		}
		if err := t.st().Delete(templatesBucket, key); err != nil {
			return fmt.Errorf("remove tag %q of template %q: %w", tg, name, err)
		}
	}
	return nil
}

func (t *E2BTemplates) Delete(scope project.Scope, name string) error {
	if _, ok, err := t.cat.lookupBuilt(scope, name); err != nil {
		return err
	} else if !ok || strings.ContainsAny(name, "/:") {
		return fmt.Errorf("template %q: %w", name, e2b.ErrTemplateNotFound)
	}
	if err := mapE2BDelete(t.cat.Delete(scope, name)); err != nil {
		return err
	}
	// Its builds go with it, as in E2B.
	var ids []string
	_ = t.each(func(b e2bBuild) {
		if b.Project == scope.Owner() && b.Name == name {
			ids = append(ids, b.ID)
		}
	})
	for _, id := range ids {
		_ = t.st().Delete(e2bBuildsBucket, id)
	}
	return nil
}

// pointTag records tag of a template built through the cluster: a record
// "<project>/<name>:<tag>" of the same template, which creates and
// aliases find by that name. List shows none of them; a delete of the
// name takes them.
func (c *Catalog) pointTag(rec builtTemplate, tag string) error {
	base, _, _ := strings.Cut(rec.Name, ":")
	rec.Name = base + ":" + tag
	if err := c.st.Put(templatesBucket, rec.canonical(), rec); err != nil {
		return fmt.Errorf("tag %s: %w", rec.Name, err)
	}
	return nil
}

// mapE2BDelete maps the catalog's refusals of a delete onto E2B's.
func mapE2BDelete(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, api.ErrTemplateNotFound):
		return fmt.Errorf("%w: %v", e2b.ErrTemplateNotFound, err)
	case errors.Is(err, api.ErrTemplateInUse):
		return fmt.Errorf("%w: %v", e2b.ErrTemplateInUse, err)
	}
	return err
}

// filesGrace is how long an uploaded archive is safe from eviction after
// its upload or last use.
const filesGrace = time.Hour

// maxWaitingBuilds bounds a project's builds requested but never
// triggered: past it the oldest goes, so requests alone cannot fill the
// disk with records.
const maxWaitingBuilds = 100

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
