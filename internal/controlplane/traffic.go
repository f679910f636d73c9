package controlplane

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// Traffic is who may reach a sandbox's exposed ports and how much of the
// node's network it may use. All of it is chosen at create time: a token
// handed out cannot be taken back by turning traffic public and private
// again, and limits are what the sandbox was admitted with.
type Traffic struct {
	// Token must accompany requests to the sandbox's exposed ports
	// through the proxy; empty means they are public.
	Token string `json:"token,omitempty"`
	// BandwidthMbit and MaxConnections are the limits in effect (0:
	// unlimited): the server's, lowered by the create request. The node
	// caps them with its own limits again when it applies them.
	BandwidthMbit  int `json:"bandwidth_mbit,omitempty"`
	MaxConnections int `json:"max_connections,omitempty"`
	// MaskHost is the Host header requests to the exposed ports get
	// ("${PORT}" is the port); empty keeps the client's.
	MaskHost string `json:"mask_host,omitempty"`
	// HTTPSPorts are the ports the proxy reaches over TLS, sorted.
	HTTPSPorts []int `json:"https_ports,omitempty"`
}

// maxHTTPSPorts bounds https_ports; a sandbox serves a handful of ports.
const maxHTTPSPorts = 64

// agentPort is the port the agent (envd) is addressed on; it speaks plain
// HTTP over the node's channel and cannot be made an HTTPS port.
const agentPort = 49983

// checkHTTPSPorts validates https_ports.
func checkHTTPSPorts(ports []int) error {
	if len(ports) > maxHTTPSPorts {
		return invalid("network.https_ports lists %d ports, at most %d", len(ports), maxHTTPSPorts)
	}
	for _, p := range ports {
		switch {
		case p < 1 || p > 65535:
			return invalid("network.https_ports: %d is not a port (1-65535)", p)
		case p == agentPort:
			return invalid("network.https_ports: %d is envd's port and cannot be listed", p)
		}
	}
	return nil
}

// sortedPorts is ports sorted without repeats (nil when empty).
func sortedPorts(ports []int) []int {
	if len(ports) == 0 {
		return nil
	}
	out := append([]int(nil), ports...)
	slices.Sort(out)
	return slices.Compact(out)
}

// ServesHTTPS reports whether the proxy reaches port over TLS.
func (s Sandbox) ServesHTTPS(port int) bool {
	return s.Traffic != nil && slices.Contains(s.Traffic.HTTPSPorts, port)
}

// portVariable in a mask stands for the port a request is for.
const portVariable = "${PORT}"

// maskHostPattern is what a Host header may hold once ${PORT} is
// replaced: a name or address and an optional port, nothing that could
// split the header or the request line.
var maskHostPattern = regexp.MustCompile(`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:[0-9]{1,5})?$`)

// checkMaskHost validates a mask_request_host.
func checkMaskHost(mask string) error {
	if mask == "" {
		return nil
	}
	if len(mask) > 253 {
		return invalid("network.mask_request_host is longer than 253 characters")
	}
	if !maskHostPattern.MatchString(strings.ReplaceAll(mask, portVariable, "1")) {
		return invalid("network.mask_request_host %q is not a host[:port] (%s stands for the port)", mask, portVariable)
	}
	return nil
}

// RequestHost is the Host header the proxy sends to the sandbox's port:
// the mask with the port filled in, or "" to keep the client's.
func (s Sandbox) RequestHost(port int) string {
	if s.Traffic == nil || s.Traffic.MaskHost == "" {
		return ""
	}
	return strings.ReplaceAll(s.Traffic.MaskHost, portVariable, strconv.Itoa(port))
}

// checkTraffic validates the traffic settings of a create request: limits
// may lower the server's, never raise them.
func (cp *ControlPlane) checkTraffic(req *apiv1.NetworkPolicy) error {
	if req == nil {
		return nil
	}
	if err := checkMaskHost(req.MaskRequestHost); err != nil {
		return err
	}
	if err := checkHTTPSPorts(req.HTTPSPorts); err != nil {
		return err
	}
	d := cp.cfg.Defaults
	for _, l := range []struct {
		name            string
		asked, server   int
		unit, serverArg string
	}{
		{"bandwidth_mbit", req.BandwidthMbit, d.BandwidthMbit, "Mbit/s", "--sandbox-bandwidth-mbit"},
		{"max_connections", req.MaxConnections, d.MaxConnections, "connections", "--sandbox-max-connections"},
	} {
		switch {
		case l.asked < 0:
			return invalid("network.%s must be positive (or 0 for the server's limit), got %d", l.name, l.asked)
		case l.server > 0 && l.asked > l.server:
			return invalid("network.%s %d exceeds the server's limit of %d %s per sandbox (space serve %s)",
				l.name, l.asked, l.server, l.unit, l.serverArg)
		}
	}
	return nil
}

// trafficOf resolves a validated create request's traffic settings.
func (cp *ControlPlane) trafficOf(req *apiv1.NetworkPolicy) *Traffic {
	d := cp.cfg.Defaults
	server := network.Limits{BandwidthMbit: d.BandwidthMbit, MaxConnections: d.MaxConnections}
	var asked network.Limits
	t := &Traffic{}
	if req != nil {
		asked = network.Limits{BandwidthMbit: req.BandwidthMbit, MaxConnections: req.MaxConnections}
		if req.AllowPublicTraffic != nil && !*req.AllowPublicTraffic {
			t.Token = newToken()
		}
		t.MaskHost = req.MaskRequestHost
		t.HTTPSPorts = sortedPorts(req.HTTPSPorts)
	}
	l := server.Tighter(asked)
	t.BandwidthMbit, t.MaxConnections = l.BandwidthMbit, l.MaxConnections
	return t
}

// forBranch is a branch's copy of its source's settings: the same limits
// and, if the source's ports are private, a token of its own, so that
// handing out one branch's token opens no other sandbox.
func (t *Traffic) forBranch() *Traffic {
	if t == nil {
		return nil
	}
	out := *t
	if out.Token != "" {
		out.Token = newToken()
	}
	return &out
}

// limits are the sandbox's limits in the node's terms. A record without
// traffic settings (created before they existed) has none of its own and
// gets the node's.
func (t *Traffic) limits() network.Limits {
	if t == nil {
		return network.Limits{}
	}
	return network.Limits{BandwidthMbit: t.BandwidthMbit, MaxConnections: t.MaxConnections}
}

// TrafficToken is the token requests to the sandbox's exposed ports must
// carry; "" when they are public.
func (s Sandbox) TrafficToken() string {
	if s.Traffic == nil {
		return ""
	}
	return s.Traffic.Token
}

// view adds the traffic settings to a sandbox's public policy.
func (t *Traffic) view(p *apiv1.NetworkPolicy) *apiv1.NetworkPolicy {
	public := t == nil || t.Token == ""
	p.AllowPublicTraffic = &public
	l := t.limits()
	p.BandwidthMbit, p.MaxConnections = l.BandwidthMbit, l.MaxConnections
	if t != nil {
		p.MaskRequestHost = t.MaskHost
		p.HTTPSPorts = t.HTTPSPorts
	}
	return p
}

// checkTrafficUnchanged refuses a policy change that would change what is
// chosen at create time. Repeating the values in effect is allowed, so a
// client may send back the policy it read.
func (cp *ControlPlane) checkTrafficUnchanged(id string, req apiv1.NetworkPolicy) error {
	s, err := cp.Get(project.Everything, id)
	if err != nil {
		return err
	}
	current := s.Traffic.view(&apiv1.NetworkPolicy{})
	switch {
	case req.AllowPublicTraffic != nil && *req.AllowPublicTraffic != *current.AllowPublicTraffic:
		return invalid("network.allow_public_traffic is chosen when the sandbox is created and cannot be changed")
	case req.BandwidthMbit != 0 && req.BandwidthMbit != current.BandwidthMbit:
		return invalid("network.bandwidth_mbit is chosen when the sandbox is created and cannot be changed (it is %d)", current.BandwidthMbit)
	case req.MaskRequestHost != "" && req.MaskRequestHost != current.MaskRequestHost:
		return invalid("network.mask_request_host is chosen when the sandbox is created and cannot be changed")
	case req.HTTPSPorts != nil && !slices.Equal(sortedPorts(req.HTTPSPorts), current.HTTPSPorts):
		return invalid("network.https_ports are chosen when the sandbox is created and cannot be changed")
	case req.MaxConnections != 0 && req.MaxConnections != current.MaxConnections:
		return invalid("network.max_connections is chosen when the sandbox is created and cannot be changed (it is %d)", current.MaxConnections)
	}
	return nil
}
