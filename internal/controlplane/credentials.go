package controlplane

import (
	"maps"
	"slices"

	"github.com/space-platform/space/internal/credentials"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/internal/secrets"
	"github.com/space-platform/space/pkg/apiv1"
)

// maxCredentialRules bounds one sandbox's credential rules.
const maxCredentialRules = 32

// Secrets is the secret store as the control plane uses it: rules may only
// name secrets that exist in the sandbox's project. ref is secrets.Ref.
type Secrets interface {
	Exists(ref string) bool
}

// checkCredentials validates the credential rules of a create request for
// a sandbox of project owner.
func (cp *ControlPlane) checkCredentials(owner string, req *apiv1.CreateSandboxRequest) error {
	if len(req.Credentials) == 0 {
		return nil
	}
	if len(req.Credentials) > maxCredentialRules {
		return invalid("credentials holds %d rules, at most %d are allowed", len(req.Credentials), maxCredentialRules)
	}
	if req.Network != nil && req.Network.Mode == apiv1.NetworkModeNone {
		return invalid("credentials need a network; this sandbox has network mode %q", apiv1.NetworkModeNone)
	}
	envs := map[string]bool{}
	for i, in := range req.Credentials {
		r, err := cp.checkRule(owner, i, in)
		if err != nil {
			return err
		}
		if r.Env != "" {
			if _, ok := req.Env[r.Env]; ok || envs[r.Env] {
				return invalid("credentials[%d]: env %s is set twice (in env or by another rule)", i, r.Env)
			}
			envs[r.Env] = true
		}
	}
	return nil
}

// checkRule validates rule i of a sandbox of project owner, and that the
// secrets it names exist in that project; it returns the rule normalised.
func (cp *ControlPlane) checkRule(owner string, i int, in apiv1.CredentialRule) (credentials.Rule, error) {
	r := ruleOf(in)
	if err := r.Validate(); err != nil {
		return r, invalid("credentials[%d]: %v", i, err)
	}
	for _, name := range r.Secrets() {
		if cp.cfg.Secrets == nil || !cp.cfg.Secrets.Exists(secrets.Ref(owner, name)) {
			return r, invalid("credentials[%d]: project %s has no secret named %s (store it with POST /v1/secrets or `space secrets set %s`)", i, project.Of(owner), name, name)
		}
	}
	return r, nil
}

// checkHeaderRules validates the header rules that are to replace those of
// sandbox id.
func (cp *ControlPlane) checkHeaderRules(id string, in []apiv1.CredentialRule) ([]credentials.Rule, error) {
	s, err := cp.Get(project.Everything, id)
	if err != nil {
		return nil, err
	}
	env := 0
	for _, r := range s.Credentials {
		if r.Env != "" {
			env++
		}
	}
	if len(in)+env > maxCredentialRules {
		return nil, invalid("credentials holds %d rules, at most %d are allowed", len(in)+env, maxCredentialRules)
	}
	out := make([]credentials.Rule, 0, len(in))
	for i, rule := range in {
		if rule.Env != "" {
			return nil, invalid("credentials[%d]: env rules are chosen when the sandbox is created (their placeholder is in its environment); a running sandbox takes header rules", i)
		}
		r, err := cp.checkRule(s.Project, i, rule)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// replaceHeaderRules keeps the env rules of old and puts header in place
// of its header rules.
func replaceHeaderRules(old, header []credentials.Rule) []credentials.Rule {
	var out []credentials.Rule
	for _, r := range old {
		if r.Env != "" {
			out = append(out, r)
		}
	}
	return append(out, header...)
}

func ruleOf(in apiv1.CredentialRule) credentials.Rule {
	return credentials.Rule{Host: in.Host, Header: in.Header, Value: in.Value, Env: in.Env, Secret: in.Secret}
}

// withCredentials gives a new sandbox the validated rules of its request:
// each env rule gets a fresh placeholder, which goes into the environment.
func withCredentials(s *Sandbox, req []apiv1.CredentialRule) {
	if len(req) == 0 {
		return
	}
	s.Env = maps.Clone(s.Env)
	if s.Env == nil {
		s.Env = map[string]string{}
	}
	for _, in := range req {
		r := ruleOf(in)
		_ = r.Validate() // validated by checkCredentials; this normalises
		if r.Env != "" {
			r.Placeholder = credentials.NewPlaceholder()
			s.Env[r.Env] = r.Placeholder
		}
		s.Credentials = append(s.Credentials, r)
	}
}

// credentialsAPI is the public form of a sandbox's rules: secret names and
// value templates, no secret values (the record holds none).
func credentialsAPI(rules []credentials.Rule) []apiv1.CredentialRule {
	var out []apiv1.CredentialRule
	for _, r := range rules {
		out = append(out, apiv1.CredentialRule{Host: r.Host, Header: r.Header, Value: r.Value, Env: r.Env, Secret: r.Secret})
	}
	return out
}

// CredentialRules returns the rules of a live sandbox, for the gateway.
func (cp *ControlPlane) CredentialRules(id string) []credentials.Rule {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	r, ok := cp.sandboxes[id]
	if !ok || terminal(r.State) {
		return nil
	}
	return slices.Clone(r.Credentials)
}

// SecretUsers returns the live sandboxes of project p whose rules use the
// secret name.
func (cp *ControlPlane) SecretUsers(p, name string) []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var ids []string
	for id, r := range cp.sandboxes {
		if terminal(r.State) || project.Of(r.Project) != project.Of(p) {
			continue
		}
		for _, rule := range r.Credentials {
			if slices.Contains(rule.Secrets(), name) {
				ids = append(ids, id)
				break
			}
		}
	}
	slices.Sort(ids)
	return ids
}
