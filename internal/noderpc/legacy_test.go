package noderpc

import (
	"context"
	"net/http"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
	"github.com/space-platform/space/internal/noderpc/gen/nodev1/nodev1connect"
	"github.com/space-platform/space/pkg/apiv1"
)

// A node of the release before Reconcile does not serve it: the client
// drives that node's recovery steps in the same order, and the whole
// suite, Reconcile case included, passes against such a node.
func TestConformanceWithNodeOfReleaseBefore(t *testing.T) {
	nodeapitest.Run(t, func(t *testing.T) nodeapitest.Harness {
		f := nodeapitest.NewFake("fake")
		h := NewHandler(f, testToken, nil)
		old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == nodev1connect.NodeServiceReconcileProcedure {
				http.NotFound(w, r) // what a node without the procedure answers
				return
			}
			h.ServeHTTP(w, r)
		})
		srv, err := NewServer(old, ServerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ln := listen(t)
		go func() { _ = Serve(srv, ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		c, err := Dial("http://"+ln.Addr().String(), testToken, DialOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return nodeapitest.FakeHarness(c, f)
	})
}

// A control plane of the release before drives the recovery steps of a
// node of this one, which still serves them.
func TestNodeServesStepsOfReleaseBefore(t *testing.T) {
	ctx := context.Background()
	f := nodeapitest.NewFake("fake")
	old := previousRelease{dial(t, f)}
	id := "abcdefghij0123456789"
	h := nodeapitest.FakeHarness(f, f)
	if err := f.Create(ctx, nodeapi.CreateRequest{Spec: nodeapi.CreateSpec{ID: id, Template: h.Template, Limits: h.Limits, DiskMB: h.DiskMB, AccessToken: "t"}}); err != nil {
		t.Fatal(err)
	}
	if adopted, err := old.Adopt(ctx, id, "t"); err != nil || !adopted {
		t.Fatalf("adopt over the deprecated procedure: %v, %v", adopted, err)
	}
	if err := old.Quiesce(ctx, id); err != nil {
		t.Fatalf("quiesce: %v", err)
	}
	if reverted, err := old.RevertRestore(ctx, id); err != nil || reverted {
		t.Fatalf("revert with nothing to undo: %v, %v", reverted, err)
	}
	if whole, err := old.SettleCheckpoint(ctx, id, "no-such-image"); err != nil || whole {
		t.Fatalf("settle a missing image: %v, %v", whole, err)
	}
	res, err := nodeapi.Reconcile(ctx, old, nodeapi.ReconcileRequest{ID: id, AccessToken: "t", State: apiv1.StateRunning})
	if err != nil || res.Outcome != nodeapi.ReconcileRunning {
		t.Fatalf("reconcile step by step: %+v, %v", res, err)
	}
}

// A node whose implementation has no separate steps answers the
// deprecated procedures UNIMPLEMENTED, not a crash.
func TestStepsOfNodeWithoutThem(t *testing.T) {
	old := previousRelease{dial(t, reconcileOnly{nodeapitest.NewFake("fake")})}
	if _, err := old.Adopt(context.Background(), "abcdefghij0123456789", "t"); err == nil {
		t.Fatal("adopt on a node without the step succeeded")
	}
}

// reconcileOnly hides a node's recovery steps.
type reconcileOnly struct{ nodeapi.Node }
