package gateway

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-platform/space/internal/network"
)

const (
	// headTimeout bounds how long a new connection may take to say where
	// it is going (request head or ClientHello).
	headTimeout = 15 * time.Second
	// idleTimeout bounds the wait for the next request on a kept-alive
	// HTTP connection.
	idleTimeout = 2 * time.Minute
	// maxHeadBytes bounds an HTTP request head.
	maxHeadBytes = 64 << 10
)

func (s *slotGateway) serveProxy(l net.Listener, isTLS bool) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			// Out of descriptors or similar: give the node a moment.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if !s.track(c) {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			if isTLS {
				s.proxyTLS(c)
			} else {
				s.proxyHTTP(c)
			}
		}()
	}
}

// route decides where a connection the sandbox opened for host (an
// HTTP Host or TLS server name; "" when it named none) to port may go.
// A name is resolved here, not taken from the address the sandbox
// connected to, so a forged DNS answer or an address literal under a
// good name leads nowhere new. Without a name, the address the sandbox
// connected to (orig) must be allowed by itself. It returns the address
// to dial, or why the connection is refused.
func (s *slotGateway) route(ctx context.Context, p network.Policy, host string, port int, orig netip.AddrPort) (dst, refusal string, err error) {
	eg := s.g.cfg.Egress
	if host == "" {
		if orig.IsValid() && eg.Permits(p, orig.Addr(), false) {
			return orig.String(), "", nil
		}
		return "", fmt.Sprintf("%s without a host name: address not allowed", orig), nil
	}
	if ip, perr := netip.ParseAddr(host); perr == nil {
		if eg.Permits(p, ip, false) {
			return netip.AddrPortFrom(ip, uint16(port)).String(), "", nil
		}
		return "", fmt.Sprintf("%s: address not allowed", netip.AddrPortFrom(ip.Unmap(), uint16(port))), nil
	}
	switch judgeName(p, host) {
	case nameDenied:
		return "", host + ": denied domain", nil
	case nameNotAllowed:
		return "", host + ": not in the allowed domains", nil
	}
	addrs, _, err := s.g.upstream.lookup(ctx, host)
	if err != nil {
		return "", "", err
	}
	for _, a := range addrs {
		if eg.Permits(p, a, true) {
			return netip.AddrPortFrom(a, uint16(port)).String(), "", nil
		}
	}
	return "", fmt.Sprintf("%s: resolves only to blocked, private or denied addresses", host), nil
}

// checkedDial is the dialer handed to an Interceptor: it applies the
// same policy as the proxy and dials from the gateway namespace.
func (s *slotGateway) checkedDial(p network.Policy) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, netw, addr string) (net.Conn, error) {
		if netw != "tcp" && netw != "tcp4" {
			return nil, fmt.Errorf("dial %s %s: only TCP", netw, addr)
		}
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil || port <= 0 || port > 65535 {
			return nil, fmt.Errorf("dial %s: bad port", addr)
		}
		dst, refusal, err := s.route(ctx, p, canonicalName(host), port, netip.AddrPort{})
		if err != nil {
			return nil, err
		}
		if refusal != "" {
			s.denied("connection to %s", refusal)
			return nil, fmt.Errorf("dial %s: refused by the egress policy (%s)", addr, refusal)
		}
		return s.dial(ctx, dst)
	}
}

func (s *slotGateway) proxyTLS(c net.Conn) {
	orig := originalDst(c)
	p := *s.policy.Load()
	_ = c.SetReadDeadline(time.Now().Add(headTimeout))
	raw, sni, err := readClientHello(c)
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case errors.Is(err, errNotTLS):
		sni = "" // not TLS: only the address can decide
	case err != nil:
		if len(raw) > 5 { // a handshake that is not one; silence is a dead client
			s.denied("TLS to %s: unreadable ClientHello (%v)", orig, err)
		}
		resetConn(c)
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	if ic := s.g.cfg.Interceptor; ic != nil && sni != "" && judgeName(p, sni) == nameAllowed && ic.Intercepts(s.id, sni) {
		if err := ic.Serve(ctx, s.id, sni, &replayConn{Conn: c, pending: raw}, s.checkedDial(p)); err != nil {
			s.g.log.Debug("intercepted TLS", "sandbox", s.id, "host", sni, "err", err)
		}
		return
	}
	dst, refusal, err := s.route(ctx, p, sni, 443, orig)
	if refusal != "" {
		s.denied("TLS to %s", refusal)
		resetConn(c)
		return
	}
	if err != nil {
		s.g.log.Debug("TLS proxy", "sandbox", s.id, "host", sni, "err", err)
		resetConn(c)
		return
	}
	up, err := s.dial(ctx, dst)
	if err != nil {
		resetConn(c)
		return
	}
	if !s.track(up) {
		return
	}
	defer s.untrack(up)
	if _, err := up.Write(raw); err != nil {
		return
	}
	splice(c, up)
}

func (s *slotGateway) proxyHTTP(c net.Conn) {
	orig := originalDst(c)
	p := *s.policy.Load()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	lr := &headLimiter{r: c}
	br := bufio.NewReader(lr)
	var up net.Conn
	var first string
	upDone := make(chan struct{})
	defer func() {
		if up != nil {
			s.untrack(up)
			<-upDone
		}
	}()
	for {
		lr.n = maxHeadBytes
		wait := headTimeout
		if up != nil {
			wait = idleTimeout
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		req, err := http.ReadRequest(br)
		if err != nil {
			if up != nil && errors.Is(err, io.EOF) {
				// The client is done sending; let the answer finish.
				closeWrite(up)
				<-upDone
			}
			if up == nil && lr.n == 0 {
				writeRefusal(c, http.StatusRequestHeaderFieldsTooLarge, "request head too large")
			}
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		lr.n = -1 // the body is not bounded here
		host := hostOnly(req.Host)
		if up == nil {
			dst, refusal, err := s.route(ctx, p, host, 80, orig)
			if refusal != "" {
				s.denied("HTTP to %s", refusal)
				writeRefusal(c, http.StatusForbidden, "refused by the sandbox's egress policy: "+refusal)
				return
			}
			if err != nil {
				writeRefusal(c, http.StatusBadGateway, err.Error())
				return
			}
			if up, err = s.dial(ctx, dst); err != nil {
				writeRefusal(c, http.StatusBadGateway, fmt.Sprintf("connect to %s: %v", dst, err))
				return
			}
			if !s.track(up) {
				up = nil
				return
			}
			first = host
			go func() {
				defer close(upDone)
				_, _ = io.Copy(c, up)
				// The upstream is done answering; what the client sends
				// after has nowhere to go.
				c.Close()
			}()
		} else if host != first {
			// One connection, one name: a later request may not reach
			// another site that shares the address.
			s.denied("HTTP to %s on a connection opened for %s", host, first)
			closeWrite(up) // the requests already sent still get answers
			<-upDone
			return
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // keep Write from adding Go's
		}
		if err := req.Write(up); err != nil {
			return
		}
		if req.Method == http.MethodConnect || req.Header.Get("Upgrade") != "" {
			// The connection stops being HTTP (WebSocket and the like).
			_, _ = io.Copy(up, br)
			closeWrite(up)
			<-upDone
			return
		}
	}
}

// headLimiter fails reads once n bytes were read (n < 0: no limit).
type headLimiter struct {
	r io.Reader
	n int
}

func (l *headLimiter) Read(b []byte) (int, error) {
	if l.n == 0 {
		return 0, errors.New("request head too large")
	}
	if l.n > 0 && len(b) > l.n {
		b = b[:l.n]
	}
	n, err := l.r.Read(b)
	if l.n > 0 {
		l.n -= n
	}
	return n, err
}

func writeRefusal(c net.Conn, status int, reason string) {
	body := "space egress: " + strings.ReplaceAll(reason, "\n", " ") + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// resetConn closes c with a TCP reset, which a client reports at once.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	c.Close()
}

// splice copies both ways until both directions are done.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		closeWrite(dst)
		done <- struct{}{}
	}
	go pipe(a, b)
	go pipe(b, a)
	<-done
	<-done
}

// replayConn returns pending before reading on from Conn.
type replayConn struct {
	net.Conn
	pending []byte
}

func (r *replayConn) Read(b []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(b, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.Conn.Read(b)
}

// originalDst is where the sandbox sent a connection before the gateway
// redirected it (SO_ORIGINAL_DST); invalid if unknown.
func originalDst(c net.Conn) netip.AddrPort {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}
	}
	var out netip.AddrPort
	_ = raw.Control(func(fd uintptr) {
		// struct sockaddr_in is 16 bytes, the size of an IPv6 mreq.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			return
		}
		b := m.Multiaddr
		port := binary.BigEndian.Uint16(b[2:4])
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port)
	})
	return out
}
