package nodeapi

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// steps records the recovery steps Reconcile takes, on a node where the
// runtime is alive (or not), frozen (or not) and the image whole (or not).
type steps struct {
	alive, frozen, whole bool
	quiesceErr           error
	calls                []string
}

func (s *steps) call(name string) { s.calls = append(s.calls, name) }

func (s *steps) Quiesce(context.Context, string) error { s.call("quiesce"); return s.quiesceErr }
func (s *steps) RevertRestore(context.Context, string) (bool, error) {
	s.call("revert")
	return true, nil
}
func (s *steps) CommitRestore(context.Context, string) error { s.call("commit"); return nil }
func (s *steps) SettleCheckpoint(context.Context, string, string) (bool, error) {
	s.call("settle")
	return s.whole, nil
}
func (s *steps) Halt(context.Context, string) error { s.call("halt"); s.alive = false; return nil }
func (s *steps) Adopt(context.Context, string, string) (bool, error) {
	s.call("adopt")
	return s.alive, nil
}
func (s *steps) Paused(context.Context, string) (bool, error) { s.call("paused"); return s.frozen, nil }
func (s *steps) Resume(context.Context, string) error         { s.call("resume"); s.frozen = false; return nil }

func TestReconcileOrder(t *testing.T) {
	cases := []struct {
		name  string
		node  steps
		req   ReconcileRequest
		want  ReconcileOutcome
		calls []string
	}{
		{"running adopted", steps{alive: true}, ReconcileRequest{State: apiv1.StateRunning},
			ReconcileRunning, []string{"quiesce", "commit", "adopt", "paused"}},
		{"an interrupted pause resumed", steps{alive: true, frozen: true}, ReconcileRequest{State: apiv1.StatePausing},
			ReconcileRunning, []string{"quiesce", "commit", "adopt", "paused", "resume"}},
		{"paused stays paused", steps{alive: true, frozen: true}, ReconcileRequest{State: apiv1.StatePaused},
			ReconcilePaused, []string{"quiesce", "commit", "adopt"}},
		{"runtime gone", steps{}, ReconcileRequest{State: apiv1.StateRunning},
			ReconcileGone, []string{"quiesce", "commit", "adopt"}},
		{"suspended left alone, no quiesce", steps{}, ReconcileRequest{State: apiv1.StateSuspended},
			ReconcileUntouched, []string{"commit"}},
		{"starting left to the control plane", steps{alive: true}, ReconcileRequest{State: apiv1.StateStarting},
			ReconcileUntouched, []string{"quiesce", "commit"}},
		{"stopping left to the control plane", steps{alive: true}, ReconcileRequest{State: apiv1.StateStopping},
			ReconcileUntouched, []string{"quiesce", "commit"}},
		{"a whole suspend finished", steps{alive: true, whole: true}, ReconcileRequest{State: apiv1.StateSuspending, Image: "img"},
			ReconcileSuspended, []string{"quiesce", "commit", "settle", "halt"}},
		{"a torn suspend runs on", steps{alive: true, frozen: true}, ReconcileRequest{State: apiv1.StateSuspending, Image: "img"},
			ReconcileRunning, []string{"quiesce", "commit", "settle", "adopt", "paused", "resume"}},
		{"a suspend with no image runs on", steps{alive: true}, ReconcileRequest{State: apiv1.StateSuspending},
			ReconcileRunning, []string{"quiesce", "commit", "adopt", "paused"}},
		{"an uncommitted restore undone first", steps{alive: true}, ReconcileRequest{State: apiv1.StateRunning, Restoring: true},
			ReconcileRunning, []string{"quiesce", "revert", "adopt", "paused"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := c.node
			c.req.ID = "sbx"
			res, err := Reconcile(context.Background(), &n, c.req)
			if err != nil || res.Outcome != c.want {
				t.Fatalf("outcome %+v, %v; want %s", res, err, c.want)
			}
			if !slices.Equal(n.calls, c.calls) {
				t.Fatalf("steps %v, want %v", n.calls, c.calls)
			}
			if res.Reverted != c.req.Restoring {
				t.Fatalf("reverted %v for restoring %v", res.Reverted, c.req.Restoring)
			}
			// The second call (a crash before the record followed) ends
			// in the same outcome.
			again, err := Reconcile(context.Background(), &n, c.req)
			if err != nil || again.Outcome != c.want {
				t.Fatalf("second reconcile: %+v, %v; want %s", again, err, c.want)
			}
		})
	}
}

// A quiesce that times out is a warning: the reconcile goes on.
func TestReconcileQuiesceWarns(t *testing.T) {
	n := &steps{alive: true, quiesceErr: errors.New("runtime commands still running")}
	res, err := Reconcile(context.Background(), n, ReconcileRequest{ID: "sbx", State: apiv1.StateRunning})
	if err != nil || res.Outcome != ReconcileRunning || len(res.Warnings) != 1 {
		t.Fatalf("reconcile: %+v, %v", res, err)
	}
}

// Names that could escape a node's directories are refused before any
// step runs.
func TestReconcileRefusesInvalidNames(t *testing.T) {
	for _, req := range []ReconcileRequest{
		{ID: "../escape", State: apiv1.StateRunning},
		{ID: "a/b", State: apiv1.StateRunning},
		{ID: "", State: apiv1.StateRunning},
		{ID: "sbx", State: apiv1.StateSuspending, Image: "../../etc"},
	} {
		n := &steps{alive: true}
		if _, err := Reconcile(context.Background(), n, req); !errors.Is(err, ErrInvalidName) || len(n.calls) != 0 {
			t.Errorf("reconcile %+v: %v after steps %v", req, err, n.calls)
		}
	}
}
