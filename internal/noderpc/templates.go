package noderpc

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/nodeapi"
	pb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
)

// A template build streams its log as chunks of bytes while it runs and
// the built template as its last message, so that the control plane can
// show the log of a build on another node as it happens.

var _ nodeapi.Templates = (*Client)(nil)

// templates is the node's template builder, which not every node has.
func (s *server) templates() (nodeapi.Templates, error) {
	t, ok := s.node.(nodeapi.Templates)
	if !ok {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this node does not build templates"))
	}
	return t, nil
}

func (s *server) BuildTemplate(ctx context.Context, req *connect.Request[pb.TemplateBuildRequest], stream *connect.ServerStream[pb.TemplateBuildEvent]) error {
	t, err := s.templates()
	if err != nil {
		return err
	}
	logs := chunkWriter(func(p []byte) error {
		return stream.Send(&pb.TemplateBuildEvent{Event: &pb.TemplateBuildEvent_Log{Log: p}})
	})
	built, err := t.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{
		Name: req.Msg.GetName(), Recipe: req.Msg.GetRecipe(), HostPaths: req.Msg.GetHostPaths(), Archive: req.Msg.GetArchive(),
		CopyArchives: req.Msg.GetCopyArchives(), RegistryUsername: req.Msg.GetRegistryUsername(), RegistryPassword: req.Msg.GetRegistryPassword(),
		DiskQuotaBytes: req.Msg.GetDiskQuotaBytes(),
	}, logs)
	if err != nil {
		return wireError(err)
	}
	return stream.Send(&pb.TemplateBuildEvent{Event: &pb.TemplateBuildEvent_Built{Built: &pb.TemplateBuilt{
		Spec: toTemplate(built.Spec), SizeBytes: built.SizeBytes,
	}}})
}

func (s *server) DeleteTemplate(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.Empty], error) {
	t, err := s.templates()
	if err != nil {
		return nil, err
	}
	return ok(t.DeleteTemplate(ctx, req.Msg.GetName()))
}

func (s *server) StageTemplateArchive(ctx context.Context, stream *connect.ClientStream[pb.StageTemplateArchiveRequest]) (*connect.Response[pb.NameRequest], error) {
	t, err := s.templates()
	if err != nil {
		return nil, err
	}
	head, err := receiveHead(stream, "stage template archive")
	if err != nil {
		return nil, err
	}
	body := &uploadReader[pb.StageTemplateArchiveRequest]{stream: stream, data: (*pb.StageTemplateArchiveRequest).GetData, buf: head.GetData()}
	handle, err := t.StageTemplateArchive(ctx, body, head.GetLimit())
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.NameRequest{Name: handle}), nil
}

func (s *server) DiscardTemplateArchive(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.Empty], error) {
	t, err := s.templates()
	if err != nil {
		return nil, err
	}
	return ok(t.DiscardTemplateArchive(ctx, req.Msg.GetName()))
}

func (c *Client) DiscardTemplateArchive(ctx context.Context, handle string) error {
	_, err := unary(ctx, c, c.rpc.DiscardTemplateArchive, &pb.NameRequest{Name: handle})
	return err
}

func (c *Client) StageTemplateArchive(ctx context.Context, r io.Reader, limit int64) (string, error) {
	res, err := uploadFor(ctx, c, c.rpc.StageTemplateArchive, &pb.StageTemplateArchiveRequest{Limit: limit},
		func(p []byte) *pb.StageTemplateArchiveRequest { return &pb.StageTemplateArchiveRequest{Data: p} }, r, "stage template archive")
	if err != nil {
		return "", err
	}
	return res.GetName(), nil
}

func (c *Client) BuildTemplate(ctx context.Context, req nodeapi.TemplateBuildRequest, logs io.Writer) (nodeapi.TemplateBuilt, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.BuildTemplate(ctx, connect.NewRequest(&pb.TemplateBuildRequest{
		Name: req.Name, Recipe: req.Recipe, HostPaths: req.HostPaths, Archive: req.Archive,
		CopyArchives: req.CopyArchives, RegistryUsername: req.RegistryUsername, RegistryPassword: req.RegistryPassword,
		DiskQuotaBytes: req.DiskQuotaBytes,
	}))
	if err != nil {
		return nodeapi.TemplateBuilt{}, c.fail(err)
	}
	defer stream.Close()
	var built *pb.TemplateBuilt
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.TemplateBuildEvent_Log:
			if logs != nil {
				if _, err := logs.Write(ev.Log); err != nil {
					return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: write its log: %w", req.Name, err)
				}
			}
		case *pb.TemplateBuildEvent_Built:
			built = ev.Built
		}
	}
	if err := stream.Err(); err != nil {
		return nodeapi.TemplateBuilt{}, c.fail(err)
	}
	if built == nil {
		return nodeapi.TemplateBuilt{}, fmt.Errorf("build template %s: node %s ended the build without a result", req.Name, c.base)
	}
	return nodeapi.TemplateBuilt{Spec: fromTemplate(built.GetSpec()), SizeBytes: built.GetSizeBytes()}, nil
}

func (c *Client) DeleteTemplate(ctx context.Context, id string) error {
	_, err := unary(ctx, c, c.rpc.DeleteTemplate, &pb.NameRequest{Name: id})
	return err
}
