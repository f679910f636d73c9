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

// Volumes and images cross between nodes as streams of DataChunk: the
// server writes what the node's Send* produces into the stream, and feeds
// a Receive* the data of a client stream.

var _ nodeapi.Transfer = (*Client)(nil)

// chunkWriter sends what is written to it as messages of at most
// chunkSize bytes.
type chunkWriter func([]byte) error

func (w chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		part := p[:min(len(p), chunkSize)]
		if err := w(part); err != nil {
			return n, err
		}
		n, p = n+len(part), p[len(part):]
	}
	return n, nil
}

func sendChunks(stream *connect.ServerStream[pb.DataChunk]) chunkWriter {
	return func(p []byte) error { return stream.Send(&pb.DataChunk{Data: p}) }
}

func (s *server) SendVolume(ctx context.Context, req *connect.Request[pb.NameRequest], stream *connect.ServerStream[pb.DataChunk]) error {
	return wireError(s.node.SendVolume(ctx, req.Msg.GetName(), sendChunks(stream)))
}

func (s *server) SendImage(ctx context.Context, req *connect.Request[pb.NameRequest], stream *connect.ServerStream[pb.DataChunk]) error {
	return wireError(s.node.SendImage(ctx, req.Msg.GetName(), sendChunks(stream)))
}

func (s *server) ReceiveVolume(ctx context.Context, stream *connect.ClientStream[pb.ReceiveVolumeRequest]) (*connect.Response[pb.Empty], error) {
	head, err := receiveHead(stream, "receive volume")
	if err != nil {
		return nil, err
	}
	body := &uploadReader[pb.ReceiveVolumeRequest]{stream: stream, data: (*pb.ReceiveVolumeRequest).GetData, buf: head.GetData()}
	req := nodeapi.ReceiveVolumeRequest{Name: head.GetName(), Writable: head.GetWritable(), DiskMB: int(head.GetDiskMb())}
	return ok(s.node.ReceiveVolume(ctx, req, body))
}

func (s *server) ReceiveImage(ctx context.Context, stream *connect.ClientStream[pb.ReceiveImageRequest]) (*connect.Response[pb.Empty], error) {
	head, err := receiveHead(stream, "receive image")
	if err != nil {
		return nil, err
	}
	body := &uploadReader[pb.ReceiveImageRequest]{stream: stream, data: (*pb.ReceiveImageRequest).GetData, buf: head.GetData()}
	return ok(s.node.ReceiveImage(ctx, head.GetImage(), body))
}

// download writes the data of a server stream into w.
func (c *Client) download(ctx context.Context, w io.Writer, open func(context.Context) (*connect.ServerStreamForClient[pb.DataChunk], error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer stream.Close()
	for stream.Receive() {
		if _, err := w.Write(stream.Msg().GetData()); err != nil {
			return err
		}
	}
	if err := stream.Err(); err != nil {
		return c.fail(err)
	}
	return nil
}

func (c *Client) SendVolume(ctx context.Context, name string, w io.Writer) error {
	return c.download(ctx, w, func(ctx context.Context) (*connect.ServerStreamForClient[pb.DataChunk], error) {
		return c.rpc.SendVolume(ctx, connect.NewRequest(&pb.NameRequest{Name: name}))
	})
}

func (c *Client) SendImage(ctx context.Context, image string, w io.Writer) error {
	return c.download(ctx, w, func(ctx context.Context) (*connect.ServerStreamForClient[pb.DataChunk], error) {
		return c.rpc.SendImage(ctx, connect.NewRequest(&pb.NameRequest{Name: image}))
	})
}

func (c *Client) ReceiveVolume(ctx context.Context, req nodeapi.ReceiveVolumeRequest, r io.Reader) error {
	head := &pb.ReceiveVolumeRequest{Name: req.Name, Writable: req.Writable, DiskMb: int64(req.DiskMB)}
	return upload(ctx, c, c.rpc.ReceiveVolume, head, func(p []byte) *pb.ReceiveVolumeRequest { return &pb.ReceiveVolumeRequest{Data: p} }, r, "receive volume "+req.Name)
}

func (c *Client) ReceiveImage(ctx context.Context, image string, r io.Reader) error {
	head := &pb.ReceiveImageRequest{Image: image}
	return upload(ctx, c, c.rpc.ReceiveImage, head, func(p []byte) *pb.ReceiveImageRequest { return &pb.ReceiveImageRequest{Data: p} }, r, "receive image "+image)
}

// upload sends head, then body in messages data makes, on a client stream.
// A body that fails cancels the stream (rather than closing it), so the
// node drops what it received instead of keeping a truncated copy.
func upload[T any](ctx context.Context, c *Client, open func(context.Context) *connect.ClientStreamForClient[T, pb.Empty], head *T, data func([]byte) *T, body io.Reader, what string) error {
	_, err := uploadFor(ctx, c, open, head, data, body, what)
	return err
}

// uploadFor is upload for a call that answers with a message.
func uploadFor[T, R any](ctx context.Context, c *Client, open func(context.Context) *connect.ClientStreamForClient[T, R], head *T, data func([]byte) *T, body io.Reader, what string) (*R, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := open(ctx)
	sendErr := stream.Send(head)
	buf := make([]byte, chunkSize)
	for sendErr == nil {
		n, rerr := body.Read(buf)
		if n > 0 {
			// Send marshals at once, so buf can be reused.
			sendErr = stream.Send(data(buf[:n]))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			cancel()
			_, _ = stream.CloseAndReceive()
			return nil, fmt.Errorf("%s: read: %w", what, rerr)
		}
	}
	// A failed Send means the node answered already: its error, if it
	// failed, comes with the answer.
	res, err := stream.CloseAndReceive()
	if err != nil {
		return nil, c.fail(err)
	}
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		return nil, c.fail(sendErr)
	}
	return res.Msg, nil
}
