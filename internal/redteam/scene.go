package redteam

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// Scene is what an attempt works with: the sandboxes, the API, and the
// facts about the host its scripts receive as environment variables.
type Scene struct {
	api  *client.Client
	raw  rawAPI
	cfg  Config
	host *host
	// Attacker is the sandbox the attempt runs in; Victim and Bystander
	// are the other tenants.
	Attacker  string
	Victim    string
	Bystander string
	// Runtime is the backend the sandboxes run on, as the server said.
	Runtime string
	// facts are the environment of every script: what a well-informed
	// attacker would know about the host.
	facts map[string]string
	// transcript is everything the attempt saw, scanned for secrets.
	transcript strings.Builder
	// openBox is a sandbox whose policy allows the internet and denies
	// Config.DeniedName, for the DNS attempts.
	openBox string
	// templates are the templates build attempts made, deleted at the end.
	templates []string
	// probe finds the commands a sandbox lacks (probeTools unless a test
	// replaces it).
	probe toolProbe
}

// toolProbe returns those of tools that sandbox id has no command for.
type toolProbe func(ctx context.Context, id string, tools []string) ([]string, error)

// probeTools asks the sandbox's shell for each tool.
func (s *Scene) probeTools(ctx context.Context, id string, tools []string) ([]string, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	cmd := append([]string{"/bin/sh", "-c", `for t do command -v "$t" >/dev/null 2>&1 || echo "$t"; done`, "sh"}, tools...)
	res, err := s.api.Exec(ctx, id, apiv1.ExecRequest{Cmd: cmd, User: "root", TimeoutS: 20})
	if err != nil {
		return nil, fmt.Errorf("look for %s in the sandbox: %w", strings.Join(tools, ", "), err)
	}
	return strings.Fields(res.Stdout), nil
}

// lacks reports the tools the attempt's sandbox is missing, as a skip
// verdict; ok is false when the attempt cannot run. A probe that fails
// lets the attempt run (and fail on its own terms).
func (s *Scene) lacks(ctx context.Context, tools ...string) (Verdict, bool) {
	probe := s.probe
	if probe == nil {
		probe = s.probeTools
	}
	missing, err := probe(ctx, s.Attacker, tools)
	if err != nil || len(missing) == 0 {
		return Verdict{}, true
	}
	return skipped("needs %s, which the sandbox's template lacks", strings.Join(missing, ", ")), false
}

// guest reports whether the sandboxes are microVM guests: a kernel of
// their own, which root inside may use as it likes, between them and the
// host.
func (s *Scene) guest() bool { return s.Runtime == "microvm" }

// guestKernel runs an attempt on the sandbox's kernel. In a microVM that
// kernel is the guest's own: what it grants root there (a module, a BPF
// program, I/O ports, its symbols) is no way out, so there a success
// inside is evidence only, and the verdict is the host's checks, which
// run after every attempt and overrule it.
func guestKernel(run func(ctx context.Context, s *Scene) Verdict) func(ctx context.Context, s *Scene) Verdict {
	return func(ctx context.Context, s *Scene) Verdict {
		v := run(ctx, s)
		if s.guest() && v.Outcome == Escaped {
			return blocked("granted by the guest's own kernel, behind the hypervisor (the host is checked from outside): %s", v.Evidence)
		}
		return v
	}
}

// record keeps what an attempt saw for the secret scan.
func (s *Scene) record(parts ...string) {
	for _, p := range parts {
		s.transcript.WriteString(p)
		s.transcript.WriteByte('\n')
	}
}

// scriptPrelude gives every shell script its verdict helpers.
const scriptPrelude = `blocked() { echo "BLOCKED: $*"; }
escaped() { echo "ESCAPED: $*"; }
`

// pyPrelude gives every Python script its verdict helpers and a connect
// probe that tells a refusal from a timeout.
const pyPrelude = `import os, socket, sys, errno, ctypes, struct, subprocess
def blocked(m): print("BLOCKED:", m, flush=True)
def escaped(m): print("ESCAPED:", m, flush=True)
def connect(host, port, timeout=3, family=None):
    fam = family or (socket.AF_INET6 if ":" in host else socket.AF_INET)
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((host, int(port)))
        try:
            s.settimeout(1)
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = s.recv(200)
        except OSError:
            data = b""
        return "connected " + data.decode("latin-1").replace("\n", " ")[:120]
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
def env(name): return os.environ.get(name, "")
`

// sh runs a bash script as root in the attempt's sandbox and judges it by
// the BLOCKED:/ESCAPED: lines it prints.
func (s *Scene) sh(ctx context.Context, script string) Verdict {
	if v, ok := s.lacks(ctx, "bash"); !ok {
		return v
	}
	return s.judge(s.exec(ctx, s.Attacker, "root", []string{"/bin/bash", "-c", scriptPrelude + script}))
}

// py runs a Python script as root in the attempt's sandbox and judges it
// the same way.
func (s *Scene) py(ctx context.Context, script string) Verdict {
	if v, ok := s.lacks(ctx, "python3"); !ok {
		return v
	}
	return s.judge(s.exec(ctx, s.Attacker, "root", []string{"/usr/bin/python3", "-c", pyPrelude + script}))
}

// exec runs a command in sandbox id with the facts as environment and
// records its output.
func (s *Scene) exec(ctx context.Context, id, user string, cmd []string) (*apiv1.ExecResult, error) {
	timeout := 60
	if d, ok := ctx.Deadline(); ok {
		timeout = max(1, int(time.Until(d).Seconds())-2)
	}
	res, err := s.api.Exec(ctx, id, apiv1.ExecRequest{Cmd: cmd, User: user, Env: s.facts, TimeoutS: timeout})
	if err != nil {
		s.record(err.Error())
		return nil, err
	}
	s.record(res.Stdout, res.Stderr)
	return res, nil
}

// judge reads a script's verdict lines: any ESCAPED line wins; a script
// that printed neither did not run as designed.
func (s *Scene) judge(res *apiv1.ExecResult, err error) Verdict {
	if err != nil {
		return failed("exec: %v", err)
	}
	var esc, blk []string
	for _, line := range strings.Split(res.Stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "ESCAPED:"):
			esc = append(esc, strings.TrimSpace(strings.TrimPrefix(line, "ESCAPED:")))
		case strings.HasPrefix(line, "BLOCKED:"):
			blk = append(blk, strings.TrimSpace(strings.TrimPrefix(line, "BLOCKED:")))
		}
	}
	switch {
	case len(esc) > 0:
		return escaped("%s", strings.Join(esc, "; "))
	case len(blk) > 0:
		return blocked("%s", strings.Join(blk, "; "))
	default:
		return failed("no verdict from the script (exit %d): %s", res.ExitCode, tail(res.Stderr+res.Stdout, 300))
	}
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.ReplaceAll(s, "\n", " | ")
}

// rawAPI makes requests the typed client has no method for (routes of
// features newer than this package).
type rawAPI struct {
	url, key string
	hc       *http.Client
}

func (r rawAPI) do(ctx context.Context, method, path string, in any) (int, []byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.url+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, out, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, out, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(out)))
	}
	return resp.StatusCode, out, nil
}
