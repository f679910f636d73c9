package redteam

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// sandboxGone reports whether the attempt's sandbox is no longer running,
// and why.
func sandboxGone(ctx context.Context, s *Scene) (bool, string) {
	sb, err := s.api.GetSandbox(ctx, s.Attacker)
	if err != nil {
		return true, err.Error()
	}
	return sb.State != apiv1.StateRunning, sb.State + " " + sb.Reason
}

func resourceAttempts() []Attempt {
	return []Attempt{
		{
			Name: "fork bomb", Category: Resources, Own: &Sandbox{VCPUs: 1, MemoryMB: 256},
			Expected: "the pids or memory limit stops it", Escape: "the host or its neighbours starved",
			Run: func(ctx context.Context, s *Scene) Verdict {
				res, err := s.exec(ctx, s.Attacker, "root", []string{"/usr/bin/python3", "-c", `
import os, time, sys
n, err = 0, ""
end = time.time() + 15
while time.time() < end:
    try:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
    except OSError as e:
        err = e.strerror; break
print("forked", n, "then", err or "time ran out", flush=True)
os._exit(0)`})
				if err != nil {
					gone, why := sandboxGone(ctx, s)
					return blocked("the sandbox's command ended (%v); sandbox %v %s", err, gone, why)
				}
				return blocked("%s", tail(res.Stdout, 100))
			},
		},
		{
			Name: "memory balloon past memory_mb", Category: Resources, Own: &Sandbox{VCPUs: 1, MemoryMB: 128},
			Expected: "killed or out of memory at 128 MiB", Escape: "memory beyond the sandbox's limit",
			Run: func(ctx context.Context, s *Scene) Verdict {
				res, err := s.exec(ctx, s.Attacker, "root", []string{"/usr/bin/python3", "-c", `
chunks = []
try:
    for i in range(1, 513):
        chunks.append(bytearray(b"\x01" * (1 << 20)))
        if i % 32 == 0: print("MiB", i, flush=True)
    print("ALLOCATED 512", flush=True)
except MemoryError:
    print("MemoryError at", len(chunks), flush=True)`})
				if res != nil && strings.Contains(res.Stdout, "ALLOCATED 512") {
					return escaped("a 128 MiB sandbox held 512 MiB")
				}
				gone, why := sandboxGone(ctx, s)
				last := ""
				if res != nil {
					last = tail(res.Stdout, 60)
				}
				return blocked("stopped at %s %s; sandbox ended: %v %s", last, errOrNil(err), gone, why)
			},
		},
		{
			// Not smaller: the base template's start needs room. An
			// emulated guest writes a few MiB a second, hence the bound.
			Name: "disk fill past disk_mb", Category: Resources, Own: &Sandbox{VCPUs: 1, MemoryMB: 256, DiskMB: 512},
			Expected: "no space left at 512 MiB (EDQUOT under gVisor, ENOSPC in a guest)", Escape: "writing past the disk quota onto the host's disk",
			Timeout: 6 * time.Minute,
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `out=$(dd if=/dev/zero of=/home/user/rt-fill bs=1M count=768 conv=fsync 2>&1); rc=$?
sync; size=$(du -m /home/user/rt-fill 2>/dev/null | cut -f1); rm -f /home/user/rt-fill
[ $rc -eq 0 ] && escaped "wrote ${size} MiB to a 512 MiB volume"
blocked "dd stopped at ${size} MiB: $(echo "$out" | grep -m1 -i -E 'space|quota|error' )"`)
			},
		},
		{
			Name: "file descriptor exhaustion", Category: Resources, Own: &Sandbox{VCPUs: 1, MemoryMB: 256},
			Expected: "EMFILE or the memory limit", Escape: "the host running out of file descriptors",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, `
import time, resource
fds, err, end = [], "time ran out", time.time() + 15
try: resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
except (ValueError, OSError) as e: print("setrlimit", e)
while time.time() < end and len(fds) < 400000:
    try: fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e: err = errno.errorcode.get(e.errno, "?"); break
n = len(fds)
for fd in fds: os.close(fd)
blocked("opened %d descriptors, then %s" % (n, err))`)
			},
		},
		{
			Name: "CPU spin on every vCPU", Category: Resources, Own: &Sandbox{VCPUs: 2, MemoryMB: 256},
			Expected: "the bystander keeps answering", Escape: "one sandbox starving the host's other tenants",
			Timeout: 90 * time.Second,
			Run: func(ctx context.Context, s *Scene) Verdict {
				sess, err := s.api.CreateSession(ctx, s.Attacker, apiv1.CreateSessionRequest{Cmd: []string{"/bin/bash", "-c",
					`for i in $(seq $(( $(nproc) * 4 ))); do timeout 25 bash -c 'while :; do :; done' & done; wait`}})
				if err != nil {
					return failed("start the spin: %v", err)
				}
				s.record(sess.ID)
				time.Sleep(3 * time.Second)
				var worst time.Duration
				for i := 0; i < 5; i++ {
					began := time.Now()
					res, err := s.api.Exec(ctx, s.Bystander, apiv1.ExecRequest{Cmd: []string{"true"}, TimeoutS: 20})
					if err != nil || res.ExitCode != 0 {
						return escaped("the bystander failed to run a command during the spin: %v", err)
					}
					worst = max(worst, time.Since(began))
					time.Sleep(time.Second)
				}
				return blocked("the bystander ran 5 commands during the spin (slowest %s)", worst.Round(time.Millisecond))
			},
		},
		{
			Name: "connection flood", Category: Resources, Own: &Sandbox{VCPUs: 1, MemoryMB: 256},
			Expected: "refused fast; neighbours unaffected", Escape: "exhausting the host's connection tracking or sockets",
			Timeout: 90 * time.Second,
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, `
import time, selectors
targets = [("169.254.0.22", 80), ("203.0.113.99", 80), ("10.0.0.1", 80), ("8.8.8.8", 443)]
if env("REACH"):
    h, p = env("REACH").rsplit(":", 1); targets.append((h, int(p)))
opened, failed, held, end = 0, 0, [], time.time() + 15
while time.time() < end and opened < 20000:
    for t in targets:
        try: s = socket.socket()
        except OSError:
            # The sandbox's own descriptor limit (a guest's is 1024).
            failed += 1
            for x in held[:len(held) // 2]: x.close()
            del held[:len(held) // 2]
            continue
        s.setblocking(False)
        try: s.connect(t)
        except BlockingIOError: pass
        except OSError: failed += 1
        opened += 1
        held.append(s)
        if len(held) > 2000:
            for x in held[:1000]: x.close()
            del held[:1000]
for x in held: x.close()
blocked("%d connection attempts in 15 s (%d failed at once); the neighbours are checked from outside" % (opened, failed))`)
			},
		},
		{
			Name: "exec output flood", Category: Resources,
			Expected: "the server bounds what it buffers", Escape: "a sandbox making the server hold unbounded output in memory",
			Timeout: 90 * time.Second,
			Run: func(ctx context.Context, s *Scene) Verdict {
				const mib = 64
				res, err := s.api.Exec(ctx, s.Attacker, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c",
					fmt.Sprintf("head -c %d /dev/zero | tr '\\0' A", mib<<20)}, TimeoutS: 60})
				if err != nil {
					return blocked("the server refused to buffer %d MiB: %v", mib, err)
				}
				if got := len(res.Stdout); got >= mib<<20 {
					return escaped("one exec call made the server buffer all %d MiB of the sandbox's output (no bound; the sandbox chooses the size)", got>>20)
				} else {
					return blocked("the server returned %d of %d MiB", got>>20, mib)
				}
			},
		},
	}
}
