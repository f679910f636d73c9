package apiv1

import (
	"encoding/json"
	"fmt"
)

// NetworkModeNone gives a sandbox loopback only: no uplink, no egress.
const NetworkModeNone = "none"

// NetworkPolicy is what a sandbox may reach outside itself. It is set at
// create time (CreateSandboxRequest.Network) and replaced on a running
// sandbox with PUT /v1/sandboxes/{id}/network. In JSON it is an object, or
// the string "none" for Mode "none".
type NetworkPolicy struct {
	// Mode "none" turns the sandbox's network off (loopback only); empty
	// means the rules below apply.
	Mode string `json:"mode,omitempty"`
	// AllowInternet lets the sandbox reach public addresses (default
	// true). Private, link-local, loopback and multicast ranges, the host
	// and other sandboxes stay closed whatever it says, unless the
	// operator opened a private range (space serve --allow-private).
	AllowInternet *bool `json:"allow_internet,omitempty"`
	// Allow opens IPv4 addresses or CIDRs, and domains ("example.com") or
	// wildcards ("*.example.com": any name below example.com, at any
	// depth, but not example.com itself), even without AllowInternet;
	// Deny closes them, and wins over Allow and AllowInternet. Domains are
	// enforced by the sandbox's gateway: its resolver answers only allowed
	// names and opens just the addresses it answered, and HTTP and HTTPS
	// are judged by Host header / TLS server name, so an address literal,
	// a forged DNS answer or a denied site sharing an allowed one's
	// address goes nowhere. Refusals are recorded as "network.denied"
	// sandbox events.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// AllowPublicTraffic lets anyone who reaches the sandbox proxy reach
	// the sandbox's exposed ports (default true). When false, requests to
	// them must carry the sandbox's traffic_access_token in the
	// E2b-Traffic-Access-Token header. Chosen at create time.
	AllowPublicTraffic *bool `json:"allow_public_traffic,omitempty"`
	// BandwidthMbit (each way) and MaxConnections (open at once) lower the
	// server's per-sandbox limits for this sandbox; 0 keeps the server's.
	// A sandbox's view shows the limits in effect, 0 meaning unlimited.
	// Chosen at create time.
	BandwidthMbit  int `json:"bandwidth_mbit,omitempty"`
	MaxConnections int `json:"max_connections,omitempty"`
	// MaskRequestHost, when set, is the Host header the sandbox proxy
	// sends to the sandbox's exposed ports instead of the client's
	// (E2B's maskRequestHost); "${PORT}" in it becomes the port asked
	// for, e.g. "localhost:${PORT}". Chosen at create time.
	MaskRequestHost string `json:"mask_request_host,omitempty"`
	// HTTPSPorts are the sandbox's ports whose services serve HTTPS
	// themselves (E2B's httpsPorts): the proxy reaches them over TLS,
	// without verifying their certificate (self-signed ones work); the
	// agent's port 49983 cannot be listed. Chosen at create time.
	HTTPSPorts []int `json:"https_ports,omitempty"`
}

// UnmarshalJSON accepts the object form and the shorthand string "none".
func (p *NetworkPolicy) UnmarshalJSON(b []byte) error {
	var mode string
	if err := json.Unmarshal(b, &mode); err == nil {
		if mode != NetworkModeNone {
			return fmt.Errorf("network: the only string form is %q, got %q", NetworkModeNone, mode)
		}
		*p = NetworkPolicy{Mode: mode}
		return nil
	}
	type plain NetworkPolicy
	return json.Unmarshal(b, (*plain)(p))
}
