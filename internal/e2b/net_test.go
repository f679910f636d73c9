package e2b

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// E2B's rules become header credential rules; Secret.fill's placeholder
// becomes a reference to the stored secret, and back in the detail.
func TestCredentialRulesFromE2B(t *testing.T) {
	raw := json.RawMessage(`{
		"API.Example.com": [{"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.OpenAI-Key}", "X-Team": "a"}}}, {}],
		"*.example.org": [{"transform": {"headers": {"X-Literal": "plain"}}}]
	}`)
	got, msg := credentialRules(raw)
	if msg != "" {
		t.Fatal(msg)
	}
	want := []apiv1.CredentialRule{
		{Host: "*.example.org", Header: "X-Literal", Value: "plain"},
		{Host: "api.example.com", Header: "Authorization", Value: "Bearer ${OpenAI-Key}"},
		{Host: "api.example.com", Header: "X-Team", Value: "a"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("rule %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if !usesSecrets(got) || usesSecrets(want[:1]) {
		t.Error("usesSecrets does not tell a secret reference from a literal value")
	}
	view := rulesView(got)
	if v := view["api.example.com"][0].Transform.Headers["Authorization"]; v != "Bearer ${e2b.secrets.OpenAI-Key}" {
		t.Errorf("detail shows %q", v)
	}
	if len(view) != 2 || view["*.example.org"][0].Transform.Headers["X-Literal"] != "plain" {
		t.Errorf("detail: %+v", view)
	}

	for in, wantMsg := range map[string]string{
		`{"a.example.com": [{"transform": {"headers": {"A": "${e2b.identity.tokens.aws}"}}}]}`: "workload identity",
		`{"a.example.com": [{"transform": {"headers": {"A": "${HOME}"}}}]}`:                    "not an E2B secret placeholder",
		`{"a.example.com": {"transform": {}}}`:                                                 "must map host names",
		`["a.example.com"]`:                                                                    "must map host names",
	} {
		if _, msg := credentialRules(json.RawMessage(in)); !strings.Contains(msg, wantMsg) {
			t.Errorf("%s: message %q, want it to say %q", in, msg, wantMsg)
		}
	}
	for _, empty := range []string{``, `null`, `{}`} {
		if rules, msg := credentialRules(json.RawMessage(empty)); rules != nil || msg != "" {
			t.Errorf("%q: %+v %q", empty, rules, msg)
		}
	}
}

// The create request carries rules and maskRequestHost through; other
// network options stay refused.
func TestCreateNetworkOptions(t *testing.T) {
	var req newSandbox
	body := `{"templateID":"base","network":{"allowOut":["allowed.test"],"denyOut":["0.0.0.0/0"],"maskRequestHost":"localhost:${PORT}",
		"rules":{"allowed.test":[{"transform":{"headers":{"Authorization":"Bearer x"}}}]}}}`
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	if msg := req.unsupported(); msg != "" {
		t.Fatalf("refused: %s", msg)
	}
	out, msg := req.request()
	if msg != "" {
		t.Fatal(msg)
	}
	if out.Network == nil || out.Network.MaskRequestHost != "localhost:${PORT}" || *out.Network.AllowInternet || len(out.Network.Allow) != 1 {
		t.Fatalf("network: %+v", out.Network)
	}
	if len(out.Credentials) != 1 || out.Credentials[0].Host != "allowed.test" || out.Credentials[0].Value != "Bearer x" {
		t.Fatalf("credentials: %+v", out.Credentials)
	}
	for _, bad := range []string{
		`{"templateID":"base","network":{"egressProxy":{"address":"p:1080"}}}`,
		`{"templateID":"base","network":{"maskRequestHost":5}}`,
		`{"templateID":"base","network":{"rules":{"h.example.com":[{"transform":{"headers":{"A":"${x"}}}]}}}`,
	} {
		var req newSandbox
		if err := json.Unmarshal([]byte(bad), &req); err != nil {
			t.Fatal(err)
		}
		if msg := req.unsupported(); msg == "" && !strings.Contains(bad, "${x") {
			t.Errorf("%s accepted", bad)
		}
	}
}

// The update's egress fields translate as at create; all absent is the
// default.
func TestEgressPolicyOfUpdate(t *testing.T) {
	if p, msg := egressPolicy(nil, nil, nil); p != nil || msg != "" {
		t.Fatalf("empty update: %+v %q, want the default", p, msg)
	}
	no := false
	p, msg := egressPolicy(&no, []string{"192.88.99.10"}, []string{"192.88.99.11/32"})
	if msg != "" || *p.AllowInternet || len(p.Allow) != 1 || len(p.Deny) != 1 {
		t.Fatalf("%+v %q", p, msg)
	}
	if _, msg := egressPolicy(nil, []string{"192.88.99.10"}, []string{"192.88.99.0/24"}); !strings.Contains(msg, "covers") {
		t.Fatalf("a deny covering an allow: %q", msg)
	}
}
