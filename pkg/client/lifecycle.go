package client

import (
	"context"
	"net/http"

	"github.com/space-platform/space/pkg/apiv1"
)

// Pause freezes the sandbox's processes in memory.
func (c *Client) Pause(ctx context.Context, id string) (*apiv1.Sandbox, error) {
	return c.sandboxAction(ctx, id, "pause", nil)
}

// Resume brings a paused or suspended sandbox back to running.
func (c *Client) Resume(ctx context.Context, id string) (*apiv1.Sandbox, error) {
	return c.sandboxAction(ctx, id, "resume", nil)
}

// Suspend saves the sandbox to disk and releases its memory.
func (c *Client) Suspend(ctx context.Context, id string) (*apiv1.Sandbox, error) {
	return c.sandboxAction(ctx, id, "suspend", nil)
}

// SuspendWith suspends the sandbox as req says: KeepMemory false keeps
// only its disk, and the resume boots it afresh.
func (c *Client) SuspendWith(ctx context.Context, id string, req apiv1.SuspendRequest) (*apiv1.Sandbox, error) {
	return c.sandboxAction(ctx, id, "suspend", req)
}

// Restore rolls the sandbox back to the named snapshot.
func (c *Client) Restore(ctx context.Context, id, snapshot string) (*apiv1.Sandbox, error) {
	return c.sandboxAction(ctx, id, "restore", apiv1.RestoreRequest{Snapshot: snapshot})
}

func (c *Client) sandboxAction(ctx context.Context, id, action string, body any) (*apiv1.Sandbox, error) {
	var sb apiv1.Sandbox
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, action), nil, body, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// CreateSnapshot records the sandbox's current state under name.
func (c *Client) CreateSnapshot(ctx context.Context, id, name string) (*apiv1.Snapshot, error) {
	var snap apiv1.Snapshot
	req := apiv1.CreateSnapshotRequest{Name: name}
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "snapshots"), nil, req, &snap); err != nil {
		return nil, err
	}
	return &snap, nil
}

// ListSnapshots returns the sandbox's snapshots.
func (c *Client) ListSnapshots(ctx context.Context, id string) ([]apiv1.Snapshot, error) {
	var list apiv1.SnapshotList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "snapshots"), nil, nil, &list); err != nil {
		return nil, err
	}
	return list.Snapshots, nil
}

// DeleteSnapshot removes the named snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, id, name string) error {
	return c.doJSON(ctx, http.MethodDelete, sandboxPath(id, "snapshots", name), nil, nil, nil)
}

// Branch starts count new sandboxes from the sandbox's current state.
func (c *Client) Branch(ctx context.Context, id string, count int) ([]apiv1.Sandbox, error) {
	var res apiv1.BranchResult
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "branch"), nil, apiv1.BranchRequest{Count: count}, &res); err != nil {
		return nil, err
	}
	return res.Sandboxes, nil
}

// Events returns the sandbox's lifecycle history, oldest first.
func (c *Client) Events(ctx context.Context, id string) ([]apiv1.SandboxEvent, error) {
	var list apiv1.SandboxEventList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "events"), nil, nil, &list); err != nil {
		return nil, err
	}
	return list.Events, nil
}
