package redteam

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// reservedRegistries are one address of each range the registry guard
// must refuse as sandbox egress does (carrier-grade NAT, IETF protocol
// assignments, benchmarking, reserved), picked to lead nowhere should a
// server without the guard dial them: the CGNAT range's own network
// address, the IPv4 dummy address (RFC 7600), the benchmarking range's
// network address, and the first reserved one; all on port 9 (discard).
var reservedRegistries = []string{"100.64.0.0", "192.0.0.8", "198.18.0.0", "240.0.0.1"}

const reservedPort = "9"

// probeGrace is how much longer than the refused loopback control a
// probe may take before the run stops waiting: a server that answers
// later is trying to connect.
const probeGrace = 5 * time.Second

func registryAttack() ServerAttack {
	return ServerAttack{
		Name: "registry probes of reserved ranges", Timeout: time.Minute,
		Checks: []Check{{Name: "registry probes of reserved ranges",
			Expected: "every probe refused at once with the refused loopback control's error, open and closed ports alike",
			Escape:   "the server connecting to non-public addresses for a recipe, and telling ports apart"}},
		Run: func(ctx context.Context, t *tenant) []Verdict { return []Verdict{t.registryProbes(ctx)} },
	}
}

// probeAnswer is how the server answered a from: image: recipe naming a
// registry: its refusal, normalised so that answers for different
// registries compare equal when they say the same.
type probeAnswer struct {
	registry string
	status   int
	text     string
	elapsed  time.Duration
	// accepted: the template was built; late: no answer within the
	// probe's time.
	accepted, late bool
}

func (a probeAnswer) String() string {
	switch {
	case a.accepted:
		return a.registry + ": built"
	case a.late:
		return fmt.Sprintf("%s: no answer in %s", a.registry, a.elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s: %d in %s, %q", a.registry, a.status, a.elapsed.Round(time.Millisecond), a.text)
}

// registryProbes submits recipes pulling from a closed and an open port on
// the server's loopback (the controls, which the guard refuses without
// connecting), then from one address of each reserved range: held if
// every answer is the closed control's, and as fast.
func (t *tenant) registryProbes(ctx context.Context) Verdict {
	closed := t.probeRegistry(ctx, "127.0.0.1:1", t.scaled(30*time.Second))
	if closed.late || closed.accepted || closed.status == 0 {
		return failed("the loopback control was not refused: %s", closed)
	}
	if strings.Contains(closed.text, "dial tcp") || strings.Contains(closed.text, "connection refused") {
		return skipped("the server pulls from registries on private addresses (--template-registry-private), so no guard answers: %s", closed)
	}
	wait := closed.elapsed + t.scaled(probeGrace)
	targets := []string{net.JoinHostPort("127.0.0.1", t.apiPort())}
	for _, a := range reservedRegistries {
		targets = append(targets, net.JoinHostPort(a, reservedPort))
	}
	answers := make([]probeAnswer, len(targets))
	var wg sync.WaitGroup
	for i, reg := range targets {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = t.probeRegistry(ctx, reg, wait) }()
	}
	wg.Wait()
	var differ []string
	slowest := closed.elapsed
	for _, a := range answers {
		slowest = max(slowest, a.elapsed)
		if a.late || a.accepted || a.status != closed.status || a.text != closed.text {
			differ = append(differ, a.String())
		}
	}
	if len(differ) > 0 {
		return broke("answered unlike the refused control (%s): %s", closed, strings.Join(differ, "; "))
	}
	return held("%d probes (an open loopback port and %s) all answered as the closed loopback port did: %d in at most %s, %q",
		len(answers), strings.Join(reservedRegistries, ", "), closed.status, slowest.Round(time.Millisecond), closed.text)
}

// apiPort is the port of the server's API, an open port on its loopback
// when the run is on the server's host (80 when the URL names none).
func (t *tenant) apiPort() string {
	if u, err := url.Parse(t.cfg.URL); err == nil && u.Port() != "" {
		return u.Port()
	}
	return "80"
}

// probeRegistry submits a recipe pulling from registry and waits at most
// wait for the refusal, at the request or as the build's failure.
func (t *tenant) probeRegistry(ctx context.Context, registry string, wait time.Duration) probeAnswer {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ref := registry + "/space-redteam/probe:latest"
	name := "redteam-registry-" + randomHex(4)
	a := probeAnswer{registry: registry}
	_, err := t.api.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: name, Recipe: "from: image:" + ref + "\n"})
	if err == nil {
		t.madeTemplate(name)
		var tpl *apiv1.Template
		if tpl, err = t.waitTemplate(ctx, name); err == nil {
			a.accepted = tpl.State == apiv1.TemplateReady
			a.status, a.text = 202, normaliseProbe(tpl.Reason, ref, registry)
		}
	} else if a.status = statusOf(err); a.status != 0 {
		a.text, err = normaliseProbe(err.Error(), ref, registry), nil
	}
	a.elapsed = time.Since(began)
	a.late = err != nil && ctx.Err() != nil
	if err != nil && !a.late {
		a.text = err.Error()
	}
	return a
}

// normaliseProbe takes the registry out of an answer, so that answers
// for different registries compare equal when they say the same.
func normaliseProbe(text, ref, registry string) string {
	host, _, _ := net.SplitHostPort(registry)
	for _, s := range []string{ref, registry, host} {
		text = strings.ReplaceAll(text, s, "<registry>")
	}
	return text
}
