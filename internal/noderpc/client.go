package noderpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	pb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
	"github.com/space-platform/space/internal/noderpc/gen/nodev1/nodev1connect"
	"github.com/space-platform/space/internal/runtime"
)

// DialOptions configure a Client.
type DialOptions struct {
	// CAFile holds the PEM certificates that sign the node's TLS
	// certificate, for https URLs; CAPEM is the same already read (as
	// the CLI's --tls-ca holds it). Neither trusts the system's roots.
	CAFile string
	CAPEM  []byte
	// Name is how errors name the node (its id, so that no client of the
	// control plane learns the node's address); empty: its URL.
	Name string
	// Unavailable, when set, is the error that a call the node did not
	// answer (refused, reset, unreachable) wraps, so that the caller tells
	// a node that went away from a node's refusal.
	Unavailable error
}

// Client is a node reached over the network. It implements nodeapi.Node.
type Client struct {
	base string
	// name is the node as errors name it; unavailable as DialOptions says.
	name        string
	unavailable error
	http        *http.Client
	rpc         nodev1connect.NodeServiceClient
}

var _ nodeapi.Node = (*Client)(nil)

// Dial returns a client of the node served at baseURL (http:// for HTTP/2
// in the clear, https:// for TLS) that presents token. It does not connect:
// the first call does.
func Dial(baseURL, token string, opts DialOptions) (*Client, error) {
	u, err := neturl.Parse(baseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("node address %q is not an http:// or https:// URL", baseURL)
	}
	if token == "" {
		return nil, errors.New("dial node: the cluster token is empty")
	}
	var protocols http.Protocols
	t := &http.Transport{
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// Pings find a node that vanished under a long stream (an attach,
		// the events) instead of waiting on it forever.
		HTTP2:               &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 5 * time.Second},
		TLSHandshakeTimeout: 10 * time.Second,
		Protocols:           &protocols,
	}
	if u.Scheme == "https" {
		protocols.SetHTTP2(true)
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if opts.CAFile != "" || len(opts.CAPEM) > 0 {
			roots, err := loadRoots(opts.CAFile, opts.CAPEM)
			if err != nil {
				return nil, err
			}
			t.TLSClientConfig.RootCAs = roots
		}
	} else {
		if opts.CAFile != "" || len(opts.CAPEM) > 0 {
			return nil, fmt.Errorf("node address %q: a CA file needs an https:// URL", baseURL)
		}
		protocols.SetUnencryptedHTTP2(true)
	}
	base := strings.TrimSuffix(u.String(), "/")
	hc := &http.Client{Transport: bearer{token: token, next: t}}
	name := opts.Name
	if name == "" {
		name = base
	}
	return &Client{
		base: base, name: name, unavailable: opts.Unavailable,
		http: hc,
		rpc:  nodev1connect.NewNodeServiceClient(hc, base, connect.WithCompressMinBytes(1<<62)),
	}, nil
}

// Close releases the client's idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// bearer adds the cluster token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}

// fail turns a failed call into the error the caller sees: the node's own
// error rebuilt, or the transport's naming the node.
func (c *Client) fail(err error) error {
	if rebuilt := nodeError(err); rebuilt != err {
		return rebuilt
	}
	return c.transportError(err)
}

// transportError names the node in an error of the transport: one that
// says the node did not answer wraps c.unavailable (when set) and leaves
// the node's address out of its text.
func (c *Client) transportError(err error) error {
	if c.unavailable != nil && unanswered(err) {
		return &unansweredError{node: c.name, sentinel: c.unavailable, cause: err}
	}
	return fmt.Errorf("node %s: %w", c.name, err)
}

// unary runs one call and returns its answer's message.
func unary[Req, Res any](ctx context.Context, c *Client, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req) (*Res, error) {
	res, err := call(ctx, connect.NewRequest(msg))
	if err != nil {
		return nil, c.fail(err)
	}
	return res.Msg, nil
}

func (c *Client) done(err error) error {
	if err != nil {
		return c.fail(err)
	}
	return nil
}

func (c *Client) Info(ctx context.Context) (nodeapi.Info, error) {
	res, err := unary(ctx, c, c.rpc.Info, &pb.InfoRequest{})
	if err != nil {
		return nodeapi.Info{}, err
	}
	return fromInfo(res), nil
}

func (c *Client) Create(ctx context.Context, req nodeapi.CreateRequest) error {
	_, err := unary(ctx, c, c.rpc.Create, &pb.CreateRequest{Spec: toCreateSpec(req.Spec), Warm: req.Warm, Identity: toIdentity(req.Identity)})
	return err
}

func (c *Client) Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.ClaimResult, error) {
	res, err := unary(ctx, c, c.rpc.Claim, &pb.ClaimRequest{TemplateId: req.TemplateID, Limits: toPoolLimits(req.Limits), Identity: toIdentity(req.Identity), Network: toPolicy(req.Network)})
	if err != nil {
		return nodeapi.ClaimResult{}, err
	}
	return nodeapi.ClaimResult{Claimed: res.GetClaimed(), ID: res.GetId()}, nil
}

func (c *Client) BootFromDisk(ctx context.Context, spec nodeapi.CreateSpec) error {
	_, err := unary(ctx, c, c.rpc.BootFromDisk, &pb.BootFromDiskRequest{Spec: toCreateSpec(spec)})
	return err
}

func (c *Client) Destroy(ctx context.Context, id string) error {
	_, err := unary(ctx, c, c.rpc.Destroy, &pb.SandboxRequest{Id: id})
	return err
}

func (c *Client) Halt(ctx context.Context, id string) error {
	_, err := unary(ctx, c, c.rpc.Halt, &pb.SandboxRequest{Id: id})
	return err
}

// Reconcile settles a sandbox after a crash; a node of the release
// before, which answers UNIMPLEMENTED, is driven step by step (legacy.go).
func (c *Client) Reconcile(ctx context.Context, req nodeapi.ReconcileRequest) (nodeapi.ReconcileResult, error) {
	res, err := unary(ctx, c, c.rpc.Reconcile, &pb.ReconcileRequest{Id: req.ID, AccessToken: req.AccessToken, State: req.State, Restoring: req.Restoring, Image: req.Image})
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return nodeapi.Reconcile(ctx, previousRelease{c}, req)
	}
	if err != nil {
		return nodeapi.ReconcileResult{}, err
	}
	return nodeapi.ReconcileResult{Outcome: nodeapi.ReconcileOutcome(res.GetOutcome()), Reverted: res.GetReverted(), Warnings: res.GetWarnings()}, nil
}

func (c *Client) Sweep(ctx context.Context, keep []string) error {
	_, err := unary(ctx, c, c.rpc.Sweep, &pb.SweepRequest{Keep: keep})
	return err
}

func (c *Client) Sandboxes(ctx context.Context) ([]string, error) {
	res, err := unary(ctx, c, c.rpc.Sandboxes, &pb.Empty{})
	return res.GetNames(), err
}

func (c *Client) Pause(ctx context.Context, id string) error {
	_, err := unary(ctx, c, c.rpc.Pause, &pb.SandboxRequest{Id: id})
	return err
}

func (c *Client) Resume(ctx context.Context, id string) error {
	_, err := unary(ctx, c, c.rpc.Resume, &pb.SandboxRequest{Id: id})
	return err
}

func (c *Client) Paused(ctx context.Context, id string) (bool, error) {
	res, err := unary(ctx, c, c.rpc.Paused, &pb.SandboxRequest{Id: id})
	return res.GetValue(), err
}

func (c *Client) Suspend(ctx context.Context, id, image string) error {
	_, err := unary(ctx, c, c.rpc.Suspend, &pb.SuspendRequest{Id: id, Image: image})
	return err
}

func (c *Client) Capture(ctx context.Context, req nodeapi.CaptureRequest) error {
	_, err := unary(ctx, c, c.rpc.Capture, &pb.CaptureRequest{Id: req.ID, Volume: req.Volume, Image: req.Image})
	return err
}

func (c *Client) ResumeFrom(ctx context.Context, spec nodeapi.RestoreSpec) error {
	_, err := unary(ctx, c, c.rpc.ResumeFrom, toRestoreSpec(spec))
	return err
}

func (c *Client) CommitRestore(ctx context.Context, id string) error {
	_, err := unary(ctx, c, c.rpc.CommitRestore, &pb.SandboxRequest{Id: id})
	return err
}

func (c *Client) Rekey(ctx context.Context, id string, identity nodeapi.Identity) error {
	_, err := unary(ctx, c, c.rpc.Rekey, &pb.RekeyRequest{Id: id, Identity: toIdentity(identity)})
	return err
}

func (c *Client) SetNetwork(ctx context.Context, id string, policy network.Policy) error {
	_, err := unary(ctx, c, c.rpc.SetNetwork, &pb.SetNetworkRequest{Id: id, Policy: toPolicy(policy)})
	return err
}

func (c *Client) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	res, err := unary(ctx, c, c.rpc.Stats, &pb.SandboxRequest{Id: id})
	if err != nil {
		return runtime.Stats{}, err
	}
	return runtime.Stats{CPUNanos: res.GetCpuNanos(), MemoryBytes: res.GetMemoryBytes(), Pids: res.GetPids()}, nil
}

func (c *Client) Metrics(ctx context.Context, id string, start, end time.Time) ([]nodeapi.MetricSample, error) {
	res, err := unary(ctx, c, c.rpc.Metrics, &pb.MetricsRequest{Id: id, Start: timestamppb.New(start), End: timestamppb.New(end)})
	if err != nil {
		return nil, err
	}
	out := make([]nodeapi.MetricSample, 0, len(res.GetSamples()))
	for _, m := range res.GetSamples() {
		out = append(out, fromMetricSample(m))
	}
	return out, nil
}

func (c *Client) Image(ctx context.Context, image string) (nodeapi.ImageInfo, error) {
	res, err := unary(ctx, c, c.rpc.Image, &pb.NameRequest{Name: image})
	if err != nil {
		return nodeapi.ImageInfo{}, err
	}
	return nodeapi.ImageInfo{Complete: res.GetComplete(), SizeBytes: res.GetSizeBytes()}, nil
}

func (c *Client) Images(ctx context.Context) ([]string, error) {
	res, err := unary(ctx, c, c.rpc.Images, &pb.Empty{})
	return res.GetNames(), err
}

func (c *Client) DeleteImage(ctx context.Context, image string) error {
	_, err := unary(ctx, c, c.rpc.DeleteImage, &pb.NameRequest{Name: image})
	return err
}

func (c *Client) Volumes(ctx context.Context, prefix string) ([]string, error) {
	res, err := unary(ctx, c, c.rpc.Volumes, &pb.NameRequest{Name: prefix})
	return res.GetNames(), err
}

func (c *Client) VolumeExists(ctx context.Context, name string) (bool, error) {
	res, err := unary(ctx, c, c.rpc.VolumeExists, &pb.NameRequest{Name: name})
	return res.GetValue(), err
}

func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	_, err := unary(ctx, c, c.rpc.DeleteVolume, &pb.NameRequest{Name: name})
	return err
}

func (c *Client) TemplateImages(ctx context.Context) ([]string, error) {
	res, err := unary(ctx, c, c.rpc.TemplateImages, &pb.Empty{})
	return res.GetNames(), err
}

func (c *Client) DropTemplateImage(ctx context.Context, templateID string) error {
	_, err := unary(ctx, c, c.rpc.DropTemplateImage, &pb.NameRequest{Name: templateID})
	return err
}

func (c *Client) SetPool(ctx context.Context, req nodeapi.PoolRequest) error {
	_, err := unary(ctx, c, c.rpc.SetPool, &pb.PoolRequest{Template: toTemplate(req.Template), Limits: toPoolLimits(req.Limits), Waiting: toPolicy(req.Waiting), Size: int64(req.Size)})
	return err
}

func (c *Client) Pool(ctx context.Context, templateID string) (nodeapi.PoolStatus, error) {
	res, err := unary(ctx, c, c.rpc.Pool, &pb.NameRequest{Name: templateID})
	if err != nil {
		return nodeapi.PoolStatus{}, err
	}
	return fromPoolStatus(res), nil
}

// Events returns once the node confirmed the subscription, so no event
// after the call is missed.
func (c *Client) Events(ctx context.Context) (<-chan nodeapi.Event, error) {
	stream, err := c.rpc.Events(ctx, connect.NewRequest(&pb.Empty{}))
	if err != nil {
		return nil, c.fail(err)
	}
	if !stream.Receive() {
		err := stream.Err()
		_ = stream.Close()
		if err == nil {
			err = errors.New("events stream ended before it started")
		}
		return nil, c.fail(err)
	}
	ch := make(chan nodeapi.Event, 64)
	go func() {
		defer close(ch)
		defer stream.Close()
		for stream.Receive() {
			select {
			case ch <- fromEvent(stream.Msg()):
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Sandbox returns a handle without asking the node: the control plane
// already knows the sandbox runs there, and an existence round trip in
// front of every exec or file call was most of what a data-plane call
// cost over serve. A sandbox that is gone fails its first call with
// ErrNoSandbox, which the nodeapi contract allows.
func (c *Client) Sandbox(_ context.Context, id string) (nodeapi.Sandbox, error) {
	return &remoteSandbox{c: c, id: id}, nil
}

// remoteSandbox is the data plane of one sandbox of a remote node.
type remoteSandbox struct {
	c  *Client
	id string
}

func (s *remoteSandbox) ID() string { return s.id }

func (s *remoteSandbox) Exec(ctx context.Context, spec nodeapi.ExecSpec) (*nodeapi.ExecResult, error) {
	res, err := unary(ctx, s.c, s.c.rpc.Exec, &pb.ExecRequest{Sandbox: s.id, Cmd: spec.Cmd, Env: spec.Env, Cwd: spec.Cwd, User: spec.User, TimeoutNs: int64(spec.Timeout)})
	if err != nil {
		return nil, err
	}
	return &nodeapi.ExecResult{Stdout: res.GetStdout(), Stderr: res.GetStderr(), ExitCode: int(res.GetExitCode()), Truncated: res.GetTruncated()}, nil
}

func (s *remoteSandbox) ReadFile(ctx context.Context, path, user string) (io.ReadCloser, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := s.c.rpc.ReadFile(ctx, connect.NewRequest(&pb.FileRequest{Sandbox: s.id, Path: path, User: user}))
	if err != nil {
		cancel()
		return nil, 0, s.c.fail(err)
	}
	if !stream.Receive() {
		err := stream.Err()
		_ = stream.Close()
		cancel()
		if err == nil {
			err = fmt.Errorf("read %s: the node sent no answer", path)
		}
		return nil, 0, s.c.fail(err)
	}
	size := stream.Msg().GetSize()
	return &downloadReader[pb.FileChunk]{c: s.c, stream: stream, data: (*pb.FileChunk).GetData, cancel: cancel}, size, nil
}

// ReadVolumeFile reads a path of a captured volume on the node.
func (c *Client) ReadVolumeFile(ctx context.Context, volume, path string) (io.ReadCloser, *pbEntry, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.ReadVolumeFile(ctx, connect.NewRequest(&pb.VolumeFileRequest{Volume: volume, Path: path}))
	if err != nil {
		cancel()
		return nil, nil, c.fail(err)
	}
	if !stream.Receive() {
		err := stream.Err()
		_ = stream.Close()
		cancel()
		if err == nil {
			err = fmt.Errorf("read %s in volume %s: the node sent no answer", path, volume)
		}
		return nil, nil, c.fail(err)
	}
	entry := stream.Msg().GetEntry()
	return &downloadReader[pb.VolumeFileChunk]{c: c, stream: stream, data: (*pb.VolumeFileChunk).GetData, cancel: cancel}, entry, nil
}

// downloadReader reads the data messages of a ReadFile or ReadVolumeFile
// stream (past the first, which the caller received).
type downloadReader[T any] struct {
	c      *Client
	stream *connect.ServerStreamForClient[T]
	data   func(*T) []byte
	cancel context.CancelFunc
	buf    []byte
}

func (r *downloadReader[T]) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if !r.stream.Receive() {
			if err := r.stream.Err(); err != nil {
				return 0, r.c.fail(err)
			}
			return 0, io.EOF
		}
		r.buf = r.data(r.stream.Msg())
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *downloadReader[T]) Close() error {
	r.cancel()
	return r.stream.Close()
}

func (s *remoteSandbox) WriteFile(ctx context.Context, path, user string, body io.Reader) error {
	head := &pb.WriteFileRequest{Sandbox: s.id, Path: path, User: user}
	return upload(ctx, s.c, s.c.rpc.WriteFile, head, func(p []byte) *pb.WriteFileRequest { return &pb.WriteFileRequest{Data: p} }, body, "write "+path)
}

func entryOf(res *pb.EntryResponse, err error) (*pbEntry, error) {
	if err != nil {
		return nil, err
	}
	return res.GetEntry(), nil
}

func (s *remoteSandbox) Stat(ctx context.Context, path, user string) (*pbEntry, error) {
	return entryOf(unary(ctx, s.c, s.c.rpc.Stat, &pb.FileRequest{Sandbox: s.id, Path: path, User: user}))
}

func (s *remoteSandbox) List(ctx context.Context, path, user string, opts nodeapi.ListOptions) (nodeapi.DirPage, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := s.c.rpc.List(ctx, connect.NewRequest(&pb.ListRequest{Sandbox: s.id, Path: path, User: user, Depth: int64(opts.Depth), Limit: int64(opts.Limit), Cursor: opts.Cursor}))
	return openPage(s.c, stream, err, cancel)
}

// ListVolumeDir lists a directory of a captured volume on the node.
func (c *Client) ListVolumeDir(ctx context.Context, volume, path string, opts nodeapi.ListOptions) (nodeapi.DirPage, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.ListVolumeDir(ctx, connect.NewRequest(&pb.ListVolumeDirRequest{Volume: volume, Path: path, Depth: int64(opts.Depth), Limit: int64(opts.Limit), Cursor: opts.Cursor}))
	return openPage(c, stream, err, cancel)
}

// openPage reads the start of a listing's stream (err is the call's).
func openPage(c *Client, stream *connect.ServerStreamForClient[pb.ListResponse], err error, cancel context.CancelFunc) (nodeapi.DirPage, error) {
	if err != nil {
		cancel()
		return nil, c.fail(err)
	}
	// The first message tells a listing that started from one that failed.
	page := &dirPage{c: c, stream: stream, cancel: cancel}
	if _, err := page.receive(); err != nil {
		_ = page.Close()
		return nil, err
	}
	page.peeked = true
	return page, nil
}

// dirPage reads a List stream.
type dirPage struct {
	c      *Client
	stream *connect.ServerStreamForClient[pb.ListResponse]
	cancel context.CancelFunc
	peeked bool
	done   bool
	cursor string
}

func (p *dirPage) receive() (*pb.ListResponse, error) {
	if !p.stream.Receive() {
		err := p.stream.Err()
		if err == nil {
			err = errors.New("the listing ended early")
		}
		return nil, p.c.fail(err)
	}
	return p.stream.Msg(), nil
}

func (p *dirPage) Next() (*pbEntry, error) {
	if p.done {
		return nil, io.EOF
	}
	var msg *pb.ListResponse
	if p.peeked {
		p.peeked = false
		msg = p.stream.Msg()
	} else {
		var err error
		if msg, err = p.receive(); err != nil {
			return nil, err
		}
	}
	if msg.GetDone() {
		p.done, p.cursor = true, msg.GetNextCursor()
		return nil, io.EOF
	}
	return msg.GetEntry(), nil
}

func (p *dirPage) NextCursor() string { return p.cursor }

func (p *dirPage) Close() error {
	p.cancel()
	return p.stream.Close()
}

func (s *remoteSandbox) Remove(ctx context.Context, path, user string) error {
	_, err := unary(ctx, s.c, s.c.rpc.Remove, &pb.FileRequest{Sandbox: s.id, Path: path, User: user})
	return err
}

func (s *remoteSandbox) MakeDir(ctx context.Context, path, user string) (*pbEntry, error) {
	return entryOf(unary(ctx, s.c, s.c.rpc.MakeDir, &pb.FileRequest{Sandbox: s.id, Path: path, User: user}))
}

func (s *remoteSandbox) Move(ctx context.Context, from, to, user string) (*pbEntry, error) {
	return entryOf(unary(ctx, s.c, s.c.rpc.Move, &pb.MoveRequest{Sandbox: s.id, From: from, To: to, User: user}))
}

func sessionOf(res *pb.SessionInfo, err error) (nodeapi.SessionInfo, error) {
	if err != nil {
		return nodeapi.SessionInfo{}, err
	}
	return fromSessionInfo(res), nil
}

func (s *remoteSandbox) StartSession(ctx context.Context, spec nodeapi.SessionSpec) (nodeapi.SessionInfo, error) {
	return sessionOf(unary(ctx, s.c, s.c.rpc.StartSession, &pb.StartSessionRequest{Sandbox: s.id, Spec: toSessionSpec(spec)}))
}

func (s *remoteSandbox) Session(ctx context.Context, sid string) (nodeapi.SessionInfo, error) {
	return sessionOf(unary(ctx, s.c, s.c.rpc.Session, &pb.SessionRequest{Sandbox: s.id, Session: sid}))
}

func (s *remoteSandbox) Sessions(ctx context.Context) ([]nodeapi.SessionInfo, error) {
	res, err := unary(ctx, s.c, s.c.rpc.Sessions, &pb.SandboxRequest{Id: s.id})
	if err != nil {
		return nil, err
	}
	var out []nodeapi.SessionInfo
	for _, info := range res.GetSessions() {
		out = append(out, fromSessionInfo(info))
	}
	return out, nil
}

func (s *remoteSandbox) Attach(ctx context.Context, sid string, offset int64, dropped func(requested, first int64) error, fn func(nodeapi.Chunk) error) (*nodeapi.End, error) {
	// Returning early (fn or dropped refused) cancels the stream.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.c.rpc.Attach(ctx, connect.NewRequest(&pb.AttachRequest{Sandbox: s.id, Session: sid, Offset: offset}))
	if err != nil {
		return nil, s.c.fail(err)
	}
	defer stream.Close()
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.AttachResponse_Dropped:
			if dropped != nil {
				if err := dropped(ev.Dropped.GetRequested(), ev.Dropped.GetFirst()); err != nil {
					return nil, err
				}
			}
		case *pb.AttachResponse_Chunk:
			c := ev.Chunk
			if err := fn(nodeapi.Chunk{Stream: nodeapi.Stream(c.GetStream()), Offset: c.GetOffset(), Data: c.GetData()}); err != nil {
				return nil, err
			}
		case *pb.AttachResponse_End:
			return fromEnd(ev.End), nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, s.c.fail(err)
	}
	// The node stops without an end only when the attach's context ended.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("attach %s: node %s ended the stream before the process ended", sid, s.c.name)
}

func (s *remoteSandbox) WriteStdin(ctx context.Context, sid string, data []byte) error {
	_, err := unary(ctx, s.c, s.c.rpc.WriteStdin, &pb.StdinRequest{Sandbox: s.id, Session: sid, Data: data})
	return err
}

func (s *remoteSandbox) CloseStdin(ctx context.Context, sid string) error {
	_, err := unary(ctx, s.c, s.c.rpc.CloseStdin, &pb.SessionRequest{Sandbox: s.id, Session: sid})
	return err
}

func (s *remoteSandbox) Signal(ctx context.Context, sid string, signal int) error {
	_, err := unary(ctx, s.c, s.c.rpc.Signal, &pb.SignalRequest{Sandbox: s.id, Session: sid, Signal: int64(signal)})
	return err
}

func (s *remoteSandbox) Resize(ctx context.Context, sid string, cols, rows uint32) error {
	_, err := unary(ctx, s.c, s.c.rpc.Resize, &pb.ResizeRequest{Sandbox: s.id, Session: sid, Cols: cols, Rows: rows})
	return err
}

// Agent forwards requests to the node's agent route. The request's own
// Authorization (envd's Basic auth user) travels in forwardedAuthHeader.
func (s *remoteSandbox) Agent() http.RoundTripper {
	return agentTransport{s: s}
}

type agentTransport struct{ s *remoteSandbox }

func (t agentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	// Sandbox ids need no escaping.
	u, err := neturl.Parse(t.s.c.base)
	if err != nil {
		return nil, err
	}
	prefix := agentPrefix + t.s.id
	u.Path += prefix + req.URL.Path
	if req.URL.RawPath != "" {
		u.RawPath = u.Path[:len(u.Path)-len(req.URL.Path)] + req.URL.RawPath
	}
	u.RawQuery = req.URL.RawQuery
	out.URL, out.Host, out.RequestURI = u, "", ""
	out.Header.Del(forwardedAuthHeader)
	if a := req.Header.Get("Authorization"); a != "" {
		out.Header.Set(forwardedAuthHeader, a)
	}
	resp, err := t.s.c.http.Transport.RoundTrip(out)
	if err != nil {
		return nil, t.s.c.transportError(err)
	}
	if err := readNodeError(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// DialPort opens a tunnel through the node to port. The connection
// outlives ctx, which bounds only the dial.
func (s *remoteSandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	connCtx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	upR, upW := io.Pipe()
	req, err := http.NewRequestWithContext(connCtx, http.MethodPost, s.c.base+"/port/"+neturl.PathEscape(s.id)+"/"+strconv.Itoa(port), upR)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := s.c.http.Do(req)
	if !stop() {
		err = errors.Join(ctx.Err(), err)
	}
	if err != nil {
		cancel()
		if resp != nil {
			_ = resp.Body.Close()
		}
		return nil, fmt.Errorf("dial sandbox %s port %d: %w", s.id, port, s.c.transportError(err))
	}
	if nerr := readNodeError(resp); nerr != nil {
		cancel()
		return nil, nerr
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("dial sandbox %s port %d: node %s answered %s", s.id, port, s.c.name, resp.Status)
	}
	// A pipe gives the caller a real net.Conn (deadlines included); two
	// pumps join its far end to the stream.
	user, inner := net.Pipe()
	go func() {
		_, _ = io.Copy(inner, resp.Body)
		_ = inner.Close()
		_ = resp.Body.Close()
	}()
	go func() {
		_, _ = io.Copy(upW, inner)
		_ = upW.Close()
	}()
	return &tunnelConn{Conn: user, cancel: cancel}, nil
}

// tunnelConn ends its stream when closed.
type tunnelConn struct {
	net.Conn
	cancel context.CancelFunc
}

func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	c.cancel()
	return err
}
