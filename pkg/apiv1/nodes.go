package apiv1

import "time"

// Node states. A ready node takes new sandboxes; cordoned and draining
// ones take none (a draining node's sandboxes are moved away); an
// unreachable one missed its heartbeats and is ready (or what it was)
// again at its next; a lost one was removed with force and its sandboxes
// written off.
const (
	NodeReady       = "ready"
	NodeCordoned    = "cordoned"
	NodeDraining    = "draining"
	NodeUnreachable = "unreachable"
	NodeLost        = "lost"
)

// Node is one node of the cluster: its state, capacity and use, as of its
// last heartbeat.
type Node struct {
	ID string `json:"id"`
	// Address is the URL the node advertised.
	Address string `json:"address"`
	State   string `json:"state"`
	// Reason says why a node is not ready.
	Reason string `json:"reason,omitempty"`
	// Capacity.
	VCPUs    int `json:"vcpus"`
	MemoryMB int `json:"memory_mb"`
	DiskMB   int `json:"disk_mb"`
	// Use: sandboxes running, memory and disk free, and the sums of the
	// limits of its sandboxes (pooled ones included).
	Sandboxes         int `json:"sandboxes"`
	MemoryFreeMB      int `json:"memory_free_mb"`
	DiskFreeMB        int `json:"disk_free_mb"`
	VCPUsCommitted    int `json:"vcpus_committed"`
	MemoryCommittedMB int `json:"memory_committed_mb"`
	// Templates are the ids of the templates the node holds (and so can
	// run), TemplateImages those booted warm on it.
	Templates      []string `json:"templates"`
	TemplateImages []string `json:"template_images"`
	// Pools are the node's warm pools by template id.
	Pools         map[string]PoolStatus `json:"pools"`
	RegisteredAt  time.Time             `json:"registered_at"`
	LastHeartbeat time.Time             `json:"last_heartbeat"`
}

// NodeList is the body of GET /v1/nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}
