package server

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/secrets"
)

// openCredentials opens the secret store (its key outside state.db), the
// installation's egress CA, and the interceptor the gateway hands TLS
// connections to hosts with credential rules. The interceptor asks the
// control plane for rules and secrets as a cluster's node does, through
// the node → control-plane contract, here in process (no cache: an
// answer costs no round trip).
func (s *Server) openCredentials() (*secrets.Store, *credentials.CA, *credentials.Interceptor, error) {
	keyFile := s.cfg.SecretsKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(s.cfg.DataDir, "secrets.key")
	}
	key, err := secrets.LoadOrCreateKey(keyFile)
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := secrets.Open(s.st, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("secrets: %w (key file %s)", err, keyFile)
	}
	ca, err := credentials.LoadOrCreateCA(filepath.Join(s.cfg.DataDir, "ca"))
	if err != nil {
		return nil, nil, nil, err
	}
	roots, err := upstreamRoots(s.cfg.EgressCAFile)
	if err != nil {
		return nil, nil, nil, err
	}
	cp := &cpapi.Service{Logger: s.cfg.Logger, Credentials: controlPlaneCredentials{
		ca: ca, secrets: store,
		// The control plane is built later; no sandbox runs before it is.
		sandboxes: func() sandboxLookup { return s.cp },
	}}
	asked := newNodeCredentials(localNodeID, cp, s.cfg.Logger, 0)
	in := credentials.NewInterceptor(credentials.Config{
		CA: ca, Rules: asked, Secrets: asked, UpstreamRoots: roots, Logger: s.cfg.Logger,
	})
	return store, ca, in, nil
}

// upstreamRoots are the system roots plus the certificates in extraFile.
func upstreamRoots(extraFile string) (*x509.CertPool, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if extraFile == "" {
		return roots, nil
	}
	data, err := os.ReadFile(extraFile)
	if err != nil {
		return nil, fmt.Errorf("egress CA file: %w", err)
	}
	if !roots.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("egress CA file %s holds no PEM certificate", extraFile)
	}
	return roots, nil
}
