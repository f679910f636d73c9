package redteam

import "context"

// dnsQuery is a Python helper that asks a resolver for A records over UDP
// or TCP and returns (rcode, addresses) or an error string.
const dnsQuery = `
import random
def dns_query(server, name, tcp=False, timeout=3):
    qid = random.randrange(65536)
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack("!HH", 1, 1)
    fam = socket.AF_INET6 if ":" in server else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        if tcp:
            s.connect((server, 53)); s.sendall(struct.pack("!H", len(q)) + q)
            n = struct.unpack("!H", s.recv(2))[0]; resp = b""
            while len(resp) < n:
                chunk = s.recv(n - len(resp))
                if not chunk: break
                resp += chunk
        else:
            s.sendto(q, (server, 53)); resp = s.recv(4096)
    except socket.timeout: return "timeout", []
    except OSError as e: return errno.errorcode.get(e.errno, "?"), []
    finally: s.close()
    rcode = resp[3] & 15
    an = struct.unpack("!H", resp[6:8])[0]
    i = 12
    while resp[i] != 0: i += resp[i] + 1
    i += 5
    addrs = []
    for _ in range(an):
        if resp[i] & 0xc0 == 0xc0: i += 2
        else:
            while resp[i] != 0: i += resp[i] + 1
            i += 1
        typ, _, _, ln = struct.unpack("!HHIH", resp[i:i+10]); i += 10
        if typ == 1: addrs.append(socket.inet_ntoa(resp[i:i+4]))
        i += ln
    return ["NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"][rcode] if rcode < 6 else str(rcode), addrs
`

// inOpenBox runs a Python script in the sandbox whose policy allows the
// internet but denies Config.DeniedName: the policy where a DNS bypass
// matters.
func inOpenBox(script string) func(ctx context.Context, s *Scene) Verdict {
	return func(ctx context.Context, s *Scene) Verdict {
		return s.judge(s.exec(ctx, s.openBox, "root", []string{"/usr/bin/python3", "-c", pyPrelude + dnsQuery + script}))
	}
}

func dnsAttempts() []Attempt {
	needNames := []Feature{FeatureDomainRules, FeatureNames}
	return []Attempt{
		{
			Name: "resolve a denied name", Category: DNS, Requires: needNames,
			Expected: "NXDOMAIN", Escape: "an address for a name the policy denies",
			Run: inOpenBox(`
d = env("DENIED_NAME")
got = []
for name in (d, d + ".", d.upper(), "www." + d if not d.startswith("*") else d):
    try:
        addrs = sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
        got.append("%s:%s" % (name, addrs))
        if name.lower().rstrip(".") == d.lower(): escaped("%s resolved to %s" % (name, addrs))
    except socket.gaierror as e: got.append("%s:%s" % (name, e.strerror))
blocked(" ".join(got))`),
		},
		{
			Name: "a rogue resolver over UDP 53", Category: DNS, Requires: needNames,
			Expected: "the gateway answers: NXDOMAIN", Escape: "a resolver outside the gateway answering for a denied name",
			Run: inOpenBox(`
res = []
for server in ("8.8.8.8", "1.1.1.1", "9.9.9.9", "169.254.169.254", env("UPLINK_HOST") or "10.200.0.1", "203.0.113.53"):
    rc, addrs = dns_query(server, env("DENIED_NAME"))
    if addrs: escaped("%s answered %s with %s" % (server, env("DENIED_NAME"), addrs))
    res.append("%s:%s" % (server, rc))
blocked(" ".join(res))`),
		},
		{
			Name: "a rogue resolver over TCP 53", Category: DNS, Requires: needNames,
			Expected: "the gateway answers: NXDOMAIN", Escape: "a TCP resolver answering for a denied name",
			Run: inOpenBox(`
res = []
for server in ("8.8.8.8", "1.1.1.1", "203.0.113.53"):
    rc, addrs = dns_query(server, env("DENIED_NAME"), tcp=True)
    if addrs: escaped("%s answered %s over TCP with %s" % (server, env("DENIED_NAME"), addrs))
    res.append("%s:%s" % (server, rc))
blocked(" ".join(res))`),
		},
		{
			Name: "DNS over TLS and HTTPS resolvers", Category: DNS,
			Expected: "refused", Escape: "an encrypted resolver reachable despite an allow-list policy",
			Run: controlled(`probe_all([(a, p) for a in ("1.1.1.1", "8.8.8.8", "9.9.9.9", "8.8.4.4") for p in ("853", "443")], "encrypted DNS")`),
		},
		{
			Name: "the allowed name's shared address with a denied Host", Category: DNS, Requires: needNames,
			Expected: "refused by the HTTP proxy", Escape: "reaching a denied site through an address shared with an allowed one",
			Run: inOpenBox(`
ip = socket.getaddrinfo(env("ALLOWED_NAME"), 80, socket.AF_INET)[0][4][0]
d = env("DENIED_NAME")
out = subprocess.run(["curl", "-sS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", "--resolve", "%s:80:%s" % (d, ip), "http://%s/" % d], capture_output=True, text=True)
raw = connect(ip, 80)
print("raw", raw)
if out.stdout.startswith("2"): escaped("http://%s/ via %s answered %s" % (d, ip, out.stdout))
blocked("http://%s/ via %s: status %s %s" % (d, ip, out.stdout, out.stderr.strip()[:60]))`),
		},
		{
			Name: "the allowed name's shared address with a denied SNI", Category: DNS, Requires: needNames,
			Expected: "TLS refused", Escape: "reaching a denied site over TLS through a shared address",
			Run: inOpenBox(`
ip = socket.getaddrinfo(env("ALLOWED_NAME"), 443, socket.AF_INET)[0][4][0]
d = env("DENIED_NAME")
out = subprocess.run(["curl", "-ksS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", "--resolve", "%s:443:%s" % (d, ip), "https://%s/" % d], capture_output=True, text=True)
if out.stdout.startswith("2"): escaped("https://%s/ via %s answered %s" % (d, ip, out.stdout))
blocked("https://%s/ via %s: %s %s" % (d, ip, out.stdout, out.stderr.strip()[:60]))`),
		},
		{
			Name: "an allowed name's address as an IP literal under an allow-list", Category: DNS, Requires: needNames, Tools: []string{"getent"},
			Expected: "refused", Escape: "an address opened by someone else's lookup",
			Run: func(ctx context.Context, s *Scene) Verdict {
				// The open sandbox resolves the name; the attacker, whose
				// allow list does not name it, tries the address.
				res, err := s.exec(ctx, s.openBox, "root", []string{"getent", "ahostsv4", s.cfg.AllowedName})
				if err != nil || res.ExitCode != 0 || res.Stdout == "" {
					return failed("the open sandbox cannot resolve %s: %v %s", s.cfg.AllowedName, err, errOrNil(nil))
				}
				ip := firstField(res.Stdout)
				return controlled(`probe_all([("`+ip+`", "80"), ("`+ip+`", "443")], "IP literal")`)(ctx, s)
			},
		},
		{
			Name: "DNS rebinding to a private address", Category: DNS, Requires: []Feature{FeatureDomainRules, FeatureRebindName},
			Expected: "private answers stripped", Escape: "an allowed name pointing the sandbox at a private address",
			Run: inOpenBox(`
import ipaddress
rc, addrs = dns_query("169.254.0.22", env("REBIND_NAME"))
bad = [a for a in addrs if not ipaddress.ip_address(a).is_global]
if bad: escaped("%s answered with %s" % (env("REBIND_NAME"), bad))
blocked("%s: %s %s" % (env("REBIND_NAME"), rc, addrs))`),
		},
	}
}

func firstField(s string) string {
	for i, c := range s {
		if c == ' ' || c == '\t' || c == '\n' {
			return s[:i]
		}
	}
	return s
}
