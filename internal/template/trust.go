package template

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
)

// Where templates keep the installation's egress CA certificate (which
// the gateway's credential injection presents leaves from). The file under
// /usr/local/share/ca-certificates survives a later update-ca-certificates
// (Debian's tool rebuilds the bundle from it); the bundle is what OpenSSL,
// curl, Python and Go read.
const (
	caCertPath = "/usr/local/share/ca-certificates/space-egress-ca.crt"
	caBundle   = "/etc/ssl/certs/ca-certificates.crt"
)

// trustEnv points common TLS clients at the bundle, so they trust the CA
// even when they do not read the system store by default.
var trustEnv = map[string]string{
	"SSL_CERT_FILE":       caBundle,
	"REQUESTS_CA_BUNDLE":  caBundle,
	"NODE_EXTRA_CA_CERTS": caCertPath,
}

// caFingerprint identifies a CA certificate in template IDs, so that
// another installation's CA builds a template of its own.
func caFingerprint(pemData []byte) string {
	sum := sha256.Sum256(pemData)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// installCA adds the CA certificate to the rootfs's trust store: its own
// file, and the bundle (created if the rootfs has none). It is idempotent:
// a template built from one that trusts the CA already is left as it is.
func installCA(rootfs string, pemData []byte) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	own := caCertPath[1:]
	if err := root.MkdirAll(path.Dir(own), 0o755); err != nil {
		return fmt.Errorf("trust store: %w", err)
	}
	if err := root.WriteFile(own, pemData, 0o644); err != nil {
		return fmt.Errorf("trust store: write %s: %w", caCertPath, err)
	}
	bundle := caBundle[1:]
	existing, err := root.ReadFile(bundle)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := root.MkdirAll(path.Dir(bundle), 0o755); err != nil {
			return fmt.Errorf("trust store: %w", err)
		}
	case err != nil:
		return fmt.Errorf("trust store: read %s: %w", caBundle, err)
	case bytes.Contains(existing, bytes.TrimSpace(pemData)):
		return nil
	}
	if len(existing) > 0 && !bytes.HasSuffix(existing, []byte("\n")) {
		existing = append(existing, '\n')
	}
	if err := root.WriteFile(bundle, append(existing, pemData...), 0o644); err != nil {
		return fmt.Errorf("trust store: write %s: %w", caBundle, err)
	}
	return nil
}
