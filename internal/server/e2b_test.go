package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"
)

// The compatibility listeners speak HTTP/1.1 and h2c, or with a
// certificate HTTPS with HTTP/2 by ALPN (the sandbox proxy's --proxy-tls-*).
func TestServeCompatProtocols(t *testing.T) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) })
	s := &Server{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	t.Cleanup(func() { _ = s.shutdownCompat(t.Context()) })

	plain, err := s.serveCompat("plain", "127.0.0.1:0", hello, nil)
	if err != nil {
		t.Fatal(err)
	}
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	if got := get(t, &http.Client{Transport: h2c}, plain); got != "HTTP/2.0" {
		t.Fatalf("h2c client served as %q", got)
	}
	if got := get(t, http.DefaultClient, plain); got != "HTTP/1.1" {
		t.Fatalf("HTTP/1.1 client served as %q", got)
	}

	cert, pool := selfSigned(t)
	secure, err := s.serveCompat("tls", "127.0.0.1:0", hello, &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	if got := get(t, &http.Client{Transport: tr}, secure); got != "HTTP/2.0" {
		t.Fatalf("HTTPS client served as %q", got)
	}
}

func get(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}
