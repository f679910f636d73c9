package redteam

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// DefaultAttemptTimeout bounds one attempt, scripts and checks included.
const DefaultAttemptTimeout = 60 * time.Second

// Config is a red-team run.
type Config struct {
	// URL and APIKey reach the server; the key must be the admin key, or
	// one that may create sandboxes.
	URL, APIKey string
	// Template of every sandbox the run creates (default "base": the
	// scripts need bash, python3 and curl).
	Template string
	// Runtime is the backend of every sandbox and template the run
	// creates ("gvisor", "microvm"; empty: the template's default).
	// Attempts read it from the sandboxes the server made, so that they
	// judge by the backend the attacker really runs on.
	Runtime string
	// MemoryMB is the memory of the run's sandboxes that name none of
	// their own (0: the server's default); small guests keep a microVM
	// run affordable.
	MemoryMB int
	// Only restricts the run to these categories (all when empty); Names
	// to these attempts.
	Only  []Category
	Names []string
	// DataDir is the server's --data-dir: its agent binary and keys are
	// watched and scanned for. Empty leaves those checks out.
	DataDir string
	// CanaryRoot is where the host canary directory is made (default the
	// system temporary directory).
	CanaryRoot string
	// Reach is host:port of an HTTP server outside the node that the
	// attacker's policy allows; Unallowed one that it does not. Network
	// attempts need them to tell policy from a broken network.
	Reach, Unallowed string
	// AllowedName and DeniedName are domains that resolve upstream to the
	// same address (which answers HTTP and HTTPS for both); RebindName is
	// one that resolves to a private address.
	AllowedName, DeniedName, RebindName string
	// AttemptTimeout bounds each attempt (DefaultAttemptTimeout if zero).
	AttemptTimeout time.Duration
	// Progress, if set, receives each result as it is known; Log, if set,
	// receives a line per setup step.
	Progress func(Result)
	Log      io.Writer
}

// Report is the outcome of a run.
type Report struct {
	Server    string    `json:"server"`
	Template  string    `json:"template"`
	Runtime   string    `json:"runtime,omitempty"`
	StartedAt time.Time `json:"started_at"`
	Results   []Result  `json:"results"`
	// Notes say which checks could not be set up and why.
	Notes []string `json:"notes,omitempty"`
}

// Failures returns the results that escaped or errored.
func (r *Report) Failures() []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Failed() {
			out = append(out, res)
		}
	}
	return out
}

// Count returns how many results have the outcome.
func (r *Report) Count(o Outcome) int {
	n := 0
	for _, res := range r.Results {
		if res.Outcome == o {
			n++
		}
	}
	return n
}

// runner is one run's state.
type runner struct {
	cfg      Config
	api      *client.Client
	scene    *Scene
	features map[Feature]bool
	notes    []string

	victimToken, victimSleep, victimSession string

	mu      sync.Mutex
	created []string
}

// Run plays the selected attempts against the server and returns their
// results. It deletes every sandbox it created, also when ctx ends early.
// An error means the run could not be set up or was interrupted; the
// report then holds the results so far.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Template == "" {
		cfg.Template = "base"
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.CanaryRoot == "" {
		cfg.CanaryRoot = os.TempDir()
	}
	hc := &http.Client{}
	r := &runner{
		cfg:      cfg,
		api:      client.New(cfg.URL, cfg.APIKey, client.WithHTTPClient(hc), client.WithUserAgent("space-redteam")),
		features: map[Feature]bool{},
	}
	report := &Report{Server: cfg.URL, Template: cfg.Template, Runtime: cfg.Runtime, StartedAt: time.Now().UTC()}
	attempts := Select(Catalog(), cfg.Only, cfg.Names)
	if len(attempts) == 0 {
		return report, errors.New("no attempt matches the selection")
	}

	h, err := plantHost(cfg.CanaryRoot)
	if err != nil {
		return report, err
	}
	defer h.close()
	r.scene = &Scene{api: r.api, raw: rawAPI{url: strings.TrimRight(cfg.URL, "/"), key: cfg.APIKey, hc: hc}, cfg: cfg, host: h}
	defer r.cleanup()

	err = r.setup(ctx, attempts)
	report.Runtime = r.scene.Runtime
	if err != nil {
		report.Notes = append(h.notes, r.notes...)
		return report, err
	}
	for _, a := range attempts {
		if ctx.Err() != nil {
			break
		}
		res := r.play(ctx, a)
		report.Results = append(report.Results, res)
		if cfg.Progress != nil {
			cfg.Progress(res)
		}
	}
	report.Notes = append(h.notes, r.notes...)
	return report, ctx.Err()
}

// Select filters attempts by category and name; empty filters keep all.
func Select(all []Attempt, only []Category, names []string) []Attempt {
	var out []Attempt
	for _, a := range all {
		if len(only) > 0 && !slices.Contains(only, a.Category) {
			continue
		}
		if len(names) > 0 && !slices.Contains(names, a.Name) {
			continue
		}
		out = append(out, a)
	}
	return out
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "redteam: "+format+"\n", args...)
	}
}

// attackerPolicy is what the attacker may reach: nothing but the allowed
// address (a documentation address when none was given, so the allow
// list is never empty).
func (r *runner) attackerPolicy() *apiv1.NetworkPolicy {
	allow := "203.0.113.254"
	if host, _, err := splitHostPort(r.cfg.Reach); err == nil {
		allow = host
	}
	off := false
	return &apiv1.NetworkPolicy{AllowInternet: &off, Allow: []string{allow}}
}

func splitHostPort(hp string) (string, string, error) {
	if hp == "" {
		return "", "", errors.New("empty")
	}
	u, err := url.Parse("//" + hp)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return "", "", fmt.Errorf("%q is not host:port", hp)
	}
	return u.Hostname(), u.Port(), nil
}

// newSandbox creates a sandbox and waits until it runs.
func (r *runner) newSandbox(ctx context.Context, shape *Sandbox, policy *apiv1.NetworkPolicy) (*apiv1.Sandbox, error) {
	req := apiv1.CreateSandboxRequest{Template: r.cfg.Template, Runtime: r.cfg.Runtime, TimeoutS: 3600, Network: policy, Metadata: map[string]string{"space-redteam": "1"}}
	if shape != nil {
		req.VCPUs, req.MemoryMB, req.DiskMB = shape.VCPUs, shape.MemoryMB, shape.DiskMB
	}
	if req.MemoryMB == 0 {
		req.MemoryMB = r.cfg.MemoryMB
	}
	sb, err := r.api.CreateSandbox(ctx, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.created = append(r.created, sb.ID)
	r.mu.Unlock()
	running, err := r.api.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("wait for sandbox %s: %w", sb.ID, err)
	}
	running.AccessToken = sb.AccessToken
	return running, nil
}

func (r *runner) deleteSandbox(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.api.DeleteSandbox(ctx, id); err != nil && !client.IsNotFound(err) {
		r.notes = append(r.notes, fmt.Sprintf("could not delete sandbox %s: %v", id, err))
	}
	r.mu.Lock()
	r.created = slices.DeleteFunc(r.created, func(s string) bool { return s == id })
	r.mu.Unlock()
}

func (r *runner) cleanup() {
	r.mu.Lock()
	ids := slices.Clone(r.created)
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); r.deleteSandbox(id) }()
	}
	wg.Wait()
	// Children first: a template's children were built from it.
	for i := len(r.scene.templates) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := r.api.DeleteTemplate(ctx, r.scene.templates[i]); err != nil && !client.IsNotFound(err) {
			r.notes = append(r.notes, fmt.Sprintf("could not delete template %s: %v", r.scene.templates[i], err))
		}
		cancel()
	}
	if name := r.scene.facts["SECRET_NAME"]; name != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, _ = r.scene.raw.do(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil)
	}
}

// setup creates the victim, bystander and attacker, plants the victim's
// secrets, detects features and gathers the facts scripts receive.
func (r *runner) setup(ctx context.Context, attempts []Attempt) error {
	s, h := r.scene, r.scene.host
	r.logf("creating the attacker, victim and bystander sandboxes from %s", r.cfg.Template)
	type made struct {
		sb  *apiv1.Sandbox
		err error
	}
	var victim, bystander, attacker made
	// One after the other: emulated guests booting side by side on a
	// small host each take long enough to miss the agent's start bound,
	// and gVisor sandboxes start in about a second anyway.
	for _, m := range []struct {
		out    *made
		policy *apiv1.NetworkPolicy
	}{{&victim, nil}, {&bystander, nil}, {&attacker, r.attackerPolicy()}} {
		m.out.sb, m.out.err = r.newSandbox(ctx, nil, m.policy)
		if m.out.err != nil {
			return fmt.Errorf("create sandbox: %w", m.out.err)
		}
	}
	s.Victim, s.Bystander, s.Attacker = victim.sb.ID, bystander.sb.ID, attacker.sb.ID
	s.Runtime = attacker.sb.Runtime
	if s.Runtime == "" {
		s.Runtime = "gvisor" // a server from before the runtime choice
	}
	r.logf("the sandboxes run on %s (%s)", s.Runtime, attacker.sb.Isolation)
	h.secrets["victim access token"] = victim.sb.AccessToken
	h.secrets["bystander access token"] = bystander.sb.AccessToken
	h.secrets["API key"] = r.cfg.APIKey

	// The victim holds a secret file and a long-running process.
	r.victimToken = "space-redteam-victim-" + randomHex(16)
	h.secrets["victim's file"] = r.victimToken
	if _, err := r.api.WriteFile(ctx, s.Victim, "/home/user/victim-secret", strings.NewReader(r.victimToken)); err != nil {
		return fmt.Errorf("plant the victim's file: %w", err)
	}
	r.victimSleep = fmt.Sprintf("%d", 77000000+time.Now().UnixNano()%999999)
	sess, err := r.api.CreateSession(ctx, s.Victim, apiv1.CreateSessionRequest{Cmd: []string{"sleep", r.victimSleep}})
	if err != nil {
		return fmt.Errorf("start the victim's process: %w", err)
	}
	r.victimSession = sess.ID
	h.secrets["victim's process"] = "sleep " + r.victimSleep

	if r.cfg.DataDir != "" {
		// The node keeps every agent binary it has run, by digest
		// (node/agents/<sha256>/space-agent): each is mounted into some
		// sandbox, so each must stay unchanged.
		agents, _ := filepath.Glob(filepath.Join(r.cfg.DataDir, "node", "agents", "*", "space-agent"))
		if len(agents) == 0 {
			r.notes = append(r.notes, "no agent binary found in the server's data directory: none is checked")
		}
		for _, a := range agents {
			h.watchFile("the agent binary", a)
		}
		if s.Runtime == "microvm" {
			r.watchGuests(ctx)
		}
		h.secretFile("server admin key file", filepath.Join(r.cfg.DataDir, "admin.key"))
		h.secretFile("secrets key", filepath.Join(r.cfg.DataDir, "secrets.key"))
		h.secretFile("egress CA key", filepath.Join(r.cfg.DataDir, "ca", "ca.key"))
	} else {
		r.notes = append(r.notes, "no server data directory given: its agent binary and keys are not checked")
	}
	r.watchLimits(s.Attacker)

	uplinkHost, uplinkGW, _ := network.UplinkAddrs(s.Attacker)
	victimHost, victimGW, _ := network.UplinkAddrs(s.Victim)
	apiPort := ""
	if u, err := url.Parse(r.cfg.URL); err == nil {
		apiPort = u.Port()
	}
	s.facts = map[string]string{
		"CANARY_PATH":  h.canaryPath,
		"CANARY_DIR":   h.canaryDir,
		"DROP_PATH":    h.dropPath,
		"HOST_ADDRS":   strings.Join(hostAddrs(), " "),
		"HOST_PORT":    fmt.Sprint(h.port),
		"API_PORT":     apiPort,
		"UPLINK_HOST":  addrString(uplinkHost),
		"UPLINK_GW":    addrString(uplinkGW),
		"VICTIM_HOST":  addrString(victimHost),
		"VICTIM_GW":    addrString(victimGW),
		"VICTIM_ID":    s.Victim,
		"DATA_DIR":     r.cfg.DataDir,
		"REACH":        r.cfg.Reach,
		"UNALLOWED":    r.cfg.Unallowed,
		"ALLOWED_NAME": r.cfg.AllowedName,
		"DENIED_NAME":  r.cfg.DeniedName,
		"REBIND_NAME":  r.cfg.RebindName,
		"RUNNER_PID":   fmt.Sprint(os.Getpid()),
		"RUNTIME":      s.Runtime,
	}
	if pid := vmmPID(r.cfg.DataDir, s.Victim); pid > 0 {
		s.facts["VICTIM_VMM_PID"] = fmt.Sprint(pid)
	}
	if h.sentinel != nil {
		s.facts["SENTINEL_PID"] = fmt.Sprint(h.sentinel.Process.Pid)
	}
	if r.cfg.DataDir != "" {
		s.facts["HOST_ROOTFS"] = filepath.Join(r.cfg.DataDir, "volumes", "sandboxes", s.Attacker)
	}
	return r.detectFeatures(ctx, attempts)
}

func addrString(a interface {
	IsValid() bool
	String() string
}) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// watchGuests watches what a microVM guest could reach for on the host:
// the initramfs every guest boots its agent from, the victim's and the
// bystander's QEMU processes and the files their QEMU was started with,
// and the template's root image that every sandbox's is cloned from.
func (r *runner) watchGuests(ctx context.Context) {
	h, dir := r.scene.host, filepath.Join(r.cfg.DataDir, "microvm")
	initrds, _ := filepath.Glob(filepath.Join(dir, "initramfs", "initramfs-*.cpio"))
	if len(initrds) == 0 {
		r.notes = append(r.notes, "no guest initramfs found in the server's data directory: none is checked")
	}
	for _, p := range initrds {
		h.watchFile("the guests' initramfs (their agent)", p)
	}
	for who, id := range map[string]string{"victim": r.scene.Victim, "bystander": r.scene.Bystander} {
		if pid := vmmPID(r.cfg.DataDir, id); pid > 0 {
			h.watchProcess("the "+who+"'s QEMU", pid)
		} else {
			r.notes = append(r.notes, "the "+who+"'s QEMU is not checked: no pid file")
		}
		h.watchFile("the "+who+"'s QEMU environment", filepath.Join(dir, id, "env.json"))
	}
	if tpl, err := r.api.GetTemplate(ctx, r.cfg.Template); err != nil {
		r.notes = append(r.notes, fmt.Sprintf("the template's root image is not checked: %v", err))
	} else {
		// The artifact volume of the template's microVM build
		// (<id>.microvm, beside its tree).
		images, _ := filepath.Glob(filepath.Join(r.cfg.DataDir, "volumes", "templates", tpl.ID+"*", "rootfs.img"))
		if len(images) == 0 {
			r.notes = append(r.notes, "the template's root image was not found: not checked")
		}
		for _, p := range images {
			h.watchStat("the template's root image", p)
		}
	}
}

// vmmPID is the host pid of a microVM sandbox's QEMU, 0 if it has none.
func vmmPID(dataDir, id string) int {
	if dataDir == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "microvm", id, "qemu.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// watchLimits watches the attacker's cgroup limits on the host (v1 and v2
// layouts): a sandbox that raises its own limits has escaped them.
func (r *runner) watchLimits(id string) {
	found := false
	for _, p := range []string{
		"/sys/fs/cgroup/memory/space/" + id + "/memory.limit_in_bytes",
		"/sys/fs/cgroup/pids/space/" + id + "/pids.max",
		"/sys/fs/cgroup/cpu/space/" + id + "/cpu.cfs_quota_us",
		"/sys/fs/cgroup/space/" + id + "/memory.max",
		"/sys/fs/cgroup/space/" + id + "/pids.max",
		"/sys/fs/cgroup/space/" + id + "/cpu.max",
	} {
		if _, err := os.Stat(p); err == nil {
			r.scene.host.watchFile("the attacker's cgroup limit", p)
			found = true
		}
	}
	if !found {
		r.notes = append(r.notes, "the attacker's cgroup limits were not found on this host: not checked")
	}
}

// detectFeatures finds out which optional features the server and the
// configuration offer, creating what the selected attempts need.
func (r *runner) detectFeatures(ctx context.Context, attempts []Attempt) error {
	s := r.scene
	need := map[Feature]bool{}
	for _, a := range attempts {
		for _, f := range a.Requires {
			need[f] = true
		}
	}
	r.features[FeatureReach] = r.cfg.Reach != ""
	r.features[FeatureUnallowed] = r.cfg.Unallowed != ""
	r.features[FeatureNames] = r.cfg.AllowedName != "" && r.cfg.DeniedName != ""
	r.features[FeatureRebindName] = r.cfg.RebindName != ""

	if need[FeatureDomainRules] {
		denied := r.cfg.DeniedName
		if denied == "" {
			denied = "denied.redteam.invalid"
		}
		on := true
		sb, err := r.newSandbox(ctx, nil, &apiv1.NetworkPolicy{AllowInternet: &on, Deny: []string{denied}})
		var apiErr *client.APIError
		switch {
		case err == nil:
			r.features[FeatureDomainRules] = true
			s.openBox = sb.ID
			s.facts["OPEN_BOX"] = sb.ID
		case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusBadRequest:
			r.notes = append(r.notes, "the server refuses domain rules: "+apiErr.Error())
		default:
			return fmt.Errorf("create the sandbox for DNS attempts: %w", err)
		}
	}
	if need[FeatureSecrets] {
		status, _, err := s.raw.do(ctx, http.MethodGet, "/v1/secrets", nil)
		switch {
		case err == nil:
			r.features[FeatureSecrets] = true
		case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
			r.notes = append(r.notes, "the server has no secrets API")
		default:
			return fmt.Errorf("probe the secrets API: %w", err)
		}
	}
	return nil
}

// play runs one attempt and then the checks that do not trust it.
func (r *runner) play(ctx context.Context, a Attempt) Result {
	res := Result{Name: a.Name, Category: a.Category, Expected: a.Expected, Escape: a.Escape}
	var missing []string
	for _, f := range a.Requires {
		if !r.features[f] {
			missing = append(missing, string(f))
		}
	}
	if len(missing) > 0 {
		res.Outcome, res.Evidence = Skipped, "needs "+strings.Join(missing, ", ")
		return res
	}
	if len(a.Runtimes) > 0 && !slices.Contains(a.Runtimes, r.scene.Runtime) {
		res.Outcome, res.Evidence = Skipped, "not on "+r.scene.Runtime+": "+a.NotOn
		return res
	}
	if v, ok := r.scene.lacks(ctx, a.Tools...); !ok {
		res.Outcome, res.Evidence = v.Outcome, v.Evidence
		return res
	}
	began := time.Now()
	s := r.scene
	s.transcript.Reset()
	attacker := s.Attacker
	// The attempt's own sandbox is made before its time starts: a guest's
	// boot (long under emulation) is not the attempt.
	if a.Own != nil {
		sb, err := r.newSandbox(ctx, a.Own, r.attackerPolicy())
		if err != nil {
			res.Outcome, res.Evidence = Errored, "could not create the attempt's own sandbox: "+err.Error()
			return res
		}
		s.Attacker = sb.ID
		defer func() { s.Attacker = attacker; r.deleteSandbox(sb.ID) }()
	} else if err := r.ensureAttacker(ctx); err != nil {
		res.Outcome, res.Evidence = Errored, err.Error()
		return res
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = r.cfg.AttemptTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	v := a.Run(actx, s)
	// Evidence from outside the sandbox overrides what the attempt found.
	var outside []string
	if leaks := s.host.leaks(s.transcript.String()); len(leaks) > 0 {
		slices.Sort(leaks)
		outside = append(outside, "the sandbox's output holds the "+strings.Join(leaks, ", the "))
	}
	outside = append(outside, s.host.check()...)
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	outside = append(outside, r.checkNeighbours(cctx)...)
	if len(outside) > 0 {
		v = escaped("%s", strings.Join(outside, "; "))
	}
	res.Outcome, res.Evidence = v.Outcome, v.Evidence
	res.Seconds = time.Since(began).Round(10 * time.Millisecond).Seconds()
	return res
}

// ensureAttacker replaces the shared attacker if an earlier attempt killed
// it, so one attempt's damage does not turn the rest into errors.
func (r *runner) ensureAttacker(ctx context.Context) error {
	s := r.scene
	if res, err := r.api.Exec(ctx, s.Attacker, apiv1.ExecRequest{Cmd: []string{"true"}, TimeoutS: 20}); err == nil && res.ExitCode == 0 {
		return nil
	}
	r.logf("the attacker sandbox %s stopped answering; replacing it", s.Attacker)
	old := s.Attacker
	sb, err := r.newSandbox(ctx, nil, r.attackerPolicy())
	if err != nil {
		return fmt.Errorf("replace the attacker sandbox: %w", err)
	}
	r.deleteSandbox(old)
	s.Attacker = sb.ID
	r.notes = append(r.notes, fmt.Sprintf("attacker sandbox %s was replaced by %s", old, sb.ID))
	if hostAddr, gw, ok := network.UplinkAddrs(sb.ID); ok {
		s.facts["UPLINK_HOST"], s.facts["UPLINK_GW"] = hostAddr.String(), gw.String()
	}
	return nil
}

// checkNeighbours verifies that the victim is untouched and that the
// bystander, and so the host, still serves.
func (r *runner) checkNeighbours(ctx context.Context) []string {
	s := r.scene
	var bad []string
	if res, err := r.api.Exec(ctx, s.Bystander, apiv1.ExecRequest{Cmd: []string{"true"}, TimeoutS: 20}); err != nil || res.ExitCode != 0 {
		bad = append(bad, fmt.Sprintf("the bystander sandbox stopped running commands (%v)", err))
	}
	body, err := r.api.ReadFile(ctx, s.Victim, "/home/user/victim-secret")
	if err != nil {
		bad = append(bad, fmt.Sprintf("the victim's file cannot be read (%v)", err))
	} else {
		b, _ := io.ReadAll(body)
		body.Close()
		if string(b) != r.victimToken {
			bad = append(bad, fmt.Sprintf("the victim's file changed to %q", tail(string(b), 80)))
		}
	}
	// Asked of the server, not of a tool (pgrep) the template may lack.
	if sess, err := r.api.GetSession(ctx, s.Victim, r.victimSession); err != nil || sess.State != apiv1.SessionRunning {
		state := ""
		if sess != nil {
			state = sess.State
		}
		bad = append(bad, fmt.Sprintf("the victim's process is gone (%s%v)", state, errOrNil(err)))
	}
	return bad
}
