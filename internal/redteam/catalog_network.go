package redteam

import "context"

// probeAll is a Python helper: connect to every target in parallel and
// escape on any that accepts; otherwise summarise the refusals.
const probeAll = `
import concurrent.futures
def probe_all(targets, what, timeout=3):
    targets = [t for t in targets if t[0]]
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda t: (t, connect(t[0], t[1], timeout)), targets))
    got = ["%s:%s %s" % (t[0], t[1], r) for t, r in results if r.startswith("connected")]
    if got: escaped(what + " reached: " + "; ".join(got[:5]))
    counts = {}
    for _, r in results: counts[r] = counts.get(r, 0) + 1
    blocked("%d %s targets: %s" % (len(targets), what, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
host_addrs = [a for a in env("HOST_ADDRS").split() if a]
ports = [p for p in [env("API_PORT"), env("HOST_PORT"), "22", "3000", "3001", "7070"] if p]
`

// controlled runs a network attempt after proving that the attacker does
// reach its allowed address, so that refusals are policy, not a dead
// uplink.
func controlled(script string) func(ctx context.Context, s *Scene) Verdict {
	return func(ctx context.Context, s *Scene) Verdict {
		if s.cfg.Reach != "" {
			if v := s.py(ctx, `
h, p = env("REACH").rsplit(":", 1)
r = connect(h.strip("[]"), p)
if r.startswith("connected"): blocked("control reached")
else: print("control:", r)`); v.Outcome != Blocked {
				return failed("the attacker cannot reach its allowed address %s, so refusals prove nothing: %s", s.cfg.Reach, v.Evidence)
			}
		}
		return s.py(ctx, probeAll+script)
	}
}

func networkAttempts() []Attempt {
	return []Attempt{
		{
			Name: "the API server on the sandbox's loopback", Category: Network,
			Expected: "refused (the sandbox's own loopback)", Escape: "reaching the control plane from inside",
			Run: controlled(`probe_all([("127.0.0.1", p) for p in ports] + [("::1", p) for p in ports] + [("0.0.0.0", env("API_PORT"))], "loopback")`),
		},
		{
			Name: "every host address on service ports", Category: Network,
			Expected: "refused", Escape: "connecting to the host (API, E2B API, proxy, SSH, a host listener)",
			Run: controlled(`probe_all([(a, p) for a in host_addrs + [env("UPLINK_HOST")] for p in ports], "host")`),
		},
		{
			Name: "cloud metadata 169.254.169.254", Category: Network,
			Expected: "refused", Escape: "reading cloud instance metadata (credentials)",
			Run: controlled(`probe_all([("169.254.169.254", 80), ("169.254.169.254", 443), ("169.254.170.2", 80), ("fd00:ec2::254", 80)], "metadata")`),
		},
		{
			Name: "services on the gateway", Category: Network,
			Expected: "refused", Escape: "a connection to the slot's gateway namespace",
			Run: controlled(`probe_all([("169.254.0.22", p) for p in ports + ["49983", "8080", "10250"]] + [(env("UPLINK_GW"), p) for p in ports + ["49983"]], "gateway")`),
		},
		{
			Name: "the victim's uplink and agent port", Category: Network,
			Expected: "refused", Escape: "one sandbox connecting to another",
			Run: controlled(`probe_all([(a, p) for a in (env("VICTIM_HOST"), env("VICTIM_GW")) for p in ["49983", "80", "22", env("HOST_PORT")]], "victim")`),
		},
		{
			Name: "scan the uplink pool", Category: Network,
			Expected: "refused", Escape: "reaching any other sandbox's slot",
			Run: controlled(`
import random
base = [int(x) for x in (env("UPLINK_HOST") or "10.200.0.1").split(".")]
targets = [("%d.%d.%d.%d" % (base[0], base[1], random.randrange(256), random.randrange(64) * 4 + random.choice((1, 2))), "49983") for _ in range(48)]
targets += [("%d.%d.0.1" % (base[0], base[1]), "49983"), ("%d.%d.0.2" % (base[0], base[1]), "49983")]
probe_all(targets, "pool", timeout=2)`),
		},
		{
			Name: "private ranges", Category: Network,
			Expected: "refused", Escape: "reaching the operator's private network",
			Run: controlled(`probe_all([(a, p) for a in ("10.0.0.1", "172.16.0.1", "172.17.0.1", "192.168.0.1", "192.168.1.1", "100.64.0.1", "198.18.0.1") for p in ("80", "22")], "private")`),
		},
		{
			Name: "IPv6: host loopback, link-local, multicast", Category: Network,
			Expected: "no IPv6 path", Escape: "reaching the host or neighbours over IPv6",
			Run: controlled(`
v6 = [a for a in host_addrs if ":" in a and not a.startswith("fe80")]
probe_all([(a, p) for a in v6 + ["fe80::1%eth0", "fe80::2%eth0", "ff02::1%eth0", "2001:db8::1"] for p in ports], "ipv6", timeout=2)`),
		},
		{
			Name: "UDP and ICMP to the host", Category: Network,
			Expected: "nothing arrives", Escape: "a datagram reaching the host",
			Run: func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, probeAll+`
sent = 0
for a in host_addrs + [env("UPLINK_HOST"), env("UPLINK_GW"), "169.254.0.22"]:
    if not a: continue
    fam = socket.AF_INET6 if ":" in a else socket.AF_INET
    try:
        u = socket.socket(fam, socket.SOCK_DGRAM); u.sendto(b"space-redteam", (a, int(env("HOST_PORT")))); u.close(); sent += 1
    except OSError as e: print("udp", a, e)
pings = []
for a in [x for x in host_addrs if ":" not in x] + [env("UPLINK_HOST")]:
    try:
        ic = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); ic.settimeout(1)
        ic.sendto(struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"rt", (a, 0))
        try: ic.recvfrom(64); escaped("ICMP echo reply from " + a)
        except socket.timeout: pings.append(a + ":no-reply")
        except OSError as e: pings.append(a + ":" + errno.errorcode.get(e.errno, "?"))
    except OSError as e: pings.append("icmp-socket:" + errno.errorcode.get(e.errno, "?")); break
blocked("%d UDP datagrams sent (the host listener checks none arrived); ping %s" % (sent, " ".join(pings[:4])))`)
			},
		},
		{
			Name: "raw IP sockets", Category: Network,
			Expected: "EPERM", Escape: "crafting arbitrary packets (spoofing, scanning below TCP)",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, `
r = []
for name, fam, typ, proto in [("raw", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW), ("icmp-raw", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                              ("tcp-raw", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP), ("raw6", socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)]:
    try:
        socket.socket(fam, typ, proto).close(); escaped(name + " socket created")
    except OSError as e: r.append(name + ":" + errno.errorcode.get(e.errno, "?"))
blocked(" ".join(r))`)
			}),
		},
		{
			Name: "ARP and Ethernet frames (AF_PACKET)", Category: Network,
			Expected: "EPERM", Escape: "spoofing the gateway's or a neighbour's MAC address",
			Run: guestKernel(func(ctx context.Context, s *Scene) Verdict {
				return s.py(ctx, `
try:
    p = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
    p.bind(("eth0", 0))
    arp = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + b"\x02\x00\x00\x00\x00\x01" + socket.inet_aton("169.254.0.22") + b"\xff" * 6 + socket.inet_aton("169.254.0.22")
    p.send(arp)
    escaped("sent a gratuitous ARP claiming the gateway's address")
except OSError as e:
    blocked("AF_PACKET: " + errno.errorcode.get(e.errno, "?"))`)
			}),
		},
		{
			Name: "vsock to the host (CID 2) and other guests", Category: Network,
			Expected: "no vsock, or refused", Escape: "a guest talking to host services or other guests over vsock, outside the network policy",
			Run: func(ctx context.Context, s *Scene) Verdict {
				// The node's agent channel is a vsock only where the host
				// has /dev/vhost-vsock; a guest then has a vsock device,
				// and every CID but its own must be out of reach.
				return s.py(ctx, `
if not hasattr(socket, "AF_VSOCK"):
    blocked("this Python has no AF_VSOCK"); sys.exit(0)
dev = "present" if os.path.exists("/dev/vsock") else "absent"
try:
    probe = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); probe.close()
except OSError as e:
    blocked("/dev/vsock %s; AF_VSOCK socket: %s" % (dev, errno.errorcode.get(e.errno, "?"))); sys.exit(0)
import concurrent.futures
def vconnect(t):
    v = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); v.settimeout(2)
    try:
        v.connect(t); return "connected"
    except socket.timeout: return "timeout"
    except OSError as e: return errno.errorcode.get(e.errno, "?")
    finally: v.close()
# The guest's own CID (and 1, the local loopback) reach its own agent.
own = None
try:
    import fcntl
    fd = os.open("/dev/vsock", os.O_RDONLY)
    own = struct.unpack("I", fcntl.ioctl(fd, 0x7b9, b"\0" * 4))[0]  # IOCTL_VM_SOCKETS_GET_LOCAL_CID
    os.close(fd)
except OSError: pass
first = vconnect((2, 49983))
if first == "connected": escaped("connected to the host's vsock CID 2 port 49983")
if first == "ENODEV":
    # A vsock driver and no transport: no CID is reachable.
    blocked("/dev/vsock %s (own CID %s), but no transport: CID 2 gives ENODEV" % (dev, own)); sys.exit(0)
cids = [c for c in [2, 0, 0xffffffff] + list(range(3, 20)) if c != own]
targets = [(cid, port) for cid in cids for port in (49983, 1024, 22)]
with concurrent.futures.ThreadPoolExecutor(16) as pool:
    got = list(pool.map(vconnect, targets))
for t, r in zip(targets, got):
    if r == "connected": escaped("connected to vsock CID %d port %d" % t)
res = {}
for r in got: res[r] = res.get(r, 0) + 1
try:
    d = socket.socket(socket.AF_VSOCK, socket.SOCK_DGRAM); d.sendto(b"space-redteam", (2, 9999)); res["dgram-sent"] = 1
except OSError as e: res["dgram:" + errno.errorcode.get(e.errno, "?")] = 1
blocked("/dev/vsock %s (own CID %s); %s" % (dev, own, ", ".join("%s %d" % kv for kv in sorted(res.items()))))`)
			},
		},
		{
			Name: "spoofed source address", Category: Network, Requires: []Feature{FeatureReach},
			Expected: "dropped by the gateway", Escape: "traffic leaving the slot from an address other than the sandbox's",
			Run: controlled(`
h, p = env("REACH").rsplit(":", 1)
res = []
for src in ("169.254.0.99", "10.9.9.9", env("VICTIM_HOST") or "10.200.0.5", "203.0.113.77"):
    s = socket.socket(); s.settimeout(3)
    try:
        s.setsockopt(socket.SOL_IP, 15, 1)  # IP_FREEBIND
        try: s.setsockopt(socket.SOL_IP, 19, 1)  # IP_TRANSPARENT
        except OSError: pass
        s.bind((src, 0)); s.connect((h, int(p)))
        escaped("connected to %s from spoofed %s" % (env("REACH"), src))
    except socket.timeout: res.append(src + ":timeout")
    except OSError as e: res.append(src + ":" + errno.errorcode.get(e.errno, "?"))
    finally: s.close()
blocked("spoofed sources: " + " ".join(res))`),
		},
		{
			Name: "a public address outside the policy", Category: Network, Requires: []Feature{FeatureReach, FeatureUnallowed},
			Expected: "refused", Escape: "egress the policy does not allow",
			Run: controlled(`
h, p = env("UNALLOWED").rsplit(":", 1)
probe_all([(h.strip("[]"), p), (h.strip("[]"), "443"), ("8.8.8.8", "443"), ("1.1.1.1", "80")], "outside the policy")`),
		},
	}
}
