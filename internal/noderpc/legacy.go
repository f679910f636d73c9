package noderpc

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/nodeapi"
	pb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
)

// The four recovery steps that one Reconcile call replaced (issue #30)
// stay on the wire for one release, deprecated, so that a control plane
// and a node one release apart still reconcile each other during a
// rolling upgrade: the server answers them for a control plane of the
// release before, and the client, when a node of the release before
// answers Reconcile with UNIMPLEMENTED, runs nodeapi.Reconcile's one
// order over them. Delete this file and the four procedures in
// proto/space/node/v1/node.proto in the release after.

// previousRelease is a node of the release before Reconcile, driven by
// the recovery steps it serves.
type previousRelease struct{ *Client }

func (p previousRelease) Adopt(ctx context.Context, id, accessToken string) (bool, error) {
	res, err := unary(ctx, p.Client, p.rpc.Adopt, &pb.AdoptRequest{Id: id, AccessToken: accessToken})
	return res.GetAdopted(), err
}

func (p previousRelease) RevertRestore(ctx context.Context, id string) (bool, error) {
	res, err := unary(ctx, p.Client, p.rpc.RevertRestore, &pb.SandboxRequest{Id: id})
	return res.GetValue(), err
}

func (p previousRelease) SettleCheckpoint(ctx context.Context, id, image string) (bool, error) {
	res, err := unary(ctx, p.Client, p.rpc.SettleCheckpoint, &pb.SuspendRequest{Id: id, Image: image})
	return res.GetValue(), err
}

func (p previousRelease) Quiesce(ctx context.Context, id string) error {
	_, err := unary(ctx, p.Client, p.rpc.Quiesce, &pb.SandboxRequest{Id: id})
	return err
}

// errNoSteps answers a deprecated step for a node that has no such steps
// (it settles sandboxes only through Reconcile).
func errNoSteps() error {
	return connect.NewError(connect.CodeUnimplemented, errors.New("this node settles sandboxes only through Reconcile"))
}

func (s *server) steps() (nodeapi.RecoverySteps, bool) {
	steps, ok := s.node.(nodeapi.RecoverySteps)
	return steps, ok
}

func (s *server) Adopt(ctx context.Context, req *connect.Request[pb.AdoptRequest]) (*connect.Response[pb.AdoptResponse], error) {
	steps, has := s.steps()
	if !has {
		return nil, errNoSteps()
	}
	adopted, err := steps.Adopt(ctx, req.Msg.GetId(), req.Msg.GetAccessToken())
	if err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.AdoptResponse{Adopted: adopted}), nil
}

func (s *server) RevertRestore(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.BoolResponse], error) {
	steps, has := s.steps()
	if !has {
		return nil, errNoSteps()
	}
	return boolean(steps.RevertRestore(ctx, req.Msg.GetId()))
}

func (s *server) SettleCheckpoint(ctx context.Context, req *connect.Request[pb.SuspendRequest]) (*connect.Response[pb.BoolResponse], error) {
	steps, has := s.steps()
	if !has {
		return nil, errNoSteps()
	}
	return boolean(steps.SettleCheckpoint(ctx, req.Msg.GetId(), req.Msg.GetImage()))
}

func (s *server) Quiesce(ctx context.Context, req *connect.Request[pb.SandboxRequest]) (*connect.Response[pb.Empty], error) {
	steps, has := s.steps()
	if !has {
		return nil, errNoSteps()
	}
	return ok(steps.Quiesce(ctx, req.Msg.GetId()))
}
