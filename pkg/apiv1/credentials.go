package apiv1

import "time"

// CredentialRule binds a stored secret to a sandbox's requests to one host.
// The gateway adds the credential outside the sandbox; the secret's value
// never enters it. A rule is one of two kinds:
//
//   - Header and Value: every HTTPS request to Host gets the header, with
//     ${NAME} in Value replaced by the secret NAME, e.g.
//     {"host":"api.example.com","header":"Authorization","value":"Bearer ${API_TOKEN}"}.
//   - Env and Secret: the sandbox's environment variable Env holds a
//     random placeholder, which the gateway replaces by the secret in the
//     headers and request target of HTTPS requests to Host (and to no
//     other host).
type CredentialRule struct {
	// Host is an exact host name or "*.suffix" (names below suffix).
	Host   string `json:"host"`
	Header string `json:"header,omitempty"`
	Value  string `json:"value,omitempty"`
	Env    string `json:"env,omitempty"`
	Secret string `json:"secret,omitempty"`
}

// SetSecretRequest is the body of POST /v1/secrets. Project is the
// project the secret belongs to (default: the key's); only that project's
// sandboxes can name it in credential rules.
type SetSecretRequest struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Project string `json:"project,omitempty"`
}

// Secret describes a stored secret; its value is never returned.
type Secret struct {
	Name      string    `json:"name"`
	Project   string    `json:"project"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}
