package nodeapi

import (
	"context"
	"fmt"
	"strings"

	"github.com/space-platform/space/pkg/apiv1"
)

// ReconcileRequest is what the control plane's record says of a sandbox
// when it reconciles the sandbox's node after a crash: all the node needs
// to settle the sandbox itself.
type ReconcileRequest struct {
	ID          string
	AccessToken string
	// State is the record's state (apiv1.State*).
	State string
	// Restoring says a restore in place began that the record did not
	// commit: it did not happen, and the node undoes it.
	Restoring bool
	// Image is the suspend image the record names, if any: a suspending
	// sandbox whose image is whole is suspended.
	Image string
}

// ReconcileOutcome is the state a Reconcile left a sandbox in.
type ReconcileOutcome string

const (
	// ReconcileRunning: a runtime survived and was adopted; one left
	// frozen by an interrupted pause, suspend or capture was resumed.
	ReconcileRunning ReconcileOutcome = "running"
	// ReconcilePaused: a runtime survived, frozen as the record says.
	ReconcilePaused ReconcileOutcome = "paused"
	// ReconcileSuspended: the suspend a crash interrupted left a whole
	// image; the runtime is halted and the root volume kept.
	ReconcileSuspended ReconcileOutcome = "suspended"
	// ReconcileGone: no runtime is left to adopt; the root volume and
	// any image are as they were.
	ReconcileGone ReconcileOutcome = "gone"
	// ReconcileUntouched: the record says starting, stopping or
	// suspended, which the control plane finishes itself; nothing was
	// adopted.
	ReconcileUntouched ReconcileOutcome = "untouched"
)

// ReconcileResult is the answer of Reconcile.
type ReconcileResult struct {
	Outcome ReconcileOutcome
	// Reverted is true when a restore in place was undone by this call
	// (false when an earlier call already had).
	Reverted bool
	// Warnings name the steps that failed without deciding the outcome:
	// runtime commands that still ran, a finished restore whose old
	// volume could not be dropped.
	Warnings []string
}

// RecoverySteps are a node's own steps of a reconcile. They are not on
// the contract: Reconcile orders them, and every implementation of the
// contract (the real node, the fakes) runs that one order.
type RecoverySteps interface {
	// Quiesce waits for runtime commands a previous process left running.
	Quiesce(ctx context.Context, id string) error
	// RevertRestore undoes a restore in place that a crash interrupted;
	// reverted is false when there was nothing to undo.
	RevertRestore(ctx context.Context, id string) (reverted bool, err error)
	// CommitRestore drops the volume a finished restore in place set aside.
	CommitRestore(ctx context.Context, id string) error
	// SettleCheckpoint waits for a checkpoint into image that a previous
	// process left running; true when the image is complete.
	SettleCheckpoint(ctx context.Context, id, image string) (bool, error)
	// Halt stops a sandbox's runtime and keeps its root volume.
	Halt(ctx context.Context, id string) error
	// Adopt takes over a sandbox a previous node process left running;
	// adopted is false when it is not running any more.
	Adopt(ctx context.Context, id, accessToken string) (adopted bool, err error)
	Paused(ctx context.Context, id string) (bool, error)
	Resume(ctx context.Context, id string) error
}

// Reconcile is the one order of a reconcile's steps (Control.Reconcile):
//
//  1. unless the record says suspended, wait for runtime commands a dead
//     process left running (their outcome decides what follows);
//  2. undo a restore in place the record did not commit, or drop what a
//     committed one had not dropped yet;
//  3. starting, stopping, suspended: stop there (the control plane runs
//     the start again, finishes the stop, or keeps the suspend);
//  4. suspending with a whole image: halt the runtime (suspended);
//  5. otherwise adopt a runtime that survived, resuming one an
//     interrupted pause, suspend or capture left frozen unless the record
//     says paused; without one, the sandbox is gone.
//
// Every step is idempotent, so the whole is too. An id that is not one
// valid name, or an image that is not a valid name, is refused before
// any step (ErrInvalidName); a node may refuse more.
func Reconcile(ctx context.Context, n RecoverySteps, req ReconcileRequest) (ReconcileResult, error) {
	var res ReconcileResult
	if ValidName(req.ID) != nil || strings.Contains(req.ID, "/") {
		return res, fmt.Errorf("%w: sandbox id %q", ErrInvalidName, req.ID)
	}
	if req.Image != "" {
		if err := ValidName(req.Image); err != nil {
			return res, err
		}
	}
	if req.State != apiv1.StateSuspended {
		if err := n.Quiesce(ctx, req.ID); err != nil {
			res.Warnings = append(res.Warnings, err.Error())
		}
	}
	if req.Restoring {
		reverted, err := n.RevertRestore(ctx, req.ID)
		if err != nil {
			return res, fmt.Errorf("undo an interrupted restore: %w", err)
		}
		res.Reverted = reverted
	} else if err := n.CommitRestore(ctx, req.ID); err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("drop the volume a restore replaced: %v", err))
	}
	switch req.State {
	case apiv1.StateStarting, apiv1.StateStopping, apiv1.StateSuspended:
		res.Outcome = ReconcileUntouched
		return res, nil
	case apiv1.StateSuspending:
		if req.Image != "" {
			whole, err := n.SettleCheckpoint(ctx, req.ID, req.Image)
			if err != nil {
				res.Warnings = append(res.Warnings, fmt.Sprintf("settle checkpoint: %v", err))
			} else if whole {
				if err := n.Halt(ctx, req.ID); err != nil {
					return res, err
				}
				res.Outcome = ReconcileSuspended
				return res, nil
			}
		}
	}
	alive, err := n.Adopt(ctx, req.ID, req.AccessToken)
	if err != nil {
		return res, err
	}
	switch {
	case !alive:
		res.Outcome = ReconcileGone
	case req.State == apiv1.StatePaused:
		res.Outcome = ReconcilePaused
	default:
		paused, err := n.Paused(ctx, req.ID)
		if err != nil {
			return res, err
		}
		if paused {
			if err := n.Resume(ctx, req.ID); err != nil {
				return res, err
			}
		}
		res.Outcome = ReconcileRunning
	}
	return res, nil
}
