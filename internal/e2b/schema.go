package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/pkg/apiv1"
)

// newSandbox is E2B's NewSandbox (v1) and NewSandboxV2 request. Options
// space cannot honour are kept raw so that a request using them is refused
// rather than half-served.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResume       `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Network             json.RawMessage   `json:"network"`
	MCP                 json.RawMessage   `json:"mcp"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	IAM                 json.RawMessage   `json:"iam"`
}

type autoResume struct {
	Enabled *bool `json:"enabled"`
}

// emptyJSON reports whether a raw option is absent, null or an empty
// object or array: all of which ask for nothing.
func emptyJSON(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", "{}", "[]":
		return true
	}
	return false
}

// unsupported names the first option in req that space cannot honour, as
// the message of a 400; "" when there is none.
func (req *newSandbox) unsupported() string {
	switch {
	case !emptyJSON(req.IAM):
		return "iam is not supported by space: no IAM tokens can be issued to sandboxes; remove the iam option"
	}
	if !emptyJSON(req.Network) {
		var network map[string]json.RawMessage
		if err := json.Unmarshal(req.Network, &network); err != nil {
			return "network must be an object: " + err.Error()
		}
		keys := make([]string, 0, len(network))
		for k := range network {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := network[k]
			switch k {
			case "allowPublicTraffic":
				var public *bool
				if err := json.Unmarshal(v, &public); err != nil {
					return "network.allowPublicTraffic must be true or false"
				}
				continue
			case "allowOut", "denyOut":
				var rules []string
				if err := json.Unmarshal(v, &rules); err != nil {
					return fmt.Sprintf("network.%s must be a list of addresses, CIDRs or domains", k)
				}
				continue
			case "maskRequestHost":
				var mask *string
				if err := json.Unmarshal(v, &mask); err != nil {
					return "network.maskRequestHost must be a string"
				}
				continue
			case "httpsPorts":
				var ports []int
				if err := json.Unmarshal(v, &ports); err != nil {
					return "network.httpsPorts must be a list of port numbers"
				}
				continue
			case "rules":
				if _, msg := credentialRules(v); msg != "" {
					return msg
				}
				continue
			}
			if emptyJSON(v) {
				continue
			}
			return fmt.Sprintf("network.%s is not supported by space; remove it", k)
		}
	}
	return ""
}

// request translates an E2B create request into space's.
func (req *newSandbox) request() (apiv1.CreateSandboxRequest, string) {
	out := apiv1.CreateSandboxRequest{Template: req.TemplateID, Env: req.EnvVars, Metadata: req.Metadata}
	if req.Timeout != nil {
		if *req.Timeout < 0 {
			return out, fmt.Sprintf("timeout must be a positive number of seconds, got %d", *req.Timeout)
		}
		out.TimeoutS = *req.Timeout
	}
	if req.AutoPause != nil && *req.AutoPause {
		// E2B pauses on timeout; space's durable suspend is its pause.
		out.OnTimeout = "suspend"
	}
	// E2B wakes a paused sandbox on traffic only when asked to
	// (autoResume.enabled, default false); space's native default is on,
	// so the E2B API always says which it wants.
	autoResume := req.AutoResume != nil && req.AutoResume.Enabled != nil && *req.AutoResume.Enabled
	out.AutoResume = &autoResume
	if !autoResume {
		// E2B pauses a sandbox on its own only at its timeout. space's
		// idle suspend is invisible only when traffic undoes it; without
		// auto-resume it would leave the sandbox paused behind its
		// owner's back, so it is off.
		out.IdleSuspendS = -1
	}
	if msg := req.pauseMemory(&out); msg != "" {
		return out, msg
	}
	mounts, msg := volumeMounts(req.VolumeMounts)
	if msg != "" {
		return out, msg
	}
	out.VolumeMounts = mounts
	policy, msg := req.networkPolicy()
	out.Network = policy
	if msg == "" {
		var n e2bNetwork
		_ = json.Unmarshal(req.Network, &n) // networkPolicy parsed it
		out.Credentials, msg = credentialRules(n.Rules)
	}
	return out, msg
}

// e2bNetwork is E2B's SandboxNetworkConfig as space serves it.
type e2bNetwork struct {
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	MaskRequestHost    *string         `json:"maskRequestHost"`
	HTTPSPorts         []int           `json:"httpsPorts"`
	Rules              json.RawMessage `json:"rules"`
}

// everywhere is how E2B's egress rules say "all of the internet".
const everywhere = "0.0.0.0/0"

// networkPolicy translates allow_internet_access and network into space's
// policy (nil: the default). E2B lets allowOut win over denyOut, space
// lets a deny win: denyOut 0.0.0.0/0 (E2B's "only what allowOut names")
// becomes allow_internet false, and a denyOut range covering an allowOut
// address is refused rather than silently reversed.
func (req *newSandbox) networkPolicy() (*apiv1.NetworkPolicy, string) {
	var n e2bNetwork
	if !emptyJSON(req.Network) {
		if err := json.Unmarshal(req.Network, &n); err != nil {
			return nil, "network must be an object: " + err.Error()
		}
	}
	mask := ""
	if n.MaskRequestHost != nil {
		mask = *n.MaskRequestHost
	}
	if n.AllowPublicTraffic == nil && mask == "" && len(n.HTTPSPorts) == 0 {
		return egressPolicy(req.AllowInternetAccess, n.AllowOut, n.DenyOut)
	}
	p, msg := egressPolicy(req.AllowInternetAccess, n.AllowOut, n.DenyOut)
	if p == nil {
		p = &apiv1.NetworkPolicy{}
	}
	p.AllowPublicTraffic, p.MaskRequestHost, p.HTTPSPorts = n.AllowPublicTraffic, mask, n.HTTPSPorts
	return p, msg
}

// egressPolicy translates E2B's allow_internet_access, allowOut and
// denyOut into space's policy (nil when all are absent: the default).
func egressPolicy(allowInternet *bool, allowOut, denyOut []string) (*apiv1.NetworkPolicy, string) {
	if allowInternet == nil && len(allowOut) == 0 && len(denyOut) == 0 {
		return nil, ""
	}
	internet := allowInternet == nil || *allowInternet
	p := &apiv1.NetworkPolicy{Allow: allowOut}
	for _, d := range denyOut {
		if strings.TrimSpace(d) == everywhere {
			internet = false
			continue
		}
		p.Deny = append(p.Deny, d)
	}
	for _, d := range p.Deny {
		deny, err := network.ParsePrefixes([]string{d})
		if err != nil {
			continue // a domain, or malformed: space validates it
		}
		for _, a := range p.Allow {
			allow, err := network.ParsePrefixes([]string{a})
			if err != nil {
				continue
			}
			if deny[0].Bits() <= allow[0].Bits() && deny[0].Contains(allow[0].Addr()) {
				return nil, fmt.Sprintf("network.denyOut %q covers network.allowOut %q: in space a deny rule wins over an allow rule; deny everything with %q and list what is allowed in allowOut instead", d, a, everywhere)
			}
		}
	}
	p.AllowInternet = &internet
	return p, ""
}

// sandboxJSON is E2B's Sandbox (create, connect and fork responses).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedSandbox is E2B's ListedSandbox; every field but alias and metadata
// is required by the Python SDK.
type listedSandbox struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   string            `json:"startedAt"`
	EndAt       string            `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
	// VolumeMounts are the volumes it mounts (by name), absent for none.
	VolumeMounts []sandboxVolumeMount `json:"volumeMounts,omitempty"`
}

// sandboxDetail is E2B's SandboxDetail (GET /sandboxes/{id}).
type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken     string          `json:"envdAccessToken"`
	Domain              *string         `json:"domain"`
	AllowInternetAccess bool            `json:"allowInternetAccess"`
	Network             networkDetail   `json:"network"`
	Lifecycle           lifecycleDetail `json:"lifecycle"`
}

// networkDetail is the part of E2B's SandboxNetworkConfig space serves.
type networkDetail struct {
	AllowPublicTraffic bool                     `json:"allowPublicTraffic"`
	AllowOut           []string                 `json:"allowOut,omitempty"`
	DenyOut            []string                 `json:"denyOut,omitempty"`
	MaskRequestHost    string                   `json:"maskRequestHost,omitempty"`
	HTTPSPorts         []int                    `json:"httpsPorts,omitempty"`
	Rules              map[string][]e2bRuleView `json:"rules,omitempty"`
}

type lifecycleDetail struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// sandboxMetric is E2B's SandboxMetric; every field is required.
type sandboxMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       uint64  `json:"memUsed"`
	MemTotal      uint64  `json:"memTotal"`
	MemCache      uint64  `json:"memCache"`
	DiskUsed      uint64  `json:"diskUsed"`
	DiskTotal     uint64  `json:"diskTotal"`
}

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// forkResult is one entry of the fork response: a sandbox or an error.
type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

// e2bState maps space's states onto E2B's two. ok is false for sandboxes
// E2B would not show at all (stopped, failed). Space's resident pause and
// its durable suspend are both "paused" to E2B: neither runs.
func e2bState(state string) (string, bool) {
	switch state {
	case apiv1.StateStopped, apiv1.StateStopping, apiv1.StateFailed:
		return "", false
	case apiv1.StatePaused, apiv1.StateSuspending, apiv1.StateSuspended:
		return "paused", true
	}
	return "running", true
}

func (h *Handler) domain() *string {
	if h.cfg.Domain == "" {
		return nil
	}
	d := h.cfg.Domain
	return &d
}

func (h *Handler) sandboxView(s controlplane.Sandbox) sandboxJSON {
	return sandboxJSON{
		TemplateID: s.TemplateName(), SandboxID: s.ID, Alias: s.TemplateName(), ClientID: clientID,
		EnvdVersion: envdVersion, EnvdAccessToken: s.AccessToken, Domain: h.domain(),
		TrafficAccessToken: trafficToken(s),
	}
}

// trafficToken is the sandbox's traffic access token, null when its ports
// are public.
func trafficToken(s controlplane.Sandbox) *string {
	if t := s.TrafficToken(); t != "" {
		return &t
	}
	return nil
}

func listedView(s controlplane.Sandbox) listedSandbox {
	state, _ := e2bState(s.State)
	started := s.CreatedAt
	if s.StartedAt != nil {
		started = *s.StartedAt
	}
	metadata := s.Metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	return listedSandbox{
		TemplateID: s.TemplateName(), Alias: s.TemplateName(), SandboxID: s.ID, ClientID: clientID,
		StartedAt: started.UTC().Format(time.RFC3339Nano), EndAt: s.ExpiresAt.UTC().Format(time.RFC3339Nano),
		CPUCount: s.VCPUs, MemoryMB: s.MemoryMB, DiskSizeMB: s.DiskMB, State: state,
		EnvdVersion: envdVersion, Metadata: metadata, VolumeMounts: mountsView(s),
	}
}

func (h *Handler) detailView(s controlplane.Sandbox) sandboxDetail {
	onTimeout := "kill"
	if s.Lifecycle.OnTimeout == "suspend" {
		onTimeout = "pause"
	}
	network := networkDetail{AllowPublicTraffic: s.TrafficToken() == "", Rules: rulesView(s.API().Credentials)}
	if s.Traffic != nil {
		network.MaskRequestHost, network.HTTPSPorts = s.Traffic.MaskHost, s.Traffic.HTTPSPorts
	}
	internet := true
	if n := s.Network; n != nil {
		internet = n.AllowInternet && !n.Offline
		network.AllowOut, network.DenyOut = n.Allow, n.Deny
	}
	return sandboxDetail{
		listedSandbox: listedView(s), EnvdAccessToken: s.AccessToken, Domain: h.domain(),
		AllowInternetAccess: internet, Network: network,
		Lifecycle: lifecycleDetail{AutoResume: s.Lifecycle.AutoResume, OnTimeout: onTimeout},
	}
}

// snapshotRef strips E2B's ":tag" suffix from a snapshot id; space's
// snapshots have no tags.
func snapshotRef(id string) string {
	ref, _, _ := strings.Cut(id, ":")
	return ref
}
