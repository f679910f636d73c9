package microvm

import (
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// tapName is the guest's tap device inside the sandbox's namespace.
const tapName = "tap0"

// attachTap makes a tap device inside the network namespace at nsPath and
// joins it to the namespace's veth by tc mirred redirects in both
// directions, so every frame the gateway sends to the veth reaches the
// guest and every frame of the guest leaves by the veth: the guest takes
// the veth's place in the slot. It returns the tap's file (for QEMU's
// -netdev tap,fd=) and the veth's MAC, which the guest adopts (or, given
// mac, sets the veth's MAC to it: a restored guest keeps the MAC it was
// saved with).
func attachTap(nsPath, veth string, mac net.HardwareAddr) (*os.File, net.HardwareAddr, error) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, nil, fmt.Errorf("tap: open namespace: %w", err)
	}
	defer ns.Close()
	tap, err := openTapIn(ns)
	if err != nil {
		return nil, nil, err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		tap.Close()
		return nil, nil, fmt.Errorf("tap: netlink: %w", err)
	}
	defer h.Close()
	mac, err = redirect(h, veth, mac)
	if err != nil {
		tap.Close()
		return nil, nil, err
	}
	return tap, mac, nil
}

// openTapIn opens /dev/net/tun on a thread inside ns: a tap device
// belongs to the namespace of the thread that creates it.
func openTapIn(ns netns.NsHandle) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		// The thread is never unlocked: if it cannot go back to the
		// host's namespace it must die with the goroutine, not serve
		// others.
		orig, err := netns.Get()
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			ch <- result{nil, fmt.Errorf("tap: enter namespace: %w", err)}
			return
		}
		f, err := createTap()
		if netns.Set(orig) == nil {
			goruntime.UnlockOSThread()
		}
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

func createTap() (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tap: open tun: %w", err)
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:], tapName)
	// IFF_VNET_HDR lets QEMU pass checksum and segmentation offloads
	// through; it finds the flag on the fd itself.
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("tap: TUNSETIFF: %w", e)
	}
	return os.NewFile(uintptr(fd), tapName), nil
}

// redirect joins the tap and the veth with ingress mirred redirects. An
// earlier guest's qdiscs are replaced, so it may run again in a slot.
func redirect(h *netlink.Handle, veth string, mac net.HardwareAddr) (net.HardwareAddr, error) {
	vl, err := h.LinkByName(veth)
	if err != nil {
		return nil, fmt.Errorf("tap: find %s: %w", veth, err)
	}
	tl, err := h.LinkByName(tapName)
	if err != nil {
		return nil, fmt.Errorf("tap: find %s: %w", tapName, err)
	}
	if mac != nil && vl.Attrs().HardwareAddr.String() != mac.String() {
		if err := h.LinkSetHardwareAddr(vl, mac); err != nil {
			return nil, fmt.Errorf("tap: set %s's MAC: %w", veth, err)
		}
	} else {
		mac = vl.Attrs().HardwareAddr
	}
	if err := h.LinkSetMTU(tl, vl.Attrs().MTU); err != nil {
		return nil, fmt.Errorf("tap: MTU: %w", err)
	}
	for _, pair := range [][2]netlink.Link{{vl, tl}, {tl, vl}} {
		from, to := pair[0], pair[1]
		qd := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: from.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}
		_ = h.QdiscDel(qd)
		if err := h.QdiscAdd(qd); err != nil {
			return nil, fmt.Errorf("tap: ingress qdisc on %s: %w", from.Attrs().Name, err)
		}
		// A u32 filter without a selector matches every frame; u32 is
		// built into more kernels than matchall (this project's hosts
		// have no matchall).
		filter := &netlink.U32{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: from.Attrs().Index, Parent: netlink.MakeHandle(0xffff, 0), Priority: 1, Protocol: unix.ETH_P_ALL},
			Actions:     []netlink.Action{netlink.NewMirredAction(to.Attrs().Index)},
		}
		if err := h.FilterAdd(filter); err != nil {
			return nil, fmt.Errorf("tap: redirect %s to %s: %w", from.Attrs().Name, to.Attrs().Name, err)
		}
	}
	if err := h.LinkSetUp(tl); err != nil {
		return nil, fmt.Errorf("tap: bring up: %w", err)
	}
	if err := h.LinkSetUp(vl); err != nil {
		return nil, fmt.Errorf("tap: bring up %s: %w", veth, err)
	}
	return mac, nil
}

// detachTap removes the veth's redirect; the tap itself vanishes with
// QEMU, which holds its only file.
func detachTap(nsPath, veth string) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return
	}
	defer h.Close()
	for _, name := range []string{veth, tapName} {
		if l, err := h.LinkByName(name); err == nil {
			_ = h.QdiscDel(&netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}})
		}
		if name == tapName {
			if l, err := h.LinkByName(name); err == nil {
				_ = h.LinkDel(l)
			}
		}
	}
}
