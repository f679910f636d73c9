package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/space-platform/space/pkg/apiv1"
)

// volumePath is the URL path of volume ref (name or id) and what is below it.
func volumePath(ref string, parts ...string) string {
	p := "/v1/volumes/" + url.PathEscape(ref)
	for _, part := range parts {
		p += "/" + part
	}
	return p
}

// CreateVolume makes a persistent volume of the key's project.
func (c *Client) CreateVolume(ctx context.Context, req apiv1.CreateVolumeRequest) (*apiv1.Volume, error) {
	var v apiv1.Volume
	if err := c.doJSON(ctx, http.MethodPost, "/v1/volumes", nil, req, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ListVolumes returns the project's volumes, by name.
func (c *Client) ListVolumes(ctx context.Context) ([]apiv1.Volume, error) {
	var list apiv1.VolumeList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/volumes", nil, nil, &list); err != nil {
		return nil, err
	}
	return list.Volumes, nil
}

// GetVolume returns a volume (by name or id) with what it holds now.
func (c *Client) GetVolume(ctx context.Context, ref string) (*apiv1.Volume, error) {
	var v apiv1.Volume
	if err := c.doJSON(ctx, http.MethodGet, volumePath(ref), nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// DeleteVolume deletes a volume and its files; it fails (409) while a
// sandbox that has not stopped mounts it.
func (c *Client) DeleteVolume(ctx context.Context, ref string) error {
	return c.doJSON(ctx, http.MethodDelete, volumePath(ref), nil, nil, nil)
}

// ReadVolumeFile opens a file of a volume; no sandbox needs to run. The
// caller closes the reader.
func (c *Client) ReadVolumeFile(ctx context.Context, ref, path string) (io.ReadCloser, error) {
	req, err := c.newRequest(ctx, http.MethodGet, volumePath(ref, "files"), url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req)
	return fileBody(resp, err, path)
}

// ListVolumeDir lists one page of a directory of a volume.
func (c *Client) ListVolumeDir(ctx context.Context, ref, path string, opts ListDirOptions) (*apiv1.FileList, error) {
	q := opts.query()
	q.Set("path", path)
	var list apiv1.FileList
	if err := c.doJSON(ctx, http.MethodGet, volumePath(ref, "files"), q, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// WriteVolumeFile creates or replaces a file of a volume (making its
// parents); it is durable when WriteVolumeFile returns.
func (c *Client) WriteVolumeFile(ctx context.Context, ref, path string, content io.Reader) (*apiv1.FileEntry, error) {
	return c.putFile(ctx, volumePath(ref, "files"), path, content)
}

// RemoveVolumeFile deletes a file or directory (recursively) of a volume.
func (c *Client) RemoveVolumeFile(ctx context.Context, ref, path string) error {
	return c.doJSON(ctx, http.MethodDelete, volumePath(ref, "files"), url.Values{"path": {path}}, nil, nil)
}

// MkdirVolume makes a directory (and its parents) in a volume.
func (c *Client) MkdirVolume(ctx context.Context, ref, path string) (*apiv1.FileEntry, error) {
	var entry apiv1.FileEntry
	if err := c.doJSON(ctx, http.MethodPost, volumePath(ref, "files", "mkdir"), nil, apiv1.MkdirRequest{Path: path}, &entry); err != nil {
		return nil, err
	}
	return &entry, nil
}
