package clusterrpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/cluster"
	pb "github.com/space-platform/space/internal/clusterrpc/gen/clusterv1"
	"github.com/space-platform/space/internal/clusterrpc/gen/clusterv1/clusterv1connect"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/nodeapi"
)

// DialOptions configure a Client.
type DialOptions struct {
	// CAFile holds the PEM certificates that sign the control plane's
	// TLS certificate, for https URLs; empty trusts the system's roots.
	CAFile string
}

// Client is a node's side of the cluster service, one replica's.
type Client struct {
	rpc  clusterv1connect.ClusterServiceClient
	http *http.Client
}

var _ cpapi.ControlPlane = (*Client)(nil)

// Dial returns a client of the control plane at baseURL presenting token.
// It does not connect: the first call does.
func Dial(baseURL, token string, opts DialOptions) (*Client, error) {
	u, err := neturl.Parse(baseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("control plane address %q is not an http:// or https:// URL", baseURL)
	}
	if token == "" {
		return nil, errors.New("dial the control plane: the cluster token is empty")
	}
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	if opts.CAFile != "" {
		if u.Scheme != "https" {
			return nil, fmt.Errorf("control plane address %q: a CA file needs an https:// URL", baseURL)
		}
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read the TLS CA: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the TLS CA file %s holds no PEM certificate", opts.CAFile)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	// A heartbeat that hangs must not outlive the interval it stands for.
	hc := &http.Client{Transport: t, Timeout: 10 * time.Second}
	c := &Client{http: hc}
	c.rpc = clusterv1connect.NewClusterServiceClient(hc, strings.TrimSuffix(u.String(), "/"),
		connect.WithInterceptors(bearer(token)))
	return c, nil
}

// Close releases the client's idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// Register registers the node.
func (c *Client) Register(ctx context.Context, id, address string, info nodeapi.Info, templates []cpapi.Template) error {
	_, err := c.rpc.Register(ctx, connect.NewRequest(&pb.RegisterRequest{Id: id, Address: address, Info: toInfo(info), Templates: toTemplates(templates)}))
	return clientError(err)
}

// Heartbeat reports the node's Info; an unknown node's answer wraps
// cluster.ErrUnknownNode, a lost one's cluster.ErrConflict.
func (c *Client) Heartbeat(ctx context.Context, id string, info nodeapi.Info, templates []cpapi.Template) error {
	_, err := c.rpc.Heartbeat(ctx, connect.NewRequest(&pb.HeartbeatRequest{Id: id, Info: toInfo(info), Templates: toTemplates(templates)}))
	return clientError(err)
}

// EgressCA fetches the cluster's egress CA for node id.
func (c *Client) EgressCA(ctx context.Context, id string) (cpapi.EgressCA, error) {
	resp, err := c.rpc.EgressCA(ctx, connect.NewRequest(&pb.EgressCARequest{NodeId: id}))
	if err != nil {
		return cpapi.EgressCA{}, credentialClientError(err)
	}
	return cpapi.EgressCA{CertPEM: resp.Msg.GetCertPem(), KeyPEM: resp.Msg.GetKeyPem()}, nil
}

// CredentialRules fetches the rules of sandbox sandboxID, which runs on
// node id.
func (c *Client) CredentialRules(ctx context.Context, id, sandboxID string) ([]credentials.Rule, error) {
	resp, err := c.rpc.CredentialRules(ctx, connect.NewRequest(&pb.CredentialRulesRequest{NodeId: id, SandboxId: sandboxID}))
	if err != nil {
		return nil, credentialClientError(err)
	}
	var out []credentials.Rule
	for _, r := range resp.Msg.GetRules() {
		out = append(out, credentials.Rule{
			Host: r.GetHost(), Header: r.GetHeader(), Value: r.GetValue(), Env: r.GetEnv(), Secret: r.GetSecret(), Placeholder: r.GetPlaceholder(),
		})
	}
	return out, nil
}

// Secret fetches the value of secret name for sandbox sandboxID, which
// runs on node id.
func (c *Client) Secret(ctx context.Context, id, sandboxID, name string) ([]byte, error) {
	resp, err := c.rpc.Secret(ctx, connect.NewRequest(&pb.SecretRequest{NodeId: id, SandboxId: sandboxID, Name: name}))
	if err != nil {
		return nil, credentialClientError(err)
	}
	return resp.Msg.GetValue(), nil
}

// credentialClientError maps the credential calls' codes back to
// cpapi.ErrNoSandbox, ErrDenied, ErrToken and ErrUnsupported.
func credentialClientError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeNotFound:
			return &remoteError{msg: ce.Message(), cause: cpapi.ErrNoSandbox}
		case connect.CodePermissionDenied:
			return &remoteError{msg: ce.Message(), cause: cpapi.ErrDenied}
		case connect.CodeUnauthenticated:
			return &remoteError{msg: ce.Message(), cause: cpapi.ErrToken}
		case connect.CodeUnimplemented:
			return &remoteError{msg: ce.Message(), cause: cpapi.ErrUnsupported}
		}
	}
	return fmt.Errorf("control plane: %w", err)
}

// clientError maps the service's codes back to the registry's errors, so
// that membership tells a forgotten node from a lost one. The message is
// the control plane's own, which already names the sentinel.
func clientError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("control plane: %w", err)
	}
	var cause error
	switch ce.Code() {
	case connect.CodeNotFound:
		cause = cluster.ErrUnknownNode
	case connect.CodeFailedPrecondition:
		cause = cluster.ErrConflict
	case connect.CodeInvalidArgument:
		cause = cluster.ErrInvalid
	default:
		return fmt.Errorf("control plane: %w", err)
	}
	return &remoteError{msg: ce.Message(), cause: cause}
}

// remoteError is the control plane's answer, unwrapping to the registry
// error it stands for.
type remoteError struct {
	msg   string
	cause error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.cause }

// bearer adds the cluster token to every call.
func bearer(token string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	}
}
