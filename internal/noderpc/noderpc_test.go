package noderpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
)

const testToken = "cluster-secret-token"

// serve serves node on a loopback listener and returns its base URL.
func serve(t *testing.T, node nodeapi.Node, opts ServerOptions) string {
	t.Helper()
	srv, err := NewServer(NewHandler(node, testToken, nil), opts)
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = Serve(srv, ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	scheme := "http"
	if opts.CertFile != "" {
		scheme = "https"
	}
	return scheme + "://" + ln.Addr().String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// dial serves node in the clear and returns a client of it.
func dial(t *testing.T, node nodeapi.Node) *Client {
	t.Helper()
	c, err := Dial(serve(t, node, ServerOptions{}), testToken, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The same cases pass against the fake behind the wire as in process.
func TestConformanceOverRPC(t *testing.T) {
	nodeapitest.Run(t, func(t *testing.T) nodeapitest.Harness {
		f := nodeapitest.NewFake("fake")
		return nodeapitest.FakeHarness(dial(t, f), f)
	})
}

func TestConformanceOverTLS(t *testing.T) {
	cert, key, ca := testCert(t)
	nodeapitest.Run(t, func(t *testing.T) nodeapitest.Harness {
		f := nodeapitest.NewFake("fake")
		url := serve(t, f, ServerOptions{CertFile: cert, KeyFile: key})
		c, err := Dial(url, testToken, DialOptions{CAFile: ca})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return nodeapitest.FakeHarness(c, f)
	})
}

// testCert writes a self-signed certificate for 127.0.0.1 (its own CA).
func testCert(t *testing.T) (certFile, keyFile, caFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "space node test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, certFile
}

func TestTLSNeedsTheCA(t *testing.T) {
	cert, key, _ := testCert(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // the refused handshake is logged
	url := serve(t, nodeapitest.NewFake("fake"), ServerOptions{CertFile: cert, KeyFile: key, Logger: quiet})
	c, err := Dial(url, testToken, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(context.Background()); err == nil {
		t.Fatal("a node with an unknown CA's certificate was trusted")
	}
	if _, err := Dial("http://127.0.0.1:1", testToken, DialOptions{CAFile: cert}); err == nil {
		t.Fatal("a CA file with an http URL was accepted")
	}
	// The CA as bytes works as the file does.
	pem, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	c, err = Dial(url, testToken, DialOptions{CAPEM: pem})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatalf("trusting the CA given as PEM: %v", err)
	}
	if _, err := Dial(url, testToken, DialOptions{CAPEM: []byte("not pem")}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a CA that is no PEM: %v", err)
	}
	if _, err := NewServer(nil, ServerOptions{CertFile: cert}); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
}

// BenchmarkExecOverRPC measures what the wire adds to a data plane call
// (a fake's exec costs next to nothing).
func BenchmarkExecOverRPC(b *testing.B) {
	f := nodeapitest.NewFake("fake")
	srv, err := NewServer(NewHandler(f, testToken, nil), ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = Serve(srv, ln) }()
	defer srv.Close()
	c, err := Dial("http://"+ln.Addr().String(), testToken, DialOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	id := "benchbenchbenchbench"
	if err := c.Create(ctx, nodeapi.CreateRequest{Spec: nodeapi.CreateSpec{ID: id, Template: nodeapi.TemplateSpec{ID: "minimal"}}}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sb, err := c.Sandbox(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Exec(ctx, nodeapi.ExecSpec{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
	}
}
