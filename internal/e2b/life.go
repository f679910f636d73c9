package e2b

import (
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/pkg/apiv1"
)

// pauseOptions maps the pause body's `memory` (the SDKs' keepMemory) onto
// space's suspend: false drops memory and keeps the disk, so the resume
// (connect) boots the sandbox afresh; absent or true keeps it.
func pauseOptions(memory *bool) controlplane.SuspendOptions {
	return controlplane.SuspendOptions{DropMemory: memory != nil && !*memory}
}

// pauseMemory carries create's autoPauseMemory (lifecycle.onTimeout
// keepMemory) into the request: false makes the timeout's pause keep only
// the disk. A sandbox paused that way cannot wake on traffic (its
// processes are gone), so autoResume with it is refused, as the SDKs do.
func (req *newSandbox) pauseMemory(out *apiv1.CreateSandboxRequest) string {
	if req.AutoPauseMemory == nil || *req.AutoPauseMemory {
		return ""
	}
	if req.AutoPause == nil || !*req.AutoPause {
		return "autoPauseMemory is only allowed when autoPause is true (onTimeout action pause)"
	}
	if req.AutoResume != nil && req.AutoResume.Enabled != nil && *req.AutoResume.Enabled {
		return "autoResume: true is not valid with autoPauseMemory: false: a filesystem-only pause is resumed explicitly with connect"
	}
	keep := false
	out.KeepMemory = &keep
	if out.AutoResume == nil {
		// The native default wakes on traffic; a cold boot on traffic is
		// not what an E2B caller asked for.
		off := false
		out.AutoResume = &off
	}
	return ""
}
