package controlplane

import (
	"fmt"

	"github.com/space-platform/space/pkg/apiv1"
)

// transitions is the sandbox state machine: for each state, the states it
// may move to. Every state change goes through setState, which checks it here.
var transitions = map[string][]string{
	apiv1.StateStarting:     {apiv1.StateRunning, apiv1.StateFailed, apiv1.StateStopping},
	apiv1.StateRunning:      {apiv1.StatePausing, apiv1.StateSuspending, apiv1.StateSnapshotting, apiv1.StateResuming, apiv1.StateStopping, apiv1.StateFailed},
	apiv1.StatePausing:      {apiv1.StatePaused, apiv1.StateRunning, apiv1.StateFailed},
	apiv1.StatePaused:       {apiv1.StateResuming, apiv1.StateSuspending, apiv1.StateSnapshotting, apiv1.StateStopping, apiv1.StateFailed},
	apiv1.StateSuspending:   {apiv1.StateSuspended, apiv1.StateRunning, apiv1.StatePaused, apiv1.StateFailed},
	apiv1.StateSuspended:    {apiv1.StateResuming, apiv1.StateStopping, apiv1.StateFailed},
	apiv1.StateResuming:     {apiv1.StateRunning, apiv1.StatePaused, apiv1.StateSuspended, apiv1.StateFailed},
	apiv1.StateSnapshotting: {apiv1.StateRunning, apiv1.StatePaused, apiv1.StateFailed},
	apiv1.StateStopping:     {apiv1.StateStopped, apiv1.StateFailed},
	apiv1.StateStopped:      {},
	apiv1.StateFailed:       {apiv1.StateStopping},
}

// canMove reports whether from → to is allowed.
func canMove(from, to string) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// StateError is a request that the sandbox's current state does not allow.
type StateError struct {
	ID, State, Want string
	// Kind names what ID is when it is not a sandbox ("volume").
	Kind string
}

func (e *StateError) Error() string {
	kind := e.Kind
	if kind == "" {
		kind = "sandbox"
	}
	return fmt.Sprintf("%s %s is %s; cannot %s", kind, e.ID, e.State, e.Want)
}

// terminal states end a sandbox's life.
func terminal(state string) bool {
	return state == apiv1.StateStopped || state == apiv1.StateFailed
}
