package guestinit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// listen opens the agent channel the host named: "serial:<name>" (a
// virtio-serial port) or "vsock:<port>".
func listen(spec string, logf func(string, ...any)) (net.Listener, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "serial":
		dev, err := findPort(arg, 10*time.Second)
		if err != nil {
			return nil, err
		}
		// Non-blocking, so reads and writes wait in Go's poller, where
		// a closing session's deadline can cut them off; a blocking write
		// to a port without a host would wait in the kernel for the next
		// host and hand it the old session's bytes.
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open agent port: %w", err)
		}
		f := os.NewFile(uintptr(fd), dev)
		if err := f.SetDeadline(time.Time{}); err != nil {
			return nil, fmt.Errorf("agent port is not pollable: %w", err)
		}
		l := newPortListener(f)
		l.logf = logf
		return l, nil
	case "vsock":
		port, err := strconv.ParseUint(arg, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("vsock port %q: %w", arg, err)
		}
		return listenVsock(uint32(port))
	}
	return nil, fmt.Errorf("unknown agent channel %q", spec)
}

// findPort finds the device of the virtio-serial port named name (there
// is no udev to make /dev/virtio-ports/<name>).
func findPort(name string, bound time.Duration) (string, error) {
	deadline := time.Now().Add(bound)
	for {
		ports, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, p := range ports {
			if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == name {
				dev := "/dev/" + filepath.Base(filepath.Dir(p))
				if _, err := os.Stat(dev); err == nil {
					return dev, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("virtio-serial port %s did not appear within %s", name, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// portListener turns one virtio-serial port into a listener: each host
// connection to the port's socket becomes one accepted conn, in turn. The
// port reads EOF while no host is connected (virtio_console returns 0
// when the host side is closed and nothing is buffered), which is how a
// session learns that its host went away.
type portListener struct {
	f *os.File
	// rmu and wmu are held across every read and write of the port, so
	// a closing session can wait until none of its calls is inside.
	rmu, wmu sync.Mutex
	free     chan struct{} // a token: no session is open
	// stash holds bytes a session read that belong to the next one
	// (under rmu).
	stash  []byte
	logf   func(string, ...any)
	closed chan struct{}
	once   sync.Once
}

func newPortListener(f *os.File) *portListener {
	l := &portListener{f: f, free: make(chan struct{}, 1), closed: make(chan struct{})}
	l.free <- struct{}{}
	return l
}

// idlePoll is how often a port without a host is read again: the driver
// reports hang-up as readable, so poll would spin.
const idlePoll = 20 * time.Millisecond

func (l *portListener) Accept() (net.Conn, error) {
	select {
	case <-l.free:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	pre, err := l.serverHandshake()
	if err != nil {
		l.free <- struct{}{}
		return nil, err
	}
	l.log("agent channel: host connected")
	return &portConn{l: l, pre: pre}, nil
}

// serverHandshake waits for a host's HELLO, answers READY and waits for
// GO (handshake.go); it returns what followed GO.
func (l *portListener) serverHandshake() ([]byte, error) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	got := l.stash
	l.stash = nil
	stashed := len(got) > 0
	buf := make([]byte, 4096)
	nonce := ""
	for {
		select {
		case <-l.closed:
			return nil, net.ErrClosed
		default:
		}
		n, err := len(got), error(nil)
		if !stashed {
			n, err = l.f.Read(buf)
			got = append(got, buf[:n]...)
		}
		stashed = false // a stashed HELLO is parsed before reading on
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			// No host (or it left mid-handshake): start over.
			got, nonce = nil, ""
			time.Sleep(idlePoll)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("agent port: %w", err)
		}
		for {
			if nonce == "" {
				i := bytes.Index(got, []byte(helloPrefix))
				if i < 0 {
					break
				}
				j := bytes.IndexByte(got[i:], '\n')
				if j < 0 {
					break
				}
				nonce = string(got[i+len(helloPrefix) : i+j])
				got = got[i+j+1:]
				l.wmu.Lock()
				_, err := l.f.Write([]byte(readyPrefix + nonce + "\n"))
				l.wmu.Unlock()
				if err != nil {
					return nil, fmt.Errorf("agent port: %w", err)
				}
				continue
			}
			want := []byte(goPrefix + nonce + "\n")
			if i := bytes.Index(got, want); i >= 0 {
				return got[i+len(want):], nil
			}
			// A newer HELLO means the host redialed: answer that one.
			if i := bytes.LastIndex(got, []byte(helloPrefix)); i >= 0 {
				if j := bytes.IndexByte(got[i:], '\n'); j >= 0 && string(got[i+len(helloPrefix):i+j]) != nonce {
					nonce = ""
					got = got[i:]
					continue
				}
			}
			break
		}
		if len(got) > 1<<16 {
			got = got[len(got)-256:]
		}
	}
}

func (l *portListener) log(msg string) {
	if l.logf != nil {
		l.logf(msg)
	}
}

func (l *portListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *portListener) Addr() net.Addr { return portAddr{} }

type portAddr struct{}

func (portAddr) Network() string { return "virtio-serial" }
func (portAddr) String() string  { return "agent-port" }

// portConn is one host connection over the port.
type portConn struct {
	l   *portListener
	pre []byte
	// hostGone: the session saw its host leave (EOF or a new HELLO).
	hostGone bool
	mu       sync.Mutex
	closed   bool
	once     sync.Once
}

func (c *portConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *portConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	if c.hostGone {
		return 0, io.EOF
	}
	c.l.rmu.Lock()
	if c.isClosed() {
		c.l.rmu.Unlock()
		return 0, net.ErrClosed
	}
	n, err := c.l.f.Read(p)
	if n > 0 {
		// A hang-up and a new host while the guest was paused (or busy)
		// reach the driver together, and the read never sees the EOF
		// between them: the new host's HELLO arrives in this session.
		// It ends here, and the next session starts from the HELLO.
		if i := findHello(p[:n]); i >= 0 {
			c.l.stash = append([]byte(nil), p[i:n]...)
			c.hostGone = true
			n = i
		}
	}
	c.l.rmu.Unlock()
	if n == 0 && (c.hostGone || errors.Is(err, io.EOF) || err == nil) {
		return 0, io.EOF // the host closed its end
	}
	return n, err
}

// findHello returns where a complete HELLO line (handshake.go) starts in
// b, or -1. Bytes of HTTP/2 frames could spell one only if the node sent
// them on purpose (a user's own upload): that ends the user's own
// connection, which the node redials.
func findHello(b []byte) int {
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(helloPrefix))
		if i < 0 {
			return -1
		}
		i += off
		rest := b[i+len(helloPrefix):]
		if j := bytes.IndexByte(rest, '\n'); j == 24 && isHex(rest[:j]) {
			return i
		}
		off = i + 1
	}
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (c *portConn) Write(p []byte) (int, error) {
	c.l.wmu.Lock()
	defer c.l.wmu.Unlock()
	if c.isClosed() {
		return 0, net.ErrClosed
	}
	return c.l.f.Write(p)
}

// Close ends the session: it cuts off any read or write of it still in
// the port (a write blocks while no host is connected) before the next
// session may start, so none of its bytes can reach the next host.
func (c *portConn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		past := time.Unix(1, 0)
		_ = c.l.f.SetDeadline(past)
		c.l.rmu.Lock()
		c.l.wmu.Lock()
		_ = c.l.f.SetDeadline(time.Time{})
		c.l.wmu.Unlock()
		c.l.rmu.Unlock()
		c.l.log("agent channel: connection ended")
		c.l.free <- struct{}{}
	})
	return nil
}

func (c *portConn) LocalAddr() net.Addr  { return portAddr{} }
func (c *portConn) RemoteAddr() net.Addr { return portAddr{} }

func (c *portConn) SetDeadline(t time.Time) error {
	if c.isClosed() {
		return net.ErrClosed
	}
	return c.l.f.SetDeadline(t)
}

func (c *portConn) SetReadDeadline(t time.Time) error {
	if c.isClosed() {
		return net.ErrClosed
	}
	return c.l.f.SetReadDeadline(t)
}

func (c *portConn) SetWriteDeadline(t time.Time) error {
	if c.isClosed() {
		return net.ErrClosed
	}
	return c.l.f.SetWriteDeadline(t)
}

// listenVsock listens on an AF_VSOCK stream port; Go's net package has no
// vsock, so accepted sockets are wrapped as files.
func listenVsock(port uint32) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vsock bind %d: %w", port, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vsock listen: %w", err)
	}
	return &vsockListener{fd: fd, port: port}, nil
}

type vsockListener struct {
	fd   int
	port uint32
}

func (l *vsockListener) Accept() (net.Conn, error) {
	for {
		nfd, _, err := unix.Accept4(l.fd, unix.SOCK_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("vsock accept: %w", err)
		}
		c := fileConn{File: os.NewFile(uintptr(nfd), "vsock")}
		pre, err := handshakeFile(c)
		if err != nil {
			c.Close()
			continue
		}
		return &prefixConn{Conn: c, pre: pre}, nil
	}
}

func (l *vsockListener) Close() error   { return unix.Close(l.fd) }
func (l *vsockListener) Addr() net.Addr { return vsockAddr(l.port) }

type vsockAddr uint32

func (vsockAddr) Network() string  { return "vsock" }
func (a vsockAddr) String() string { return "vsock:" + strconv.Itoa(int(a)) }

// fileConn is a connected socket Go's net package cannot wrap.
type fileConn struct{ *os.File }

func (fileConn) LocalAddr() net.Addr  { return vsockAddr(0) }
func (fileConn) RemoteAddr() net.Addr { return vsockAddr(0) }

// handshakeFile runs the guest's handshake on a vsock connection, which,
// unlike the serial port, is one host connection from start to end.
func handshakeFile(c fileConn) ([]byte, error) {
	l := newPortListener(c.File)
	_ = c.File.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.File.SetDeadline(time.Time{})
	return l.serverHandshake()
}
