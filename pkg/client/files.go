package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	"github.com/space-platform/space/pkg/apiv1"
)

// ErrIsDirectory is returned (wrapped) by ReadFile when the path is a directory.
var ErrIsDirectory = errors.New("is a directory")

// ErrNotDirectory is returned (wrapped) by ListDir when the path is a file.
var ErrNotDirectory = errors.New("not a directory")

// ReadFile opens a file inside the sandbox. The caller must close the
// returned reader; its bytes stream from the server as they are read.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error) {
	return c.readFile(ctx, id, path, url.Values{})
}

// ReadFileFromSnapshot opens a file as it was in one of the sandbox's
// snapshots (by name or id), without restoring anything; path must be
// absolute.
func (c *Client) ReadFileFromSnapshot(ctx context.Context, id, path, snapshot string) (io.ReadCloser, error) {
	return c.readFile(ctx, id, path, url.Values{"snapshot": {snapshot}})
}

func (c *Client) readFile(ctx context.Context, id, path string, extra url.Values) (io.ReadCloser, error) {
	resp, err := c.getFiles(ctx, id, path, 0, extra)
	return fileBody(resp, err, path)
}

// fileBody is the body of a files read, or ErrIsDirectory for a listing.
func fileBody(resp *http.Response, err error, path string) (io.ReadCloser, error) {
	if err != nil {
		return nil, err
	}
	if isJSON(resp) {
		resp.Body.Close()
		return nil, fmt.Errorf("read %s: %w", path, ErrIsDirectory)
	}
	return resp.Body, nil
}

// ListDir lists a directory inside the sandbox down to depth levels (0
// leaves the choice to the server, which lists one level), fetching every
// page. For directories too large to hold, use ListDirPage.
func (c *Client) ListDir(ctx context.Context, id, path string, depth int) (*apiv1.FileList, error) {
	var all *apiv1.FileList
	opts := ListDirOptions{Depth: depth}
	for {
		page, err := c.ListDirPage(ctx, id, path, opts)
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = page
		} else {
			all.Entries = append(all.Entries, page.Entries...)
		}
		if page.NextCursor == "" {
			all.NextCursor = ""
			return all, nil
		}
		opts.Cursor = page.NextCursor
	}
}

// ListDirOptions selects a page of a directory listing.
type ListDirOptions struct {
	Depth  int    // levels below the directory; 0 is the server's default (1)
	Limit  int    // entries per page; 0 is the server's default (1,000)
	Cursor string // NextCursor of the previous page; "" for the first
}

func (o ListDirOptions) query() url.Values {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return q
}

// ListDirPage returns one page of a directory listing; its NextCursor, if
// set, fetches the next.
func (c *Client) ListDirPage(ctx context.Context, id, path string, opts ListDirOptions) (*apiv1.FileList, error) {
	resp, err := c.getFiles(ctx, id, path, opts.Depth, opts.query())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !isJSON(resp) {
		return nil, fmt.Errorf("list %s: %w", path, ErrNotDirectory)
	}
	var list apiv1.FileList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("decode listing of %s: %w", path, err)
	}
	return &list, nil
}

// ListDirEach streams one page of a directory listing, calling fn with each
// entry as it is decoded, so that not even one page is held in memory. It
// returns the page's NextCursor ("" after the last page). An error from fn
// stops the listing and is returned.
func (c *Client) ListDirEach(ctx context.Context, id, path string, opts ListDirOptions, fn func(apiv1.FileEntry) error) (string, error) {
	resp, err := c.getFiles(ctx, id, path, opts.Depth, opts.query())
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if !isJSON(resp) {
		return "", fmt.Errorf("list %s: %w", path, ErrNotDirectory)
	}
	next, err := decodeListing(json.NewDecoder(resp.Body), fn)
	if err != nil {
		return "", fmt.Errorf("decode listing of %s: %w", path, err)
	}
	return next, nil
}

// decodeListing walks a FileList object token by token.
func decodeListing(dec *json.Decoder, fn func(apiv1.FileEntry) error) (string, error) {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", fmt.Errorf("want a JSON object (%v)", err)
	}
	next := ""
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch t {
		case "entries":
			if t, err := dec.Token(); err != nil || t != json.Delim('[') {
				return "", fmt.Errorf("entries: want an array (%v)", err)
			}
			for dec.More() {
				var e apiv1.FileEntry
				if err := dec.Decode(&e); err != nil {
					return "", err
				}
				if err := fn(e); err != nil {
					return "", err
				}
			}
			if _, err := dec.Token(); err != nil {
				return "", err
			}
		case "next_cursor":
			if err := dec.Decode(&next); err != nil {
				return "", err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", err
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return "", err
	}
	return next, nil
}

func (c *Client) getFiles(ctx context.Context, id, path string, depth int, extra url.Values) (*http.Response, error) {
	query := url.Values{"path": {path}}
	for k, v := range extra {
		query[k] = v
	}
	if depth > 0 {
		query.Set("depth", strconv.Itoa(depth))
	}
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "files"), query, nil)
	if err != nil {
		return nil, err
	}
	return c.send(req)
}

// isJSON tells a directory listing from file content: the server marks
// listings application/json and file bytes application/octet-stream.
func isJSON(resp *http.Response) bool {
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mediaType == "application/json"
}

// WriteFile creates or replaces a file inside the sandbox with the bytes of
// content, creating missing parent directories. The file is durable when
// WriteFile returns.
func (c *Client) WriteFile(ctx context.Context, id, path string, content io.Reader) (*apiv1.FileEntry, error) {
	return c.putFile(ctx, sandboxPath(id, "files"), path, content)
}

// putFile streams content to the files route at route (a sandbox's or a
// volume's) for path.
func (c *Client) putFile(ctx context.Context, route, path string, content io.Reader) (*apiv1.FileEntry, error) {
	req, err := c.newRequest(ctx, http.MethodPut, route, url.Values{"path": {path}}, content)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var entry apiv1.FileEntry
	if err := decodeBody(resp, &entry); err != nil {
		return nil, err
	}
	return &entry, nil
}

// RemoveFile deletes a file or directory inside the sandbox.
func (c *Client) RemoveFile(ctx context.Context, id, path string) error {
	return c.doJSON(ctx, http.MethodDelete, sandboxPath(id, "files"), url.Values{"path": {path}}, nil, nil)
}

// Mkdir creates a directory (and its parents) inside the sandbox.
func (c *Client) Mkdir(ctx context.Context, id, path string) (*apiv1.FileEntry, error) {
	var entry apiv1.FileEntry
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "files", "mkdir"), nil, apiv1.MkdirRequest{Path: path}, &entry); err != nil {
		return nil, err
	}
	return &entry, nil
}

// Move renames a file or directory inside the sandbox.
func (c *Client) Move(ctx context.Context, id, from, to string) (*apiv1.FileEntry, error) {
	var entry apiv1.FileEntry
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "files", "move"), nil, apiv1.MoveRequest{From: from, To: to}, &entry); err != nil {
		return nil, err
	}
	return &entry, nil
}
