package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
	"github.com/space-platform/space/internal/storage"
)

// Template states.
const (
	StateBuilding = "building"
	StateReady    = "ready"
	StateFailed   = "failed"
)

// Errors callers branch on; returned wrapped.
var (
	ErrNotFound    = errors.New("template not found")
	ErrInUse       = errors.New("template in use")
	ErrBuildFailed = errors.New("template build failed")
	// ErrHostPaths refuses a recipe that names host paths without
	// Source.HostPaths.
	ErrHostPaths = errors.New("host paths are for admins")
	// ErrArchiveTooLarge is returned by StageUpload for an archive over
	// its limit.
	ErrArchiveTooLarge = errors.New("uploaded archive is too large")
)

// Source is where a recipe comes from, which decides what of the host it
// may name.
type Source struct {
	// Dir is the recipe file's directory, against which relative host
	// paths resolve; empty for recipes sent over the API.
	Dir string
	// HostPaths allows from: oci-layout:/oci-archive: and files: with
	// host sources: for admin keys and the operator's own builds.
	HostPaths bool
	// Archive is an uploaded OCI archive from StageUpload, the image of
	// from: upload. The manager owns it from the call on and removes it.
	Archive string
	// Archives are the uploaded file archives the recipe's copy steps
	// name, by name (E2B's files hash) to their path on the server. They
	// stay the caller's: the manager only reads them, and hashes their
	// content (not their name) into the template ID.
	Archives map[string]string
	// Registry are the credentials of a from: image:<reference> base.
	Registry *RegistryAuth
	// DiskQuotaBytes is what is left of the template disk quota of the
	// project the build is for: when less than Config.BuildDiskBytes, it
	// bounds the build's disk instead (0: BuildDiskBytes alone).
	DiskQuotaBytes int64
}

// Template is the catalog record of one built (or building) template
// version. Records are immutable once ready; a changed recipe is a new ID.
type Template struct {
	Name     string            `json:"name"`
	ID       string            `json:"id"`
	From     string            `json:"from"`
	ParentID string            `json:"parent_id,omitempty"`
	State    string            `json:"state"`
	Reason   string            `json:"reason,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	User     string            `json:"user,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	Start    string            `json:"start,omitempty"`
	Ready    string            `json:"ready,omitempty"`
	// MCPGateway is the template's MCP gateway command (recipe mcp.gateway,
	// inherited from its base template), "" for none.
	MCPGateway   string `json:"mcp_gateway,omitempty"`
	RootfsVolume string `json:"rootfs_volume"`
	// Runtimes are the backends the template was built for, its default
	// first (recipe runtime); a record from before the field is gVisor's.
	Runtimes  []string   `json:"runtimes,omitempty"`
	SizeBytes int64      `json:"size_bytes,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
}

// RootfsPath is where the template's read-only rootfs lives on the host.
func (t *Template) RootfsPath(pool *storage.Pool) string {
	return pool.Path(t.RootfsVolume)
}

// Spec is what a node needs to know of a template (nodeapi.TemplateSpec):
// the node contract carries it, and the control plane's catalog records it.
func (t *Template) Spec() nodeapi.TemplateSpec {
	return nodeapi.TemplateSpec{
		ID: t.ID, RootfsVolume: t.RootfsVolume, Env: t.Env, User: t.User, Workdir: t.Workdir,
		Start: t.Start, Ready: t.Ready, MCPGateway: t.MCPGateway, Runtimes: t.Runtimes,
	}
}

func (t *Template) clone() *Template {
	c := *t
	c.Env = maps.Clone(t.Env)
	c.Runtimes = slices.Clone(t.Runtimes)
	if t.ReadyAt != nil {
		at := *t.ReadyAt
		c.ReadyAt = &at
	}
	return &c
}

// Config configures a Manager.
type Config struct {
	// DataDir holds the catalog (<DataDir>/templates) and download caches
	// (<DataDir>/cache).
	DataDir string
	// Volumes stores the rootfs volumes.
	Volumes *storage.Pool
	// DebianMirror is used by debootstrap; default http://deb.debian.org/debian.
	DebianMirror string
	// TrustedCA is a PEM certificate every template trusts (the egress
	// CA of credential injection); its fingerprint is part of every
	// template ID. Empty: none.
	TrustedCA []byte
	// Sandboxes boots the build sandboxes that packages, run steps and
	// file copies run in; nil refuses recipes that have any.
	Sandboxes BuildSandboxes
	// BuildDiskBytes bounds a build's work volume, while its image
	// unpacks (what unpacking writes is counted as it goes) and while its
	// steps run, as a sandbox's disk_mb does (0: no bound).
	BuildDiskBytes int64
	// BuildTimeout bounds the time a build's sandbox runs its packages,
	// steps and files (DefaultBuildTimeout when zero): a step that never
	// ends must not hold a sandbox for ever.
	BuildTimeout time.Duration
	// Registry configures pulls of from: image:<reference> bases.
	Registry RegistryConfig
	// Runtimes are the sandbox backends of the server by name, each with
	// the hook that makes its artifact of a built template; nil for a
	// backend that boots the rootfs volume as it is (gVisor). A recipe
	// naming a backend not here fails. A nil map is gVisor alone.
	Runtimes map[string]runtime.ImageBuilder
	// BuildCache, when set, is a directory of finished builds' root
	// volumes by template ID, shared by the servers of this host and kept
	// when a data directory goes (buildcache.go); empty: none.
	BuildCache string
	// BuildCacheMaxBytes bounds the cache's entries: past it, the least
	// recently used go when a manager opens the cache. 0:
	// DefaultBuildCacheMaxBytes.
	BuildCacheMaxBytes int64
	// Logf receives build events; nil discards them.
	Logf func(format string, args ...any)
}

// Manager is the template catalog and builder. It is safe for concurrent
// use.
type Manager struct {
	cfg     Config
	store   *store
	ctx     context.Context // cancelled by Close; parent of Submit builds
	cancel  context.CancelFunc
	running sync.WaitGroup

	mu      sync.Mutex
	records map[string]*Template // by ID
	names   map[string]string    // name -> latest ID
	builds  map[string]*build    // in flight, by ID

	// aptMu serializes bootstrap stages, which share caches.
	aptMu sync.Mutex
	// hostRun runs the builder's host commands (debootstrap, tar);
	// tests watch what reaches them.
	hostRun func(cmd *exec.Cmd, logLine func(string)) error
}

// NewManager loads the catalog. Builds a crash interrupted are marked
// failed and their partial volumes deleted; ready templates whose volume
// has disappeared are marked failed so the next Submit rebuilds them.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.DataDir == "" || cfg.Volumes == nil {
		return nil, errors.New("template: Config.DataDir and Config.Volumes are required")
	}
	if cfg.DebianMirror == "" {
		cfg.DebianMirror = "http://deb.debian.org/debian"
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.BuildTimeout <= 0 {
		cfg.BuildTimeout = DefaultBuildTimeout
	}
	st, err := openStore(filepath.Join(cfg.DataDir, "templates"))
	if err != nil {
		return nil, err
	}
	records, names, err := st.load()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{cfg: cfg, store: st, ctx: ctx, cancel: cancel,
		records: records, names: names, builds: map[string]*build{}, hostRun: runLogged}
	if err := m.recover(); err != nil {
		cancel()
		return nil, err
	}
	if err := m.openBuildCache(); err != nil {
		cancel()
		return nil, err
	}
	// Uploads of builds a restart interrupted.
	_ = os.RemoveAll(m.uploadDir())
	return m, nil
}

// recover reconciles the catalog with the volumes after a restart.
func (m *Manager) recover() error {
	for id, t := range m.records {
		switch {
		case t.State == StateBuilding:
			m.cfg.Logf("template %s (%s): build interrupted by restart", t.Name, id)
			for _, vol := range append([]string{workVolume(id), rootfsVolume(id)}, artifactVolumes(id)...) {
				if err := m.cfg.Volumes.Delete(vol); err != nil {
					m.cfg.Logf("template %s: delete partial volume %s: %v", id, vol, err)
				}
			}
			t.State, t.Reason = StateFailed, "interrupted by restart"
			appendLogLine(m.store.logPath(id), "build failed: interrupted by restart")
		case t.State == StateReady && !m.cfg.Volumes.Exists(t.RootfsVolume):
			m.cfg.Logf("template %s (%s): rootfs volume %s is missing; it will be rebuilt on next submit", t.Name, id, t.RootfsVolume)
			t.State, t.Reason, t.ReadyAt = StateFailed, "rootfs volume missing", nil
		default:
			continue
		}
		if err := m.store.saveRecord(t); err != nil {
			return err
		}
	}
	// Work volumes without a building record (e.g. the record was never
	// written) are garbage too.
	vols, err := m.cfg.Volumes.List("templates")
	if err != nil {
		return err
	}
	for _, v := range vols {
		if strings.HasSuffix(v, workSuffix) {
			if err := m.cfg.Volumes.Delete(v); err != nil {
				m.cfg.Logf("template: delete stale work volume %s: %v", v, err)
			}
		}
	}
	return nil
}

// Close cancels running builds (they end as failed) and waits for them.
func (m *Manager) Close() error {
	m.cancel()
	m.running.Wait()
	return nil
}

const workSuffix = ".build"

// DefaultBuildTimeout is Config.BuildTimeout's default.
const DefaultBuildTimeout = time.Hour

func rootfsVolume(id string) string { return "templates/" + id }
func workVolume(id string) string   { return "templates/" + id + workSuffix }

// Submit validates the recipe, computes its ID and starts building it in
// the background. It returns the record: ready when this recipe was built
// before, otherwise building. Concurrent submits of one ID share a build.
// name may be empty when the recipe names itself.
func (m *Manager) Submit(name string, r *Recipe, src Source) (*Template, error) {
	return m.submit("", name, r, src)
}

// submit plans the recipe and starts or joins its build, filed under
// catalogName when that is not empty.
func (m *Manager) submit(catalogName, name string, r *Recipe, src Source) (*Template, error) {
	p, err := m.plan(name, r, src)
	if err != nil {
		removeUpload(src.Archive)
		return nil, err
	}
	if catalogName != "" {
		p.name = catalogName
	}
	t, _, err := m.startOrJoin(m.ctx, p, src.Archive)
	return t, err
}

func (m *Manager) uploadDir() string { return filepath.Join(m.cfg.DataDir, "cache", "uploads") }

// StageUpload streams an uploaded OCI archive to the server's disk, at
// most limit bytes (ErrArchiveTooLarge beyond), and returns the path to
// pass as Source.Archive.
func (m *Manager) StageUpload(r io.Reader, limit int64) (string, error) {
	if err := os.MkdirAll(m.uploadDir(), 0o700); err != nil {
		return "", fmt.Errorf("stage upload: %w", err)
	}
	f, err := os.CreateTemp(m.uploadDir(), "archive-*.tar")
	if err != nil {
		return "", fmt.Errorf("stage upload: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		os.Remove(f.Name())
		return "", fmt.Errorf("receive the archive: %w", err)
	case n > limit:
		os.Remove(f.Name())
		return "", fmt.Errorf("%w: the limit is %d bytes", ErrArchiveTooLarge, limit)
	}
	return f.Name(), nil
}

// StagedUpload returns the path of an archive StageUpload staged, from
// its base name (which a node hands a remote caller instead of the path),
// or an error when no such archive is staged.
func (m *Manager) StagedUpload(handle string) (string, error) {
	if !ValidUploadHandle(handle) {
		return "", fmt.Errorf("no staged archive %q", handle)
	}
	path := filepath.Join(m.uploadDir(), handle)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no staged archive %q", handle)
	}
	return path, nil
}

// ValidUploadHandle reports whether handle has the form StageUpload's
// handles have (a file name in the upload directory, nothing more).
func ValidUploadHandle(handle string) bool {
	return handle != "" && handle == filepath.Base(handle) && strings.HasPrefix(handle, "archive-")
}

func removeUpload(path string) {
	if path != "" {
		_ = os.Remove(path)
	}
}

// SubmitAs is Submit under a catalog name of the caller's choosing, which
// unlike a recipe name may hold a '/': the server files each project's
// templates as "<project>/<name>", apart from the built-in ones and from
// other projects' (the recipe's ID stays the content hash, so equal
// recipes share one rootfs, and Delete keeps it while any name points at
// it). name is validated like Submit's.
func (m *Manager) SubmitAs(catalogName, name string, r *Recipe, src Source) (*Template, error) {
	return m.submit(catalogName, name, r, src)
}

// Names returns every catalog name and the ID it points at.
func (m *Manager) Names() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.names)
}

// PlannedID is the id Build would give the template of recipe r named
// name now: an existing template of that name with another id was built
// from another recipe, builder or trusted CA.
func (m *Manager) PlannedID(name string, r *Recipe) (string, error) {
	p, err := m.plan(name, r, Source{})
	if err != nil {
		return "", err
	}
	return p.id, nil
}

// Build is the synchronous Submit: it builds (or joins the build of, or
// returns the already built) template and writes progress and step output
// to progress (which may be nil).
func (m *Manager) Build(ctx context.Context, name string, r *Recipe, src Source, progress io.Writer) (*Template, error) {
	if progress == nil {
		progress = io.Discard
	}
	p, err := m.plan(name, r, src)
	if err != nil {
		removeUpload(src.Archive)
		return nil, err
	}
	t, b, err := m.startOrJoin(ctx, p, src.Archive)
	if err != nil {
		return nil, err
	}
	if b == nil {
		fmt.Fprintf(progress, "template %s is up to date (id %s)\n", p.name, t.ID)
		return t, nil
	}
	if err := b.log.follow(ctx, 0, func(line string) { fmt.Fprintln(progress, line) }); err != nil {
		return nil, err
	}
	return m.result(t.ID)
}

// startOrJoin returns the existing ready record (b == nil), joins a build
// in flight, or records a new build and starts it. The build removes the
// uploaded archive (if any) before its end is heard; otherwise it goes at
// once.
func (m *Manager) startOrJoin(ctx context.Context, p *buildPlan, upload string) (_ *Template, _ *build, err error) {
	started := false
	defer func() {
		if !started {
			removeUpload(upload)
		}
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.setName(p.name, p.id); err != nil {
		return nil, nil, err
	}
	if b, ok := m.builds[p.id]; ok {
		return m.records[p.id].clone(), b, nil
	}
	if t, ok := m.records[p.id]; ok && t.State == StateReady && m.cfg.Volumes.Exists(t.RootfsVolume) {
		return t.clone(), nil, nil
	}
	t := p.record()
	if err := m.store.saveRecord(t); err != nil {
		return nil, nil, err
	}
	logFile, err := m.store.createLog(p.id)
	if err != nil {
		return nil, nil, err
	}
	m.records[p.id] = t
	b := &build{log: newBuildLog(logFile), done: make(chan struct{})}
	m.builds[p.id] = b
	m.running.Add(1)
	started = true
	go m.runBuild(ctx, p, b, upload)
	return t.clone(), b, nil
}

// setName points name at id and persists the mapping. Caller holds m.mu.
func (m *Manager) setName(name, id string) error {
	if m.names[name] == id {
		return nil
	}
	m.names[name] = id
	return m.store.saveNames(m.names)
}

// result returns the record of a finished build, or its failure.
func (m *Manager) result(id string) (*Template, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.records[id]
	if !ok {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if t.State == StateFailed {
		return t.clone(), fmt.Errorf("template %s (%s): %w: %s", t.Name, id, ErrBuildFailed, t.Reason)
	}
	return t.clone(), nil
}

// resolveID maps a name or ID to an ID. Caller holds m.mu.
func (m *Manager) resolveID(nameOrID string) (string, bool) {
	if id, ok := m.names[nameOrID]; ok {
		return id, true
	}
	if _, ok := m.records[nameOrID]; ok {
		return nameOrID, true
	}
	return "", false
}

// Get returns the latest template of a name, or the template with an ID.
// A record found by name carries that name.
func (m *Manager) Get(nameOrID string) (*Template, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.resolveID(nameOrID)
	if !ok {
		return nil, fmt.Errorf("template %q: %w", nameOrID, ErrNotFound)
	}
	t := m.records[id].clone()
	if m.names[nameOrID] == id {
		t.Name = nameOrID
	}
	return t, nil
}

// List returns the latest template of every name, sorted by name. Older
// versions stay reachable by ID through Get.
func (m *Manager) List() []*Template {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Template, 0, len(m.names))
	for name, id := range m.names {
		if t, ok := m.records[id]; ok {
			c := t.clone()
			c.Name = name
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Logs returns the build log lines from index from on, and whether the
// build has finished (no more lines will come).
func (m *Manager) Logs(nameOrID string, from int) ([]string, bool, error) {
	m.mu.Lock()
	id, ok := m.resolveID(nameOrID)
	b := m.builds[id]
	m.mu.Unlock()
	if !ok {
		return nil, false, fmt.Errorf("template %q: %w", nameOrID, ErrNotFound)
	}
	if b != nil {
		lines, done := b.log.since(from)
		return lines, done, nil
	}
	lines, err := readLogLines(m.store.logPath(id))
	if err != nil {
		return nil, true, err
	}
	if from < 0 {
		from = 0
	}
	if from >= len(lines) {
		return nil, true, nil
	}
	return lines[from:], true, nil
}

// Wait blocks until the template's build finishes and returns it; a failed
// build is an error wrapping ErrBuildFailed.
func (m *Manager) Wait(ctx context.Context, nameOrID string) (*Template, error) {
	m.mu.Lock()
	id, ok := m.resolveID(nameOrID)
	b := m.builds[id]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("template %q: %w", nameOrID, ErrNotFound)
	}
	if b != nil {
		select {
		case <-b.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	t, err := m.result(id)
	if t != nil && nameOrID != id {
		t.Name = nameOrID
	}
	return t, err
}

// Delete removes a template version and its rootfs volume.
//
// By ID it removes that version and every name pointing at it. By name it
// removes the name, the version the name points at (unless another name
// points there too) and older versions built under that name that no name
// points at and that are not in use.
//
// It refuses with ErrInUse while the version is building or inUse(id)
// reports sandboxes using it (inUse may be nil). Templates built from it
// are full snapshots and stay valid.
func (m *Manager) Delete(nameOrID string, inUse func(id string) bool) error {
	if inUse == nil {
		inUse = func(string) bool { return false }
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.resolveID(nameOrID)
	if !ok {
		return fmt.Errorf("template %q: %w", nameOrID, ErrNotFound)
	}
	if _, building := m.builds[id]; building {
		return fmt.Errorf("template %q is still building: %w", nameOrID, ErrInUse)
	}
	if inUse(id) {
		return fmt.Errorf("template %q (%s) is used by sandboxes: %w", nameOrID, id, ErrInUse)
	}
	victims := []string{id}
	if m.names[nameOrID] == id {
		// By name: drop the name; the version goes unless another name
		// still points at it. Older versions of the name go too when
		// nothing refers to them.
		delete(m.names, nameOrID)
		pointed := map[string]bool{}
		for _, other := range m.names {
			pointed[other] = true
		}
		victims = nil
		if !pointed[id] {
			victims = append(victims, id)
		}
		for oid, t := range m.records {
			_, building := m.builds[oid]
			if oid != id && t.Name == nameOrID && !pointed[oid] && !building && !inUse(oid) {
				victims = append(victims, oid)
			}
		}
	} else {
		for name, nid := range m.names {
			if nid == id {
				delete(m.names, name)
			}
		}
	}
	if err := m.store.saveNames(m.names); err != nil {
		return err
	}
	for _, vid := range victims {
		for _, vol := range append([]string{rootfsVolume(vid)}, artifactVolumes(vid)...) {
			if err := m.cfg.Volumes.Delete(vol); err != nil {
				return err
			}
		}
		if err := m.store.removeRecord(vid); err != nil {
			return err
		}
		delete(m.records, vid)
	}
	return nil
}

// Point files the existing version id under catalogName too (a tag),
// replacing what the name pointed at; the version's rootfs is shared.
func (m *Manager) Point(catalogName, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.records[id]; !ok {
		return fmt.Errorf("template %s: %w", id, ErrNotFound)
	}
	return m.setName(catalogName, id)
}

// Unpoint removes catalogName, keeping the version it pointed at (which
// other names, its ID and a later Delete of its first name still reach).
func (m *Manager) Unpoint(catalogName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.names[catalogName]; !ok {
		return fmt.Errorf("template %q: %w", catalogName, ErrNotFound)
	}
	delete(m.names, catalogName)
	return m.store.saveNames(m.names)
}
