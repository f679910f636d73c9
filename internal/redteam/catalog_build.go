package redteam

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/space-platform/space/pkg/apiv1"
)

// buildTimeout bounds a build attempt: up to two template builds.
const buildTimeout = 3 * time.Minute

// Build attempts submit recipes whose steps attack the host the way a
// build running on it (in a chroot, with the host's network) could be
// attacked. The verdict comes from the runner's host checks: the drop
// file in the canary directory, the host listener, the host's sysctls.
// What the steps print only goes into the evidence.
func buildAttempts() []Attempt {
	return []Attempt{
		{
			Name: "build: cgroup release_agent from a second recipe", Category: Build, Timeout: buildTimeout,
			Expected: "no host program runs", Escape: "a recipe's script run by the host kernel, outside every namespace",
			Run: func(ctx context.Context, s *Scene) Verdict {
				// The first recipe leaves the payload in its template, whose
				// host path (DATA_DIR/volumes/templates/<id>) the second one
				// names as release_agent.
				payload, log, err := s.build(ctx, "payload", "minimal", []string{
					`printf '#!/bin/sh\ntouch "%s"\ncat "%s/admin.key" > "%s"\n' "$DROP_PATH" "$DATA_DIR" "$DROP_PATH" > /rt-payload; chmod 0755 /rt-payload`,
				})
				if err != nil {
					return failed("payload recipe: %v", err)
				}
				if payload.State != apiv1.TemplateReady {
					return failed("the payload recipe, which only writes a file, failed: %s", tail(log, 200))
				}
				hostPayload := "/rt-payload"
				if s.cfg.DataDir != "" {
					hostPayload = filepath.Join(s.cfg.DataDir, "volumes", "templates", payload.ID, "rt-payload") + " /rt-payload"
				}
				tpl, log, err := s.build(ctx, "release-agent", "template:"+payload.Name, []string{
					"RT_PAYLOADS='" + hostPayload + "'\n" + releaseAgentScript + "\necho \"release_agent:$r\"",
				})
				if err != nil {
					return failed("release_agent recipe: %v", err)
				}
				time.Sleep(time.Second) // a host kernel runs release_agent asynchronously
				return blocked("build %s; %s (the host drop file is checked from outside)", tpl.State, logLine(log, "release_agent:"))
			},
		},
		{
			Name: "build: core_pattern pipe", Category: Build, Timeout: buildTimeout,
			Expected: "the host's core_pattern unchanged", Escape: "a build step making the host kernel run a program on the next crash",
			Run: func(ctx context.Context, s *Scene) Verdict {
				tpl, log, err := s.build(ctx, "core-pattern", "minimal", []string{
					`(echo "|/bin/sh -c 'touch $DROP_PATH'" > /proc/sys/kernel/core_pattern) 2>/dev/null && r=accepted-in-sandbox || r=refused
sh -c 'kill -SEGV $$' 2>/dev/null
echo "core_pattern:$r now $(cat /proc/sys/kernel/core_pattern 2>&1)"`,
				})
				if err != nil {
					return failed("core_pattern recipe: %v", err)
				}
				return blocked("build %s; %s (the host's core_pattern is checked from outside)", tpl.State, logLine(log, "core_pattern:"))
			},
		},
		{
			Name: "build: services on the host's loopback and addresses", Category: Build, Timeout: buildTimeout,
			Expected: "no connection reaches the host", Escape: "a build step reaching services bound to the host's 127.0.0.1 or its addresses",
			Run: func(ctx context.Context, s *Scene) Verdict {
				tpl, log, err := s.build(ctx, "loopback", "minimal", []string{
					// busybox nc, not wget: busybox's static wget crashes in
					// gVisor before it connects. The gateway's resolver is the
					// control: reaching it shows the step can connect at all.
					`ns=$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf)
echo | nc -w 3 "$ns" 53 && echo "loopback-control:ok" || echo "loopback-control:failed to reach the gateway's resolver $ns:53"
r=""; n=0
for a in 127.0.0.1 $HOST_ADDRS; do
  case $a in fe80:*) continue;; esac
  for p in $HOST_PORT $API_PORT; do
    n=$((n+1))
    echo | nc -w 3 "$a" "$p" >/dev/null 2>&1 && r="$r $a:$p"
  done
done
echo "loopback: $n address:port pairs tried (127.0.0.1 and the host's addresses; the host listener's port and the API's); connected:${r:- none}"`,
				})
				if err != nil {
					return failed("loopback recipe: %v", err)
				}
				if control := logLine(log, "loopback-control:"); control != "loopback-control:ok" {
					return failed("the step could not connect anywhere, so its refusals prove nothing: %s", control)
				}
				return blocked("build %s; %s (the host listener on every address, 127.0.0.1 included, records contact)", tpl.State, logLine(log, "loopback:"))
			},
		},
	}
}

// build submits a recipe of run steps from base, with the scene's facts
// as its env, waits for the build to end, and returns the template and
// its log (also recorded for the secret scan). The template is deleted
// when the run ends.
func (s *Scene) build(ctx context.Context, what, base string, run []string) (*apiv1.Template, string, error) {
	name := "redteam-" + what + "-" + randomHex(4)
	env := map[string]string{}
	for k, v := range s.facts {
		if v != "" {
			env[k] = v
		}
	}
	fields := map[string]any{"name": name, "from": base, "run": run, "env": env}
	if s.Runtime != "" && s.Runtime != "gvisor" {
		// Built for the run's backend too, so that its image builder
		// (for a microVM, an ext4 image made on the host from the
		// recipe's tree) is attacked as well.
		fields["runtime"] = []string{"gvisor", s.Runtime}
	}
	recipe, err := yaml.Marshal(fields)
	if err != nil {
		return nil, "", err
	}
	if _, err := s.api.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Recipe: string(recipe)}); err != nil {
		return nil, "", fmt.Errorf("submit: %w", err)
	}
	s.templates = append(s.templates, name)
	for {
		tpl, err := s.api.GetTemplate(ctx, name)
		if err != nil {
			return nil, "", fmt.Errorf("build %s: %w", name, err)
		}
		if tpl.State != apiv1.TemplateBuilding {
			log := strings.Join(tpl.Logs, "\n")
			s.record(log, tpl.Reason)
			return tpl, log, nil
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("build %s: %w", name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// logLine returns the first log line with the prefix, or a note.
func logLine(log, prefix string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return "no " + strings.TrimSuffix(prefix, ":") + " line in the build log"
}
