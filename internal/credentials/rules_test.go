package credentials

import (
	"bytes"
	"strings"
	"testing"
)

func TestRuleValidation(t *testing.T) {
	good := []Rule{
		{Host: "API.example.com", Header: "Authorization", Value: "Bearer ${TOKEN}"},
		{Host: "*.example.com", Header: "X-Static", Value: "no secret here"},
		{Host: "api.example.com", Env: "OPENAI_API_KEY", Secret: "OPENAI"},
	}
	for _, r := range good {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
		if r.Host != strings.ToLower(r.Host) {
			t.Errorf("host not normalised: %q", r.Host)
		}
	}
	bad := map[string]Rule{
		"no host":           {Header: "A", Value: "b"},
		"address":           {Host: "203.0.113.5", Header: "A", Value: "b"},
		"port":              {Host: "example.com:8443", Header: "A", Value: "b"},
		"wildcard tld":      {Host: "*.com", Header: "A", Value: "b"},
		"inner wildcard":    {Host: "a.*.com", Header: "A", Value: "b"},
		"nothing":           {Host: "example.com"},
		"both kinds":        {Host: "example.com", Header: "A", Value: "b", Env: "E", Secret: "S"},
		"host header":       {Host: "example.com", Header: "host", Value: "x"},
		"framing header":    {Host: "example.com", Header: "Content-Length", Value: "1"},
		"bad header name":   {Host: "example.com", Header: "A B", Value: "x"},
		"newline in value":  {Host: "example.com", Header: "A", Value: "x\r\nEvil: 1"},
		"bad reference":     {Host: "example.com", Header: "A", Value: "${not a name}"},
		"unterminated":      {Host: "example.com", Header: "A", Value: "Bearer ${TOKEN"},
		"env without name":  {Host: "example.com", Env: "E"},
		"bad env":           {Host: "example.com", Env: "1E", Secret: "S"},
		"env with value":    {Host: "example.com", Env: "E", Secret: "S", Value: "v"},
		"header and secret": {Host: "example.com", Header: "A", Value: "v", Secret: "S"},
	}
	for name, r := range bad {
		if err := r.Validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, r)
		}
	}
}

func TestRuleMatchingAndSecrets(t *testing.T) {
	exact := Rule{Host: "api.example.com"}
	wild := Rule{Host: "*.example.com"}
	cases := []struct {
		rule Rule
		host string
		want bool
	}{
		{exact, "api.example.com", true},
		{exact, "API.EXAMPLE.COM.", true},
		{exact, "api.example.com:443", true},
		{exact, "x.api.example.com", false},
		{exact, "api.example.com.evil.test", false},
		{wild, "a.example.com", true},
		{wild, "a.b.example.com", true},
		{wild, "example.com", false},
		{wild, "badexample.com", false},
	}
	for _, c := range cases {
		if got := c.rule.Matches(c.host); got != c.want {
			t.Errorf("%s matches %s = %v", c.rule.Host, c.host, got)
		}
	}
	r := Rule{Host: "h.example", Header: "A", Value: "${ONE}:${TWO}"}
	if got := r.Secrets(); len(got) != 2 || got[0] != "ONE" || got[1] != "TWO" {
		t.Errorf("Secrets = %v", got)
	}
	if got := expand(r.Value, map[string]string{"ONE": "1", "TWO": "2"}); got != "1:2" {
		t.Errorf("expand = %q", got)
	}
	p1, p2 := NewPlaceholder(), NewPlaceholder()
	if p1 == p2 || !strings.HasPrefix(p1, PlaceholderPrefix) || len(p1) != len(PlaceholderPrefix)+32 {
		t.Errorf("placeholders %q %q", p1, p2)
	}
}

// Every split of a stream into two writes, and a stream written one byte
// at a time, comes out with the secret redacted and nothing else changed.
func TestRedactingWriterAcrossWrites(t *testing.T) {
	secret := "sk-test-0123456789abcdef"
	other := "another/secret&value"
	text := "before " + secret + " middle " + secret[:5] + " partial " + other + " end " + secret
	want := "before " + Redacted + " middle " + secret[:5] + " partial " + Redacted + " end " + Redacted
	red := newRedactor([]string{secret, other})
	for split := 0; split <= len(text); split++ {
		var out bytes.Buffer
		w := &redactingWriter{r: red, w: &out}
		w.Write([]byte(text[:split]))
		w.Write([]byte(text[split:]))
		w.Close()
		if out.String() != want {
			t.Fatalf("split at %d: got %q", split, out.String())
		}
	}
	var out bytes.Buffer
	w := &redactingWriter{r: red, w: &out}
	for i := 0; i < len(text); i++ {
		w.Write([]byte{text[i]})
	}
	w.Close()
	if out.String() != want {
		t.Fatalf("byte by byte: got %q", out.String())
	}
}

func TestRedactorEscapedForms(t *testing.T) {
	secret := `p&ss/w"rd<1>`
	red := newRedactor([]string{secret})
	for _, echoed := range []string{
		`{"token":"p\u0026ss/w\"rd\u003c1\u003e"}`, // Go's JSON (HTML-escaped)
		`{"token":"p&ss/w\"rd<1>"}`,                // JSON without HTML escaping
		`?token=p%26ss%2Fw%22rd%3C1%3E`,            // query escaping
	} {
		if got := red.String(echoed); strings.Contains(got, "ss/w") || strings.Contains(got, "ss%2Fw") || !strings.Contains(got, Redacted) {
			t.Errorf("%s → %s", echoed, got)
		}
	}
	if got := newRedactor(nil).String("untouched"); got != "untouched" {
		t.Errorf("no secrets changed the text: %q", got)
	}
}

// Of the header rules matching a host, only the most specific pattern's
// apply; env rules always do.
func TestMostSpecificRules(t *testing.T) {
	exact := Rule{Host: "api.example.com", Header: "A", Value: "exact"}
	exact2 := Rule{Host: "api.example.com", Header: "B", Value: "exact too"}
	near := Rule{Host: "*.example.com", Header: "A", Value: "near"}
	far := Rule{Host: "*.com", Header: "C", Value: "far"}
	env := Rule{Host: "*.com", Env: "E", Secret: "S", Placeholder: "p"}
	for _, c := range []struct {
		in, want []Rule
	}{
		{[]Rule{far, near, exact, env, exact2}, []Rule{exact, env, exact2}},
		{[]Rule{far, env, near}, []Rule{env, near}},
		{[]Rule{far}, []Rule{far}},
		{[]Rule{env}, []Rule{env}},
		{nil, nil},
	} {
		got := mostSpecific(c.in)
		if len(got) != len(c.want) {
			t.Errorf("mostSpecific(%v) = %v, want %v", c.in, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("mostSpecific(%v) = %v, want %v", c.in, got, c.want)
				break
			}
		}
	}
}
