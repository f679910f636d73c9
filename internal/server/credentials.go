package server

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
)

// openCredentials opens the secret store (its key outside state.db), the
// installation's egress CA, and the interceptor the gateway hands TLS
// connections to hosts with credential rules.
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
	in := credentials.NewInterceptor(credentials.Config{
		CA: ca, Secrets: projectSecrets{store: store, cp: func() *controlplane.ControlPlane { return s.cp }}, UpstreamRoots: roots, Logger: s.cfg.Logger,
		// The control plane is built later; no sandbox runs before it is.
		Rules: ruleSource(func(id string) []credentials.Rule { return s.cp.CredentialRules(id) }),
	})
	return store, ca, in, nil
}

// projectSecrets reads the secrets a sandbox's rules name from the
// sandbox's own project, so rules never reach another project's secrets.
type projectSecrets struct {
	store *secrets.Store
	cp    func() *controlplane.ControlPlane
}

func (p projectSecrets) Secret(sandboxID, name string) ([]byte, error) {
	sb, err := p.cp().Get(project.Everything, sandboxID)
	if err != nil {
		return nil, err
	}
	return p.store.Get(secrets.Ref(sb.Project, name))
}

type ruleSource func(id string) []credentials.Rule

func (f ruleSource) CredentialRules(id string) []credentials.Rule { return f(id) }

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
