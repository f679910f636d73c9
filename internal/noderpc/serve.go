package noderpc

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"
)

// ServerOptions configure the node's HTTP server.
type ServerOptions struct {
	// CertFile and KeyFile, both set, make the server speak TLS (HTTP/2
	// over TLS); both empty, HTTP/2 in the clear (h2c) and HTTP/1.1.
	CertFile, KeyFile string
	// Logger receives the HTTP server's own errors (failed TLS
	// handshakes, ...); nil means slog.Default().
	Logger *slog.Logger
}

// NewServer returns the HTTP server for a node handler: HTTP/2 with or
// without TLS, since streams in both directions (file uploads, port
// tunnels) need it. Run it with Serve.
func NewServer(handler http.Handler, opts ServerOptions) (*http.Server, error) {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	srv := &http.Server{
		Handler:           handler,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		// Every attach and event subscription holds a stream for as long
		// as it follows; the default of 250 per connection is too few for
		// a control plane's clients on a busy node.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 4096},
	}
	switch {
	case opts.CertFile == "" && opts.KeyFile == "":
		protocols.SetUnencryptedHTTP2(true)
	case opts.CertFile == "" || opts.KeyFile == "":
		return nil, errors.New("node server TLS needs both a certificate and a key file")
	default:
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load node TLS certificate: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return srv, nil
}

// Serve serves srv (from NewServer) on ln, with TLS when it has a
// certificate.
func Serve(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil && len(srv.TLSConfig.Certificates) > 0 {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// loadRoots makes a pool of the PEM certificates of a CA file or of pem.
func loadRoots(caFile string, pem []byte) (*x509.CertPool, error) {
	source := "the cluster CA"
	if caFile != "" {
		var err error
		if pem, err = os.ReadFile(caFile); err != nil {
			return nil, fmt.Errorf("read the cluster CA file: %w", err)
		}
		source = "the cluster CA file " + caFile
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", source)
	}
	return pool, nil
}
