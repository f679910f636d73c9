package redteam

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/space-platform/space/pkg/apiv1"
)

func processAttempts() []Attempt {
	return []Attempt{
		{
			Name: "see host processes", Category: Process, Tools: []string{"ps"},
			Expected: "only the sandbox's processes", Escape: "seeing the host's process table (runsc, the server, the sentinel)",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `ps -eo pid,user,args
cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '; echo
hits=$(ps -eo args | grep -E 'runsc|qemu|space serve|containerd|sshd|systemd' | grep -v grep | head -3)
[ -n "$hits" ] && escaped "host processes visible: $hits"
[ -n "$VICTIM_VMM_PID" ] && grep -qs qemu /proc/$VICTIM_VMM_PID/cmdline && escaped "the victim's QEMU (host pid $VICTIM_VMM_PID) is visible"
[ -n "$SENTINEL_PID" ] && [ -r /proc/$SENTINEL_PID/cmdline ] && grep -q sleep /proc/$SENTINEL_PID/cmdline && escaped "the host sentinel $SENTINEL_PID is visible"
blocked "$(ps -e --no-headers | wc -l) processes visible, PID 1 is $(tr '\0' ' ' </proc/1/cmdline)"`)
			},
		},
		{
			Name: "see the victim sandbox's processes and files", Category: Process, Tools: []string{"ps", "find"},
			Expected: "nothing of the victim", Escape: "one sandbox seeing another's processes or files",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `ps -eo args; find / -xdev -name 'victim-secret' 2>/dev/null
grep -rs "$VICTIM_ID" /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | head -3
blocked "no victim process or file visible ($(find / -xdev -name 'victim-secret' 2>/dev/null | wc -l) matches)"`)
			},
		},
		{
			Name: "ptrace host processes", Category: Process,
			Expected: "no such process", Escape: "attaching a debugger to a host process",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, `
libc = ctypes.CDLL(None, use_errno=True)
res = []
for pid in [env("RUNNER_PID"), env("SENTINEL_PID")]:
    if not pid: continue
    r = libc.ptrace(16, int(pid), 0, 0)  # PTRACE_ATTACH
    if r == 0:
        try: cmd = open("/proc/%s/cmdline" % pid).read().replace("\0", " ")
        except OSError: cmd = "?"
        print("attached", pid, cmd)
        libc.ptrace(17, int(pid), 0, 0)
        res.append("%s:attached to sandbox process %s" % (pid, cmd))
    else:
        res.append("%s:%s" % (pid, errno.errorcode.get(ctypes.get_errno())))
blocked(" ".join(res) + " (a host attach would show the host's command line)")`)
			},
		},
		{
			Name: "signal host processes by pid", Category: Process,
			Expected: "no such process", Escape: "stopping or killing a host process",
			Run: func(ctx context.Context, s *Scene) Verdict {
				// SIGSTOP, not SIGKILL: the runner itself is a target, and a
				// stopped host sentinel is what the host check looks for.
				return s.sh(ctx, `r=""
for p in $SENTINEL_PID $RUNNER_PID $VICTIM_VMM_PID; do
  if kill -STOP $p 2>/dev/null; then r="$r $p:stopped-a-sandbox-process"; kill -CONT $p; else r="$r $p:$(kill -STOP $p 2>&1 | sed 's/.*: //')"; fi
done
blocked "kill -STOP:$r (host processes are checked from outside)"`)
			},
		},
		{
			Name: "kill every process (kill -9 -1)", Category: Process, Own: &Sandbox{},
			Expected: "only the sandbox's own processes die", Escape: "killing processes outside the sandbox",
			Run: func(ctx context.Context, s *Scene) Verdict {
				res, err := s.exec(ctx, s.Attacker, "root", []string{"/bin/bash", "-c", "sleep 1000 & kill -9 -1; echo done $?"})
				if err != nil {
					return blocked("kill -9 -1 ended the sandbox's command (%v); the host is checked from outside", err)
				}
				return blocked("kill -9 -1 in the sandbox: %s; agent alive: %v", tail(res.Stdout, 60), agentAlive(ctx, s))
			},
		},
		{
			Name: "kill the sandbox's PID 1 (the agent)", Category: Process, Own: &Sandbox{},
			Expected: "only this sandbox is affected", Escape: "a sandbox's death taking the host or others with it",
			Run: func(ctx context.Context, s *Scene) Verdict {
				res, err := s.exec(ctx, s.Attacker, "root", []string{"/bin/sh", "-c", "kill -SEGV 1; kill -TERM 1; kill -9 1; echo sent $?"})
				out := ""
				if res != nil {
					out = tail(res.Stdout+res.Stderr, 80)
				}
				return blocked("signals to PID 1: %s %v; agent alive: %v", out, errOrNil(err), agentAlive(ctx, s))
			},
		},
		{
			Name: "QEMU's QMP and agent sockets on the host", Category: Process,
			Runtimes: []string{"microvm"}, NotOn: "no QMP or agent socket exists for a gVisor sandbox (runsc's are looked for among open descriptors)",
			Expected: "no such path in the guest", Escape: "a guest driving QEMU's monitor or the node's end of an agent channel",
			Run: func(ctx context.Context, s *Scene) Verdict {
				var paths []string
				for _, id := range []string{s.Attacker, s.Victim} {
					for _, f := range []string{"qmp.sock", "agent.sock", "env.json", "console.log"} {
						paths = append(paths, filepath.Join(s.cfg.DataDir, "microvm", id, f))
					}
				}
				return s.py(ctx, `
paths = `+pyList(paths)+`
res = []
for p in paths:
    for pre in ("", "/proc/1/root", "/.space/bin/../../.."):
        q = pre + p
        if q.endswith(".sock"):
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); u.settimeout(2)
            try:
                u.connect(q); u.sendall(b'{"execute": "qmp_capabilities"}\n')
                escaped("connected to %s: %r" % (q, u.recv(200)))
            except OSError as e: res.append(errno.errorcode.get(e.errno, "?"))
            finally: u.close()
        else:
            try: escaped("read %s: %r" % (q, open(q, "rb").read(200)))
            except OSError as e: res.append(errno.errorcode.get(e.errno, "?"))
pid = env("VICTIM_VMM_PID")
try:
    cmd = open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ")
    if b"qemu" in cmd: escaped("the victim's QEMU is visible: %r" % cmd[:200])
    res.append("pid %s is a guest process: %r" % (pid, cmd[:40]))
except OSError as e: res.append("pid %s:%s" % (pid, errno.errorcode.get(e.errno, "?")))
blocked("%d host paths of QEMU tried: %s" % (len(paths), ", ".join(sorted(set(res)))))`)
			},
		},
		{
			Name: "chroot breakout", Category: Process,
			Expected: "still the sandbox's root", Escape: "leaving the root directory (classic double chroot)",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, `
os.makedirs("/tmp/rt-chroot", exist_ok=True)
real = os.open("/", os.O_RDONLY)
os.chroot("/tmp/rt-chroot")
os.fchdir(real)
for _ in range(64): os.chdir("..")
os.chroot(".")
try:
    data = open(env("CANARY_PATH")).read()
    escaped("read the host canary after chroot: " + data)
except OSError as e:
    blocked("after the breakout / is %s; canary: %s" % (sorted(os.listdir("/"))[:6], e.strerror))`)
			},
		},
		{
			Name: "nsenter the namespaces of PID 1", Category: Process, Tools: []string{"nsenter"},
			Expected: "the sandbox's own namespaces", Escape: "entering the host's namespaces",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `out=$(nsenter -t 1 -m -u -i -n -p sh -c 'cat /proc/version; cat /proc/sys/kernel/random/boot_id; cat "$CANARY_PATH"' 2>&1)
echo "$out"
case "$out" in *space-redteam-canary*) escaped "canary read after nsenter";; esac
blocked "nsenter gives $(echo "$out" | head -1 | cut -c1-50)"`)
			},
		},
	}
}

// agentAlive reports whether the attempt's sandbox still runs commands.
func agentAlive(ctx context.Context, s *Scene) bool {
	res, err := s.api.Exec(ctx, s.Attacker, apiv1.ExecRequest{Cmd: []string{"true"}, TimeoutS: 10})
	return err == nil && res.ExitCode == 0
}

func errOrNil(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("(%v)", err)
}

// pyList renders strings as a Python list literal.
func pyList(items []string) string {
	q := make([]string, len(items))
	for i, it := range items {
		q[i] = strconv.Quote(it)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
