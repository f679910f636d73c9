package network

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/space-platform/space/internal/hostpath"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LegacyDir is where slots' namespace files lived before each node had a
// directory of its own: the directory of `ip netns`, shared with every
// other tool on the host. Slots found there (sandboxes that ran across an
// upgrade) are still used and removed, never made.
const LegacyDir = "/run/netns"

// Namespaces is the directory a node keeps its slots' network namespace
// files in (normally <data-dir>/netns).
//
// A named namespace is an nsfs bind mount on an empty file. Keeping them
// in /run/netns broke as soon as another tool ran `ip netns add`: that
// bind-mounts /run/netns onto itself recursively, which copies every
// namespace mount already there and hides the originals beneath the copy.
// Unmounting then reaches only the copy, the file stays busy for good and
// the namespace lives on (DELETE of the sandbox failed forever, and `ip
// link` printed "Peer netns reference is invalid" for the stale file).
//
// So the directory is a mount of its own, made unbindable: mount events
// neither propagate into it nor out of it, and a recursive bind of any
// directory above it (ip netns, container runtimes) leaves it and the
// namespace mounts in it out of the copy. Only this node mounts there.
type Namespaces struct {
	dir string
}

// OpenNamespaces makes dir (if need be) and turns it into an unbindable
// mount of itself. It is idempotent: a restarted node reopens the same
// directory and finds the slots of the sandboxes it adopts.
func OpenNamespaces(dir string) (*Namespaces, error) {
	return openNamespaces(dir, unix.MS_UNBINDABLE)
}

// OpenSharedNamespaces is OpenNamespaces for a node whose successor runs
// in another mount namespace: a node container restarted by Kubernetes,
// whose data dir is a host path mounted with Bidirectional propagation.
// An unbindable directory would be left out of the new container's copy
// of the host path, its namespace files empty there, and the sandboxes
// unreachable. A shared one propagates its namespace mounts to the host
// and into the next container, and their unmounts too. dir must be on a
// shared mount, and no `ip netns`-style recursive self-bind may cover it
// (the chart's data dir is the node's alone).
func OpenSharedNamespaces(dir string) (*Namespaces, error) {
	return openNamespaces(dir, unix.MS_SHARED)
}

func openNamespaces(dir string, propagation uintptr) (*Namespaces, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("network namespace directory: %w", err)
	}
	root, err := isMountRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("network namespace directory: %w", err)
	}
	if !root {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("network namespace directory: bind mount: %w", err)
		}
	}
	// Also when it was a mount already: whatever changed its propagation
	// since (a `mount --make-rshared /`) is undone.
	if err := unix.Mount("", dir, "", propagation, ""); err != nil {
		return nil, fmt.Errorf("network namespace directory: set propagation: %w", err)
	}
	return &Namespaces{dir: dir}, nil
}

// Dir is the directory the namespace files are in.
func (n *Namespaces) Dir() string { return n.dir }

// Close unmounts the directory. Namespaces still in it lose their files;
// a node never calls it (its slots outlive it), tests and uninstalls do.
func (n *Namespaces) Close() error {
	if err := unix.Unmount(n.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace directory: %w", err)
	}
	return nil
}

// Slot returns the slot that belongs to name, whether or not it exists. A
// slot left in LegacyDir by an older version is used where it is.
func (n *Namespaces) Slot(name string) *Slot {
	s := n.slot(name)
	if !s.Sandbox.exists() && s.stale[0].exists() {
		return &Slot{Name: name, Sandbox: s.stale[0], Gateway: s.stale[1], stale: []Namespace{s.Sandbox, s.Gateway}}
	}
	return s
}

// slot is name's slot in the directory, with its files in LegacyDir to
// remove along with it.
func (n *Namespaces) slot(name string) *Slot {
	s, legacy := slotIn(n.dir, name), slotIn(LegacyDir, name)
	s.stale = []Namespace{legacy.Sandbox, legacy.Gateway}
	return s
}

// Names lists the slots that have any namespace file in the directory,
// complete or not: what a sweep looks at. The directory belongs to this
// node alone, so all of them are its own.
func (n *Namespaces) Names() ([]string, error) {
	return slotNames(n.dir)
}

// LegacyNames lists the slots in LegacyDir. That directory is host-wide,
// so they may belong to other installations: a sweep removes only those
// of sandboxes it knows.
func LegacyNames() ([]string, error) {
	return slotNames(LegacyDir)
}

func slotNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	seen := map[string]bool{}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, gatewaySuffix)
		if name != "" && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names, nil
}

// Namespace is one named network namespace of a slot. Name is what
// messages say (it is no host path, so an error may reach a client); Path
// is the nsfs file.
type Namespace struct {
	Name string
	Path string
	// legacy is set for a file in LegacyDir.
	legacy bool
}

// Open returns a handle on the namespace; the caller closes it.
func (ns Namespace) Open() (netns.NsHandle, error) {
	h, err := netns.GetFromPath(ns.Path)
	if err != nil {
		return 0, fmt.Errorf("open netns %s: %w", ns.Name, hostpath.Pathless(err))
	}
	return h, nil
}

// Do runs fn on a thread inside the namespace (see InNamespace).
func (ns Namespace) Do(fn func() error) error {
	h, err := ns.Open()
	if err != nil {
		return err
	}
	defer h.Close()
	return InNamespace(h, fn)
}

func (ns Namespace) exists() bool {
	_, err := os.Stat(ns.Path)
	return err == nil
}

// create makes a new network namespace and pins it at ns.Path. The file
// must not exist: a leftover is removed first, by whoever knows it is one.
func (ns Namespace) create() (netns.NsHandle, error) {
	f, err := os.OpenFile(ns.Path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return 0, fmt.Errorf("create netns %s: %w", ns.Name, hostpath.Pathless(err))
	}
	f.Close()
	type result struct {
		h   netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread enters the new namespace and is never unlocked, so
		// it is discarded when this goroutine ends rather than reused in
		// the wrong namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("unshare: %w", err)}
			return
		}
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, ns.Path, "", unix.MS_BIND, ""); err != nil {
			done <- result{err: fmt.Errorf("bind mount: %w", err)}
			return
		}
		h, err := netns.GetFromPath(self)
		done <- result{h, err}
	}()
	r := <-done
	if r.err != nil {
		_ = ns.remove()
		return 0, fmt.Errorf("create netns %s: %w", ns.Name, hostpath.Pathless(r.err))
	}
	return r.h, nil
}

// Attempts and pause of remove's retries on a busy file.
const (
	removeAttempts = 20
	removePause    = 25 * time.Millisecond
)

// remove unmounts the namespace file (every mount stacked on it) and
// deletes it. A file that is gone, or no longer a mount, counts as done;
// EBUSY, which a mount being torn down elsewhere can cause for a moment,
// is retried.
//
// A file in LegacyDir that stays busy is pinned by a mount that `ip netns
// add` hid beneath its bind of that directory, out of this node's reach.
// Failing for it would fail the sandbox's deletion forever, so it is left
// to the host's next reboot (or an `umount /run/netns`).
func (ns Namespace) remove() error {
	var err error
	for attempt := 0; attempt < removeAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(removePause)
		}
		if err = unmountAll(ns.Path); err != nil {
			continue
		}
		err = os.Remove(ns.Path)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	if ns.legacy && errors.Is(err, unix.EBUSY) {
		return nil
	}
	return fmt.Errorf("delete netns %s: %w", ns.Name, hostpath.Pathless(err))
}

// unmountAll detaches every mount on path until none is left.
func unmountAll(path string) error {
	// A bound on stacked mounts, so a kernel that keeps answering success
	// cannot hold the caller forever.
	for i := 0; i < 64; i++ {
		err := unix.Unmount(path, unix.MNT_DETACH)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not a mount (any more), or no file at all
		default:
			return err
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 64 unmounts", filepath.Base(path))
}

// isMountRoot reports whether path is the root of a mount.
func isMountRoot(path string) (bool, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st); err != nil {
		return false, fmt.Errorf("statx: %w", hostpath.Pathless(err))
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, errors.New("the kernel does not tell mount roots (statx needs Linux 5.8)")
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}
