package controlplane

import (
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

func TestTransitionsCoverEveryState(t *testing.T) {
	all := []string{apiv1.StateStarting, apiv1.StateRunning, apiv1.StatePausing, apiv1.StatePaused,
		apiv1.StateSuspending, apiv1.StateSuspended, apiv1.StateResuming, apiv1.StateSnapshotting,
		apiv1.StateStopping, apiv1.StateStopped, apiv1.StateFailed}
	for _, s := range all {
		if _, ok := transitions[s]; !ok {
			t.Errorf("state %s has no entry in the transition table", s)
		}
		for _, to := range transitions[s] {
			if _, ok := transitions[to]; !ok {
				t.Errorf("%s → %s: target is not a known state", s, to)
			}
		}
	}
	if canMove(apiv1.StateStopped, apiv1.StateRunning) {
		t.Error("a stopped sandbox must not run again")
	}
	if !canMove(apiv1.StateStarting, apiv1.StateRunning) {
		t.Error("starting → running must be allowed")
	}
}
