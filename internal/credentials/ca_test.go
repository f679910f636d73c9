package credentials

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCACreatedOnceAndReloaded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{caCertFile: 0o644, caKeyFile: 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", name, info.Mode().Perm(), want)
		}
	}
	if !ca.Certificate().IsCA || ca.Certificate().PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("not an ECDSA CA: %+v", ca.Certificate())
	}
	again, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fingerprint() != ca.Fingerprint() || len(ca.Fingerprint()) != 64 {
		t.Fatalf("reload gave another CA: %s vs %s", again.Fingerprint(), ca.Fingerprint())
	}
	otherDir := filepath.Join(t.TempDir(), "ca")
	other, err := LoadOrCreateCA(otherDir)
	if err != nil {
		t.Fatal(err)
	}
	if other.Fingerprint() == ca.Fingerprint() {
		t.Fatal("two installations got the same CA")
	}
	// A key that does not belong to the certificate is refused.
	if err := os.WriteFile(filepath.Join(dir, caKeyFile), mustRead(t, filepath.Join(otherDir, caKeyFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateCA(dir); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Fatalf("mismatched key: %v", err)
	}
	// LoadCA reads, never makes; half a CA is not made whole.
	empty := t.TempDir()
	if _, err := LoadCA(empty); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadCA of an empty directory: %v", err)
	}
	if err := os.Remove(filepath.Join(otherDir, caCertFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateCA(otherDir); err == nil {
		t.Fatal("a CA whose certificate is gone was made again over its key")
	}
	if _, err := LoadCA(dir); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Fatalf("LoadCA of a mismatched CA: %v", err)
	}
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatal("LoadCA wrote to the directory")
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLeafVerifiesAgainstCA(t *testing.T) {
	ca, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("CertPEM is not PEM")
	}
	leaf, err := ca.Leaf("API.Example.com.")
	if err != nil {
		t.Fatal(err)
	}
	opts := x509.VerifyOptions{DNSName: "api.example.com", Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := leaf.Leaf.Verify(opts); err != nil {
		t.Fatalf("leaf does not verify: %v", err)
	}
	opts.DNSName = "other.example.com"
	if _, err := leaf.Leaf.Verify(opts); err == nil {
		t.Fatal("leaf verifies for a name it was not minted for")
	}
	if got := leaf.Leaf.NotAfter.Sub(leaf.Leaf.NotBefore); got > leafValidity+time.Hour {
		t.Errorf("leaf valid for %s", got)
	}
	cached, err := ca.Leaf("api.example.com")
	if err != nil || cached != leaf {
		t.Fatalf("second Leaf for the same host was not cached (%v)", err)
	}
	// Another CA's roots do not accept it.
	other, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AppendCertsFromPEM(other.CertPEM())
	opts.DNSName, opts.Roots = "api.example.com", otherRoots
	if _, err := leaf.Leaf.Verify(opts); err == nil {
		t.Fatal("leaf verifies against another installation's CA")
	}
}

// A CA made in memory comes back whole from its PEM (as the cluster's is
// kept and handed to nodes) and signs leaves that verify against it; a
// mismatched key or a certificate that is no CA's is refused.
func TestCAFromPEM(t *testing.T) {
	ca, err := NewCA("cluster")
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseCA(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fingerprint() != ca.Fingerprint() || !strings.Contains(again.Certificate().Subject.CommonName, "cluster") {
		t.Fatalf("parsed CA %s (%s), want %s", again.Fingerprint(), again.Certificate().Subject.CommonName, ca.Fingerprint())
	}
	leaf, err := again.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.com"}); err != nil {
		t.Fatalf("a leaf of the parsed CA does not verify against the original: %v", err)
	}
	other, err := NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := other.KeyPEM()
	if _, err := ParseCA(ca.CertPEM(), otherKey); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Fatalf("mismatched key: %v", err)
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})
	if _, err := ParseCA(leafPEM, keyPEM); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("a leaf as CA: %v", err)
	}
	if _, err := ParseCA([]byte("junk"), keyPEM); err == nil {
		t.Fatal("junk certificate accepted")
	}
}
