// Package clusterrpc is the cluster service (space.cluster.v1) over
// Connect: the node → control-plane contract (cpapi.ControlPlane) between
// processes. NewHandler serves a cpapi.ControlPlane (the control plane's
// cpapi.Service); Dial and DialReplicas return the node's client, which
// implements cpapi.ControlPlane again. Every call carries the cluster
// token.
package clusterrpc

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/cluster"
	pb "github.com/space-platform/space/internal/clusterrpc/gen/clusterv1"
	"github.com/space-platform/space/internal/clusterrpc/gen/clusterv1/clusterv1connect"
	"github.com/space-platform/space/internal/cpapi"
)

// ServerConfig configures the service.
type ServerConfig struct {
	// ControlPlane answers the calls (a *cpapi.Service).
	ControlPlane cpapi.ControlPlane
	// Token is the cluster token; an empty one refuses every call.
	Token string
}

// NewHandler returns the service's Connect path and handler.
func NewHandler(cfg ServerConfig) (string, http.Handler) {
	return clusterv1connect.NewClusterServiceHandler(&server{cfg: cfg},
		connect.WithInterceptors(requireToken(cfg.Token)))
}

type server struct{ cfg ServerConfig }

func (s *server) Register(ctx context.Context, req *connect.Request[pb.RegisterRequest]) (*connect.Response[pb.RegisterResponse], error) {
	m := req.Msg
	if err := s.cfg.ControlPlane.Register(ctx, m.GetId(), m.GetAddress(), fromInfo(m.GetInfo()), fromTemplates(m.GetTemplates())); err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.RegisterResponse{}), nil
}

func (s *server) Heartbeat(ctx context.Context, req *connect.Request[pb.HeartbeatRequest]) (*connect.Response[pb.HeartbeatResponse], error) {
	m := req.Msg
	if err := s.cfg.ControlPlane.Heartbeat(ctx, m.GetId(), fromInfo(m.GetInfo()), fromTemplates(m.GetTemplates())); err != nil {
		return nil, wireError(err)
	}
	return connect.NewResponse(&pb.HeartbeatResponse{}), nil
}

func (s *server) EgressCA(ctx context.Context, req *connect.Request[pb.EgressCARequest]) (*connect.Response[pb.EgressCAResponse], error) {
	ca, err := s.cfg.ControlPlane.EgressCA(ctx, req.Msg.GetNodeId())
	if err != nil {
		return nil, credentialError(err)
	}
	return connect.NewResponse(&pb.EgressCAResponse{CertPem: ca.CertPEM, KeyPem: ca.KeyPEM}), nil
}

func (s *server) CredentialRules(ctx context.Context, req *connect.Request[pb.CredentialRulesRequest]) (*connect.Response[pb.CredentialRulesResponse], error) {
	m := req.Msg
	rules, err := s.cfg.ControlPlane.CredentialRules(ctx, m.GetNodeId(), m.GetSandboxId())
	if err != nil {
		return nil, credentialError(err)
	}
	out := &pb.CredentialRulesResponse{}
	for _, r := range rules {
		out.Rules = append(out.Rules, &pb.CredentialRule{
			Host: r.Host, Header: r.Header, Value: r.Value, Env: r.Env, Secret: r.Secret, Placeholder: r.Placeholder,
		})
	}
	return connect.NewResponse(out), nil
}

func (s *server) Secret(ctx context.Context, req *connect.Request[pb.SecretRequest]) (*connect.Response[pb.SecretResponse], error) {
	m := req.Msg
	v, err := s.cfg.ControlPlane.Secret(ctx, m.GetNodeId(), m.GetSandboxId(), m.GetName())
	if err != nil {
		return nil, credentialError(err)
	}
	return connect.NewResponse(&pb.SecretResponse{Value: v}), nil
}

// credentialError codes the credential calls' errors. Their messages name
// sandboxes and secrets, never values.
func credentialError(err error) error {
	code := connect.CodeInternal
	switch {
	case errors.Is(err, cpapi.ErrNoSandbox):
		code = connect.CodeNotFound
	case errors.Is(err, cpapi.ErrDenied):
		code = connect.CodePermissionDenied
	case errors.Is(err, cpapi.ErrUnsupported):
		code = connect.CodeUnimplemented
	}
	return connect.NewError(code, err)
}

// wireError gives the registry's errors the codes the client maps back:
// an unknown node NotFound (it registers again), a lost one
// FailedPrecondition (it stops), a malformed one InvalidArgument.
func wireError(err error) error {
	code := connect.CodeInternal
	switch {
	case errors.Is(err, cluster.ErrUnknownNode):
		code = connect.CodeNotFound
	case errors.Is(err, cluster.ErrConflict):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, cluster.ErrInvalid):
		code = connect.CodeInvalidArgument
	}
	return connect.NewError(code, err)
}

// requireToken refuses calls without the cluster token as their bearer
// token. The comparison is of digests, in constant time, so neither the
// token nor its length leaks through timing.
func requireToken(token string) connect.UnaryInterceptorFunc {
	want := sha256.Sum256([]byte(token))
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			got, found := strings.CutPrefix(req.Header().Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			if token == "" || !found || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				return nil, connect.NewError(connect.CodeUnauthenticated,
					errors.New("missing or wrong cluster token (send it as Authorization: Bearer <cluster token>)"))
			}
			return next(ctx, req)
		}
	}
}
