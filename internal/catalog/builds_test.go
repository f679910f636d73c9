package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/cpapi/cpapitest"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/store"
	"github.com/space-platform/space/internal/template"
	"github.com/space-platform/space/pkg/apiv1"
)

// fakeNodes reaches fake nodes by id.
type fakeNodes map[string]*nodeapitest.Fake

func (f fakeNodes) Node(id string) (controlplane.Node, error) {
	if n, ok := f[id]; ok {
		return n, nil
	}
	return nil, fmt.Errorf("%w: node %s", controlplane.ErrNodeUnavailable, id)
}

// templateCluster is a catalog over fake nodes registered in a registry.
type templateCluster struct {
	cat   *Catalog
	reg   *cluster.Registry
	nodes fakeNodes
}

func newTemplateCluster(t *testing.T, ids ...string) *templateCluster {
	t.Helper()
	st, reg := cpapitest.NewStoreAndRegistry(t)
	tc := &templateCluster{reg: reg, nodes: fakeNodes{}}
	tc.cat = New(testConfig(st, reg))
	tc.cat.StartBuilds(context.Background(), tc.nodes, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, id := range ids {
		tc.join(t, id)
	}
	return tc
}

// testConfig is a catalog's config over st and reg with no control
// plane, its build sandboxes sized as serve's defaults size them.
func testConfig(st store.Store, reg *cluster.Registry) Config {
	return Config{
		Store: st, Registry: reg,
		BuildLimits: runtime.Limits{VCPUs: 1, MemoryMB: 1024, Pids: 4096}, BuildDiskBytes: 4096 << 20,
		RegistryReadCache: time.Second,
	}
}

// join registers a new fake node.
func (tc *templateCluster) join(t *testing.T, id string) {
	t.Helper()
	f := nodeapitest.NewFake(id)
	tc.nodes[id] = f
	info, _ := f.Info(context.Background())
	if _, err := tc.reg.Register(id, "http://127.0.0.1:1", info); err != nil {
		t.Fatal(err)
	}
}

// heartbeat reports every node's templates, as their heartbeats do.
func (tc *templateCluster) heartbeat(t *testing.T) {
	t.Helper()
	for id, f := range tc.nodes {
		info, _ := f.Info(context.Background())
		if err := tc.reg.Heartbeat(id, info); err != nil {
			t.Fatal(err)
		}
	}
}

func (tc *templateCluster) holding(id string) []string {
	var out []string
	for nid, f := range tc.nodes {
		info, _ := f.Info(context.Background())
		if slices.Contains(info.Templates, id) {
			out = append(out, nid)
		}
	}
	slices.Sort(out)
	return out
}

// A template built through the cluster is built once, on one node, and
// shipped to the others; it is ready once a schedulable node reports it,
// only its project sees it, a node that joins later receives it, and a
// delete removes it from every node.
func TestClusterTemplateBuildShipDelete(t *testing.T) {
	tc := newTemplateCluster(t, "n1", "n2")
	p1, p2 := project.In("p1"), project.In("p2")
	recipe := []byte("from: minimal\nrun:\n  - echo hi > /hello\n")

	v, err := tc.cat.Submit(p1, "hello", recipe, api.TemplateBuild{})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != template.StateBuilding || v.Name != "hello" || v.Project != "p1" {
		t.Fatalf("submitted: %+v", v)
	}
	if _, err := tc.cat.Submit(p1, "hello", recipe, api.TemplateBuild{}); err != nil && !errors.Is(err, api.ErrTemplateInUse) {
		t.Fatalf("a second build while the first runs: %v", err)
	}
	tc.cat.builds.running.Wait()

	// Built and shipped, but not ready before a node reports it.
	if v, _ = tc.cat.Get(p1, "hello"); v.ID == "" || v.State != template.StateBuilding {
		t.Fatalf("before a heartbeat: %+v", v)
	}
	if _, _, err := tc.cat.Resolve(p1, "hello"); !errors.Is(err, controlplane.ErrTemplateNotReady) {
		t.Fatalf("resolve before a heartbeat: %v", err)
	}
	id := v.ID
	if _, done, _ := tc.cat.Logs(p1, "hello", 0); done {
		t.Fatal("the log ended before a node reported the template")
	}
	if got := tc.holding(id); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("template %s is on nodes %v, want both", id, got)
	}
	tc.heartbeat(t)
	if v, _ = tc.cat.Get(p1, "hello"); v.State != template.StateReady || v.ReadyAt == nil {
		t.Fatalf("after a heartbeat: %+v", v)
	}
	spec, name, err := tc.cat.Resolve(p1, "hello")
	if err != nil || spec.ID != id || spec.RootfsVolume != "templates/"+id || name != "p1/hello" {
		t.Fatalf("resolve: %+v %q %v", spec, name, err)
	}
	if _, _, err := tc.cat.Resolve(project.Everything, "p1/hello"); err != nil {
		t.Fatalf("resolve by catalog name: %v", err)
	}
	if _, _, err := tc.cat.Resolve(p2, "hello"); !errors.Is(err, controlplane.ErrUnknownTemplate) {
		t.Fatalf("another project resolved it: %v", err)
	}
	if _, err := tc.cat.Get(p2, "hello"); !errors.Is(err, api.ErrTemplateNotFound) {
		t.Fatalf("another project sees it: %v", err)
	}
	if _, err := tc.cat.Get(p2, "p1/hello"); !errors.Is(err, api.ErrTemplateNotFound) {
		t.Fatalf("another project sees it by catalog name: %v", err)
	}
	if list := tc.cat.List(p2); slices.ContainsFunc(list, func(v apiv1.Template) bool { return v.Name == "hello" }) {
		t.Fatalf("another project lists it: %+v", list)
	}
	lines, done, err := tc.cat.Logs(p1, "hello", 0)
	if err != nil || !done || len(lines) != 2 || lines[0] != "building hello" {
		t.Fatalf("logs: %q %v %v", lines, done, err)
	}
	if rest, _, _ := tc.cat.Logs(p1, "hello", 1); len(rest) != 1 || !strings.Contains(rest[0], id) {
		t.Fatalf("logs from 1: %q", rest)
	}

	// A node that joins later gets it with its first report.
	tc.join(t, "n3")
	tc.cat.ShipMissing("n3")
	tc.cat.builds.running.Wait()
	if got := tc.holding(id); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Fatalf("after n3 joined, template %s is on nodes %v", id, got)
	}

	// A cordoned node is no holder: with both others cordoned, the
	// template is not ready.
	tc.heartbeat(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := tc.reg.Cordon(n); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ = tc.cat.Get(p1, "hello"); v.State == template.StateReady {
		t.Fatalf("ready on cordoned nodes only: %+v", v)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := tc.reg.Uncordon(n); err != nil {
			t.Fatal(err)
		}
	}

	// Another project's build of the same recipe shares the volume: its
	// delete leaves it.
	if _, err := tc.cat.Submit(p2, "hello", recipe, api.TemplateBuild{}); err != nil {
		t.Fatal(err)
	}
	tc.cat.builds.running.Wait()
	if err := tc.cat.Delete(p2, "hello"); err != nil {
		t.Fatal(err)
	}
	if got := tc.holding(id); len(got) != 3 {
		t.Fatalf("a shared template's delete removed it from %v", got)
	}
	if err := tc.cat.Delete(p2, "hello"); !errors.Is(err, api.ErrTemplateNotFound) {
		t.Fatalf("deleted twice: %v", err)
	}
	if err := tc.cat.Delete(p1, "hello"); err != nil {
		t.Fatal(err)
	}
	if got := tc.holding(id); len(got) != 0 {
		t.Fatalf("after the delete, template %s is on nodes %v", id, got)
	}
	if _, err := tc.cat.Get(p1, "hello"); !errors.Is(err, api.ErrTemplateNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// What a build refuses at once, and how a failed build ends.
func TestClusterTemplateRefusalsAndFailure(t *testing.T) {
	tc := newTemplateCluster(t, "n1")
	p1 := project.In("p1")
	for _, c := range []struct {
		name, recipe string
		build        api.TemplateBuild
		want         error
	}{
		{"minimal", "from: minimal\n", api.TemplateBuild{}, api.ErrBadRecipe},
		{"Bad Name", "from: minimal\n", api.TemplateBuild{}, api.ErrBadRecipe},
		{"x", "from: nowhere\n", api.TemplateBuild{}, api.ErrBadRecipe},
		{"x", "from: oci-layout:/srv/image\n", api.TemplateBuild{}, api.ErrHostPathsForbidden},
		{"x", "from: upload\n", api.TemplateBuild{}, api.ErrBadRecipe},
		{"x", "from: minimal\n", api.TemplateBuild{Archive: strings.NewReader("tar"), ArchiveLimit: 10}, api.ErrBadRecipe},
		{"x", "from: upload\n", api.TemplateBuild{Archive: strings.NewReader("a tar of 21 bytes..."), ArchiveLimit: 10}, api.ErrArchiveTooLarge},
		{"x", "from: template:missing\n", api.TemplateBuild{}, api.ErrBadRecipe},
	} {
		if _, err := tc.cat.Submit(p1, c.name, []byte(c.recipe), c.build); !errors.Is(err, c.want) {
			t.Errorf("submit %s %q: %v, want %v", c.name, c.recipe, err, c.want)
		}
	}
	if _, err := tc.cat.Submit(p1, "bad", []byte("from: minimal\nrun:\n  - "+nodeapitest.FakeRecipeFails+"\n"), api.TemplateBuild{}); err != nil {
		t.Fatal(err)
	}
	tc.cat.builds.running.Wait()
	v, err := tc.cat.Get(p1, "bad")
	if err != nil || v.State != template.StateFailed || !strings.Contains(v.Reason, "step 1 failed") {
		t.Fatalf("failed build: %+v %v", v, err)
	}
	if _, _, err := tc.cat.Resolve(p1, "bad"); !errors.Is(err, controlplane.ErrTemplateNotReady) {
		t.Fatalf("resolve a failed build: %v", err)
	}
	// A failed build may be built again.
	if _, err := tc.cat.Submit(p1, "bad", []byte("from: minimal\n"), api.TemplateBuild{}); err != nil {
		t.Fatal(err)
	}
	tc.cat.builds.running.Wait()
	tc.heartbeat(t)
	if v, _ := tc.cat.Get(p1, "bad"); v.State != template.StateReady {
		t.Fatalf("rebuilt: %+v", v)
	}
	// An uploaded archive streams to the node that builds.
	if _, err := tc.cat.Submit(p1, "up", []byte("from: upload\n"), api.TemplateBuild{Archive: strings.NewReader("the archive"), ArchiveLimit: 11}); err != nil {
		t.Fatal(err)
	}
	tc.cat.builds.running.Wait()
	var up builtTemplate
	if err := tc.cat.st.Get(templatesBucket, "p1/up", &up); err != nil || up.State != template.StateReady {
		t.Fatalf("upload build: %+v %v", up, err)
	}
	body, _, err := tc.nodes["n1"].ReadVolumeFile(context.Background(), up.Spec.RootfsVolume, "/archive")
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := io.ReadAll(body); string(data) != "the archive" {
		t.Fatalf("the node built from %q", data)
	}
	body.Close()

	// A build whose replica died (a record building, nobody holding its
	// lease) ends as failed when it is built again or deleted.
	stale := builtTemplate{Project: "p1", Name: "stale", State: template.StateBuilding, From: "minimal"}
	if err := tc.cat.st.Put(templatesBucket, stale.canonical(), stale); err != nil {
		t.Fatal(err)
	}
	if err := tc.cat.Delete(p1, "stale"); err != nil {
		t.Fatalf("delete an abandoned build: %v", err)
	}
	// A build in flight holds its lease: another replica's delete waits.
	if took, err := tc.cat.st.TryLead(context.Background(), buildLease("p1/busy"), "another-replica", time.Minute); err != nil || !took {
		t.Fatal(took, err)
	}
	busy := builtTemplate{Project: "p1", Name: "busy", State: template.StateBuilding, From: "minimal"}
	if err := tc.cat.st.Put(templatesBucket, busy.canonical(), busy); err != nil {
		t.Fatal(err)
	}
	if err := tc.cat.Delete(p1, "busy"); !errors.Is(err, api.ErrTemplateInUse) {
		t.Fatalf("delete a build in flight: %v", err)
	}
	if _, err := tc.cat.Submit(p1, "busy", []byte("from: minimal\n"), api.TemplateBuild{}); !errors.Is(err, api.ErrTemplateInUse) {
		t.Fatalf("build again during a build: %v", err)
	}

	// A child of a template the cluster built is built on the node that
	// holds the parent in its manager, from the parent's id.
	tc.join(t, "n2")
	if _, err := tc.cat.Submit(p1, "child", []byte("from: template:bad\n"), api.TemplateBuild{}); err != nil {
		t.Fatal(err)
	}
	tc.cat.builds.running.Wait()
	var rec builtTemplate
	if err := tc.cat.st.Get(templatesBucket, "p1/child", &rec); err != nil || rec.Node != "n1" || rec.From != "template:bad" {
		t.Fatalf("child: %+v %v", rec, err)
	}
}

// The same recipe (or the same uploaded archive) submitted again is
// answered with the ready build, as serve answers the same template ID,
// and the archive staged for it is discarded; anything changed builds
// again, and a base read at build time (an image's tag) always does.
func TestClusterTemplateResubmittedUnchangedIsNotBuiltAgain(t *testing.T) {
	tc := newTemplateCluster(t, "n1")
	p1 := project.In("p1")
	build := func(name, recipe, archive string) apiv1.Template {
		t.Helper()
		var b api.TemplateBuild
		if archive != "" {
			b = api.TemplateBuild{Archive: strings.NewReader(archive), ArchiveLimit: 64}
		}
		v, err := tc.cat.Submit(p1, name, []byte(recipe), b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ready := func(name, recipe, archive string) apiv1.Template {
		t.Helper()
		build(name, recipe, archive)
		tc.cat.builds.running.Wait()
		tc.heartbeat(t)
		v, err := tc.cat.Get(p1, name)
		if err != nil || v.State != template.StateReady || v.ID == "" {
			t.Fatalf("built %s: %+v, %v", name, v, err)
		}
		return v
	}
	for _, c := range []struct{ name, recipe, archive, changed string }{
		{"hello", "from: minimal\nrun:\n  - echo hi > /hello\n", "", "from: minimal\nrun:\n  - echo bye > /hello\n"},
		{"up", "from: upload\n", "an archive", "from: upload\n"},
	} {
		first := ready(c.name, c.recipe, c.archive)
		logs, _, _ := tc.cat.Logs(p1, c.name, 0)
		again := build(c.name, c.recipe, c.archive)
		if again.State != template.StateReady || again.ID != first.ID {
			t.Fatalf("%s submitted again: %+v, want the ready build %s", c.name, again, first.ID)
		}
		if after, _, _ := tc.cat.Logs(p1, c.name, 0); !slices.Equal(after, logs) {
			t.Fatalf("%s submitted again was built again: log %q, was %q", c.name, after, logs)
		}
		// The archive staged for it, which no build consumed, is gone.
		if n := tc.nodes["n1"].StagedArchives(); n != 0 {
			t.Fatalf("%s submitted again left %d archives staged on the node", c.name, n)
		}
		archive := c.archive
		if archive != "" {
			archive = "another archive"
		}
		if changed := build(c.name, c.changed, archive); changed.State != template.StateBuilding {
			t.Fatalf("%s changed: %+v, want a build", c.name, changed)
		}
		tc.cat.builds.running.Wait()
	}
	// Another name, another project: the same inputs share the build, and
	// its delete leaves the first.
	first := ready("same", "from: minimal\nrun:\n  - echo same > /same\n", "")
	p2 := project.In("p2")
	other, err := tc.cat.Submit(p2, "mine", []byte("name: mine\nfrom: minimal\nrun:\n  - echo same > /same\n"), api.TemplateBuild{})
	if err != nil || other.State != template.StateReady || other.ID != first.ID || other.Project != "p2" || other.Name != "mine" {
		t.Fatalf("another project's build of the same inputs: %+v, %v; want %s, ready, its own", other, err, first.ID)
	}
	if err := tc.cat.Delete(p2, "mine"); err != nil {
		t.Fatal(err)
	}
	if v, err := tc.cat.Get(p1, "same"); err != nil || v.State != template.StateReady || len(tc.holding(first.ID)) != 1 {
		t.Fatalf("after the other project's delete: %+v, %v, held by %v", v, err, tc.holding(first.ID))
	}
	if got := inputsDigest(template.FromImage, []byte("from: image:registry.example/x:1\n"), ""); got != "" {
		t.Fatalf("an image's build is reused: %q", got)
	}
}

// A built-in template's listing shows what its node reported of it: its
// size and when its build began and finished (not zeros, as before
// nodes reported them).
func TestClusterBuiltinShowsItsSizeAndTimes(t *testing.T) {
	tc := newTemplateCluster(t, "n1")
	began := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ready := began.Add(time.Minute)
	if _, err := tc.cat.Record("n1", []cpapi.Template{{Name: "minimal", Spec: nodeapi.TemplateSpec{ID: "minimal-1"}, SizeBytes: 5 << 20, CreatedAt: began, ReadyAt: &ready}}); err != nil {
		t.Fatal(err)
	}
	v, err := tc.cat.Get(project.In("p1"), "minimal")
	if err != nil {
		t.Fatal(err)
	}
	if v.ID != "minimal-1" || v.SizeBytes != 5<<20 || !v.CreatedAt.Equal(began) || v.ReadyAt == nil || !v.ReadyAt.Equal(ready) {
		t.Fatalf("minimal: %+v", v)
	}
	// Nobody deletes a built-in: a project key is told it is shared
	// (403), the admin that every node builds it (409); it stays.
	if err := tc.cat.Delete(project.In("p1"), "minimal"); !errors.Is(err, api.ErrTemplateShared) {
		t.Fatalf("a project deletes minimal: %v", err)
	}
	if err := tc.cat.Delete(project.Everything, "minimal"); !errors.Is(err, api.ErrTemplateBuiltin) || !strings.Contains(err.Error(), "--build-templates") {
		t.Fatalf("the admin deletes minimal: %v", err)
	}
	if _, err := tc.cat.Get(project.Everything, "minimal"); err != nil {
		t.Fatalf("minimal after the refused deletes: %v", err)
	}
}
