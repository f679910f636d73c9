package template

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-platform/space/internal/hostpath"
	"github.com/space-platform/space/internal/storage"
)

// spaceDir is created empty in every template: the sandbox runtime mounts
// its agent there.
const spaceDir = ".space"

// build is one build in flight.
type build struct {
	log  *buildLog
	done chan struct{} // closed after the record reached ready or failed
}

// buildPlan is a validated recipe with everything it refers to resolved,
// its ID computed and the template's process defaults merged.
type buildPlan struct {
	name    string
	recipe  *Recipe
	baseDir string
	base    Base
	id      string

	// files are the recipe's files with builtin: sources replaced by
	// their materialized host copies.
	files []FileCopy

	parent *Template    // base template (FromTemplate)
	image  *ociImage    // base image (FromOCIArchive, FromOCILayout, FromUpload)
	remote *remoteImage // base image to pull (FromImage)
	// archives are the copy steps' archives on the server, by name.
	archives  map[string]string
	imageName string // how the log names the image
	busybox   string // host busybox binary (FromMinimal)
	// diskLimit bounds the disk the build may fill, while its image
	// unpacks and while its steps run (0: no bound); diskLimitName names
	// the limit in errors.
	diskLimit     int64
	diskLimitName string

	env                         map[string]string
	user, workdir, start, ready string
	mcpGateway                  string
	// stepUser and stepWorkdir are the base's defaults, which ordered
	// steps without their own use.
	stepUser, stepWorkdir string
}

// CheckHostPaths refuses a (valid) recipe that names host paths, unless
// src allows them, with ErrHostPaths: a control plane that builds on
// another machine refuses it before sending it there.
func CheckHostPaths(r *Recipe, src Source) error {
	if src.HostPaths {
		return nil
	}
	if hostFiles(r.Files) > 0 {
		return fmt.Errorf("recipe: files: %w: copying host files needs an admin key; use builtin: sources, or run steps that download what they need", ErrHostPaths)
	}
	if base, _ := ParseFrom(r.From); base.Kind == FromOCIArchive || base.Kind == FromOCILayout {
		return fmt.Errorf("recipe: from: %w: %s:<path> reads the server's disk and needs an admin key; upload the image as an OCI archive with the recipe and use from: upload", ErrHostPaths, base.Kind)
	}
	return nil
}

// plan resolves a recipe into a buildPlan. name overrides the recipe's own.
func (m *Manager) plan(name string, r *Recipe, src Source) (*buildPlan, error) {
	baseDir := src.Dir
	if r == nil {
		return nil, errors.New("template: nil recipe")
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = r.Name
	}
	if name == "" {
		return nil, errors.New("template: a name is required (recipe name field or given separately)")
	}
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	base, _ := ParseFrom(r.From) // validated above
	if err := CheckHostPaths(r, src); err != nil {
		return nil, err
	}
	if err := m.checkRuntimes(r.Runtime.Names()); err != nil {
		return nil, err
	}
	if src.Archive != "" && base.Kind != FromUpload {
		return nil, fmt.Errorf("recipe: from: an archive was uploaded, but the recipe's base is %q; use from: upload", r.From)
	}
	if hostFiles(r.Files) > 0 && baseDir == "" {
		return nil, errors.New("recipe: files: copying host files needs the recipe's directory; not available for recipes submitted without one (e.g. over the API); only builtin: sources are")
	}
	p := &buildPlan{name: name, recipe: r, baseDir: baseDir, base: base, env: map[string]string{}}
	p.diskLimit, p.diskLimitName = m.diskLimit(src)
	res := resolvedRecipe{
		Builder: BuilderVersion, Packages: r.Packages, Run: r.Run, Env: r.Env,
		User: r.User, Workdir: r.Workdir, Start: r.Start, Ready: r.Ready,
		Runtimes: r.Runtime.resolved(),
	}
	if r.MCP != nil {
		res.MCPGateway = r.MCP.Gateway
	}
	steps, err := resolveSteps(r.Steps, src.Archives)
	if err != nil {
		return nil, err
	}
	res.Steps, p.archives = steps, src.Archives

	switch base.Kind {
	case FromMinimal:
		bb, err := findStaticBusybox()
		if err != nil {
			return nil, fmt.Errorf("recipe: from: %w", err)
		}
		digest, err := fileDigest(bb)
		if err != nil {
			return nil, fmt.Errorf("recipe: from: %w", err)
		}
		p.busybox = bb
		res.From = "minimal busybox=" + digest
		p.user, p.workdir = "user", "/home/user"
	case FromDebian:
		res.From = "debian:" + base.Arg
		p.user, p.workdir = "root", "/root"
	case FromOCIArchive, FromOCILayout:
		loc, err := hostPath(base.Arg, baseDir)
		if err != nil {
			return nil, fmt.Errorf("recipe: from: %w", err)
		}
		img, err := resolveImage(base.Kind, loc)
		if err != nil {
			return nil, fmt.Errorf("recipe: from: image %s: %w", loc, err)
		}
		p.image, p.imageName = img, img.src.String()
		res.From = img.digest
		p.inheritImage()
	case FromImage:
		img, err := m.cfg.Registry.resolveRemote(m.ctx, base.Arg, src.Registry)
		if err != nil {
			return nil, fmt.Errorf("recipe: from: %w", err)
		}
		if p.diskLimit > 0 && img.size > p.diskLimit {
			return nil, fmt.Errorf("recipe: from: %w: image %s: its compressed layers alone are %s, more than %s (%s)",
				ErrImageTooLarge, img.ref, humanBytes(img.size), p.diskLimitName, humanBytes(p.diskLimit))
		}
		p.remote, p.imageName = img, img.ref.String()
		res.From = "image:" + img.digest
		p.env = envMap(img.config.Env)
		p.user, p.workdir = img.config.User, img.config.WorkingDir
		if p.workdir == "" {
			p.workdir = "/"
		}
	case FromUpload:
		if src.Archive == "" {
			return nil, errors.New("recipe: from: upload needs an OCI archive uploaded with the recipe")
		}
		img, err := resolveImage(FromOCIArchive, src.Archive)
		if err != nil {
			return nil, fmt.Errorf("recipe: from: uploaded archive: %w", cleanUploadErr(err, src.Archive))
		}
		p.image, p.imageName = img, "uploaded archive"
		res.From = img.digest
		p.inheritImage()
	case FromTemplate:
		parent, err := m.Get(base.Arg)
		if err != nil {
			return nil, fmt.Errorf("recipe: from: %w", err)
		}
		if parent.State == StateFailed {
			return nil, fmt.Errorf("recipe: from: template %s (%s) failed to build: %s", base.Arg, parent.ID, parent.Reason)
		}
		p.parent = parent
		res.From = "template:" + parent.ID
		p.env = maps.Clone(parent.Env)
		if p.env == nil {
			p.env = map[string]string{}
		}
		p.user, p.workdir, p.start, p.ready = parent.User, parent.Workdir, parent.Start, parent.Ready
		p.mcpGateway = parent.MCPGateway
	}

	materialized, err := m.materializeFiles(r.Files)
	if err != nil {
		return nil, fmt.Errorf("recipe: %w", err)
	}
	files, err := resolveFiles(materialized, baseDir)
	if err != nil {
		return nil, fmt.Errorf("recipe: %w", err)
	}
	res.Files = files
	p.files = materialized
	if len(m.cfg.TrustedCA) > 0 {
		res.TrustedCA = caFingerprint(m.cfg.TrustedCA)
		for k, v := range trustEnv {
			if _, ok := p.env[k]; !ok {
				p.env[k] = v
			}
		}
	}
	p.id = res.id()

	// Steps without a user or workdir of their own run as the base's.
	p.stepUser, p.stepWorkdir = p.user, p.workdir
	maps.Copy(p.env, r.Env)
	for _, override := range []struct {
		dst *string
		v   string
	}{
		{&p.user, r.User}, {&p.workdir, r.Workdir}, {&p.start, r.Start}, {&p.ready, r.Ready}, {&p.mcpGateway, res.MCPGateway},
	} {
		if override.v != "" {
			*override.dst = override.v
		}
	}
	return p, nil
}

// diskLimit is the disk a build from src may fill: the build limit, or
// what is left of its project's template disk quota when that is less.
func (m *Manager) diskLimit(src Source) (int64, string) {
	limit, name := m.cfg.BuildDiskBytes, "the disk limit of a build"
	if src.DiskQuotaBytes > 0 && (limit <= 0 || src.DiskQuotaBytes < limit) {
		limit, name = src.DiskQuotaBytes, "what is left of the project's template disk quota"
	}
	return limit, name
}

// unpackBudget is the bound of unpacking the plan's image.
func (p *buildPlan) unpackBudget() *unpackBudget {
	return &unpackBudget{limit: p.diskLimit, what: p.diskLimitName, maxEntries: maxImageEntries}
}

// inheritImage takes the process defaults of the base image.
func (p *buildPlan) inheritImage() {
	p.env = envMap(p.image.config.Env)
	p.user, p.workdir = p.image.config.User, p.image.config.WorkingDir
	if p.workdir == "" {
		p.workdir = "/"
	}
}

// cleanUploadErr keeps the server's path of an uploaded archive out of
// errors a client sees.
func cleanUploadErr(err error, archive string) error {
	return errors.New(strings.ReplaceAll(err.Error(), archive, "the archive"))
}

// hostFiles counts the file entries copied from the host (not builtin:).
func hostFiles(files []FileCopy) int {
	n := 0
	for _, f := range files {
		if _, ok := builtinSource(f.Src); !ok {
			n++
		}
	}
	return n
}

// materializeFiles returns files with every builtin: source written to the
// template cache and replaced by the absolute path of that copy.
func (m *Manager) materializeFiles(files []FileCopy) ([]FileCopy, error) {
	out := make([]FileCopy, len(files))
	for i, f := range files {
		out[i] = f
		if rel, ok := builtinSource(f.Src); ok {
			p, err := materializeBuiltin(filepath.Join(m.cfg.DataDir, "cache"), rel)
			if err != nil {
				return nil, fmt.Errorf("files[%d].src: %w", i, err)
			}
			out[i].Src = p
		}
	}
	return out, nil
}

// record is the catalog entry of a build that is starting.
func (p *buildPlan) record() *Template {
	t := &Template{
		Name: p.name, ID: p.id, From: p.recipe.From, State: StateBuilding,
		Env: maps.Clone(p.env), User: p.user, Workdir: p.workdir, Start: p.start, Ready: p.ready,
		MCPGateway: p.mcpGateway, RootfsVolume: rootfsVolume(p.id), CreatedAt: time.Now().UTC(),
		Runtimes: p.recipe.Runtime.Names(),
	}
	if p.parent != nil {
		t.ParentID = p.parent.ID
	}
	if len(t.Env) == 0 {
		t.Env = nil
	}
	return t
}

// runBuild executes a plan and records the outcome.
func (m *Manager) runBuild(ctx context.Context, p *buildPlan, b *build, upload string) {
	defer m.running.Done()
	started := time.Now()
	m.cfg.Logf("template %s (%s): building from %s", p.name, p.id, p.recipe.From)
	// Clients read the reason and the log (host commands' errors among
	// its lines); the server's log keeps the host paths.
	hide := hostpath.New(m.cfg.DataDir)
	size, err := m.execute(ctx, p, func(line string) { b.log.add(hide.String(line)) })
	// The upload goes before anyone following the log hears the end.
	removeUpload(upload)

	m.mu.Lock()
	t := m.records[p.id]
	if err != nil {
		reason := hide.String(err.Error())
		t.State, t.Reason = StateFailed, reason
		b.log.add("build failed: " + reason)
		m.cfg.Logf("template %s (%s): build failed: %v", p.name, p.id, err)
	} else {
		now := time.Now().UTC()
		t.State, t.Reason, t.SizeBytes, t.ReadyAt = StateReady, "", size, &now
		b.log.add(fmt.Sprintf("template %s ready: id %s, %s, built in %s", p.name, p.id, humanBytes(size), time.Since(started).Round(100*time.Millisecond)))
		m.cfg.Logf("template %s (%s): ready in %s", p.name, p.id, time.Since(started).Round(time.Millisecond))
	}
	if serr := m.store.saveRecord(t); serr != nil {
		m.cfg.Logf("template %s (%s): save record: %v", p.name, p.id, serr)
	}
	delete(m.builds, p.id)
	m.mu.Unlock()
	b.log.finish()
	close(b.done)
}

// execute builds the rootfs in a work volume and, once complete, publishes
// it as the read-only volume templates/<id>. It returns the rootfs size.
//
// Only code that takes no recipe input runs on the host: the base
// (busybox copy, the Debian bootstrap stage, OCI layer unpacking in Go,
// a snapshot of the parent template). Everything a recipe says to do,
// package installs, run steps and file copies, runs in a gVisor build
// sandbox booted on the work volume.
func (m *Manager) execute(ctx context.Context, p *buildPlan, logLine func(string)) (size int64, err error) {
	vols := m.cfg.Volumes
	work, final := workVolume(p.id), rootfsVolume(p.id)
	// Leftovers of an earlier failed attempt.
	for _, v := range []string{work, final} {
		if err := vols.Delete(v); err != nil {
			return 0, err
		}
	}
	defer func() {
		if err != nil {
			if derr := vols.Delete(work); derr != nil {
				logLine("cleanup: " + derr.Error())
			}
		}
	}()

	r := p.recipe
	total := 2 + len(r.Run) // base + finalize
	if len(r.Packages) > 0 {
		total++
	}
	if len(p.files) > 0 {
		total++
	}
	if len(m.cfg.TrustedCA) > 0 {
		total++
	}
	total += len(r.Steps) + len(m.artifactBuilders(r.Runtime.Names()))
	n := 0
	step := func(desc string) {
		n++
		logLine(fmt.Sprintf("[%d/%d] %s", n, total, desc))
	}

	// One build of an ID on the host at a time: a second server (another
	// test process, a cluster's node beside serve) waits and receives
	// the first one's result instead of building it again beside it.
	unlock, err := m.lockCacheEntry(ctx, p.id, logLine)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if m.receiveCached(ctx, p.id, final, logLine) {
		// The whole recipe's result, received: only the backends'
		// artifacts are made again.
		n = total - 1 - len(m.artifactBuilders(r.Runtime.Names()))
		step("received from the build cache (" + p.id + ")")
		return m.publish(ctx, p, final, step, logLine)
	}
	rootfs, err := m.createBase(ctx, p, work, step, logLine)
	if err != nil {
		return 0, err
	}
	if len(r.Packages) > 0 || len(r.Run) > 0 || len(p.files) > 0 || len(r.Steps) > 0 {
		if err := m.customize(ctx, p, work, rootfs, step, logLine); err != nil {
			return 0, err
		}
	}

	if len(m.cfg.TrustedCA) > 0 {
		step("trust the egress CA " + caFingerprint(m.cfg.TrustedCA)[:19])
		// The certificate is the operator's, not the recipe's; os.Root
		// keeps the write inside the rootfs whatever the steps left there.
		if err := installCA(rootfs, m.cfg.TrustedCA); err != nil {
			return 0, err
		}
	}

	if err := checkMCPGateway(rootfs, p.mcpGateway); err != nil {
		return 0, err
	}
	step("finalize: make the rootfs read-only")
	if err := finalizeRootfs(rootfs); err != nil {
		return 0, err
	}
	if err := vols.Sync(work); err != nil {
		return 0, err
	}
	if err := vols.Rename(work, final); err != nil {
		return 0, err
	}
	if err := vols.SetReadOnly(final, true); err != nil {
		vols.Delete(final)
		return 0, err
	}
	m.saveCached(ctx, p.id, final, logLine)
	return m.publish(ctx, p, final, step, logLine)
}

// publish makes the backends' artifacts of the finished, read-only
// volume final and returns its size; on failure final goes too.
func (m *Manager) publish(ctx context.Context, p *buildPlan, final string, step, logLine func(string)) (int64, error) {
	vols := m.cfg.Volumes
	if err := m.prepareArtifacts(ctx, p, final, step); err != nil {
		vols.Delete(final)
		return 0, err
	}
	size, err := vols.Size(final)
	if err != nil {
		logLine("size: " + err.Error())
	}
	return size, nil
}

// createBase fills the work volume from the recipe's base. None of the
// recipe's fields but From reach this, and From only as a kind, an
// allow-listed suite, an image already resolved or a template's ID.
func (m *Manager) createBase(ctx context.Context, p *buildPlan, work string, step func(string), logLine func(string)) (string, error) {
	vols := m.cfg.Volumes
	switch p.base.Kind {
	case FromTemplate:
		step(fmt.Sprintf("snapshot template %s (%s)", p.base.Arg, p.parent.ID))
		parent, err := m.Wait(ctx, p.parent.ID)
		if err != nil {
			return "", fmt.Errorf("base template %s: %w", p.base.Arg, err)
		}
		return vols.Snapshot(parent.RootfsVolume, work, false)
	case FromMinimal:
		step("minimal: busybox from " + p.busybox)
		rootfs, err := vols.Create(work)
		if err != nil {
			return "", err
		}
		return rootfs, buildMinimal(ctx, rootfs, p.busybox)
	case FromDebian:
		stage, err := m.bootstrapStage(ctx, p.base.Arg, step, logLine)
		if err != nil {
			return "", err
		}
		return vols.Snapshot(stage, work, false)
	case FromOCIArchive, FromOCILayout, FromUpload:
		step(fmt.Sprintf("import image %s (%d layers)", p.imageName, len(p.image.layers)))
		rootfs, err := m.createLimited(p, work)
		if err != nil {
			return "", err
		}
		return rootfs, unpackImage(p.image, rootfs, p.unpackBudget(), logLine)
	case FromImage:
		step(fmt.Sprintf("pull image %s (%s, %s)", p.imageName, p.remote.digest, humanBytes(p.remote.size)))
		dir := filepath.Join(m.cfg.DataDir, "cache", "pulls", p.id)
		defer os.RemoveAll(dir)
		img, err := p.remote.pull(ctx, dir)
		if err != nil {
			return "", err
		}
		logLine(fmt.Sprintf("unpack %d layers", len(img.layers)))
		rootfs, err := m.createLimited(p, work)
		if err != nil {
			return "", err
		}
		return rootfs, unpackImage(img, rootfs, p.unpackBudget(), logLine)
	}
	return "", fmt.Errorf("unknown base kind %q", p.base.Kind)
}

// createLimited creates the work volume with the build's disk limit set
// before anything is written to it: where the volumes enforce limits, the
// filesystem backs up the unpack budget. (Plain-directory volumes enforce
// none; the budget alone bounds the unpack there.)
func (m *Manager) createLimited(p *buildPlan, work string) (string, error) {
	rootfs, err := m.cfg.Volumes.Create(work)
	if err != nil || p.diskLimit <= 0 {
		return rootfs, err
	}
	if err := m.cfg.Volumes.SetLimit(work, p.diskLimit); err != nil && !errors.Is(err, storage.ErrNoLimits) {
		return "", fmt.Errorf("disk limit of the build: %w", err)
	}
	return rootfs, nil
}

// customize boots the build sandbox on the work volume and installs apt
// packages, runs the recipe's steps and copies its files in it.
func (m *Manager) customize(ctx context.Context, p *buildPlan, work, rootfs string, step func(string), logLine func(string)) (err error) {
	if m.cfg.Sandboxes == nil {
		return errors.New("this server has no build sandboxes: recipes with packages, run steps or files cannot be built")
	}
	if !existsInRootfs(rootfs, "bin/sh") {
		return errors.New("the base has no /bin/sh: packages, run steps and files are carried out by a shell in the build sandbox")
	}
	if len(p.recipe.Packages) > 0 && !existsInRootfs(rootfs, "usr/bin/apt-get") {
		return errors.New("packages: the base has no apt-get; apt packages need a Debian-based base")
	}
	// The runtime mounts /proc, /dev, /sys and the agent there.
	if err := finalizeRootfs(rootfs); err != nil {
		return err
	}
	if p.diskLimit > 0 {
		if err := m.cfg.Volumes.SetLimit(work, p.diskLimit); err != nil {
			return fmt.Errorf("disk limit of the build: %w", err)
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, m.cfg.BuildTimeout,
		fmt.Errorf("the build's packages, steps and files took longer than %s", m.cfg.BuildTimeout))
	defer cancel()
	defer func() {
		if err != nil && context.Cause(ctx) != nil && ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
	}()
	logLine("starting the build sandbox (gVisor)")
	sb, err := m.cfg.Sandboxes.Start(ctx, work)
	if err != nil {
		return fmt.Errorf("start the build sandbox: %w", err)
	}
	defer func() {
		// Stopped before the volume is renamed and made read-only.
		if serr := sb.Stop(context.WithoutCancel(ctx)); serr != nil && err == nil {
			err = fmt.Errorf("stop the build sandbox: %w", serr)
		}
	}()
	env := stepEnv(p.env)
	if len(p.recipe.Packages) > 0 {
		step("apt-get install " + strings.Join(p.recipe.Packages, " "))
		if err := aptInstall(ctx, sb, p.recipe.Packages, env, logLine); err != nil {
			return fmt.Errorf("apt-get install: %w", err)
		}
	}
	for i, script := range p.recipe.Run {
		step("run: " + summarize(script))
		if err := runStep(ctx, sb, script, env, logLine); err != nil {
			return fmt.Errorf("run[%d] %q: %w", i, summarize(script), err)
		}
	}
	if len(p.files) > 0 {
		step(fmt.Sprintf("copy %d file entries", len(p.files)))
		if err := copyFiles(ctx, sb, p.files, p.baseDir, logLine); err != nil {
			return err
		}
	}
	for i, st := range p.recipe.Steps {
		if st.Copy != nil {
			step(fmt.Sprintf("copy %s -> %s", st.Copy.Src, st.Copy.Dest))
		} else {
			step("run: " + summarize(st.Run))
		}
		if err := p.runOrderedStep(ctx, sb, i, st, logLine); err != nil {
			return fmt.Errorf("steps[%d]: %w", i, err)
		}
	}
	return nil
}

// summarize shortens a shell step to one line for progress output.
func summarize(script string) string {
	line, _, multi := strings.Cut(strings.TrimSpace(script), "\n")
	if len(line) > 100 {
		line, multi = line[:100], true
	}
	if multi {
		line += " ..."
	}
	return line
}

// copyFiles copies the recipe's files (host paths an admin named, or
// built-in sources) into the build sandbox through its agent, owned by
// root. Directories are copied recursively (symlinks as symlinks); mode,
// when given, applies to the top-level entry. The writes happen inside
// the sandbox, so nothing the steps planted in the rootfs (a symlink to
// a host path) is followed on the host.
func copyFiles(ctx context.Context, sb BuildSandbox, files []FileCopy, baseDir string, logLine func(string)) error {
	q := shellQuote
	for i, f := range files {
		src, err := hostPath(f.Src, baseDir)
		if err != nil {
			return fmt.Errorf("files[%d]: %w", i, err)
		}
		dest := path.Clean(f.Dest)
		logLine(fmt.Sprintf("%s -> %s", f.Src, f.Dest))
		top, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("files[%d]: %w", i, err)
		}
		// before makes directories and clears the way; the agent writes
		// file contents; after sets modes and owners and makes symlinks.
		var before, after strings.Builder
		before.WriteString("set -e\n")
		after.WriteString("set -e\n")
		fmt.Fprintf(&before, "mkdir -p %s\n", q(path.Dir(dest)))
		var writes [][2]string // host file, sandbox path
		if !top.IsDir() {
			fmt.Fprintf(&before, "if [ -d %[1]s ] && [ ! -L %[1]s ]; then echo %[2]s >&2; exit 1; fi\nrm -f %[1]s\n",
				q(dest), q(dest+" is a directory in the rootfs; give the full file path as dest"))
			writes = append(writes, [2]string{src, dest})
			fmt.Fprintf(&after, "chown 0:0 %[1]s\nchmod %[2]s %[1]s\n", q(dest), octal(top.Mode()))
		} else {
			err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(src, p)
				target := path.Join(dest, filepath.ToSlash(rel))
				info, err := d.Info()
				if err != nil {
					return err
				}
				switch {
				case d.IsDir():
					fmt.Fprintf(&before, "mkdir -p %s\n", q(target))
					fmt.Fprintf(&after, "chown 0:0 %[1]s\nchmod %[2]s %[1]s\n", q(target), octal(info.Mode()))
				case info.Mode()&fs.ModeSymlink != 0:
					link, err := os.Readlink(p)
					if err != nil {
						return err
					}
					fmt.Fprintf(&after, "rm -rf %[1]s\nln -s %[2]s %[1]s\nchown -h 0:0 %[1]s\n", q(target), q(link))
				case info.Mode().IsRegular():
					fmt.Fprintf(&before, "rm -rf %s\n", q(target))
					writes = append(writes, [2]string{p, target})
					fmt.Fprintf(&after, "chown 0:0 %[1]s\nchmod %[2]s %[1]s\n", q(target), octal(info.Mode()))
				}
				// Sockets, devices: nothing sensible to copy.
				return nil
			})
			if err != nil {
				return fmt.Errorf("files[%d]: %w", i, err)
			}
		}
		if f.Mode != "" {
			mode, _ := parseMode(f.Mode) // validated
			fmt.Fprintf(&after, "chmod %o %s\n", mode, q(dest))
		}
		if err := runStep(ctx, sb, before.String(), nil, logLine); err != nil {
			return fmt.Errorf("files[%d]: prepare %s: %w", i, f.Dest, err)
		}
		for _, w := range writes {
			if err := writeHostFile(ctx, sb, w[0], w[1]); err != nil {
				return fmt.Errorf("files[%d]: %w", i, err)
			}
		}
		if err := runStep(ctx, sb, after.String(), nil, logLine); err != nil {
			return fmt.Errorf("files[%d]: finish %s: %w", i, f.Dest, err)
		}
	}
	return nil
}

// writeHostFile streams a host file into the build sandbox.
func writeHostFile(ctx context.Context, sb BuildSandbox, src, dest string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := sb.WriteFile(ctx, dest, in); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	return nil
}

// octal renders permission bits, setuid/setgid/sticky included, for chmod.
func octal(m fs.FileMode) string {
	v := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

// finalizeRootfs creates what every template must have: the agent mount
// point and the mount points and scratch directories of a Linux system.
func finalizeRootfs(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, d := range []struct {
		name string
		mode fs.FileMode
	}{{spaceDir, 0o755}, {"proc", 0o555}, {"dev", 0o755}, {"sys", 0o555}, {"tmp", 0o777 | fs.ModeSticky}} {
		info, err := root.Lstat(d.name)
		if err == nil {
			if !info.IsDir() && d.name == spaceDir {
				return fmt.Errorf("/%s exists and is not a directory", spaceDir)
			}
			continue
		}
		if err := root.Mkdir(d.name, 0o755); err != nil {
			return fmt.Errorf("create /%s: %w", d.name, err)
		}
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
	}
	return nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// checkMCPGateway fails a build whose template declares an MCP gateway
// (its own or its base's) that the built rootfs lacks: the SDKs would only
// find out at create, with the sandbox already made.
func checkMCPGateway(rootfs, gateway string) error {
	if gateway == "" {
		return nil
	}
	info, ok := statInRootfs(rootfs, strings.TrimPrefix(gateway, "/"))
	if !ok || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("recipe: mcp.gateway: %s is not an executable file in the built template", gateway)
	}
	return nil
}
