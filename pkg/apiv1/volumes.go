package apiv1

import "time"

// CreateVolumeRequest makes a persistent volume: storage that outlives
// sandboxes and that sandboxes mount (CreateSandboxRequest.VolumeMounts).
type CreateVolumeRequest struct {
	// Name is unique within the project: 1 to 63 lower-case letters,
	// digits, '-', '_' or '.', starting with a letter or digit.
	Name string `json:"name"`
	// SizeMB caps what the volume holds (default 10240, 10 GiB); writes
	// past it fail with "disk quota exceeded" inside sandboxes and 507
	// through the files API.
	SizeMB int `json:"size_mb,omitempty"`
}

// Volume is the public view of a persistent volume.
type Volume struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Project string `json:"project"`
	SizeMB  int    `json:"size_mb"`
	// UsedBytes is what the volume holds now (its qgroup's referenced
	// bytes); absent when the node that keeps it does not answer.
	UsedBytes *int64 `json:"used_bytes,omitempty"`
	// Node keeps the volume; sandboxes mounting it run there.
	Node      string    `json:"node,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// MountedBy lists the sandboxes (not stopped) that mount it.
	MountedBy []string `json:"mounted_by"`
}

// VolumeList is the answer of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// VolumeMount mounts a persistent volume (by name or id) into a sandbox at
// Path, an absolute directory that is made if missing.
type VolumeMount struct {
	Volume   string `json:"volume"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}
