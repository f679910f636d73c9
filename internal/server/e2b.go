package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/internal/proxy"
	"github.com/space-platform/space/internal/secrets"
)

// compatServers are the E2B-compatibility listeners: E2B's control-plane
// API (--e2b-listen) and the sandbox traffic proxy (--proxy-listen).
type compatServers struct {
	e2bURL, proxyURL string
	servers          []*http.Server
	done             []chan struct{}
	proxy            *proxy.Proxy
}

// E2BURL is the E2B API's base URL (E2B_API_URL), "" when it is off.
func (s *Server) E2BURL() string { return s.compat.e2bURL }

// ProxyURL is the sandbox proxy's base URL (E2B_SANDBOX_URL), "" when off.
func (s *Server) ProxyURL() string { return s.compat.proxyURL }

// startCompat opens the E2B API and proxy listeners that are configured
// (an empty address turns one off). On failure nothing stays open.
func (s *Server) startCompat(keys *auth.Keys, secretStore *secrets.Store, templates e2b.TemplateLookup) (err error) {
	defer func() {
		if err != nil {
			_ = s.shutdownCompat(context.Background())
		}
	}()
	if s.cfg.E2BListen != "" {
		var sec e2b.Secrets // a nil *secrets.Store must stay a nil interface
		if secretStore != nil {
			sec = secretStore
		}
		h := e2b.New(e2b.Config{ControlPlane: s.cp, Keys: keys, Secrets: sec, Domain: s.cfg.Domain, Logger: s.cfg.Logger,
			Aliases: templates, Templates: s.e2bTemplates, MaxTemplateFiles: s.cfg.MaxTemplateArchiveBytes,
			Requests: s.requests, Uploads: s.uploads})
		if s.compat.e2bURL, err = s.serveCompat("E2B API", s.cfg.E2BListen, api.HidePaths(h, s.hostPaths), nil); err != nil {
			return err
		}
	}
	if s.cfg.ProxyListen != "" {
		var tlsConfig *tls.Config
		if s.cfg.ProxyTLSCert != "" || s.cfg.ProxyTLSKey != "" {
			cert, err := tls.LoadX509KeyPair(s.cfg.ProxyTLSCert, s.cfg.ProxyTLSKey)
			if err != nil {
				return fmt.Errorf("sandbox proxy: --proxy-tls-cert and --proxy-tls-key: %w", err)
			}
			tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
		s.compat.proxy = proxy.New(proxy.Config{ControlPlane: s.cp, Domain: s.cfg.Domain, Logger: s.cfg.Logger})
		if s.compat.proxyURL, err = s.serveCompat("sandbox proxy", s.cfg.ProxyListen, s.compat.proxy, tlsConfig); err != nil {
			return err
		}
	}
	return nil
}

// serveCompat serves h on addr in the background and returns its URL:
// HTTP/1.1 and HTTP/2 without TLS (h2c, prior knowledge), or with
// tlsConfig HTTPS with HTTP/2 by ALPN. No write timeout: envd streams
// (process output, watches) last as long as the processes do.
func (s *Server) serveCompat(what, addr string, h http.Handler, tlsConfig *tls.Config) (string, error) {
	srv, ln, err := listenHTTP(addr, h, s.cfg.HTTP)
	if err != nil {
		return "", fmt.Errorf("%s: %w (choose another address with --e2b-listen/--proxy-listen, or \"\" to turn it off)", what, err)
	}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	scheme := "http"
	if tlsConfig != nil {
		srv.Protocols.SetHTTP2(true)
		srv.TLSConfig = tlsConfig
		scheme = "https"
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	done := make(chan struct{})
	s.compat.servers = append(s.compat.servers, srv)
	s.compat.done = append(s.compat.done, done)
	go func() {
		defer close(done)
		serve := srv.Serve
		if tlsConfig != nil {
			// ServeTLS offers h2 by ALPN as srv.Protocols says.
			serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
		}
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error(what, "err", err)
		}
	}()
	return scheme + "://" + ln.Addr().String(), nil
}

// shutdownCompat stops the compatibility listeners. Streams still open
// through the proxy are cut when ctx ends.
func (s *Server) shutdownCompat(ctx context.Context) error {
	var errs []error
	for i, srv := range s.compat.servers {
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
			errs = append(errs, err)
		}
		<-s.compat.done[i]
	}
	s.compat.servers, s.compat.done = nil, nil
	if s.compat.proxy != nil {
		s.compat.proxy.Close()
	}
	return errors.Join(errs...)
}
