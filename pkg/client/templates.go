package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"

	"github.com/space-platform/space/pkg/apiv1"
)

// CreateTemplate submits a recipe for building. The template comes back
// "building", or "ready" when the same content was built before.
func (c *Client) CreateTemplate(ctx context.Context, req apiv1.CreateTemplateRequest) (*apiv1.Template, error) {
	var t apiv1.Template
	if err := c.doJSON(ctx, http.MethodPost, "/v1/templates", nil, req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// CreateTemplateFromArchive submits a recipe whose base is "from: upload"
// together with the OCI (or docker-save) archive it builds from, streamed
// as multipart/form-data. size is the archive's length when known (-1
// otherwise): with it the request declares its length, and the server
// refuses an archive over its limit before any of it is sent.
func (c *Client) CreateTemplateFromArchive(ctx context.Context, req apiv1.CreateTemplateRequest, archive io.Reader, size int64) (*apiv1.Template, error) {
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if req.Name != "" {
		if err := mw.WriteField("name", req.Name); err != nil {
			return nil, err
		}
	}
	if err := mw.WriteField("recipe", req.Recipe); err != nil {
		return nil, err
	}
	if _, err := mw.CreateFormFile("archive", "image.tar"); err != nil {
		return nil, err
	}
	prefix := bytes.Clone(head.Bytes())
	head.Reset()
	if err := mw.Close(); err != nil {
		return nil, err
	}
	suffix := head.Bytes()
	hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/templates", nil,
		io.MultiReader(bytes.NewReader(prefix), archive, bytes.NewReader(suffix)))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", mw.FormDataContentType())
	hreq.Header.Set("Accept", "application/json")
	if size >= 0 {
		hreq.ContentLength = int64(len(prefix)) + size + int64(len(suffix))
		hreq.Header.Set("Expect", "100-continue")
	}
	resp, err := c.send(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var t apiv1.Template
	if err := decodeBody(resp, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTemplates returns all templates.
func (c *Client) ListTemplates(ctx context.Context) ([]apiv1.Template, error) {
	var list apiv1.TemplateList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/templates", nil, nil, &list); err != nil {
		return nil, err
	}
	return list.Templates, nil
}

// GetTemplate returns one template with its whole build log.
func (c *Client) GetTemplate(ctx context.Context, name string) (*apiv1.Template, error) {
	return c.GetTemplateLogsFrom(ctx, name, 0)
}

// GetTemplateLogsFrom returns one template with the build log lines from
// index logsFrom on.
func (c *Client) GetTemplateLogsFrom(ctx context.Context, name string, logsFrom int) (*apiv1.Template, error) {
	var query url.Values
	if logsFrom > 0 {
		query = url.Values{"logs_from": {strconv.Itoa(logsFrom)}}
	}
	var t apiv1.Template
	if err := c.doJSON(ctx, http.MethodGet, "/v1/templates/"+url.PathEscape(name), query, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTemplate removes a template; it fails with a 409 (IsConflict) while
// sandboxes use it.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/templates/"+url.PathEscape(name), nil, nil, nil)
}

// TemplateLogEvent is one event of a template build log stream: a log line,
// or the final done event carrying the template in its end state.
type TemplateLogEvent struct {
	// Line is the log line and Index its position in the build log.
	Line  string
	Index int
	// Done is set on the last event, with Template in its final state
	// (ready or failed).
	Done     bool
	Template *apiv1.Template
}

// TemplateLogStream follows a template's build log. Like AttachStream it
// reconnects after a dropped connection without repeating or losing lines.
type TemplateLogStream struct {
	stream *resumingStream
	// nextIndex is the index of the next log line to return.
	nextIndex int
	done      bool
}

// TemplateLogs streams the build log of template name from line index from,
// ending with the done event.
func (c *Client) TemplateLogs(ctx context.Context, name string, from int) (*TemplateLogStream, error) {
	s := &TemplateLogStream{nextIndex: from}
	path := "/v1/templates/" + url.PathEscape(name) + "/logs"
	s.stream = c.newResumingStream(ctx, func(ctx context.Context) (*http.Request, error) {
		// Line ids are index+1, so the next index to read is also the last
		// id seen: both ways of resuming agree.
		resumeAt := strconv.Itoa(s.nextIndex)
		req, err := c.newRequest(ctx, http.MethodGet, path, url.Values{"from": {resumeAt}}, nil)
		if err != nil {
			return nil, err
		}
		if s.nextIndex > 0 {
			req.Header.Set("Last-Event-ID", resumeAt)
		}
		return req, nil
	})
	if err := s.stream.connect(); err != nil {
		s.stream.close()
		return nil, err
	}
	return s, nil
}

// Next returns the next log line or the done event, then io.EOF.
func (s *TemplateLogStream) Next() (TemplateLogEvent, error) {
	for {
		if s.done {
			return TemplateLogEvent{}, io.EOF
		}
		raw, err := s.stream.next()
		if err != nil {
			return TemplateLogEvent{}, err
		}
		switch raw.Type {
		case "log":
			index := s.nextIndex
			if raw.HasID {
				if id, err := strconv.Atoi(raw.ID); err == nil {
					index = id - 1
				}
			}
			if index < s.nextIndex {
				continue // resent after a reconnect
			}
			var line string
			if err := json.Unmarshal(raw.Data, &line); err != nil {
				line = string(raw.Data) // a bare line is still worth showing
			}
			s.nextIndex = index + 1
			return TemplateLogEvent{Line: line, Index: index}, nil
		case "done":
			var t apiv1.Template
			if err := json.Unmarshal(raw.Data, &t); err != nil {
				return TemplateLogEvent{}, fmt.Errorf("decode template log done event: %w", err)
			}
			s.done = true
			s.stream.close()
			return TemplateLogEvent{Done: true, Template: &t}, nil
		default:
			// Unknown events from a newer server carry nothing we can show.
		}
	}
}

// Close releases the connection.
func (s *TemplateLogStream) Close() error {
	s.stream.close()
	return nil
}

// SetTemplatePool sets how many sandboxes of the template the server keeps
// restored and idle (0 drains the pool).
func (c *Client) SetTemplatePool(ctx context.Context, name string, size int) (*apiv1.Template, error) {
	var t apiv1.Template
	if err := c.doJSON(ctx, http.MethodPut, "/v1/templates/"+url.PathEscape(name)+"/pool", nil, apiv1.SetPoolRequest{Size: size}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
