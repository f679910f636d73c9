package server

import (
	"crypto/x509"
	"fmt"
	"os"
)

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
