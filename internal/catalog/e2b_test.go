package catalog

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/template"
)

// An E2B build on a cluster is shared by the replicas through the store:
// requested through one, its files uploaded (in several chunks) and the
// build triggered through another, followed through either. The files
// reach the node that builds, the registry credentials with the request;
// the tags resolve once it is built; another project sees none of it; a
// delete takes the template, its tags and its builds.
func TestClusterE2BBuildAcrossReplicas(t *testing.T) {
	tc := newTemplateCluster(t, "n1")
	cat2 := New(testConfig(tc.cat.st, tc.reg))
	cat2.StartBuilds(context.Background(), tc.nodes, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r1, r2 := NewE2BTemplates(tc.cat, 0), NewE2BTemplates(cat2, 0)
	p1, p2 := project.In("p1"), project.In("p2")

	b, err := r1.NewBuild(p1, "app", []string{"v1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r2.Build(p1, b.ID); err != nil || got.Name != "app" {
		t.Fatalf("the other replica's build: %+v %v", got, err)
	}
	if _, err := r2.Build(p2, b.ID); !errors.Is(err, e2b.ErrTemplateNotFound) {
		t.Fatalf("another project's build: %v", err)
	}
	if !r2.Owns(p1, "app") || r2.Owns(p2, "app") {
		t.Fatal("ownership of a requested build")
	}

	files := make([]byte, e2bFileChunk+12345)
	_, _ = rand.Read(files)
	hash := strings.Repeat("cd", 32)
	if err := r2.StageFiles(p1, hash, bytes.NewReader(files), 1<<30); err != nil {
		t.Fatal(err)
	}
	if !r1.HasFiles(p1, hash) || r1.HasFiles(p2, hash) {
		t.Fatal("uploaded files are the project's, on every replica")
	}
	if err := r2.StageFiles(p1, strings.Repeat("ef", 32), bytes.NewReader(files), 100); !errors.Is(err, template.ErrArchiveTooLarge) {
		t.Fatalf("files over the limit: %v", err)
	}
	if r1.HasFiles(p1, strings.Repeat("ef", 32)) {
		t.Fatal("files over the limit were kept")
	}

	recipe := &template.Recipe{From: "minimal", Steps: []template.Step{
		{Copy: &template.CopyStep{Archive: hash, Src: "a", Dest: "/a"}}, {Run: "cat /a"},
	}}
	missing := &template.Recipe{From: "minimal", Steps: []template.Step{{Copy: &template.CopyStep{Archive: strings.Repeat("01", 32), Src: "a", Dest: "/a"}}}}
	if _, err := r1.StartBuild(p1, b.ID, missing, nil, []int{1}); !errors.Is(err, e2b.ErrBadTemplate) {
		t.Fatalf("a build of files never uploaded: %v", err)
	}
	if _, err := r2.StartBuild(p2, b.ID, recipe, nil, []int{1, 2}); !errors.Is(err, e2b.ErrTemplateNotFound) {
		t.Fatalf("another project triggered the build: %v", err)
	}
	if _, err := r1.StartBuild(p1, b.ID, recipe, &template.RegistryAuth{Username: "u", Password: "p"}, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.StartBuild(p1, b.ID, recipe, nil, []int{1, 2}); !errors.Is(err, e2b.ErrBadTemplate) {
		t.Fatalf("a build triggered twice: %v", err)
	}
	tc.cat.builds.running.Wait()
	tc.heartbeat(t)

	// Ready once every replica's copy of the nodes can hold it.
	started, _ := r2.Build(p1, b.ID)
	state, reason, lines, err := r2.Status(p1, started, 0)
	for deadline := time.Now().Add(10 * time.Second); err == nil && state == template.StateBuilding && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		state, reason, lines, err = r2.Status(p1, started, 0)
	}
	if err != nil || state != template.StateReady || len(lines) == 0 {
		t.Fatalf("status through the other replica: %s %q %v %v", state, reason, lines, err)
	}
	if _, _, rest, _ := r1.Status(p1, started, len(lines)); len(rest) != 0 {
		t.Fatalf("lines past the offset: %v", rest)
	}
	fake := tc.nodes["n1"]
	if got := fake.LastTemplateBuild(); got.RegistryUsername != "u" || got.RegistryPassword != "p" || len(got.CopyArchives) != 1 {
		t.Fatalf("the node's build request: %+v", got)
	}
	spec, name, err := cat2.Resolve(p1, "app:v1")
	if err != nil || name != "p1/app:v1" {
		t.Fatalf("resolve the tag: %q %v", name, err)
	}
	body, _, err := fake.ReadVolumeFile(context.Background(), spec.RootfsVolume, "/files/"+hash)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if !bytes.Equal(got, files) {
		t.Fatalf("the node built from %d bytes of files, uploaded %d", len(got), len(files))
	}
	if tags, err := r1.Tags(p1, "app"); err != nil || len(tags) != 1 || tags[0].Tag != "v1" || tags[0].BuildID != b.ID {
		t.Fatalf("tags: %+v %v", tags, err)
	}
	if _, err := r1.AssignTags(p1, "app:v1", []string{"prod"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cat2.Resolve(p2, "app:prod"); err == nil {
		t.Fatal("another project resolved the tag")
	}
	for _, v := range tc.cat.List(p1) {
		if strings.Contains(v.Name, ":") {
			t.Fatalf("a tag listed as a template: %+v", v)
		}
	}

	if err := r2.Delete(p2, "app"); !errors.Is(err, e2b.ErrTemplateNotFound) {
		t.Fatalf("another project deleted it: %v", err)
	}
	if err := r2.Delete(p1, "minimal"); !errors.Is(err, e2b.ErrTemplateNotFound) {
		t.Fatalf("a project deleted a built-in template: %v", err)
	}
	if err := r2.Delete(p1, "app"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"app", "app:v1", "app:prod"} {
		if _, _, err := tc.cat.Resolve(p1, n); err == nil {
			t.Fatalf("%s resolves after the delete", n)
		}
	}
	if _, err := r1.Build(p1, b.ID); err == nil || r1.Owns(p1, "app") {
		t.Fatal("the build outlived its template")
	}
	if ok, _ := fake.VolumeExists(context.Background(), spec.RootfsVolume); ok {
		t.Fatal("the template's volume outlived its delete (its tags kept it)")
	}
}

// A project's uploaded files are bounded: the least recently used go
// first, never the one just uploaded nor one used within the grace, nor
// another project's.
func TestE2BFilesEviction(t *testing.T) {
	tc := newTemplateCluster(t, "n1")
	tp := NewE2BTemplates(tc.cat, 0)
	tp.filesBudget = 250
	p1, p2 := project.In("p1"), project.In("p2")
	hash := func(name string) string { return strings.Repeat(name[:1], 64) }
	old := time.Now().UTC().Add(-2 * filesGrace)
	for i, name := range []string{"a-oldest", "b-older", "c-recent"} {
		if err := tp.StageFiles(p1, hash(name), bytes.NewReader(make([]byte, 100)), 1<<20); err != nil {
			t.Fatal(err)
		}
		if name == "c-recent" {
			continue
		}
		key := filesKey("p1", hash(name))
		var f e2bFiles
		if err := tc.cat.st.Get(e2bFilesBucket, key, &f); err != nil {
			t.Fatal(err)
		}
		f.Used = old.Add(time.Duration(i) * time.Minute)
		if err := tc.cat.st.Put(e2bFilesBucket, key, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := tp.StageFiles(p2, hash("d-other"), bytes.NewReader(make([]byte, 100)), 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := tp.StageFiles(p1, hash("e-new"), bytes.NewReader(make([]byte, 100)), 1<<20); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"a-oldest": false, "b-older": false, "c-recent": true, "e-new": true} {
		if got := tp.HasFiles(p1, hash(name)); got != want {
			t.Errorf("%s kept: %v, want %v", name, got, want)
		}
	}
	if !tp.HasFiles(p2, hash("d-other")) {
		t.Error("another project's files were evicted")
	}
}
