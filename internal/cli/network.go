package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/space-platform/space/pkg/apiv1"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// networkFlags are the egress policy flags of `sandbox create` and
// `network`.
type networkFlags struct {
	allow, deny stringList
	noInternet  bool
	none        bool
}

func (n *networkFlags) register(fs *flagSet) {
	fs.Var(&n.allow, "allow", "let the sandbox reach `RULE`: a domain, *.domain, address or CIDR (repeatable)")
	fs.Var(&n.deny, "deny", "keep the sandbox from `RULE`, whatever else allows it (repeatable)")
	fs.BoolVar(&n.noInternet, "no-internet", false, "reach only what --allow names")
	fs.BoolVar(&n.none, "no-network", false, "no network at all: loopback only")
}

// policy is the flags' policy, nil when none was given (the server's
// default then applies).
func (n *networkFlags) policy() *apiv1.NetworkPolicy {
	if n.none {
		return &apiv1.NetworkPolicy{Mode: apiv1.NetworkModeNone}
	}
	if len(n.allow) == 0 && len(n.deny) == 0 && !n.noInternet {
		return nil
	}
	internet := !n.noInternet
	return &apiv1.NetworkPolicy{AllowInternet: &internet, Allow: n.allow, Deny: n.deny}
}

// credentialFlags are the credential rules of `sandbox create`.
type credentialFlags struct {
	rules []apiv1.CredentialRule
}

func (c *credentialFlags) register(fs *flagSet) {
	fs.Func("credential", "requests to `HOST:HEADER=VALUE` get that header; VALUE may name secrets as ${NAME} (repeatable)", func(s string) error {
		host, header, value, err := parseHostRule(s, "HOST:HEADER=VALUE")
		if err != nil {
			return err
		}
		c.rules = append(c.rules, apiv1.CredentialRule{Host: host, Header: header, Value: value})
		return nil
	})
	fs.Func("credential-env", "env var ENV holds a placeholder the gateway swaps for secret SECRET in requests to HOST: `HOST:ENV=SECRET` (repeatable)", func(s string) error {
		host, env, secret, err := parseHostRule(s, "HOST:ENV=SECRET")
		if err != nil {
			return err
		}
		if secret == "" {
			return fmt.Errorf("%q is not %s", s, "HOST:ENV=SECRET")
		}
		c.rules = append(c.rules, apiv1.CredentialRule{Host: host, Env: env, Secret: secret})
		return nil
	})
}

// parseHostRule splits "HOST:KEY=VALUE"; host and key must not be empty.
// form names the shape in the error.
func parseHostRule(s, form string) (host, key, value string, err error) {
	host, rest, ok := strings.Cut(s, ":")
	if !ok || host == "" {
		return "", "", "", fmt.Errorf("%q is not %s", s, form)
	}
	key, value, err = parseKeyValue(rest)
	if err != nil {
		return "", "", "", fmt.Errorf("%q is not %s", s, form)
	}
	return host, key, value, nil
}

func runNetwork(ctx context.Context, args []string) error {
	fs := newFlagSet("space network ID [flags]", `
Show a sandbox's egress policy, or replace it with the one the flags give.
The new policy applies to new connections at once; open ones stay.`)
	var n networkFlags
	n.register(fs)
	positional, err := fs.parse(args, true)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return fs.usageErrorf("network needs one sandbox ID")
	}
	c, err := connect()
	if err != nil {
		return err
	}
	id := positional[0]
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if p := n.policy(); p != nil {
		if sb, err = c.SetNetwork(ctx, id, *p); err != nil {
			return err
		}
	}
	out, err := json.MarshalIndent(sb.Network, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, string(out))
	return nil
}
