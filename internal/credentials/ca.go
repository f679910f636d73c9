package credentials

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const (
	caCertFile = "ca.crt"
	caKeyFile  = "ca.key"
	caValidity = 10 * 365 * 24 * time.Hour
	// leafValidity is short: a leaf only has to outlive the connections
	// that use it, and a short one limits what a leaked leaf is worth.
	leafValidity = 24 * time.Hour
	// leafRenewBefore replaces a cached leaf this long before it expires.
	leafRenewBefore = time.Hour
	// maxCachedLeaves bounds the leaf cache; it is emptied when full.
	maxCachedLeaves = 4096
)

// CA is the installation's egress certificate authority. Templates trust
// its certificate, so the gateway can terminate TLS for hosts that have
// credential rules with leaves it mints on demand. Under `space serve` its
// key never leaves the host; a cluster's is kept sealed by the control
// plane and handed to its nodes, whose gateways all sign with it.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// LoadOrCreateCA reads the CA from dir (ca.crt, ca.key), creating an ECDSA
// P-256 CA there on first use.
func LoadOrCreateCA(dir string) (*CA, error) {
	ca, err := LoadCA(dir)
	if errors.Is(err, fs.ErrNotExist) && !exists(filepath.Join(dir, caCertFile)) && !exists(filepath.Join(dir, caKeyFile)) {
		return createCA(dir)
	}
	return ca, err
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// LoadCA reads the CA kept in dir by LoadOrCreateCA; the error wraps
// fs.ErrNotExist when dir holds none.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("egress CA in %s: %w", dir, err)
	}
	return ca, nil
}

// ParseCA makes a CA of a PEM certificate and its PEM EC private key, as
// CertPEM and KeyPEM give them.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate is not a CA's")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("key: no PEM block")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the key does not belong to the certificate")
	}
	return &CA{cert: cert, certPEM: certPEM, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// NewCA makes an ECDSA P-256 CA in memory, named name (its common name
// reads "space egress CA (name)"). Whoever keeps it stores KeyPEM.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject: pkix.Name{
			Organization: []string{"space"},
			CommonName:   "space egress CA (" + name + ")",
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress CA certificate: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &CA{cert: cert, certPEM: certPEM, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

func createCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	host, _ := os.Hostname()
	ca, err := NewCA(host)
	if err != nil {
		return nil, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	// The key first: a certificate without its key would be unusable
	// after a crash, the reverse is recreated.
	if err := writeExclusive(filepath.Join(dir, caKeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeExclusive(filepath.Join(dir, caCertFile), ca.certPEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

func writeExclusive(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	_, err = f.Write(data)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return fmt.Errorf("egress CA: write %s: %w", path, err)
	}
	return nil
}

func parseCertPEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("random serial: %v", err)) // crypto/rand does not fail on Linux
	}
	return n
}

// CertPEM is the CA certificate, PEM-encoded, as templates install it.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// KeyPEM is the CA's private key, PEM-encoded ("EC PRIVATE KEY").
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("egress CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// Certificate is the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Fingerprint is the SHA-256 of the CA certificate, in hex.
func (ca *CA) Fingerprint() string {
	sum := sha256.Sum256(ca.cert.Raw)
	return hex.EncodeToString(sum[:])
}

// Leaf returns a server certificate for host signed by the CA, minting one
// when none is cached or the cached one is close to expiry.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return nil, errors.New("leaf certificate: empty host name")
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && time.Until(c.Leaf.NotAfter) > leafRenewBefore {
		return c, nil
	}
	c, err := ca.mint(host)
	if err != nil {
		return nil, err
	}
	if len(ca.leaves) >= maxCachedLeaves {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}

func (ca *CA) mint(host string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf key for %s: %w", host, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-5 * time.Minute), // tolerate a sandbox clock slightly behind
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
