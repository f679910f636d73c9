// Package clusterrpc is the cluster service (space.cluster.v1) over
// Connect: how a node joins the control plane and heartbeats its Info and
// templates, and where it gets the cluster's egress CA and, at connection
// time, its sandboxes' credential rules and secrets. NewHandler serves it on the control plane over the node
// registry; Dial returns the node's client, which implements
// membership.ControlPlane. Every call carries the cluster token.
package clusterrpc

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/cluster"
	pb "github.com/space-platform/space/internal/clusterrpc/gen/clusterv1"
	"github.com/space-platform/space/internal/clusterrpc/gen/clusterv1/clusterv1connect"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/nodeapi"
)

// Template is a template ready on a node, by the catalog name it was
// built under.
type Template struct {
	Name string               `json:"name"`
	Spec nodeapi.TemplateSpec `json:"spec"`
}

// Registry is the part of the node registry the service drives
// (*cluster.Registry).
type Registry interface {
	Register(id, address string, info nodeapi.Info) (cluster.Node, error)
	Heartbeat(id string, info nodeapi.Info) error
}

// Errors a Credentials implementation wraps: the client maps them back.
var (
	// ErrNoSandbox: no live sandbox has the id.
	ErrNoSandbox = errors.New("no such sandbox")
	// ErrDenied: the sandbox runs on another node, or its rules do not
	// name the secret.
	ErrDenied = errors.New("permission denied")
	// ErrToken: the control plane refused the cluster token (client side).
	ErrToken = errors.New("wrong cluster token")
	// ErrUnsupported: the control plane serves no credential calls
	// (client side).
	ErrUnsupported = errors.New("not served by this control plane")
)

// Credentials answers the nodes' credential calls (the control plane).
// node is the calling node's id: a sandbox's rules and secrets go only to
// the node its record names.
type Credentials interface {
	// EgressCA is the cluster's egress CA, PEM-encoded.
	EgressCA() (certPEM, keyPEM []byte, err error)
	// CredentialRules are the rules of sandbox id (none once it stopped).
	CredentialRules(node, id string) ([]credentials.Rule, error)
	// Secret is the value of a secret the rules of sandbox id name, from
	// the sandbox's project.
	Secret(node, id, name string) ([]byte, error)
}

// ServerConfig configures the service.
type ServerConfig struct {
	Registry Registry
	// Token is the cluster token; an empty one refuses every call.
	Token string
	// Joined, when set, is told of every registration once the registry
	// took it: the control plane dials the node and reconciles it then.
	Joined func(n cluster.Node, templates []Template)
	// Templates, when set, is told of the templates of every heartbeat.
	Templates func(id string, templates []Template)
	// Credentials, when set, answers the credential calls; unset, they
	// answer UNIMPLEMENTED.
	Credentials Credentials
	Logger      *slog.Logger
}

// NewHandler returns the service's Connect path and handler.
func NewHandler(cfg ServerConfig) (string, http.Handler) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return clusterv1connect.NewClusterServiceHandler(&server{cfg: cfg},
		connect.WithInterceptors(requireToken(cfg.Token)))
}

type server struct{ cfg ServerConfig }

func (s *server) Register(ctx context.Context, req *connect.Request[pb.RegisterRequest]) (*connect.Response[pb.RegisterResponse], error) {
	m := req.Msg
	templates := fromTemplates(m.GetTemplates())
	n, err := s.cfg.Registry.Register(m.GetId(), m.GetAddress(), fromInfo(m.GetInfo()))
	if err != nil {
		return nil, wireError(err)
	}
	s.cfg.Logger.Info("node registered", "node", n.ID, "address", n.Address, "state", n.State)
	if s.cfg.Joined != nil {
		s.cfg.Joined(n, templates)
	}
	return connect.NewResponse(&pb.RegisterResponse{}), nil
}

func (s *server) Heartbeat(ctx context.Context, req *connect.Request[pb.HeartbeatRequest]) (*connect.Response[pb.HeartbeatResponse], error) {
	m := req.Msg
	if err := s.cfg.Registry.Heartbeat(m.GetId(), fromInfo(m.GetInfo())); err != nil {
		return nil, wireError(err)
	}
	if s.cfg.Templates != nil {
		s.cfg.Templates(m.GetId(), fromTemplates(m.GetTemplates()))
	}
	return connect.NewResponse(&pb.HeartbeatResponse{}), nil
}

func (s *server) credentials() (Credentials, error) {
	if s.cfg.Credentials == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this control plane serves no credentials"))
	}
	return s.cfg.Credentials, nil
}

func (s *server) EgressCA(ctx context.Context, req *connect.Request[pb.EgressCARequest]) (*connect.Response[pb.EgressCAResponse], error) {
	c, err := s.credentials()
	if err != nil {
		return nil, err
	}
	cert, key, err := c.EgressCA()
	if err != nil {
		return nil, credentialError(err)
	}
	s.cfg.Logger.Info("egress CA handed to a node", "node", req.Msg.GetNodeId())
	return connect.NewResponse(&pb.EgressCAResponse{CertPem: cert, KeyPem: key}), nil
}

func (s *server) CredentialRules(ctx context.Context, req *connect.Request[pb.CredentialRulesRequest]) (*connect.Response[pb.CredentialRulesResponse], error) {
	c, err := s.credentials()
	if err != nil {
		return nil, err
	}
	m := req.Msg
	rules, err := c.CredentialRules(m.GetNodeId(), m.GetSandboxId())
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
	c, err := s.credentials()
	if err != nil {
		return nil, err
	}
	m := req.Msg
	v, err := c.Secret(m.GetNodeId(), m.GetSandboxId(), m.GetName())
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
	case errors.Is(err, ErrNoSandbox):
		code = connect.CodeNotFound
	case errors.Is(err, ErrDenied):
		code = connect.CodePermissionDenied
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
