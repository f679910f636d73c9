package e2b

// E2B's network rules, network updates and secrets, mapped onto space's
// egress policy, credential rules and secret store (docs/e2b.md,
// "Network rules and secrets").

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/pkg/apiv1"
)

// e2bRule is one entry of E2B's SandboxNetworkRule list for a host.
type e2bRule struct {
	Transform *struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
}

// placeholderRef finds ${...} in a header value.
var placeholderRef = regexp.MustCompile(`\$\{([^}]*)\}`)

const (
	// e2bSecretPrefix starts E2B's secret placeholder, ${e2b.secrets.NAME}
	// (the SDK's Secret.fill); space's rule values say ${NAME}.
	e2bSecretPrefix = "e2b.secrets."
	// e2bIdentityPrefix starts E2B's workload identity placeholders.
	e2bIdentityPrefix = "e2b.identity."
)

// credentialRules translates E2B's network.rules (raw: absent or null is
// none) into space's header credential rules. A header value is sent as
// given, except that ${e2b.secrets.NAME} becomes the stored secret NAME of
// the sandbox's project, added by the gateway outside the sandbox. The
// message is for a 400; "" when the rules are usable.
func credentialRules(raw json.RawMessage) ([]apiv1.CredentialRule, string) {
	if emptyJSON(raw) {
		return nil, ""
	}
	var byHost map[string][]e2bRule
	if err := json.Unmarshal(raw, &byHost); err != nil {
		return nil, "network.rules must map host names to lists of {transform: {headers: {...}}}: " + err.Error()
	}
	hosts := make([]string, 0, len(byHost))
	for h := range byHost {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	var out []apiv1.CredentialRule
	for _, host := range hosts {
		for i, rule := range byHost[host] {
			if rule.Transform == nil {
				continue
			}
			names := make([]string, 0, len(rule.Transform.Headers))
			for name := range rule.Transform.Headers {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				value, msg := spaceValue(rule.Transform.Headers[name])
				if msg != "" {
					return nil, fmt.Sprintf("network.rules[%q][%d].transform.headers[%q]: %s", host, i, name, msg)
				}
				out = append(out, apiv1.CredentialRule{Host: strings.ToLower(host), Header: name, Value: value})
			}
		}
	}
	return out, ""
}

// spaceValue turns an E2B header value into a space rule value. Space
// reads every ${...} in a value as a secret reference, so any other
// placeholder is refused rather than sent literally or resolved wrongly.
func spaceValue(v string) (string, string) {
	var msg string
	out := placeholderRef.ReplaceAllStringFunc(v, func(ref string) string {
		inner := ref[2 : len(ref)-1]
		switch {
		case strings.HasPrefix(inner, e2bSecretPrefix):
			return "${" + strings.TrimPrefix(inner, e2bSecretPrefix) + "}"
		case strings.HasPrefix(inner, e2bIdentityPrefix):
			msg = fmt.Sprintf("%s: workload identity tokens (iam) are not supported by space; store the credential with Secret.create and use Secret.fill", ref)
		case msg == "":
			msg = fmt.Sprintf("%s is not an E2B secret placeholder (${e2b.secrets.NAME}); space cannot send it literally", ref)
		}
		return ref
	})
	return out, msg
}

// e2bValue is spaceValue's inverse, for the sandbox's detail.
func e2bValue(v string) string {
	return placeholderRef.ReplaceAllString(v, "$${"+e2bSecretPrefix+"$1}")
}

// rulesView is a sandbox's header credential rules as E2B's network.rules:
// per host, one rule with all its headers.
func rulesView(rules []apiv1.CredentialRule) map[string][]e2bRuleView {
	if len(rules) == 0 {
		return nil
	}
	out := map[string][]e2bRuleView{}
	for _, r := range rules {
		if r.Header == "" {
			continue
		}
		if out[r.Host] == nil {
			out[r.Host] = []e2bRuleView{{Transform: e2bTransformView{Headers: map[string]string{}}}}
		}
		out[r.Host][0].Transform.Headers[r.Header] = e2bValue(r.Value)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

type e2bRuleView struct {
	Transform e2bTransformView `json:"transform"`
}

type e2bTransformView struct {
	Headers map[string]string `json:"headers"`
}

// usesSecrets reports whether a rule sends a stored secret.
func usesSecrets(rules []apiv1.CredentialRule) bool {
	for _, r := range rules {
		if r.Secret != "" || placeholderRef.MatchString(r.Value) {
			return true
		}
	}
	return false
}

// checkRules vets rules before they reach the control plane, answering
// the error itself. Rules that send stored secrets need an admin key, as
// in space's own API: whoever writes such a rule chooses where the secret
// goes (docs/security.md); rules with values the caller gives literally
// carry nothing the caller does not already hold. Secret names are then
// resolved as E2B does, case-insensitively: E2B stores names lower-cased,
// space keeps a name as it was stored.
func (h *Handler) checkRules(w http.ResponseWriter, r *http.Request, rules []apiv1.CredentialRule) bool {
	if !usesSecrets(rules) {
		return true
	}
	if k, _ := r.Context().Value(keyContext{}).(auth.Key); !k.Admin {
		writeError(w, http.StatusForbidden, "network.rules that use stored secrets (${e2b.secrets.NAME}) need an admin key: whoever writes such a rule chooses where the secret goes; give the value literally or ask the operator")
		return false
	}
	if h.cfg.Secrets == nil {
		return true // the control plane refuses the unknown names
	}
	owner := scopeOf(r).Owner()
	for i := range rules {
		rules[i].Value = placeholderRef.ReplaceAllStringFunc(rules[i].Value, func(ref string) string {
			name := ref[2 : len(ref)-1]
			if lower := strings.ToLower(name); !h.cfg.Secrets.Exists(secrets.Ref(owner, name)) && h.cfg.Secrets.Exists(secrets.Ref(owner, lower)) {
				return "${" + lower + "}"
			}
			return ref
		})
	}
	return true
}

// networkUpdate is E2B's SandboxNetworkUpdateConfig. Every field it omits
// is cleared.
type networkUpdate struct {
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	Rules               json.RawMessage `json:"rules"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
}

// updateNetwork is PUT /sandboxes/{id}/network: the sandbox's egress
// policy and header rules are replaced by the body's, through the native
// network update, so new connections follow them at once. An empty body
// restores the default (the internet, no rules).
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var body networkUpdate
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	if _, err := h.visible(r.PathValue("id")); err != nil {
		h.fail(w, err) // E2B does not show ended sandboxes
		return
	}
	if !emptyJSON(body.EgressProxy) {
		writeError(w, http.StatusBadRequest, "egressProxy is not supported by space: sandbox egress goes out through space's gateway; remove it")
		return
	}
	policy, msg := egressPolicy(body.AllowInternetAccess, body.AllowOut, body.DenyOut)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	rules, msg := credentialRules(body.Rules)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if !h.checkRules(w, r, rules) {
		return
	}
	if policy == nil {
		policy = &apiv1.NetworkPolicy{}
	}
	if _, err := h.cfg.ControlPlane.SetEgress(r.Context(), r.PathValue("id"), *policy, rules); err != nil {
		h.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
