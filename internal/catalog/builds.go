package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/sandboxid"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
	"github.com/space-platform/space/pkg/apiv1"
)

// The templates a cluster builds through its API: each is built once, in
// a build sandbox of one node (nodeapi.Templates), and its read-only root
// volume is then shipped to every other schedulable node with btrfs send
// and receive over the node RPC (nodeapi.Transfer), and to a node that
// joins later when it first reports in without it. The record and the
// build's log live in the store, so that every replica shows them.

const (
	// templatesBucket holds the records (builtTemplate) by catalog
	// name, "<project>/<name>".
	templatesBucket = "cluster_templates"
	// templateLogsBucket holds each build's log lines, by catalog
	// name.
	templateLogsBucket = "cluster_template_logs"
	// maxBuildLogLines bounds a build log the store keeps; the lines past
	// it are dropped (the node's own log has them).
	maxBuildLogLines = 5000
	// logFlushInterval is how often a running build's log is stored.
	logFlushInterval = 500 * time.Millisecond
	// shippedMemory is how long a replica remembers a template it shipped
	// to a node, so that the heartbeats before the node reports it do not
	// ship it again.
	shippedMemory = time.Minute
	// buildLeaseTTL bounds how long a build whose replica died stays
	// "building": the replica running a build holds a lease on it,
	// renewed every third of this.
	buildLeaseTTL = 15 * time.Second
)

func buildLease(key string) string { return "template-build/" + key }

// builtTemplate is one template built through the cluster.
type builtTemplate struct {
	Project string `json:"project"`
	Name    string `json:"name"`
	// Spec is set once built; Spec.ID is the template's id.
	Spec      nodeapi.TemplateSpec `json:"spec"`
	State     string               `json:"state"`
	Reason    string               `json:"reason,omitempty"`
	From      string               `json:"from"`
	SizeBytes int64                `json:"size_bytes,omitempty"`
	CreatedAt time.Time            `json:"created_at"`
	ReadyAt   *time.Time           `json:"ready_at,omitempty"`
	// Node is the node that built it, whose template manager holds it (a
	// template built from it is built there).
	Node string `json:"node,omitempty"`
	// Inputs digests all the build was made of (the resolved recipe, the
	// builder, an uploaded archive), when that is all of it: the same
	// inputs submitted again are answered with this build, as serve
	// answers the same template ID. Empty for a base read when the build
	// runs (an image's tag, a host path), which builds again.
	Inputs string `json:"inputs,omitempty"`
}

func (b builtTemplate) canonical() string { return b.Project + "/" + b.Name }

// Nodes reaches the cluster's nodes, which build and receive templates
// (nodeapi.Templates, nodeapi.Transfer).
type Nodes interface {
	Node(id string) (controlplane.Node, error)
}

// buildQueue is the build side of the cluster's catalog.
type buildQueue struct {
	nodes Nodes
	log   *slog.Logger

	mu sync.Mutex
	// ctx is the life of the builds and shipments this replica runs.
	ctx context.Context
	// shipping and shipped are per "<node> <template id>".
	shipping map[string]bool
	shipped  map[string]time.Time
	// running counts the builds and shipments in flight (tests wait).
	running sync.WaitGroup
}

// StartBuilds gives the catalog its nodes and the context its builds and
// shipments run in (the process's).
func (c *Catalog) StartBuilds(ctx context.Context, nodes Nodes, log *slog.Logger) {
	c.builds.mu.Lock()
	defer c.builds.mu.Unlock()
	c.builds.nodes, c.builds.log, c.builds.ctx = nodes, log, ctx
	c.builds.shipping, c.builds.shipped = map[string]bool{}, map[string]time.Time{}
}

// built reads the records of the templates built through the cluster.
func (c *Catalog) built() ([]builtTemplate, error) {
	var out []builtTemplate
	err := c.st.Each(templatesBucket, func(_ string, data []byte) error {
		var b builtTemplate
		if err := json.Unmarshal(data, &b); err != nil {
			return fmt.Errorf("decode a cluster template: %w", err)
		}
		out = append(out, b)
		return nil
	})
	return out, err
}

// lookupBuilt finds nameOrID among the templates built through the
// cluster as scope sees them: its own by name, another project's as
// "<project>/<name>" (admin scopes), or by id.
func (c *Catalog) lookupBuilt(scope project.Scope, nameOrID string) (builtTemplate, bool, error) {
	all, err := c.built()
	if err != nil {
		return builtTemplate{}, false, err
	}
	want := scope.Owner() + "/" + nameOrID
	if owner, name, ok := strings.Cut(nameOrID, "/"); ok {
		if !scope.Sees(owner) || name == "" {
			return builtTemplate{}, false, nil
		}
		want = nameOrID
	}
	for _, b := range all {
		if b.canonical() == want {
			return b, true, nil
		}
	}
	for _, b := range all {
		if b.Spec.ID != "" && b.Spec.ID == nameOrID && scope.Sees(b.Project) {
			return b, true, nil
		}
	}
	return builtTemplate{}, false, nil
}

// holders counts the schedulable nodes that hold a template id.
func holders(nodes []cluster.Node, id string) int {
	n := 0
	for _, nd := range nodes {
		if nd.Schedulable() && slices.Contains(nd.Info.Templates, id) {
			n++
		}
	}
	return n
}

// builtState is a record's state as the cluster sees it: built but on no
// schedulable node (not reported yet, or those holding it are cordoned)
// is not ready.
func (c *Catalog) builtState(b builtTemplate) (state, reason string) {
	if b.State != template.StateReady {
		return b.State, b.Reason
	}
	nodes, err := c.reg.List()
	if err != nil || holders(nodes, b.Spec.ID) == 0 {
		return template.StateBuilding, "built; held by no schedulable node yet"
	}
	return template.StateReady, ""
}

func (c *Catalog) viewBuilt(scope project.Scope, b builtTemplate) apiv1.Template {
	v := apiv1.Template{
		Name: b.Name, Project: b.Project, ID: b.Spec.ID, From: b.From,
		SizeBytes: b.SizeBytes, CreatedAt: b.CreatedAt, ReadyAt: b.ReadyAt,
	}
	v.SetRuntimes(b.Spec.Runtimes)
	v.State, v.Reason = c.builtState(b)
	if cp := c.cp(); cp != nil && b.Spec.ID != "" {
		pool := cp.PoolStatus(b.Spec.ID)
		v.Sandboxes = cp.CountUsing(scope, b.Spec.ID)
		v.Pool = &apiv1.PoolStatus{Size: pool.Size, Ready: pool.Ready}
	}
	return v
}

// submitBuilt records a build and starts it on a node.
func (c *Catalog) submitBuilt(scope project.Scope, name string, recipeYAML []byte, build api.TemplateBuild) (apiv1.Template, error) {
	r, name, err := parseSubmitted(name, recipeYAML)
	if err != nil {
		return apiv1.Template{}, err
	}
	_, v, err := c.submitRecipe(scope, name, r, build, buildInputs{reuse: true})
	return v, err
}

// buildInputs are what a build from E2B's API takes beyond a recipe: the
// copy steps' file archives, by hash (kept in the store, streamed to the
// node that builds), and the image's registry credentials (passed on in
// the request, never stored).
type buildInputs struct {
	files    func(ctx context.Context, hash string, w io.Writer) error
	registry *template.RegistryAuth
	// reuse answers a resubmission of the same inputs with the ready
	// build (builtTemplate.Inputs) instead of building again.
	reuse bool
}

// inputsDigest is builtTemplate.Inputs of a build of the resolved recipe
// (and the uploaded archive's digest), or "" when the base is read when
// the build runs.
func inputsDigest(kind string, recipe []byte, archive string) string {
	switch kind {
	case template.FromImage, template.FromOCIArchive, template.FromOCILayout:
		return ""
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(template.BuilderVersion), recipe, []byte(archive)} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// submitRecipe records a build of a parsed recipe and starts it on a
// node; it returns the record it stored.
func (c *Catalog) submitRecipe(scope project.Scope, name string, r *template.Recipe, build api.TemplateBuild, in buildInputs) (builtTemplate, apiv1.Template, error) {
	var err error
	if _, builtin := template.Builtin(name); builtin {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("%w: the name %s belongs to a built-in template; choose another", api.ErrBadRecipe, name)
	}
	from := r.From
	base, _ := template.ParseFrom(r.From) // validated by ParseRecipe
	switch {
	case build.Archive != nil && base.Kind != template.FromUpload:
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("%w: from: an archive was uploaded, but the recipe's base is %q; use from: upload", api.ErrBadRecipe, r.From)
	case build.Archive == nil && base.Kind == template.FromUpload:
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("%w: from: upload needs an OCI archive uploaded with the recipe", api.ErrBadRecipe)
	}
	if err := template.CheckHostPaths(r, template.Source{HostPaths: build.Admin}); err != nil {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("%w%.0w", err, api.ErrHostPathsForbidden)
	}
	// A parent is a built-in template (on every node) or one the cluster
	// built, which only the node that built it holds in its template
	// manager: the child is built there, from the parent's id.
	builder := ""
	parentID := ""
	if base.Kind == template.FromTemplate {
		parent, ok, err := c.lookupBuilt(scope, base.Arg)
		switch {
		case err != nil:
			return builtTemplate{}, apiv1.Template{}, err
		case ok:
			if parent.State != template.StateReady {
				return builtTemplate{}, apiv1.Template{}, fmt.Errorf("%w: from: template %s is %s", api.ErrBadRecipe, base.Arg, parent.State)
			}
			builder, parentID = parent.Node, parent.Spec.ID
			r.From = template.FromTemplate + ":" + parent.Spec.ID
		default:
			t, ok, err := c.lookup(base.Arg)
			if err != nil {
				return builtTemplate{}, apiv1.Template{}, err
			}
			if !ok || strings.Contains(base.Arg, "/") {
				return builtTemplate{}, apiv1.Template{}, fmt.Errorf("%w: from: template %q: %v", api.ErrBadRecipe, base.Arg, template.ErrNotFound)
			}
			parentID = t.spec.ID
		}
	}
	recipe, err := yaml.Marshal(r)
	if err != nil {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("encode the recipe of %s: %w", name, err)
	}

	rec := builtTemplate{Project: scope.Owner(), Name: name, State: template.StateBuilding, From: from, CreatedAt: time.Now().UTC()}
	key := rec.canonical()
	diskLeft, err := c.templateDiskLeft(rec.Project, key)
	if err != nil {
		return builtTemplate{}, apiv1.Template{}, err
	}
	ctx := c.buildContext()
	req := nodeapi.TemplateBuildRequest{Name: name, Recipe: recipe, HostPaths: build.Admin, DiskQuotaBytes: diskLeft}
	// What is staged on the builder below goes again unless a build
	// consumes it: a request answered by a build of the same inputs, or
	// refused after staging, leaves nothing on the node's disk.
	building := false
	defer func() {
		if !building {
			c.discardStaged(builder, req)
		}
	}()
	archiveDigest := ""
	if build.Archive != nil {
		// The archive streams to the node that builds, during the
		// request, before the build is recorded: nothing of it is held
		// here.
		if builder, req.Archive, archiveDigest, err = c.stageArchive(ctx, build); err != nil {
			return builtTemplate{}, apiv1.Template{}, err
		}
	}
	// The name is no input: serve's ids do not cover it either.
	unnamed := *r
	unnamed.Name = ""
	content, err := yaml.Marshal(&unnamed)
	if err != nil {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("encode the recipe of %s: %w", name, err)
	}
	rec.Inputs = inputsDigest(base.Kind, content, archiveDigest)
	if in.registry != nil {
		req.RegistryUsername, req.RegistryPassword = in.registry.Username, in.registry.Password
	}
	if req.CopyArchives, builder, err = c.stageCopies(ctx, r, in, builder, parentID); err != nil {
		return builtTemplate{}, apiv1.Template{}, err
	}
	unlock, err := c.st.Lock(ctx, "template/"+key)
	if err != nil {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("lock template %s: %w", name, err)
	}
	defer unlock()
	holder := "build-" + sandboxid.New()
	if took, err := c.st.TryLead(ctx, buildLease(key), holder, buildLeaseTTL); err != nil {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("lease the build of template %s: %w", name, err)
	} else if !took {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("%w: template %s is still building; wait for it, then build again", api.ErrTemplateInUse, name)
	}
	if in.reuse && rec.Inputs != "" {
		reused, ok, err := c.reuse(rec)
		if ok || err != nil {
			_ = c.st.Resign(ctx, buildLease(key), holder)
		}
		if err != nil {
			return builtTemplate{}, apiv1.Template{}, err
		}
		if ok {
			return reused, c.viewBuilt(scope, reused), nil
		}
	}
	if err := c.st.Put(templatesBucket, key, rec); err != nil {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("record template %s: %w", name, err)
	}
	if err := c.st.Put(templateLogsBucket, key, []string{}); err != nil {
		return builtTemplate{}, apiv1.Template{}, fmt.Errorf("record template %s: %w", name, err)
	}
	building = true
	c.builds.running.Add(1)
	go func() {
		defer c.builds.running.Done()
		c.leased(ctx, buildLease(key), holder, func() {
			c.runBuild(ctx, rec, req, builder, parentID)
		})
	}()
	return rec, c.viewBuilt(scope, rec), nil
}

// reuse answers a build of rec's inputs with a ready build of the same
// inputs: rec's own name's, or another name's (another project's too,
// as serve's content-addressed ids share a rootfs), recorded under rec's
// name without a build. The caller holds rec's template lock and build
// lease.
func (c *Catalog) reuse(rec builtTemplate) (builtTemplate, bool, error) {
	var prev builtTemplate
	if err := c.st.Get(templatesBucket, rec.canonical(), &prev); err == nil && prev.Inputs == rec.Inputs {
		if state, _ := c.builtState(prev); state == template.StateReady {
			return prev, true, nil
		}
	}
	all, err := c.built()
	if err != nil {
		return builtTemplate{}, false, err
	}
	for _, b := range all {
		if b.Inputs != rec.Inputs {
			continue
		}
		if state, _ := c.builtState(b); state != template.StateReady {
			continue
		}
		now := time.Now().UTC()
		shared := b
		shared.Project, shared.Name, shared.From, shared.CreatedAt, shared.ReadyAt = rec.Project, rec.Name, rec.From, now, &now
		if err := c.st.Put(templatesBucket, shared.canonical(), shared); err != nil {
			return builtTemplate{}, false, fmt.Errorf("record template %s: %w", rec.Name, err)
		}
		line := fmt.Sprintf("the same recipe and inputs as a ready build: template %s, not built again", b.Spec.ID)
		if err := c.st.Put(templateLogsBucket, shared.canonical(), []string{line}); err != nil {
			return builtTemplate{}, false, fmt.Errorf("record template %s: %w", rec.Name, err)
		}
		return shared, true, nil
	}
	return builtTemplate{}, false, nil
}

// leased runs fn holding the lease name, renewed while it runs, and
// resigns it after.
func (c *Catalog) leased(ctx context.Context, name, holder string, fn func()) {
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(buildLeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if _, err := c.st.TryLead(ctx, name, holder, buildLeaseTTL); err != nil {
					c.builds.log.Warn("renew a template build's lease", "lease", name, "err", err)
				}
			}
		}
	}()
	fn()
	close(done)
	<-renewed
	_ = c.st.Resign(context.WithoutCancel(ctx), name, holder)
}

// abandoned marks failed a build whose replica died (nobody holds its
// lease); true when b is not building (any more).
func (c *Catalog) abandoned(ctx context.Context, b *builtTemplate) (bool, error) {
	if b.State != template.StateBuilding {
		return true, nil
	}
	probe := "probe-" + sandboxid.New()
	took, err := c.st.TryLead(ctx, buildLease(b.canonical()), probe, time.Second)
	if err != nil || !took {
		return false, err
	}
	defer func() { _ = c.st.Resign(ctx, buildLease(b.canonical()), probe) }()
	b.State, b.Reason = template.StateFailed, "the control-plane replica running the build stopped"
	if err := c.st.Put(templatesBucket, b.canonical(), *b); err != nil {
		return false, err
	}
	return true, nil
}

// errArchiveOverLimit ends an upload that goes past its limit.
var errArchiveOverLimit = errors.New("over the limit")

// boundedReader fails with errArchiveOverLimit past n bytes, and
// remembers it did: a node in process may wrap the reader's error in its
// own, which says nothing of the cause. It digests what it passed on.
type boundedReader struct {
	r      io.Reader
	n      int64
	over   bool
	digest hash.Hash
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.n -= int64(n); b.n < 0 {
		b.over = true
		return 0, errArchiveOverLimit
	}
	b.digest.Write(p[:n])
	return n, err
}

// stageArchive places a build from an uploaded archive and streams the
// archive to the node chosen; digest is the archive's SHA-256.
func (c *Catalog) stageArchive(ctx context.Context, build api.TemplateBuild) (node, handle, digest string, err error) {
	node, err = c.placeBuild("")
	if err != nil {
		return "", "", "", err
	}
	tb, err := c.templatesOf(node)
	if err != nil {
		return "", "", "", err
	}
	archive := &boundedReader{r: build.Archive, n: build.ArchiveLimit, digest: sha256.New()}
	handle, err = tb.StageTemplateArchive(ctx, archive, build.ArchiveLimit)
	switch {
	case err != nil && archive.over, errors.Is(err, errArchiveOverLimit), errors.Is(err, template.ErrArchiveTooLarge):
		return "", "", "", fmt.Errorf("%w: the limit is %d bytes", api.ErrArchiveTooLarge, build.ArchiveLimit)
	case err != nil:
		return "", "", "", fmt.Errorf("stage the archive on node %s: %w", node, err)
	}
	return node, handle, hex.EncodeToString(archive.digest.Sum(nil)), nil
}

// stageCopies streams the archives of the recipe's copy steps to the
// node that builds (placed here when builder is empty) and returns their
// handles there.
func (c *Catalog) stageCopies(ctx context.Context, r *template.Recipe, in buildInputs, builder, parentID string) (map[string]string, string, error) {
	var handles map[string]string
	for _, st := range r.Steps {
		if st.Copy == nil || handles[st.Copy.Archive] != "" {
			continue
		}
		if in.files == nil {
			return nil, "", fmt.Errorf("%w: steps: copy %s: no uploaded files", api.ErrBadRecipe, st.Copy.Src)
		}
		if builder == "" {
			var err error
			if builder, err = c.placeBuild(parentID); err != nil {
				return nil, "", err
			}
		}
		tb, err := c.templatesOf(builder)
		if err != nil {
			return nil, "", err
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(in.files(ctx, st.Copy.Archive, pw)) }()
		handle, err := tb.StageTemplateArchive(ctx, pr, maxStagedCopy)
		pr.CloseWithError(errors.New("the node stopped reading"))
		if err != nil {
			c.discardStaged(builder, nodeapi.TemplateBuildRequest{CopyArchives: handles})
			return nil, "", fmt.Errorf("stage the files of copy %s on node %s: %w", st.Copy.Src, builder, err)
		}
		if handles == nil {
			handles = map[string]string{}
		}
		handles[st.Copy.Archive] = handle
	}
	return handles, builder, nil
}

// discardStaged drops on node the archives req names, which no build will
// consume.
func (c *Catalog) discardStaged(node string, req nodeapi.TemplateBuildRequest) {
	handles := slices.Collect(maps.Values(req.CopyArchives))
	if req.Archive != "" {
		handles = append(handles, req.Archive)
	}
	if node == "" || len(handles) == 0 {
		return
	}
	tb, err := c.templatesOf(node)
	if err != nil {
		c.builds.log.Warn("discard staged template archives", "node", node, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	for _, h := range handles {
		if err := tb.DiscardTemplateArchive(ctx, h); err != nil {
			c.builds.log.Warn("discard a staged template archive", "node", node, "archive", h, "err", err)
		}
	}
}

// discardTimeout bounds the discard of a request's staged archives.
const discardTimeout = 30 * time.Second

// maxStagedCopy bounds a copy archive a node takes; the control plane
// bounded it at its upload already.
const maxStagedCopy = 1 << 40

// placeBuild picks the node to build on: capacity as a build sandbox
// takes it, holding parentID (when set).
func (c *Catalog) placeBuild(parentID string) (string, error) {
	node, err := c.reg.Place(cluster.PlaceRequest{Template: parentID, VCPUs: c.buildLimits.VCPUs, MemoryMB: c.buildLimits.MemoryMB, DiskMB: int(c.buildDisk >> 20)})
	if err != nil {
		return "", fmt.Errorf("no node to build on: %w", err)
	}
	return node, nil
}

// templatesOf is a node's template builder.
func (c *Catalog) templatesOf(id string) (nodeapi.Templates, error) {
	nd, err := c.builds.nodes.Node(id)
	if err != nil {
		return nil, fmt.Errorf("build on node %s: %w", id, err)
	}
	tb, ok := nd.(nodeapi.Templates)
	if !ok {
		return nil, fmt.Errorf("node %s does not build templates", id)
	}
	return tb, nil
}

func (c *Catalog) buildContext() context.Context {
	c.builds.mu.Lock()
	defer c.builds.mu.Unlock()
	if c.builds.ctx == nil {
		return context.Background()
	}
	return c.builds.ctx
}

// runBuild builds rec on a node and ships it to the other nodes.
func (c *Catalog) runBuild(ctx context.Context, rec builtTemplate, req nodeapi.TemplateBuildRequest, builder, parentID string) {
	key := rec.canonical()
	logs := &storedLog{st: c.st, key: key}
	fail := func(err error) {
		logs.flush()
		rec.State, rec.Reason = template.StateFailed, err.Error()
		c.putBuilt(rec)
	}
	if builder == "" {
		var err error
		if builder, err = c.placeBuild(parentID); err != nil {
			fail(err)
			return
		}
	}
	tb, err := c.templatesOf(builder)
	if err != nil {
		fail(err)
		return
	}
	rec.Node = builder
	c.putBuilt(rec)
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		t := time.NewTicker(logFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				logs.flush()
			}
		}
	}()
	built, err := tb.BuildTemplate(ctx, req, logs)
	close(stop)
	<-flushed
	if err != nil {
		fail(err)
		return
	}
	logs.flush()
	now := time.Now().UTC()
	rec.State, rec.Spec, rec.SizeBytes, rec.ReadyAt = template.StateReady, built.Spec, built.SizeBytes, &now
	if !c.putBuilt(rec) {
		return
	}
	nodes, err := c.reg.List()
	if err != nil {
		c.builds.log.Error("ship template", "template", key, "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n.ID == builder || !n.Schedulable() || slices.Contains(n.Info.Templates, built.Spec.ID) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.ship(ctx, rec, builder, n.ID)
		}()
	}
	wg.Wait()
}

// putBuilt stores rec unless it was deleted meanwhile (false then).
func (c *Catalog) putBuilt(rec builtTemplate) bool {
	var cur builtTemplate
	if err := c.st.Get(templatesBucket, rec.canonical(), &cur); err != nil || !cur.CreatedAt.Equal(rec.CreatedAt) {
		return false // deleted, or built again
	}
	if err := c.st.Put(templatesBucket, rec.canonical(), rec); err != nil {
		c.builds.log.Error("record template", "template", rec.canonical(), "err", err)
		return false
	}
	return true
}

// ship sends a template's root volume from one node to another, once per
// replica at a time; a node that has it already is done.
func (c *Catalog) ship(ctx context.Context, rec builtTemplate, from, to string) {
	k := to + " " + rec.Spec.ID
	c.builds.mu.Lock()
	if c.builds.shipping[k] || time.Since(c.builds.shipped[k]) < shippedMemory {
		c.builds.mu.Unlock()
		return
	}
	c.builds.shipping[k] = true
	c.builds.mu.Unlock()
	err := c.transfer(ctx, rec.Spec.RootfsVolume, from, to)
	c.builds.mu.Lock()
	delete(c.builds.shipping, k)
	if err == nil {
		c.builds.shipped[k] = time.Now()
	}
	c.builds.mu.Unlock()
	if err != nil {
		c.builds.log.Error("ship template", "template", rec.canonical(), "id", rec.Spec.ID, "from", from, "to", to, "err", err)
		return
	}
	c.builds.log.Info("shipped template", "template", rec.canonical(), "id", rec.Spec.ID, "from", from, "to", to)
}

// transfer streams a read-only volume from one node into another.
func (c *Catalog) transfer(ctx context.Context, volume, from, to string) error {
	src, err := c.builds.nodes.Node(from)
	if err != nil {
		return err
	}
	dst, err := c.builds.nodes.Node(to)
	if err != nil {
		return err
	}
	send, ok1 := src.(nodeapi.Transfer)
	recv, ok2 := dst.(nodeapi.Transfer)
	if !ok1 || !ok2 {
		return errors.New("the nodes do not transfer volumes")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	sent := make(chan error, 1)
	go func() {
		err := send.SendVolume(ctx, volume, pw)
		pw.CloseWithError(err)
		sent <- err
	}()
	err = recv.ReceiveVolume(ctx, nodeapi.ReceiveVolumeRequest{Name: volume}, pr)
	// A receiver that stopped early leaves the sender blocked on the pipe.
	pr.CloseWithError(errors.New("the receiver stopped"))
	if err != nil {
		cancel()
		<-sent
		if errors.Is(err, nodeapi.ErrExists) {
			return nil
		}
		return fmt.Errorf("receive %s on node %s: %w", volume, to, err)
	}
	if err := <-sent; err != nil {
		return fmt.Errorf("send %s from node %s: %w", volume, from, err)
	}
	return nil
}

// ShipMissing ships to a schedulable node the templates built through the
// cluster that it does not report: it joined after they were built, or a
// shipment failed. Called with each node's heartbeat.
func (c *Catalog) ShipMissing(nodeID string) {
	c.builds.mu.Lock()
	started := c.builds.nodes != nil
	c.builds.mu.Unlock()
	if !started {
		return
	}
	n, err := c.reg.Get(nodeID)
	if err != nil || !n.Schedulable() {
		return
	}
	all, err := c.built()
	if err != nil {
		return
	}
	var nodes []cluster.Node
	for _, b := range all {
		if b.State != template.StateReady || slices.Contains(n.Info.Templates, b.Spec.ID) {
			continue
		}
		if nodes == nil {
			if nodes, err = c.reg.List(); err != nil {
				return
			}
		}
		from := ""
		for _, src := range nodes {
			if src.ID != nodeID && src.State != cluster.Unreachable && src.State != cluster.Lost && slices.Contains(src.Info.Templates, b.Spec.ID) {
				from = src.ID
				break
			}
		}
		if from == "" {
			continue
		}
		c.builds.running.Add(1)
		go func() {
			defer c.builds.running.Done()
			c.ship(c.buildContext(), b, from, nodeID)
		}()
	}
}

// deleteBuilt deletes a template built through the cluster, on every node
// unless another record (another project's build of the same recipe) or
// a built-in template shares its id.
func (c *Catalog) deleteBuilt(b builtTemplate) error {
	key := b.canonical()
	unlock, err := c.st.Lock(c.buildContext(), "template/"+key)
	if err != nil {
		return fmt.Errorf("lock template %s: %w", b.Name, err)
	}
	defer unlock()
	if err := c.st.Get(templatesBucket, key, &b); err != nil {
		return fmt.Errorf("%w: template %q", api.ErrTemplateNotFound, b.Name)
	}
	if ended, err := c.abandoned(c.buildContext(), &b); err != nil {
		return fmt.Errorf("delete template %s: %w", b.Name, err)
	} else if !ended {
		return fmt.Errorf("%w: template %s is still building", api.ErrTemplateInUse, b.Name)
	}
	id := b.Spec.ID
	shared := false
	if id != "" {
		all, err := c.built()
		if err != nil {
			return err
		}
		for _, o := range all {
			shared = shared || o.canonical() != key && o.Spec.ID == id
		}
		if builtins, err := c.templates(); err == nil {
			for _, t := range builtins {
				shared = shared || t.spec.ID == id
			}
		}
		if cp := c.cp(); cp != nil && (shared && cp.CountUsing(project.In(b.Project), id) > 0 || !shared && cp.InUse(id)) {
			return fmt.Errorf("%w: template %s (%s) is used by sandboxes", api.ErrTemplateInUse, b.Name, id)
		}
	}
	if err := c.st.Delete(templatesBucket, key); err != nil {
		return fmt.Errorf("delete template %s: %w", b.Name, err)
	}
	_ = c.st.Delete(templateLogsBucket, key)
	if id == "" || shared {
		return nil
	}
	if cp := c.cp(); cp != nil {
		cp.ForgetTemplate(key, id)
	}
	nodes, err := c.reg.List()
	if err != nil {
		return err
	}
	// A node out of reach keeps its copy, which no name reaches any more.
	var errs []error
	for _, n := range nodes {
		if !slices.Contains(n.Info.Templates, id) && n.ID != b.Node {
			continue
		}
		nd, err := c.builds.nodes.Node(n.ID)
		if err != nil {
			c.builds.log.Warn("delete template: node out of reach keeps its copy", "template", key, "node", n.ID, "err", err)
			continue
		}
		if tb, ok := nd.(nodeapi.Templates); ok {
			if err := tb.DeleteTemplate(c.buildContext(), id); err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.ID, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete template %s: %w", b.Name, err)
	}
	return nil
}

// logsBuilt returns a build's stored log from line from, and whether the
// build has ended.
func (c *Catalog) logsBuilt(b builtTemplate, from int) ([]string, bool, error) {
	var lines []string
	if err := c.st.Get(templateLogsBucket, b.canonical(), &lines); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, false, err
	}
	from = max(from, 0)
	// Done once ready where a create can go (or failed), so that a client
	// that follows the log until it ends can use the template then.
	state, _ := c.builtState(b)
	done := state != template.StateBuilding
	if from >= len(lines) {
		return nil, done, nil
	}
	return lines[from:], done, nil
}

// storedLog collects a build's log lines and stores them on flush, at
// most maxBuildLogLines of them.
type storedLog struct {
	st  store.Store
	key string

	mu      sync.Mutex
	partial []byte
	lines   []string
	dirty   bool
}

func (l *storedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.add(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

func (l *storedLog) add(line string) {
	switch {
	case len(l.lines) < maxBuildLogLines:
		l.lines = append(l.lines, line)
	case len(l.lines) == maxBuildLogLines:
		l.lines = append(l.lines, fmt.Sprintf("(the log is cut at %d lines)", maxBuildLogLines))
	default:
		return
	}
	l.dirty = true
}

func (l *storedLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.add(string(l.partial))
		l.partial = nil
	}
	if !l.dirty {
		return
	}
	if err := l.st.Put(templateLogsBucket, l.key, l.lines); err == nil {
		l.dirty = false
	}
}

// parseSubmitted parses a recipe sent over the API and names it: name,
// or the recipe's own when empty.
func parseSubmitted(name string, recipeYAML []byte) (*template.Recipe, string, error) {
	r, err := template.ParseRecipe(recipeYAML)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", api.ErrBadRecipe, err)
	}
	if name == "" {
		name = r.Name
	}
	if err := template.ValidName(name); err != nil {
		return nil, "", fmt.Errorf("%w: %v", api.ErrBadRecipe, err)
	}
	return r, name, nil
}

// errShared refuses a change to a built-in template from a non-admin key.
func errShared(name string) error {
	return fmt.Errorf("%w: %s is a built-in template shared by every project; only an admin key may change it", api.ErrTemplateShared, name)
}
