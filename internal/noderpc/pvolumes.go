package noderpc

import (
	"context"
	"errors"
	"io"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/nodeapi"
	pb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
)

// Persistent volumes: made, measured and edited on the node that keeps
// them; a file's bytes go up as a client stream, as ReceiveVolume's do.

var _ nodeapi.PersistentVolumes = (*Client)(nil)

// pvolumes is the node's persistent volume store, which not every node has.
func (s *server) pvolumes() (nodeapi.PersistentVolumes, error) {
	v, ok := s.node.(nodeapi.PersistentVolumes)
	if !ok {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this node keeps no persistent volumes"))
	}
	return v, nil
}

func (s *server) CreateVolume(ctx context.Context, req *connect.Request[pb.CreateVolumeRequest]) (*connect.Response[pb.Empty], error) {
	v, err := s.pvolumes()
	if err != nil {
		return nil, err
	}
	return ok(v.CreateVolume(ctx, req.Msg.GetName(), int(req.Msg.GetDiskMb())))
}

func (s *server) VolumeUsage(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.VolumeUsageResponse], error) {
	v, err := s.pvolumes()
	if err != nil {
		return nil, err
	}
	n, err := v.VolumeUsage(ctx, req.Msg.GetName())
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.VolumeUsageResponse{Bytes: n}), nil
}

func (s *server) WriteVolumeFile(ctx context.Context, stream *connect.ClientStream[pb.WriteVolumeFileRequest]) (*connect.Response[pb.VolumeEntryResponse], error) {
	v, err := s.pvolumes()
	if err != nil {
		return nil, err
	}
	head, err := receiveHead(stream, "write volume file")
	if err != nil {
		return nil, err
	}
	body := &uploadReader[pb.WriteVolumeFileRequest]{stream: stream, data: (*pb.WriteVolumeFileRequest).GetData, buf: head.GetData()}
	e, err := v.WriteVolumeFile(ctx, fromVolumeEdit(head.GetEdit()), body)
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.VolumeEntryResponse{Entry: e}), nil
}

func (s *server) EditVolume(ctx context.Context, req *connect.Request[pb.VolumeEdit]) (*connect.Response[pb.VolumeEntryResponse], error) {
	v, err := s.pvolumes()
	if err != nil {
		return nil, err
	}
	e, err := v.EditVolume(ctx, fromVolumeEdit(req.Msg))
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.VolumeEntryResponse{Entry: e}), nil
}

func (c *Client) CreateVolume(ctx context.Context, name string, diskMB int) error {
	_, err := unary(ctx, c, c.rpc.CreateVolume, &pb.CreateVolumeRequest{Name: name, DiskMb: int64(diskMB)})
	return err
}

func (c *Client) VolumeUsage(ctx context.Context, name string) (int64, error) {
	res, err := unary(ctx, c, c.rpc.VolumeUsage, &pb.NameRequest{Name: name})
	return res.GetBytes(), err
}

func (c *Client) WriteVolumeFile(ctx context.Context, req nodeapi.VolumeEdit, r io.Reader) (*pbEntry, error) {
	head := &pb.WriteVolumeFileRequest{Edit: toVolumeEdit(req)}
	res, err := uploadFor(ctx, c, c.rpc.WriteVolumeFile, head, func(p []byte) *pb.WriteVolumeFileRequest { return &pb.WriteVolumeFileRequest{Data: p} }, r, "write volume file "+req.Path)
	return res.GetEntry(), err
}

func (c *Client) EditVolume(ctx context.Context, req nodeapi.VolumeEdit) (*pbEntry, error) {
	res, err := unary(ctx, c, c.rpc.EditVolume, toVolumeEdit(req))
	return res.GetEntry(), err
}
