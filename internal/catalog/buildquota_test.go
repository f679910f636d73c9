package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/template"
)

// gatedNodes are fake nodes whose builds run until the gate closes, as
// real builds run for minutes.
type gatedNodes struct {
	fakeNodes
	gate chan struct{}
	// building counts the builds running, by node.
	building *sync.Map // string → *atomic.Int32
}

func (g gatedNodes) Node(id string) (controlplane.Node, error) {
	n, ok := g.fakeNodes[id]
	if !ok {
		return g.fakeNodes.Node(id)
	}
	count, _ := g.building.LoadOrStore(id, new(atomic.Int32))
	return gatedFake{n, g.gate, count.(*atomic.Int32)}, nil
}

type gatedFake struct {
	*nodeapitest.Fake
	gate     chan struct{}
	building *atomic.Int32
}

func (g gatedFake) BuildTemplate(ctx context.Context, req nodeapi.TemplateBuildRequest, logs io.Writer) (nodeapi.TemplateBuilt, error) {
	g.building.Add(1)
	defer g.building.Add(-1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nodeapi.TemplateBuilt{}, ctx.Err()
	}
	return g.Fake.BuildTemplate(ctx, req, logs)
}

// gate makes tc's builds wait for the returned open to be called (at the
// test's end at the latest); running tells how many builds a node runs.
func (tc *templateCluster) gate(t *testing.T) (open func(), running func(node string) int) {
	t.Helper()
	g := gatedNodes{tc.nodes, make(chan struct{}), &sync.Map{}}
	tc.cat.StartBuilds(context.Background(), g, tc.cat.builds.log)
	opened := false
	open = func() {
		if !opened {
			opened = true
			close(g.gate)
		}
	}
	t.Cleanup(func() { open(); tc.cat.builds.running.Wait() })
	running = func(node string) int {
		if n, ok := g.building.Load(node); ok {
			return int(n.(*atomic.Int32).Load())
		}
		return 0
	}
	return open, running
}

func recipeNumbered(i int) []byte {
	return []byte(fmt.Sprintf("from: minimal\nrun:\n  - echo %d > /n\n", i))
}

// A build holds a build sandbox for as long as it runs, so it is charged
// to its project's quotas: a project capped at 1 sandbox cannot run a
// second build at once (429, naming the quota), nor create a sandbox
// while one runs, and one whose memory quota is smaller than a build
// sandbox cannot build at all. Another project is not held back.
func TestBuildsCountAgainstTheProjectsQuota(t *testing.T) {
	tc := newTemplateCluster(t, "n1")
	quotas, err := project.OpenQuotas(nil, project.Quota{MaxSandboxes: 1, MaxMemoryMB: 2048})
	if err != nil {
		t.Fatal(err)
	}
	cp := controlplane.New(controlplane.Config{Store: tc.cat.st, Quotas: quotas})
	tc.cat.cp = func() *controlplane.ControlPlane { return cp }
	open, _ := tc.gate(t)
	p1 := project.In("p1")

	if _, err := tc.cat.Submit(p1, "one", recipeNumbered(1), api.TemplateBuild{}); err != nil {
		t.Fatalf("p1's first build: %v", err)
	}
	var qe *controlplane.QuotaError
	for i := 2; i <= 4; i++ {
		_, err := tc.cat.Submit(p1, fmt.Sprintf("b%d", i), recipeNumbered(i), api.TemplateBuild{})
		if !errors.As(err, &qe) || qe.Project != "p1" || !strings.Contains(err.Error(), "of its 1 sandboxes") {
			t.Fatalf("p1's build %d while its first runs: %v, want a sandbox quota refusal", i, err)
		}
	}
	if u := cp.Usage("p1"); u.Sandboxes != 1 || u.MemoryMB != 1024 {
		t.Fatalf("p1's usage with a build running = %+v, want its build sandbox", u)
	}
	if _, err := tc.cat.Submit(project.In("p2"), "other", recipeNumbered(5), api.TemplateBuild{}); err != nil {
		t.Fatalf("another project's build: %v", err)
	}

	open()
	tc.cat.builds.running.Wait()
	if u := cp.Usage("p1"); u.Sandboxes != 0 || u.MemoryMB != 0 {
		t.Fatalf("p1's usage once its build ended = %+v", u)
	}
	if _, err := tc.cat.Submit(p1, "b2", recipeNumbered(2), api.TemplateBuild{}); err != nil {
		t.Fatalf("p1's build once its first ended: %v", err)
	}
	tc.cat.builds.running.Wait()

	if _, err := quotas.Set("p3", project.Override{MaxMemoryMB: ptr(512)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.cat.Submit(project.In("p3"), "big", recipeNumbered(6), api.TemplateBuild{}); !errors.As(err, &qe) || !strings.Contains(err.Error(), "MiB") {
		t.Fatalf("a 1024 MiB build in a 512 MiB project: %v, want a memory quota refusal", err)
	}
	if _, err := tc.cat.Get(project.In("p3"), "big"); !errors.Is(err, api.ErrTemplateNotFound) {
		t.Fatalf("a refused build left a record: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// Without quotas, a project still runs at most MaxBuildsPerProject
// builds at once; the next is refused (429) until one ends, and other
// projects build meanwhile.
func TestBuildsPerProjectAreBounded(t *testing.T) {
	tc := newTemplateCluster(t, "n1", "n2")
	tc.cat.maxProjectBuilds = 2
	open, _ := tc.gate(t)
	p1 := project.In("p1")
	for i := 1; i <= 2; i++ {
		if _, err := tc.cat.Submit(p1, fmt.Sprintf("b%d", i), recipeNumbered(i), api.TemplateBuild{}); err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
	}
	var qe *controlplane.QuotaError
	if _, err := tc.cat.Submit(p1, "b3", recipeNumbered(3), api.TemplateBuild{}); !errors.As(err, &qe) || !strings.Contains(err.Error(), "at most 2") {
		t.Fatalf("a third build: %v, want a refusal naming the bound", err)
	}
	if _, err := tc.cat.Submit(project.In("p2"), "b1", recipeNumbered(1), api.TemplateBuild{}); err != nil {
		t.Fatalf("another project's build: %v", err)
	}
	open()
	tc.cat.builds.running.Wait()
	if _, err := tc.cat.Submit(p1, "b3", recipeNumbered(3), api.TemplateBuild{}); err != nil {
		t.Fatalf("a build once the others ended: %v", err)
	}
}

// A build no node has room for waits in its queue, logged as queued,
// and builds once a node has room, instead of failing.
func TestBuildWaitsForANodeWithRoom(t *testing.T) {
	tc := newTemplateCluster(t, "n1")
	tc.cat.buildLimits.MemoryMB = 5000 // the fake node has 8192 MiB: one at a time
	tc.cat.queuePoll = 20 * time.Millisecond
	open, running := tc.gate(t)
	// The node's heartbeats count its build sandboxes' memory, as a real
	// node's do (it commits their limits).
	heartbeat := func() {
		info, _ := tc.nodes["n1"].Info(context.Background())
		info.MemoryFreeMB -= running("n1") * tc.cat.buildLimits.MemoryMB
		if err := tc.reg.Heartbeat("n1", info); err != nil {
			t.Fatal(err)
		}
	}
	p1 := project.In("p1")
	if _, err := tc.cat.Submit(p1, "first", recipeNumbered(1), api.TemplateBuild{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first build running", func() bool {
		heartbeat()
		return running("n1") == 1
	})
	if _, err := tc.cat.Submit(p1, "second", recipeNumbered(2), api.TemplateBuild{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second build queued", func() bool {
		heartbeat()
		lines, _, _ := tc.cat.Logs(p1, "second", 0)
		return len(lines) > 0 && strings.HasPrefix(lines[0], "queued: no node can fit")
	})
	// Past the placement's settling: the heartbeats alone hold it back.
	time.Sleep(cluster.DefaultSettle + 100*time.Millisecond)
	heartbeat()
	time.Sleep(10 * tc.cat.queuePoll)
	if b, _, _ := tc.cat.lookupBuilt(p1, "second"); b.State != template.StateBuilding || b.Node != "" || running("n1") != 1 {
		t.Fatalf("the queued build while the first runs: %+v", b)
	}
	open()
	waitFor(t, "the second build built", func() bool {
		heartbeat()
		b, _, _ := tc.cat.lookupBuilt(p1, "second")
		if b.State == template.StateFailed {
			t.Fatalf("the queued build failed: %s", b.Reason)
		}
		return b.Spec.ID != ""
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
