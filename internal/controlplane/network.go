package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/pkg/apiv1"
)

// maxNetworkRules bounds the allow and deny lists of one policy.
const maxNetworkRules = 256

// NetworkPolicy is a sandbox's persisted egress policy. A record without
// one (created before policies existed) gets the default: the internet,
// but no private ranges.
type NetworkPolicy struct {
	Offline       bool     `json:"offline,omitempty"`
	AllowInternet bool     `json:"allow_internet"`
	Allow         []string `json:"allow,omitempty"`
	Deny          []string `json:"deny,omitempty"`
}

// checkNetwork validates a requested policy and returns it in persisted
// form; nil asks for the default.
func checkNetwork(req *apiv1.NetworkPolicy) (*NetworkPolicy, error) {
	if req == nil {
		return &NetworkPolicy{AllowInternet: true}, nil
	}
	p := &NetworkPolicy{AllowInternet: true}
	switch req.Mode {
	case "":
	case apiv1.NetworkModeNone:
		p.Offline = true
	default:
		return nil, invalid("network.mode must be empty or %q, got %q", apiv1.NetworkModeNone, req.Mode)
	}
	if req.AllowInternet != nil {
		p.AllowInternet = *req.AllowInternet
	}
	for _, list := range []struct {
		name string
		in   []string
		out  *[]string
	}{{"allow", req.Allow, &p.Allow}, {"deny", req.Deny, &p.Deny}} {
		if len(list.in) > maxNetworkRules {
			return nil, invalid("network.%s holds %d entries, at most %d are allowed", list.name, len(list.in), maxNetworkRules)
		}
		for _, e := range list.in {
			if looksLikeDomain(e) {
				d, err := network.ParseDomain(e)
				if err != nil {
					return nil, invalid("network.%s: %v", list.name, err)
				}
				*list.out = append(*list.out, d)
				continue
			}
			prefixes, err := network.ParsePrefixes([]string{e})
			if err != nil {
				return nil, invalid("network.%s: %v", list.name, err)
			}
			*list.out = append(*list.out, prefixes[0].String())
		}
	}
	return p, nil
}

// splitRules separates stored rules into address ranges and domains.
// Stored rules were validated, so anything that is not a range is a
// domain.
func splitRules(rules []string) (prefixes []netip.Prefix, domains []string) {
	for _, r := range rules {
		if looksLikeDomain(r) {
			domains = append(domains, r)
			continue
		}
		if ps, err := network.ParsePrefixes([]string{r}); err == nil {
			prefixes = append(prefixes, ps...)
		}
	}
	return prefixes, domains
}

// looksLikeDomain tells a domain rule ("example.com", "*.example.com") from
// a malformed address: it has a letter or a wildcard, and no slash or colon.
func looksLikeDomain(entry string) bool {
	e := strings.TrimSpace(entry)
	if e == "" || strings.ContainsAny(e, "/:") {
		return false
	}
	letters := false
	for _, c := range e {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '*':
			letters = true
		case c >= '0' && c <= '9', c == '.', c == '-', c == '_':
		default:
			return false
		}
	}
	return letters
}

// policy returns the sandbox's policy in the node's terms.
func (s Sandbox) policy() network.Policy {
	p := s.Network
	if p == nil {
		p = &NetworkPolicy{AllowInternet: true}
	}
	allow, allowDomains := splitRules(p.Allow)
	deny, denyDomains := splitRules(p.Deny)
	return network.Policy{
		Offline: p.Offline, AllowInternet: p.AllowInternet,
		Allow: allow, Deny: deny, AllowDomains: allowDomains, DenyDomains: denyDomains,
		Limits: s.Traffic.limits(),
		// Credential rules need HTTPS through the gateway's interceptor.
		InspectHTTP: len(s.Credentials) > 0,
	}
}

// api returns the policy in its public form.
func (p *NetworkPolicy) api() *apiv1.NetworkPolicy {
	if p == nil {
		p = &NetworkPolicy{AllowInternet: true}
	}
	out := &apiv1.NetworkPolicy{Allow: slices.Clone(p.Allow), Deny: slices.Clone(p.Deny)}
	allow := p.AllowInternet
	out.AllowInternet = &allow
	if p.Offline {
		out.Mode = apiv1.NetworkModeNone
	}
	return out
}

// SetNetwork replaces a sandbox's egress policy. It is persisted first and
// then applied to a sandbox that has a network slot (running or paused), so
// new connections follow it at once; a suspended sandbox gets it when it
// resumes, and a crash in between is repaired by recovery, which applies the
// stored policy to every adopted sandbox.
func (cp *ControlPlane) SetNetwork(ctx context.Context, id string, req apiv1.NetworkPolicy) (Sandbox, error) {
	return cp.setEgress(ctx, id, req, nil)
}

// SetEgress is SetNetwork that also replaces the sandbox's header
// credential rules (E2B's network update carries both): the policy and the
// rules change together, and the gateway judges the next connection by
// both. Env rules stay as created: their placeholders are in the
// sandbox's environment.
func (cp *ControlPlane) SetEgress(ctx context.Context, id string, req apiv1.NetworkPolicy, headerRules []apiv1.CredentialRule) (Sandbox, error) {
	if headerRules == nil {
		headerRules = []apiv1.CredentialRule{}
	}
	return cp.setEgress(ctx, id, req, headerRules)
}

// setEgress replaces the policy, and the header rules unless headerRules
// is nil.
func (cp *ControlPlane) setEgress(ctx context.Context, id string, req apiv1.NetworkPolicy, headerRules []apiv1.CredentialRule) (Sandbox, error) {
	p, err := checkNetwork(&req)
	if err != nil {
		return Sandbox{}, err
	}
	if err := cp.checkTrafficUnchanged(id, req); err != nil {
		return Sandbox{}, err
	}
	var rules []credentials.Rule
	if headerRules != nil {
		if rules, err = cp.checkHeaderRules(id, headerRules); err != nil {
			return Sandbox{}, err
		}
		if len(rules) > 0 && p.Offline {
			return Sandbox{}, invalid("credentials need a network; this policy has network mode %q", apiv1.NetworkModeNone)
		}
	}
	return cp.locked(id, func(r *record) error {
		s := cp.snapshot(r)
		if terminal(s.State) {
			return &StateError{ID: id, State: s.State, Want: "change its network"}
		}
		n, err := cp.nodeOf(s)
		if err != nil {
			return err
		}
		if err := cp.update(r, func(s *Sandbox) {
			s.Network = p
			if headerRules != nil {
				s.Credentials = replaceHeaderRules(s.Credentials, rules)
			}
		}); err != nil {
			return err
		}
		if s.State != apiv1.StateRunning && s.State != apiv1.StatePaused {
			return nil
		}
		if err := n.SetNetwork(ctx, id, cp.snapshot(r).policy()); err != nil {
			if errors.Is(err, nodeapi.ErrNoEgress) {
				return fmt.Errorf("%w: %v", ErrInvalid, err)
			}
			return fmt.Errorf("apply network policy of %s: %w", id, err)
		}
		cp.recordEvent(id, Event{Type: "network", Message: "network policy changed"})
		return nil
	})
}

// EventNetworkDenied is the event type of a connection or DNS lookup the
// sandbox's egress policy refused.
const EventNetworkDenied = "network.denied"

// networkDenied records that the sandbox's egress policy refused something
// (the node's gateway reports it, already rate limited per sandbox).
func (cp *ControlPlane) networkDenied(id, message string) {
	if _, err := cp.lookup(id); err != nil {
		return // gone, or a pooled sandbox not yet known
	}
	cp.recordEvent(id, Event{Type: EventNetworkDenied, Message: "denied: " + message})
}
