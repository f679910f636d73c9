package redteam

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Category groups attempts by what they attack.
type Category string

// The categories of the catalog, in the order they run.
const (
	Filesystem  Category = "filesystem"
	Process     Category = "process"
	Kernel      Category = "kernel"
	Network     Category = "network"
	DNS         Category = "dns"
	Credentials Category = "credentials"
	Resources   Category = "resources"
	// Build attacks the host from template build steps.
	Build Category = "build"
)

// Categories lists every category in running order.
var Categories = []Category{Filesystem, Process, Kernel, Network, DNS, Credentials, Resources, Build}

// ParseCategory accepts a category name.
func ParseCategory(s string) (Category, error) {
	for _, c := range Categories {
		if string(c) == strings.ToLower(strings.TrimSpace(s)) {
			return c, nil
		}
	}
	names := make([]string, len(Categories))
	for i, c := range Categories {
		names[i] = string(c)
	}
	return "", fmt.Errorf("unknown category %q (one of %s)", s, strings.Join(names, ", "))
}

// Feature is something of the platform, or of the runner's setup, an
// attempt needs in order to mean anything. Attempts whose features are
// missing are reported as skipped, never as blocked.
type Feature string

const (
	// FeatureDomainRules is the DNS gateway and the Host/SNI-checking
	// proxy: policies that name domains.
	FeatureDomainRules Feature = "domain rules"
	// FeatureSecrets is credential injection: secrets the gateway adds to
	// requests, which the sandbox must never see.
	FeatureSecrets Feature = "credential injection"
	// FeatureReach is an address outside the node that the attacker's
	// policy allows and that answers HTTP (Config.Reach): without it a
	// refused connection could be a broken network rather than policy.
	FeatureReach Feature = "a reachable allowed address (--reach)"
	// FeatureUnallowed is an address outside the node that answers HTTP
	// and is not in the attacker's policy (Config.Unallowed).
	FeatureUnallowed Feature = "a reachable address outside the policy (--unallowed)"
	// FeatureNames are a denied and an allowed domain that resolve
	// upstream, the allowed one to an address that also serves the denied
	// one (Config.AllowedName, Config.DeniedName).
	FeatureNames Feature = "an allowed and a denied domain sharing one address (--allowed-name, --denied-name)"
	// FeatureRebindName is an allowed domain whose upstream answer is a
	// private address (Config.RebindName).
	FeatureRebindName Feature = "a domain that resolves to a private address (--rebind-name)"
)

// Outcome is the verdict on one attempt.
type Outcome string

const (
	// Blocked: the attempt failed to get out, as expected.
	Blocked Outcome = "blocked"
	// Escaped: it got out; Evidence says how we know. A security finding.
	Escaped Outcome = "ESCAPED"
	// Errored: the attempt could not run as designed, so it proves
	// nothing; a failure of the suite.
	Errored Outcome = "error"
	// Skipped: a feature the attempt needs is missing.
	Skipped Outcome = "skipped"
)

// Attempt is one scripted escape or bypass attempt.
type Attempt struct {
	Name     string
	Category Category
	// Expected is what must happen, in a few words.
	Expected string
	// Escape is what the attempt getting through would mean.
	Escape   string
	Requires []Feature
	// Tools are commands the attempt runs in the attacker's sandbox
	// (besides the shell or Python of Scene.sh and Scene.py, which those
	// check themselves). If the sandbox lacks one, the attempt is skipped
	// and says which: a missing tool proves nothing either way.
	Tools []string
	// Runtimes are the sandbox backends the attempt means something on
	// (all when empty); on another it is skipped with NotOn as the reason.
	// Only for attempts about a backend's own surface (a guest's power
	// switch, QEMU's sockets): everything else runs on every backend.
	Runtimes []string
	NotOn    string
	// Own runs the attempt in a throwaway sandbox of its own, for attempts
	// that may kill or exhaust their sandbox.
	Own *Sandbox
	// Timeout bounds the attempt (DefaultAttemptTimeout when zero).
	Timeout time.Duration
	// Run performs the attempt and judges what it could see. The runner's
	// host and victim checks run after it whatever it says.
	Run func(ctx context.Context, s *Scene) Verdict
}

// Sandbox is the shape of an attempt's own sandbox.
type Sandbox struct {
	VCPUs    int
	MemoryMB int
	DiskMB   int
}

// Verdict is an outcome and the evidence for it.
type Verdict struct {
	Outcome  Outcome
	Evidence string
}

func blocked(format string, args ...any) Verdict {
	return Verdict{Outcome: Blocked, Evidence: fmt.Sprintf(format, args...)}
}

func escaped(format string, args ...any) Verdict {
	return Verdict{Outcome: Escaped, Evidence: fmt.Sprintf(format, args...)}
}

func skipped(format string, args ...any) Verdict {
	return Verdict{Outcome: Skipped, Evidence: fmt.Sprintf(format, args...)}
}

func failed(format string, args ...any) Verdict {
	return Verdict{Outcome: Errored, Evidence: fmt.Sprintf(format, args...)}
}

// Result is the report of one attempt.
type Result struct {
	Name     string   `json:"name"`
	Category Category `json:"category"`
	Expected string   `json:"expected"`
	Escape   string   `json:"escape"`
	Outcome  Outcome  `json:"outcome"`
	Evidence string   `json:"evidence"`
	Seconds  float64  `json:"seconds"`
}

// Failed reports whether the result fails the suite: an escape, a bound
// that broke, or an attempt that could not run.
func (r Result) Failed() bool {
	return r.Outcome == Escaped || r.Outcome == Broke || r.Outcome == Errored
}
