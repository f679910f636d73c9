package catalog

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/cpapi/cpapitest"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// A project's built templates are charged to its max_template_disk_mb:
// each build is told what is left, a build asked for when nothing is
// left is refused with a quota error (429), the template a build
// replaces is not counted, and a delete makes room again. Another
// project's templates are its own.
func TestTemplateDiskQuota(t *testing.T) {
	st, reg := cpapitest.NewStoreAndRegistry(t)
	quotas, err := project.OpenQuotas(nil, apiv1.Quota{MaxTemplateDiskMB: 2})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(st, reg)
	cfg.Quotas = quotas
	tc := &templateCluster{reg: reg, nodes: fakeNodes{}, cat: New(cfg)}
	tc.cat.StartBuilds(context.Background(), tc.nodes, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tc.join(t, "n1")
	p1, p2 := project.In("p1"), project.In("p2")

	// The fake node's template holds the uploaded archive: its size is
	// the archive's.
	build := func(scope project.Scope, name string, archiveBytes int) error {
		t.Helper()
		archive := strings.Repeat("x", archiveBytes)
		_, err := tc.cat.Submit(scope, name, []byte("from: upload\n"), api.TemplateBuild{Archive: strings.NewReader(archive), ArchiveLimit: int64(len(archive))})
		tc.cat.builds.running.Wait()
		return err
	}
	left := func() int64 { return tc.nodes["n1"].LastTemplateBuild().DiskQuotaBytes }

	if err := build(p1, "big", 1536<<10); err != nil {
		t.Fatal(err)
	}
	if left() != 2<<20 {
		t.Errorf("the first build was told %d bytes are left, want the whole 2 MiB", left())
	}
	if used, err := tc.cat.DiskUsed("p1"); err != nil || used < 1536<<10 || used > 1536<<10+4096 {
		t.Errorf("p1's templates hold %d bytes (%v), want its template's size, about 1.5 MiB", used, err)
	}
	if err := build(p1, "small", 1); err != nil {
		t.Fatal(err)
	}
	if got, want := left(), int64(2<<20)-int64(1536<<10)-int64(len("/archive")); got > want || got < want-4096 {
		t.Errorf("the second build was told %d bytes are left, want about %d", got, want)
	}
	// What is left is less than this build takes: the node stops it
	// (template.Source.DiskQuotaBytes); the fake does not, so the
	// project ends over its quota.
	if err := build(p1, "over", 1<<20); err != nil {
		t.Fatal(err)
	}
	err = build(p1, "refused", 1)
	var quotaErr *controlplane.QuotaError
	if !errors.As(err, &quotaErr) || !strings.Contains(err.Error(), "of its 2 MiB of template disk") {
		t.Fatalf("a build past the quota: %v, want a quota error", err)
	}
	if _, err := tc.cat.Get(p1, "refused"); !errors.Is(err, api.ErrTemplateNotFound) {
		t.Errorf("a refused build was recorded: %v", err)
	}
	// A rebuild replaces its template, which is not counted against it.
	if err := build(p1, "over", 1); err != nil {
		t.Errorf("rebuilding a template of the project over its quota: %v", err)
	}
	if err := build(p2, "other", 1); err != nil {
		t.Errorf("another project's build: %v", err)
	}
	if err := build(p1, "over-again", 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := build(p1, "refused", 1); err == nil {
		t.Fatal("over the quota again, a build was taken")
	}
	if err := tc.cat.Delete(p1, "big"); err != nil {
		t.Fatal(err)
	}
	if err := build(p1, "refused", 1); err != nil {
		t.Errorf("after a delete made room: %v", err)
	}
}
