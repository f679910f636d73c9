// Package noderpc carries the node contract (internal/nodeapi) over the
// network: NewHandler serves any nodeapi.Node as the Connect service
// space.node.v1.NodeService, and Dial returns a *Client that implements
// nodeapi.Node by calling it. The sandbox agent's HTTP traffic and port
// tunnels are not RPCs: the same handler serves them as plain HTTP routes
// (/agent/{id}/..., /port/{id}/{port}). Every request carries the cluster
// token.
package noderpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/nodeapi"
	pb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
	"github.com/space-platform/space/internal/noderpc/gen/nodev1/nodev1connect"
)

// chunkSize is the most data one stream message carries: big enough to
// amortize framing, small enough that a stream holds little at a time.
const chunkSize = 64 << 10

// maxMessage bounds one message the server reads.
const maxMessage = 16 << 20

// NewHandler serves node to the holders of token: the Connect service, the
// agent route and the port tunnel. An empty token refuses every request.
// logger may be nil.
func NewHandler(node nodeapi.Node, token string, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	s := &server{node: node, log: logger}
	mux := http.NewServeMux()
	// Messages are never compressed: nodes and control planes share a
	// data center, and compressing file and output chunks only costs CPU.
	// A message is a control value or one chunk of a stream: none comes
	// near maxMessage, which bounds what one request can make the node
	// hold.
	path, h := nodev1connect.NewNodeServiceHandler(s, connect.WithCompressMinBytes(1<<62), connect.WithReadMaxBytes(maxMessage))
	mux.Handle(path, h)
	mux.HandleFunc(portRoute, s.servePort)
	// The agent's paths go to it as the client wrote them: ServeMux would
	// clean them and redirect.
	routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, agentPrefix) {
			s.serveAgent(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	return requireToken(token, routes)
}

type server struct {
	node nodeapi.Node
	log  *slog.Logger
}

var _ nodev1connect.NodeServiceHandler = (*server)(nil)

func ok(err error) (*connect.Response[pb.Empty], error) {
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.Empty{}), nil
}

func boolean(v bool, err error) (*connect.Response[pb.BoolResponse], error) {
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.BoolResponse{Value: v}), nil
}

func names(v []string, err error) (*connect.Response[pb.NamesResponse], error) {
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.NamesResponse{Names: v}), nil
}

func invalid(err error) error { return connect.NewError(connect.CodeInvalidArgument, err) }

func (s *server) Info(ctx context.Context, _ *connect.Request[pb.InfoRequest]) (*connect.Response[pb.InfoResponse], error) {
	info, err := s.node.Info(ctx)
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(toInfo(info)), nil
}

func (s *server) Create(ctx context.Context, req *connect.Request[pb.CreateRequest]) (*connect.Response[pb.CreateResponse], error) {
	spec, err := fromCreateSpec(req.Msg.GetSpec())
	if err != nil {
		return nil, invalid(err)
	}
	if err := s.node.Create(ctx, nodeapi.CreateRequest{Spec: spec, Warm: req.Msg.GetWarm(), Identity: fromIdentity(req.Msg.GetIdentity())}); err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.CreateResponse{}), nil
}

func (s *server) Claim(ctx context.Context, req *connect.Request[pb.ClaimRequest]) (*connect.Response[pb.ClaimResponse], error) {
	pol, err := fromPolicy(req.Msg.GetNetwork())
	if err != nil {
		return nil, invalid(err)
	}
	res, err := s.node.Claim(ctx, nodeapi.ClaimRequest{TemplateID: req.Msg.GetTemplateId(), Limits: fromPoolLimits(req.Msg.GetLimits()), Identity: fromIdentity(req.Msg.GetIdentity()), Network: pol})
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.ClaimResponse{Claimed: res.Claimed, Id: res.ID}), nil
}

func (s *server) BootFromDisk(ctx context.Context, req *connect.Request[pb.BootFromDiskRequest]) (*connect.Response[pb.BootFromDiskResponse], error) {
	spec, err := fromCreateSpec(req.Msg.GetSpec())
	if err != nil {
		return nil, invalid(err)
	}
	if err := s.node.BootFromDisk(ctx, spec); err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.BootFromDiskResponse{}), nil
}

func (s *server) Destroy(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.Destroy(ctx, req.Msg.GetId()))
}

func (s *server) Halt(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.Halt(ctx, req.Msg.GetId()))
}

func (s *server) Reconcile(ctx context.Context, req *connect.Request[pb.ReconcileRequest]) (*connect.Response[pb.ReconcileResponse], error) {
	m := req.Msg
	res, err := s.node.Reconcile(ctx, nodeapi.ReconcileRequest{ID: m.GetId(), AccessToken: m.GetAccessToken(), State: m.GetState(), Restoring: m.GetRestoring(), Image: m.GetImage()})
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.ReconcileResponse{Outcome: string(res.Outcome), Reverted: res.Reverted, Warnings: res.Warnings}), nil
}

func (s *server) Sweep(ctx context.Context, req *connect.Request[pb.SweepRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.Sweep(ctx, req.Msg.GetKeep()))
}

func (s *server) Sandboxes(ctx context.Context, _ *connect.Request[pb.Empty]) (*connect.Response[pb.NamesResponse], error) {
	return names(s.node.Sandboxes(ctx))
}

func (s *server) Pause(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.Pause(ctx, req.Msg.GetId()))
}

func (s *server) Resume(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.Resume(ctx, req.Msg.GetId()))
}

func (s *server) Paused(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.BoolResponse], error) {
	return boolean(s.node.Paused(ctx, req.Msg.GetId()))
}

func (s *server) Suspend(ctx context.Context, req *connect.Request[pb.SuspendRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.Suspend(ctx, req.Msg.GetId(), req.Msg.GetImage()))
}

func (s *server) Capture(ctx context.Context, req *connect.Request[pb.CaptureRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.Capture(ctx, nodeapi.CaptureRequest{ID: req.Msg.GetId(), Volume: req.Msg.GetVolume(), Image: req.Msg.GetImage()}))
}

func (s *server) ResumeFrom(ctx context.Context, req *connect.Request[pb.RestoreSpec]) (*connect.Response[pb.Empty], error) {
	spec, err := fromRestoreSpec(req.Msg)
	if err != nil {
		return nil, invalid(err)
	}
	return ok(s.node.ResumeFrom(ctx, spec))
}

func (s *server) CommitRestore(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.CommitRestore(ctx, req.Msg.GetId()))
}

func (s *server) Rekey(ctx context.Context, req *connect.Request[pb.RekeyRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.Rekey(ctx, req.Msg.GetId(), fromIdentity(req.Msg.GetIdentity())))
}

func (s *server) SetNetwork(ctx context.Context, req *connect.Request[pb.SetNetworkRequest]) (*connect.Response[pb.Empty], error) {
	pol, err := fromPolicy(req.Msg.GetPolicy())
	if err != nil {
		return nil, invalid(err)
	}
	return ok(s.node.SetNetwork(ctx, req.Msg.GetId(), pol))
}

func (s *server) Stats(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.SandboxStats], error) {
	st, err := s.node.Stats(ctx, req.Msg.GetId())
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.SandboxStats{CpuNanos: st.CPUNanos, MemoryBytes: st.MemoryBytes, Pids: st.Pids}), nil
}

func (s *server) Metrics(ctx context.Context, req *connect.Request[pb.MetricsRequest]) (*connect.Response[pb.MetricsResponse], error) {
	if !req.Msg.GetStart().IsValid() || !req.Msg.GetEnd().IsValid() {
		return nil, invalid(errors.New("metrics: start and end are required"))
	}
	samples, err := s.node.Metrics(ctx, req.Msg.GetId(), req.Msg.GetStart().AsTime(), req.Msg.GetEnd().AsTime())
	if err != nil {
		return nil, wireError(err)
	}
	res := &pb.MetricsResponse{Samples: make([]*pb.MetricSample, 0, len(samples))}
	for _, m := range samples {
		res.Samples = append(res.Samples, toMetricSample(m))
	}
	return connect.NewResponse(res), nil
}

func (s *server) Image(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.ImageInfo], error) {
	info, err := s.node.Image(ctx, req.Msg.GetName())
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.ImageInfo{Complete: info.Complete, SizeBytes: info.SizeBytes}), nil
}

func (s *server) Images(ctx context.Context, _ *connect.Request[pb.Empty]) (*connect.Response[pb.NamesResponse], error) {
	return names(s.node.Images(ctx))
}

func (s *server) DeleteImage(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.DeleteImage(ctx, req.Msg.GetName()))
}

func (s *server) Volumes(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.NamesResponse], error) {
	return names(s.node.Volumes(ctx, req.Msg.GetName()))
}

func (s *server) VolumeExists(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.BoolResponse], error) {
	return boolean(s.node.VolumeExists(ctx, req.Msg.GetName()))
}

func (s *server) DeleteVolume(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.DeleteVolume(ctx, req.Msg.GetName()))
}

func (s *server) TemplateImages(ctx context.Context, _ *connect.Request[pb.Empty]) (*connect.Response[pb.NamesResponse], error) {
	return names(s.node.TemplateImages(ctx))
}

func (s *server) DropTemplateImage(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.Empty], error) {
	return ok(s.node.DropTemplateImage(ctx, req.Msg.GetName()))
}

func (s *server) SetPool(ctx context.Context, req *connect.Request[pb.PoolRequest]) (*connect.Response[pb.Empty], error) {
	pol, err := fromPolicy(req.Msg.GetWaiting())
	if err != nil {
		return nil, invalid(err)
	}
	return ok(s.node.SetPool(ctx, nodeapi.PoolRequest{Template: fromTemplate(req.Msg.GetTemplate()), Limits: fromPoolLimits(req.Msg.GetLimits()), Waiting: pol, Size: int(req.Msg.GetSize())}))
}

func (s *server) Pool(ctx context.Context, req *connect.Request[pb.NameRequest]) (*connect.Response[pb.PoolStatus], error) {
	st, err := s.node.Pool(ctx, req.Msg.GetName())
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(toPoolStatus(st)), nil
}

func (s *server) Events(ctx context.Context, _ *connect.Request[pb.Empty], stream *connect.ServerStream[pb.Event]) error {
	ch, err := s.node.Events(ctx)
	if err != nil {
		return wireError(err)
	}
	// Tell the client the subscription is live.
	if err := stream.Send(&pb.Event{}); err != nil {
		return err
	}
	for ev := range ch {
		if err := stream.Send(toEvent(ev)); err != nil {
			return err
		}
	}
	return nil
}

// sandbox finds the data plane of sandbox id.
func (s *server) sandbox(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	sb, err := s.node.Sandbox(ctx, id)
	if err != nil {
		return nil, wireError(err)
	}
	return sb, nil
}

func (s *server) Exec(ctx context.Context, req *connect.Request[pb.ExecRequest]) (*connect.Response[pb.ExecResult], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	res, err := sb.Exec(ctx, nodeapi.ExecSpec{Cmd: m.GetCmd(), Env: emptyMap(m.GetEnv()), Cwd: m.GetCwd(), User: m.GetUser(), Timeout: durationNanos(m.GetTimeoutNs())})
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.ExecResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: int64(res.ExitCode), Truncated: res.Truncated}), nil
}

func (s *server) ReadFile(ctx context.Context, req *connect.Request[pb.FileRequest], stream *connect.ServerStream[pb.FileChunk]) error {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return err
	}
	body, size, err := sb.ReadFile(ctx, req.Msg.GetPath(), req.Msg.GetUser())
	if err != nil {
		return wireError(err)
	}
	defer body.Close()
	if err := stream.Send(&pb.FileChunk{Size: size}); err != nil {
		return err
	}
	return sendBody(body, func(p []byte) error { return stream.Send(&pb.FileChunk{Data: p}) }, req.Msg.GetPath())
}

// sendBody sends what body reads as messages of at most chunkSize bytes.
func sendBody(body io.Reader, send func([]byte) error, path string) error {
	buf := make([]byte, chunkSize)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if err := send(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return wireError(fmt.Errorf("read %s: %w", path, rerr))
		}
	}
}

func (s *server) ReadVolumeFile(ctx context.Context, req *connect.Request[pb.VolumeFileRequest], stream *connect.ServerStream[pb.VolumeFileChunk]) error {
	body, e, err := s.node.ReadVolumeFile(ctx, req.Msg.GetVolume(), req.Msg.GetPath())
	if err != nil {
		return wireError(err)
	}
	defer body.Close()
	if err := stream.Send(&pb.VolumeFileChunk{Entry: e}); err != nil {
		return err
	}
	return sendBody(body, func(p []byte) error { return stream.Send(&pb.VolumeFileChunk{Data: p}) }, req.Msg.GetPath())
}

func (s *server) ListVolumeDir(ctx context.Context, req *connect.Request[pb.ListVolumeDirRequest], stream *connect.ServerStream[pb.ListResponse]) error {
	m := req.Msg
	page, err := s.node.ListVolumeDir(ctx, m.GetVolume(), m.GetPath(), nodeapi.ListOptions{Depth: int(m.GetDepth()), Limit: int(m.GetLimit()), Cursor: m.GetCursor()})
	if err != nil {
		return wireError(err)
	}
	return sendPage(page, stream)
}

func (s *server) WriteFile(ctx context.Context, stream *connect.ClientStream[pb.WriteFileRequest]) (*connect.Response[pb.Empty], error) {
	head, err := receiveHead(stream, "write file")
	if err != nil {
		return nil, err
	}
	sb, err := s.sandbox(ctx, head.GetSandbox())
	if err != nil {
		return nil, err
	}
	body := &uploadReader[pb.WriteFileRequest]{stream: stream, data: (*pb.WriteFileRequest).GetData, buf: head.GetData()}
	return ok(sb.WriteFile(ctx, head.GetPath(), head.GetUser(), body))
}

// uploadReader reads the data of a client stream's messages (the first
// one's already in buf).
type uploadReader[T any] struct {
	stream *connect.ClientStream[T]
	data   func(*T) []byte
	buf    []byte
}

func (r *uploadReader[T]) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if !r.stream.Receive() {
			if err := r.stream.Err(); err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		r.buf = r.data(r.stream.Msg())
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// receiveHead reads the first message of a client stream.
func receiveHead[T any](stream *connect.ClientStream[T], what string) (*T, error) {
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, invalid(errors.New(what + ": no header message"))
	}
	return stream.Msg(), nil
}

func entry(e *pbEntry, err error) (*connect.Response[pb.EntryResponse], error) {
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.EntryResponse{Entry: e}), nil
}

func (s *server) Stat(ctx context.Context, req *connect.Request[pb.FileRequest]) (*connect.Response[pb.EntryResponse], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return entry(sb.Stat(ctx, req.Msg.GetPath(), req.Msg.GetUser()))
}

func (s *server) List(ctx context.Context, req *connect.Request[pb.ListRequest], stream *connect.ServerStream[pb.ListResponse]) error {
	m := req.Msg
	sb, err := s.sandbox(ctx, m.GetSandbox())
	if err != nil {
		return err
	}
	page, err := sb.List(ctx, m.GetPath(), m.GetUser(), nodeapi.ListOptions{Depth: int(m.GetDepth()), Limit: int(m.GetLimit()), Cursor: m.GetCursor()})
	if err != nil {
		return wireError(err)
	}
	return sendPage(page, stream)
}

// sendPage sends a page's entries, then its cursor, and closes it.
func sendPage(page nodeapi.DirPage, stream *connect.ServerStream[pb.ListResponse]) error {
	defer page.Close()
	for {
		e, err := page.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return wireError(err)
		}
		if err := stream.Send(&pb.ListResponse{Entry: e}); err != nil {
			return err
		}
	}
	return stream.Send(&pb.ListResponse{Done: true, NextCursor: page.NextCursor()})
}

func (s *server) Remove(ctx context.Context, req *connect.Request[pb.FileRequest]) (*connect.Response[pb.Empty], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return ok(sb.Remove(ctx, req.Msg.GetPath(), req.Msg.GetUser()))
}

func (s *server) MakeDir(ctx context.Context, req *connect.Request[pb.FileRequest]) (*connect.Response[pb.EntryResponse], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return entry(sb.MakeDir(ctx, req.Msg.GetPath(), req.Msg.GetUser()))
}

func (s *server) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.EntryResponse], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return entry(sb.Move(ctx, req.Msg.GetFrom(), req.Msg.GetTo(), req.Msg.GetUser()))
}

func sessionInfo(info nodeapi.SessionInfo, err error) (*connect.Response[pb.SessionInfo], error) {
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(toSessionInfo(info)), nil
}

func (s *server) StartSession(ctx context.Context, req *connect.Request[pb.StartSessionRequest]) (*connect.Response[pb.SessionInfo], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return sessionInfo(sb.StartSession(ctx, fromSessionSpec(req.Msg.GetSpec())))
}

func (s *server) Session(ctx context.Context, req *connect.Request[pb.SessionRequest]) (*connect.Response[pb.SessionInfo], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return sessionInfo(sb.Session(ctx, req.Msg.GetSession()))
}

func (s *server) Sessions(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.SessionsResponse], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	list, err := sb.Sessions(ctx)
	if err != nil {
		return nil, wireError(err)
	}
	out := &pb.SessionsResponse{}
	for _, info := range list {
		out.Sessions = append(out.Sessions, toSessionInfo(info))
	}
	return connect.NewResponse(out), nil
}

func (s *server) Attach(ctx context.Context, req *connect.Request[pb.AttachRequest], stream *connect.ServerStream[pb.AttachResponse]) error {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return err
	}
	// The client decides what a drop means: it is told and ends the
	// stream if it refuses to go on from first.
	dropped := func(requested, first int64) error {
		return stream.Send(&pb.AttachResponse{Event: &pb.AttachResponse_Dropped{Dropped: &pb.Dropped{Requested: requested, First: first}}})
	}
	send := func(c nodeapi.Chunk) error {
		return stream.Send(&pb.AttachResponse{Event: &pb.AttachResponse_Chunk{Chunk: &pb.Chunk{Stream: uint32(c.Stream), Offset: c.Offset, Data: c.Data}}})
	}
	end, err := sb.Attach(ctx, req.Msg.GetSession(), req.Msg.GetOffset(), dropped, send)
	if err != nil {
		return wireError(err)
	}
	if end == nil {
		return nil
	}
	return stream.Send(&pb.AttachResponse{Event: &pb.AttachResponse_End{End: toEnd(end)}})
}

func (s *server) WriteStdin(ctx context.Context, req *connect.Request[pb.StdinRequest]) (*connect.Response[pb.Empty], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return ok(sb.WriteStdin(ctx, req.Msg.GetSession(), req.Msg.GetData()))
}

func (s *server) CloseStdin(ctx context.Context, req *connect.Request[pb.SessionRequest]) (*connect.Response[pb.Empty], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return ok(sb.CloseStdin(ctx, req.Msg.GetSession()))
}

func (s *server) Signal(ctx context.Context, req *connect.Request[pb.SignalRequest]) (*connect.Response[pb.Empty], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return ok(sb.Signal(ctx, req.Msg.GetSession(), int(req.Msg.GetSignal())))
}

func (s *server) Resize(ctx context.Context, req *connect.Request[pb.ResizeRequest]) (*connect.Response[pb.Empty], error) {
	sb, err := s.sandbox(ctx, req.Msg.GetSandbox())
	if err != nil {
		return nil, err
	}
	return ok(sb.Resize(ctx, req.Msg.GetSession(), req.Msg.GetCols(), req.Msg.GetRows()))
}
