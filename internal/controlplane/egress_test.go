package controlplane

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// policyNode is a fake node that keeps the last policy it was given.
type policyNode struct {
	*clusterNode
	pmu    sync.Mutex
	policy map[string]network.Policy
}

func (n *policyNode) SetNetwork(_ context.Context, id string, p network.Policy) error {
	n.pmu.Lock()
	defer n.pmu.Unlock()
	n.policy[id] = p
	return nil
}

func (n *policyNode) last(id string) network.Policy {
	n.pmu.Lock()
	defer n.pmu.Unlock()
	return n.policy[id]
}

// knownSecrets is a secret store that has the references listed.
type knownSecrets map[string]bool

func (k knownSecrets) Exists(ref string) bool { return k[ref] }

// SetEgress replaces the policy and the header rules together, keeps env
// rules (their placeholder is in the sandbox's environment), applies both
// to the node at once (HTTPS inspection follows the rules), and refuses
// what it cannot serve without changing anything.
func TestSetEgressReplacesHeaderRules(t *testing.T) {
	node := &policyNode{clusterNode: newClusterNode(), policy: map[string]network.Policy{}}
	cp := newTestCPWith(t, Config{Nodes: OneNode("local", node), Secrets: knownSecrets{"TOKEN": true, "KEY": true}}, t.TempDir(), nil)
	ctx := context.Background()
	req := createReq
	req.Credentials = []apiv1.CredentialRule{
		{Host: "api.example.com", Header: "Authorization", Value: "Bearer ${TOKEN}"},
		{Host: "api.example.com", Env: "API_KEY", Secret: "KEY"},
	}
	s, err := cp.Create(project.Everything, req)
	if err != nil {
		t.Fatal(err)
	}
	s = waitRunning(t, cp, s.ID)
	placeholder := s.Env["API_KEY"]

	no := false
	got, err := cp.SetEgress(ctx, s.ID, apiv1.NetworkPolicy{AllowInternet: &no, Allow: []string{"api.example.com"}},
		[]apiv1.CredentialRule{{Host: "other.example.com", Header: "X-Team", Value: "literal"}})
	if err != nil {
		t.Fatal(err)
	}
	rules := cp.CredentialRules(s.ID)
	if len(rules) != 2 || rules[0].Env != "API_KEY" || rules[0].Placeholder != placeholder || rules[1].Host != "other.example.com" || rules[1].Header != "X-Team" {
		t.Fatalf("rules after the update: %+v", rules)
	}
	if got.Network.AllowInternet || len(got.Network.Allow) != 1 {
		t.Fatalf("policy after the update: %+v", got.Network)
	}
	if p := node.last(s.ID); !p.InspectHTTP || p.AllowInternet || len(p.AllowDomains) != 1 {
		t.Fatalf("the node got %+v", p)
	}

	// Refused: env rules, unknown secrets, bad rules, too many; nothing
	// changes.
	many := make([]apiv1.CredentialRule, maxCredentialRules)
	for i := range many {
		many[i] = apiv1.CredentialRule{Host: "a.example.com", Header: "X-A", Value: "v"}
	}
	for name, bad := range map[string][]apiv1.CredentialRule{
		"env rule":       {{Host: "a.example.com", Env: "B", Secret: "KEY"}},
		"unknown secret": {{Host: "a.example.com", Header: "A", Value: "${NOPE}"}},
		"reserved":       {{Host: "a.example.com", Header: "Host", Value: "x"}},
		"too many":       many, // with the env rule kept, one over
	} {
		if _, err := cp.SetEgress(ctx, s.ID, apiv1.NetworkPolicy{}, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := cp.SetEgress(ctx, s.ID, apiv1.NetworkPolicy{Mode: apiv1.NetworkModeNone}, []apiv1.CredentialRule{{Host: "a.example.com", Header: "A", Value: "v"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("header rules with network none: %v", err)
	}
	if rules := cp.CredentialRules(s.ID); len(rules) != 2 || rules[1].Header != "X-Team" {
		t.Fatalf("a refused update changed the rules: %+v", rules)
	}

	// Clearing keeps the env rule; the native SetNetwork keeps the rules.
	if _, err := cp.SetEgress(ctx, s.ID, apiv1.NetworkPolicy{}, nil); err != nil {
		t.Fatal(err)
	}
	if rules := cp.CredentialRules(s.ID); len(rules) != 1 || rules[0].Env != "API_KEY" {
		t.Fatalf("rules after clearing: %+v", rules)
	}
	if _, err := cp.SetNetwork(ctx, s.ID, apiv1.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	if rules := cp.CredentialRules(s.ID); len(rules) != 1 {
		t.Fatalf("SetNetwork changed the rules: %+v", rules)
	}
	if p := node.last(s.ID); !p.InspectHTTP || !p.AllowInternet {
		t.Fatalf("the node got %+v after clearing", p)
	}
}
