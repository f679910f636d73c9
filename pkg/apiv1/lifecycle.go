package apiv1

import "time"

// Snapshot is one named snapshot of a sandbox (POST /v1/sandboxes/{id}/snapshots).
type Snapshot struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	SandboxID string    `json:"sandbox_id"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
}

// CreateSnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type CreateSnapshotRequest struct {
	// Name may be empty (it is then omitted); naming is left to the server.
	Name string `json:"name,omitempty"`
}

// SnapshotList is the body of GET /v1/sandboxes/{id}/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// RestoreRequest is the body of POST /v1/sandboxes/{id}/restore.
type RestoreRequest struct {
	Snapshot string `json:"snapshot"`
}

// BranchRequest is the body of POST /v1/sandboxes/{id}/branch: how many
// copies of the sandbox to start.
type BranchRequest struct {
	Count int `json:"count"`
	// TimeoutS is the branches' lifetime; 0 takes the source's.
	TimeoutS int `json:"timeout_s,omitempty"`
}

// BranchResult is the response of POST /v1/sandboxes/{id}/branch.
type BranchResult struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// SandboxEvent is one entry of a sandbox's lifecycle history, usually a
// state transition From -> To.
type SandboxEvent struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to,omitempty"`
	Message string    `json:"message,omitempty"`
}

// SandboxEventList is the body of GET /v1/sandboxes/{id}/events.
type SandboxEventList struct {
	Events []SandboxEvent `json:"events"`
}
