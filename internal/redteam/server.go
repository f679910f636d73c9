package redteam

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// ServerSection is the section of attacks on the shared server's own
// resources through its API, with an ordinary project key: bombs, floods,
// spills and build storms that try to make the server hold more than any
// bound allows. It runs apart from the sandbox battery (RunServer): it
// needs no host access, and a different key.
const ServerSection Category = "server"

// The outcomes of the server section. A server attack tries to make the
// server hold or do more than a bound allows: it held, or it broke.
const (
	// Held: the server answered with its bound (a 400 or 429, a build
	// failed for its disk limit, a spill that stopped growing); Evidence
	// says which.
	Held Outcome = "held"
	// Broke: the server held or did what no bound allowed; Evidence has
	// the sizes, counts and statuses. A finding.
	Broke Outcome = "BROKE"
)

func held(format string, args ...any) Verdict {
	return Verdict{Outcome: Held, Evidence: fmt.Sprintf(format, args...)}
}

func broke(format string, args ...any) Verdict {
	return Verdict{Outcome: Broke, Evidence: fmt.Sprintf(format, args...)}
}

// Defaults of ServerConfig: what the section may consume itself.
const (
	DefaultMaxUploadBytes = 160 << 20
	DefaultMaxSessions    = 300
	DefaultMaxSandboxes   = 8
	DefaultServerDuration = 15 * time.Minute
	DefaultBombBytes      = 5 << 30
	DefaultBuilds         = 4
)

// ServerConfig is a run of the server section.
type ServerConfig struct {
	// URL and APIKey reach the server; the key should be an ordinary
	// project key, whose project's quotas are what the attacks test.
	URL, APIKey string
	// Template of the sandboxes the attacks make (default "minimal": they
	// need a shell, true, dd and sleep).
	Template string
	// Names restricts the run to these attacks (all when empty).
	Names []string
	// MaxUploadBytes bounds what the run sends the server to hold: the
	// bomb archive and the session tags (DefaultMaxUploadBytes when 0).
	MaxUploadBytes int64
	// MaxSessions bounds the sessions the flood makes; it must be more
	// than the server keeps per sandbox for a bound to show
	// (DefaultMaxSessions when 0).
	MaxSessions int
	// MaxSandboxes bounds the sandboxes the build storm makes to fill the
	// project's quota (DefaultMaxSandboxes when 0).
	MaxSandboxes int
	// Duration bounds the whole run (DefaultServerDuration when 0); the
	// cleanup after it is bounded separately.
	Duration time.Duration
	// BombBytes is what the gzip bomb's one file unpacks to
	// (DefaultBombBytes when 0): more than the server's build disk limit.
	BombBytes int64
	// Builds is how many builds the storm submits at once (DefaultBuilds
	// when 0).
	Builds int
	// Progress, if set, receives each result as it is known; Log, if set,
	// a line per step.
	Progress func(Result)
	Log      io.Writer

	// poll is how often growing things are sampled (a second; tests
	// shorten it), and the timeouts of the attacks are scaled by
	// timeScale (1 when 0).
	poll      time.Duration
	timeScale float64
}

// ServerAttack is one attack of the server section. One attack may
// report several checks (the session flood reports on tags, counts and
// listings from the one flood).
type ServerAttack struct {
	Name    string
	Checks  []Check
	Timeout time.Duration
	// Run performs the attack and returns one verdict per check, in
	// order.
	Run func(ctx context.Context, t *tenant) []Verdict
}

// Check is one reported result of a server attack.
type Check struct {
	Name string
	// Expected is what a bounded server answers; Escape what the attack
	// getting through means.
	Expected, Escape string
}

// ServerAttacks returns the section's attacks in running order: the
// cheap probes first, the bomb before the session flood (which spends
// what the upload budget has left), the build storm (which fills the
// project's sandbox quota) last.
func ServerAttacks() []ServerAttack {
	return []ServerAttack{registryAttack(), bombAttack(), sessionFloodAttack(), spillAttack(), buildStormAttack()}
}

// ServerCheckNames lists the names --name accepts for the section: the
// attacks' and their checks'.
func ServerCheckNames() []string {
	var names []string
	for _, a := range ServerAttacks() {
		names = append(names, a.Name)
		for _, c := range a.Checks {
			if c.Name != a.Name {
				names = append(names, c.Name)
			}
		}
	}
	return names
}

// selectServer keeps the attacks named, or one of whose checks is named.
func selectServer(all []ServerAttack, names []string) []ServerAttack {
	if len(names) == 0 {
		return all
	}
	var out []ServerAttack
	for _, a := range all {
		if slices.Contains(names, a.Name) || slices.ContainsFunc(a.Checks, func(c Check) bool { return slices.Contains(names, c.Name) }) {
			out = append(out, a)
		}
	}
	return out
}

// tenant is one run of the server section: the API as its key sees it,
// what the run has spent of its own bounds, and what it made.
type tenant struct {
	cfg ServerConfig
	api *client.Client
	raw rawAPI

	mu        sync.Mutex
	uploaded  int64
	sandboxes []string
	templates []string
	notes     []string
}

// RunServer plays the server section against cfg.URL with cfg.APIKey.
// Everything it made (sandboxes, their sessions, templates) is deleted
// before it returns, also when ctx ends early.
func RunServer(ctx context.Context, cfg ServerConfig) (*Report, error) {
	cfg = cfg.withDefaults()
	hc := &http.Client{}
	t := &tenant{
		cfg: cfg,
		api: client.New(cfg.URL, cfg.APIKey, client.WithHTTPClient(hc), client.WithUserAgent("space-redteam")),
		raw: rawAPI{url: strings.TrimRight(cfg.URL, "/"), key: cfg.APIKey, hc: hc},
	}
	report := &Report{Server: cfg.URL, Template: cfg.Template, StartedAt: time.Now().UTC()}
	attacks := selectServer(ServerAttacks(), cfg.Names)
	if len(attacks) == 0 {
		return report, errors.New("no server attack matches the selection")
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	defer func() { report.Notes = append(report.Notes, t.cleanup()...) }()
	if status, _, _ := t.raw.do(runCtx, http.MethodGet, "/v1/projects", nil); status == http.StatusOK {
		report.Notes = append(report.Notes, "the key is an admin key: the attacks test its own project's quotas; run with an ordinary project key")
	}
	for _, a := range attacks {
		if runCtx.Err() != nil {
			break
		}
		t.logf("%s", a.Name)
		for _, res := range t.play(runCtx, a) {
			if len(cfg.Names) > 0 && !slices.Contains(cfg.Names, a.Name) && !slices.Contains(cfg.Names, res.Name) {
				continue
			}
			report.Results = append(report.Results, res)
			if cfg.Progress != nil {
				cfg.Progress(res)
			}
		}
		report.Notes = append(report.Notes, t.takeNotes()...)
	}
	if runCtx.Err() != nil && ctx.Err() == nil {
		report.Notes = append(report.Notes, fmt.Sprintf("the run's %s ran out; the attacks after it did not run", cfg.Duration))
		return report, nil
	}
	return report, ctx.Err()
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.Template == "" {
		c.Template = "minimal"
	}
	if c.MaxUploadBytes <= 0 {
		c.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxSandboxes <= 0 {
		c.MaxSandboxes = DefaultMaxSandboxes
	}
	if c.Duration <= 0 {
		c.Duration = DefaultServerDuration
	}
	if c.BombBytes <= 0 {
		c.BombBytes = DefaultBombBytes
	}
	if c.Builds <= 0 {
		c.Builds = DefaultBuilds
	}
	if c.poll <= 0 {
		c.poll = time.Second
	}
	if c.timeScale <= 0 {
		c.timeScale = 1
	}
	return c
}

// play runs one attack within its timeout and turns its verdicts into
// results; the sandboxes it made are deleted after it, so that the next
// attack has the project's quota to itself.
func (t *tenant) play(ctx context.Context, a ServerAttack) []Result {
	began := time.Now()
	actx, cancel := context.WithTimeout(ctx, t.scaled(a.Timeout))
	defer cancel()
	verdicts := a.Run(actx, t)
	t.deleteSandboxes()
	out := make([]Result, len(a.Checks))
	for i, c := range a.Checks {
		v := failed("the attack returned no verdict for this check")
		if i < len(verdicts) {
			v = verdicts[i]
		}
		out[i] = Result{Name: c.Name, Category: ServerSection, Expected: c.Expected, Escape: c.Escape,
			Outcome: v.Outcome, Evidence: v.Evidence, Seconds: time.Since(began).Round(10 * time.Millisecond).Seconds()}
	}
	return out
}

func (t *tenant) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * t.cfg.timeScale)
}

func (t *tenant) logf(format string, args ...any) {
	if t.cfg.Log != nil {
		fmt.Fprintf(t.cfg.Log, "redteam: "+format+"\n", args...)
	}
}

func (t *tenant) note(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func (t *tenant) takeNotes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.notes
	t.notes = nil
	return n
}

// spend takes n bytes from the run's upload budget; false, taking
// nothing, when they do not fit.
func (t *tenant) spend(n int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.uploaded+n > t.cfg.MaxUploadBytes {
		return false
	}
	t.uploaded += n
	return true
}

// newSandbox creates a sandbox of the run's template with shape and
// waits until it runs. A refusal comes back as the client's error (an
// *client.APIError for a status), for the caller to judge.
func (t *tenant) newSandbox(ctx context.Context, diskMB int) (*apiv1.Sandbox, error) {
	sb, err := t.api.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: t.cfg.Template, DiskMB: diskMB, TimeoutS: 3600,
		Metadata: map[string]string{"space-redteam": "server"}})
	if err != nil {
		return nil, err
	}
	t.madeSandbox(sb.ID)
	running, err := t.api.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("wait for sandbox %s: %w", sb.ID, err)
	}
	return running, nil
}

// madeSandbox records a sandbox the run created, for the cleanup.
func (t *tenant) madeSandbox(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sandboxes = append(t.sandboxes, id)
}

// madeTemplate records a template the run submitted, for the cleanup.
func (t *tenant) madeTemplate(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.templates = append(t.templates, name)
}

// waitTemplate polls a template until its build ends (or ctx does).
func (t *tenant) waitTemplate(ctx context.Context, name string) (*apiv1.Template, error) {
	for {
		tpl, err := t.api.GetTemplate(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		if tpl.State != apiv1.TemplateBuilding {
			return tpl, nil
		}
		if err := sleepCtx(ctx, t.cfg.poll); err != nil {
			return tpl, fmt.Errorf("template %s still building: %w", name, err)
		}
	}
}

// cleanupTimeout bounds the cleanup: builds the run started must end
// before their templates can be deleted.
const cleanupTimeout = 5 * time.Minute

func (t *tenant) deleteSandboxes() {
	t.mu.Lock()
	ids := t.sandboxes
	t.sandboxes = nil
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := t.api.DeleteSandbox(ctx, id); err != nil && !client.IsNotFound(err) {
				t.note("could not delete sandbox %s: %v", id, err)
			}
		}()
	}
	wg.Wait()
}

// cleanup deletes what the run made; a template still building is
// deleted once its build ends (the server refuses before, 409).
func (t *tenant) cleanup() []string {
	t.deleteSandboxes()
	t.mu.Lock()
	names := t.templates
	t.templates = nil
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), t.scaled(cleanupTimeout))
	defer cancel()
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := t.api.DeleteTemplate(ctx, name)
				if err == nil || client.IsNotFound(err) {
					return
				}
				if !client.IsConflict(err) || sleepCtx(ctx, t.cfg.poll) != nil {
					t.note("could not delete template %s: %v", name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return t.takeNotes()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// statusOf is the HTTP status of an API error, 0 for other errors.
func statusOf(err error) int {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return 0
}

// mib formats a byte count in MiB (KiB below one MiB).
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
