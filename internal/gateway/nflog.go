package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// nfnetlink_log protocol numbers (linux/netfilter/nfnetlink_log.h).
const (
	nfnlSubsysULOG     = 4
	nfulnlMsgPacket    = 0
	nfulnlMsgConfig    = 1
	nfulaCfgCmd        = 1
	nfulaCfgMode       = 2
	nfulnlCfgCmdBind   = 1
	nfulnlCopyPacket   = 2
	nfulaPayload       = 9
	nfnetlinkV0        = 0
	nlaTypeMask        = 0x3fff
	nflogCopyRange     = 64 // IP and transport headers are all we read
	nflogReceiveBuffer = 1 << 16
)

// nflog receives the packets the gateway rules log to one NFLOG group in
// the namespace the socket was opened in.
type nflog struct {
	f *os.File
}

// openNflog binds an NFLOG group; it must run in the target namespace.
func openNflog(group uint16) (*nflog, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind netlink: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, nflogReceiveBuffer)
	bind := nflogConfig(group, attr(nfulaCfgCmd, []byte{nfulnlCfgCmdBind}))
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, nflogCopyRange)
	mode[4] = nfulnlCopyPacket
	setMode := nflogConfig(group, attr(nfulaCfgMode, mode))
	for _, msg := range [][]byte{bind, setMode} {
		if err := nlRequest(fd, msg); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("configure NFLOG group %d: %w", group, err)
		}
	}
	// Non-blocking and owned by os.File, reads go through the runtime's
	// poller, and Close wakes a pending read.
	return &nflog{f: os.NewFile(uintptr(fd), "nflog")}, nil
}

func (n *nflog) Close() error { return n.f.Close() }

// loggedPacket is what a refused packet says about its connection.
type loggedPacket struct {
	dst   netip.AddrPort
	proto string
}

func (p loggedPacket) String() string {
	if p.dst.Port() == 0 {
		return fmt.Sprintf("%s/%s", p.dst.Addr(), p.proto)
	}
	return fmt.Sprintf("%s/%s", p.dst, p.proto)
}

// read blocks for the next batch of logged packets.
func (n *nflog) read(buf []byte) ([]loggedPacket, error) {
	k, err := n.f.Read(buf)
	if err != nil {
		return nil, err
	}
	var out []loggedPacket
	b := buf[:k]
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			break
		}
		if typ == nfnlSubsysULOG<<8|nfulnlMsgPacket && l >= unix.NLMSG_HDRLEN+4 {
			if p, ok := parseLogged(b[unix.NLMSG_HDRLEN+4 : l]); ok {
				out = append(out, p)
			}
		}
		b = b[min(nlAlign(l), len(b)):]
	}
	return out, nil
}

// parseLogged finds the payload attribute and reads the IPv4 packet's
// destination from it.
func parseLogged(attrs []byte) (loggedPacket, bool) {
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs[0:2]))
		typ := binary.NativeEndian.Uint16(attrs[2:4]) & nlaTypeMask
		if l < 4 || l > len(attrs) {
			return loggedPacket{}, false
		}
		if typ == nfulaPayload {
			return parseIPv4(attrs[4:l])
		}
		attrs = attrs[min(nlAlign(l), len(attrs)):]
	}
	return loggedPacket{}, false
}

func parseIPv4(pkt []byte) (loggedPacket, bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return loggedPacket{}, false
	}
	ihl := int(pkt[0]&0x0f) * 4
	dst := netip.AddrFrom4([4]byte(pkt[16:20]))
	var proto string
	switch pkt[9] {
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_UDP:
		proto = "udp"
	case unix.IPPROTO_ICMP:
		proto = "icmp"
	default:
		proto = fmt.Sprintf("proto-%d", pkt[9])
	}
	var port uint16
	if (proto == "tcp" || proto == "udp") && len(pkt) >= ihl+4 {
		port = binary.BigEndian.Uint16(pkt[ihl+2 : ihl+4])
	}
	return loggedPacket{dst: netip.AddrPortFrom(dst, port), proto: proto}, true
}

// watchDenials turns packets the rules refused into denial events.
func (s *slotGateway) watchDenials() {
	buf := make([]byte, nflogReceiveBuffer)
	for {
		pkts, err := s.nflog.read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			if errors.Is(err, unix.ENOBUFS) {
				continue // the kernel dropped some; carry on with the rest
			}
			s.g.log.Warn("denial log", "sandbox", s.id, "err", err)
			return
		}
		for _, p := range pkts {
			s.denied("connection to %s (address not allowed)", p)
		}
	}
}

func nlAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

func attr(typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b := make([]byte, nlAlign(l))
	binary.NativeEndian.PutUint16(b[0:2], uint16(l))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	copy(b[4:], data)
	return b
}

func nflogConfig(group uint16, attrs ...[]byte) []byte {
	body := []byte{unix.AF_UNSPEC, nfnetlinkV0, byte(group >> 8), byte(group)}
	for _, a := range attrs {
		body = append(body, a...)
	}
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(msg[0:4], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(msg[4:6], nfnlSubsysULOG<<8|nfulnlMsgConfig)
	binary.NativeEndian.PutUint16(msg[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:12], 1)
	return append(msg, body...)
}

// nlRequest sends msg and waits for the kernel's acknowledgement. The
// socket is still blocking-free here, so it polls for the answer.
func nlRequest(fd int, msg []byte) error {
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 2000); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			return errors.New("no answer from the kernel")
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		if n < unix.NLMSG_HDRLEN {
			continue
		}
		if binary.NativeEndian.Uint16(buf[4:6]) != unix.NLMSG_ERROR || n < unix.NLMSG_HDRLEN+4 {
			continue
		}
		if errno := int32(binary.NativeEndian.Uint32(buf[unix.NLMSG_HDRLEN:])); errno != 0 {
			return unix.Errno(-errno)
		}
		return nil
	}
}
