// Package credentials injects operator secrets into sandbox traffic without
// the sandbox ever holding them. The gateway hands it TLS connections to
// hosts that have credential rules; it terminates TLS with a leaf from the
// installation's CA (which templates trust), adds the rule's headers or
// swaps placeholders for secrets in requests, re-encrypts upstream with
// full certificate verification, and scrubs every secret from what comes
// back.
package credentials

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/textproto"
	"regexp"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// PlaceholderPrefix starts every placeholder, so one is recognisable in a
// sandbox's environment and in logs.
const PlaceholderPrefix = "space-secret-placeholder-"

// Rule binds credentials to requests to one host. Either Header and Value
// (the header is set on every request; Value may reference secrets as
// ${NAME}) or Env and Secret (the sandbox's variable Env holds
// Placeholder, which requests to the host get replaced by the secret).
type Rule struct {
	// Host is an exact lower-case host name or "*.suffix" (any name below
	// suffix, not suffix itself).
	Host        string `json:"host"`
	Header      string `json:"header,omitempty"`
	Value       string `json:"value,omitempty"`
	Env         string `json:"env,omitempty"`
	Secret      string `json:"secret,omitempty"`
	Placeholder string `json:"placeholder,omitempty"`
}

var (
	secretRef  = regexp.MustCompile(`\$\{([^}]*)\}`)
	secretName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`) // secrets.ValidName
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hostLabel  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// reservedHeaders are headers a rule may not set: they frame the message
// or the connection, and the proxy owns them.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Upgrade": true, "Te": true, "Trailer": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Accept-Encoding": true, "Expect": true,
}

// Validate checks a rule as a client gave it and normalises its host. It
// does not check that referenced secrets exist.
func (r *Rule) Validate() error {
	host, err := normalizeHostPattern(r.Host)
	if err != nil {
		return err
	}
	r.Host = host
	switch {
	case r.Header != "" && r.Env != "":
		return errors.New("a rule sets either header and value, or env and secret, not both")
	case r.Header != "":
		if r.Secret != "" {
			return errors.New("header rules reference secrets in value as ${NAME}; secret goes with env")
		}
		if !httpguts.ValidHeaderFieldName(r.Header) {
			return fmt.Errorf("header %q is not a valid header name", r.Header)
		}
		if reservedHeaders[canonicalHeader(r.Header)] {
			return fmt.Errorf("header %s is managed by the proxy and cannot be set by a rule", canonicalHeader(r.Header))
		}
		if r.Value == "" {
			return fmt.Errorf("header %s needs a value", r.Header)
		}
		if !httpguts.ValidHeaderFieldValue(r.Value) {
			return fmt.Errorf("the value of header %s has characters a header cannot carry", r.Header)
		}
		if _, err := References(r.Value); err != nil {
			return fmt.Errorf("header %s: %w", r.Header, err)
		}
	case r.Env != "":
		if r.Value != "" {
			return errors.New("env rules take secret, not value")
		}
		if !envName.MatchString(r.Env) {
			return fmt.Errorf("env %q is not a valid variable name", r.Env)
		}
		if !secretName.MatchString(r.Secret) {
			return fmt.Errorf("env %s needs secret, the name of a stored secret", r.Env)
		}
	default:
		return errors.New("a rule needs header and value, or env and secret")
	}
	return nil
}

// Secrets lists the secrets the rule uses.
func (r Rule) Secrets() []string {
	if r.Secret != "" {
		return []string{r.Secret}
	}
	names, _ := References(r.Value) // validated when stored
	return names
}

// Matches reports whether the rule applies to requests to host.
func (r Rule) Matches(host string) bool {
	host = normalizeHost(host)
	if suffix, ok := strings.CutPrefix(r.Host, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	return host == r.Host
}

// References returns the secret names value refers to as ${NAME}.
func References(value string) ([]string, error) {
	var names []string
	for _, m := range secretRef.FindAllStringSubmatch(value, -1) {
		if !secretName.MatchString(m[1]) {
			return nil, fmt.Errorf("${%s} is not a secret reference (names match [A-Za-z_][A-Za-z0-9_-]*)", m[1])
		}
		names = append(names, m[1])
	}
	if i := strings.Index(secretRef.ReplaceAllString(value, ""), "${"); i >= 0 {
		return nil, errors.New("unterminated ${ in value")
	}
	return names, nil
}

// expand replaces every ${NAME} in value by the secret's value.
func expand(value string, secrets map[string]string) string {
	return secretRef.ReplaceAllStringFunc(value, func(ref string) string {
		return secrets[ref[2:len(ref)-1]]
	})
}

// NewPlaceholder returns a fresh random placeholder.
func NewPlaceholder() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("random placeholder: %v", err)) // crypto/rand does not fail on Linux
	}
	return PlaceholderPrefix + hex.EncodeToString(b)
}

// normalizeHostPattern checks a rule's host: a DNS name (no address, no
// port) or "*." and a name of at least two labels.
func normalizeHostPattern(h string) (string, error) {
	h = normalizeHost(h)
	name, wildcard := strings.CutPrefix(h, "*.")
	if h == "" {
		return "", errors.New("a rule needs host")
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return "", fmt.Errorf("host %q: rules name hosts, not addresses (TLS clients send no name for an address)", h)
	}
	labels := strings.Split(name, ".")
	if wildcard && len(labels) < 2 {
		return "", fmt.Errorf("host %q: a wildcard needs a suffix of at least two labels", h)
	}
	if len(name) > 253 {
		return "", fmt.Errorf("host %q is longer than 253 characters", h)
	}
	for _, l := range labels {
		if !hostLabel.MatchString(l) {
			return "", fmt.Errorf("host %q is not a host name (exact, or *.suffix)", h)
		}
	}
	return h, nil
}

// normalizeHost lower-cases a host name and drops a trailing dot and an
// explicit :443.
func normalizeHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = strings.TrimSuffix(h, ":443")
	return strings.TrimSuffix(h, ".")
}

func canonicalHeader(h string) string { return textproto.CanonicalMIMEHeaderKey(h) }
