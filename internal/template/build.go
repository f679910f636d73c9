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

	parent  *Template // base template (FromTemplate)
	image   *ociImage // base image (FromOCIArchive, FromOCILayout)
	busybox string    // host busybox binary (FromMinimal)

	env                         map[string]string
	user, workdir, start, ready string
}

// plan resolves a recipe into a buildPlan. name overrides the recipe's own.
func (m *Manager) plan(name string, r *Recipe, baseDir string) (*buildPlan, error) {
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
	if hostFiles(r.Files) > 0 && baseDir == "" {
		return nil, errors.New("recipe: files: copying host files needs the recipe's directory; not available for recipes submitted without one (e.g. over the API); only builtin: sources are")
	}
	base, _ := ParseFrom(r.From) // validated above
	p := &buildPlan{name: name, recipe: r, baseDir: baseDir, base: base, env: map[string]string{}}
	res := resolvedRecipe{
		Builder: BuilderVersion, Packages: r.Packages, Run: r.Run, Env: r.Env,
		User: r.User, Workdir: r.Workdir, Start: r.Start, Ready: r.Ready,
	}

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
		p.image = img
		res.From = img.digest
		p.env = envMap(img.config.Env)
		p.user, p.workdir = img.config.User, img.config.WorkingDir
		if p.workdir == "" {
			p.workdir = "/"
		}
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

	maps.Copy(p.env, r.Env)
	for _, override := range []struct {
		dst *string
		v   string
	}{
		{&p.user, r.User}, {&p.workdir, r.Workdir}, {&p.start, r.Start}, {&p.ready, r.Ready},
	} {
		if override.v != "" {
			*override.dst = override.v
		}
	}
	return p, nil
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
		RootfsVolume: rootfsVolume(p.id), CreatedAt: time.Now().UTC(),
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
func (m *Manager) runBuild(ctx context.Context, p *buildPlan, b *build) {
	defer m.running.Done()
	started := time.Now()
	m.cfg.Logf("template %s (%s): building from %s", p.name, p.id, p.recipe.From)
	size, err := m.execute(ctx, p, b.log.add)

	m.mu.Lock()
	t := m.records[p.id]
	if err != nil {
		t.State, t.Reason = StateFailed, err.Error()
		b.log.add("build failed: " + err.Error())
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
	aptPackages := r.Packages
	if p.base.Kind == FromDebian {
		aptPackages = nil // debootstrap includes them
	}
	total := 2 + len(r.Run) // base + finalize
	if len(aptPackages) > 0 {
		total++
	}
	if len(r.Files) > 0 {
		total++
	}
	if len(m.cfg.TrustedCA) > 0 {
		total++
	}
	n := 0
	step := func(desc string) {
		n++
		logLine(fmt.Sprintf("[%d/%d] %s", n, total, desc))
	}

	rootfs, err := m.createBase(ctx, p, work, step, logLine)
	if err != nil {
		return 0, err
	}

	if len(aptPackages) > 0 || len(r.Run) > 0 {
		restore, err := useHostResolvConf(rootfs)
		if err != nil {
			return 0, err
		}
		err = m.customize(ctx, p, rootfs, aptPackages, step, logLine)
		if rerr := restore(); err == nil && rerr != nil {
			err = fmt.Errorf("restore /etc/resolv.conf: %w", rerr)
		}
		if err != nil {
			return 0, err
		}
	}

	if len(p.files) > 0 {
		step(fmt.Sprintf("copy %d file entries", len(p.files)))
		if err := copyFiles(rootfs, p.files, p.baseDir, logLine); err != nil {
			return 0, err
		}
	}

	if len(m.cfg.TrustedCA) > 0 {
		step("trust the egress CA " + caFingerprint(m.cfg.TrustedCA)[:19])
		if err := installCA(rootfs, m.cfg.TrustedCA); err != nil {
			return 0, err
		}
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
	size, err = vols.Usage(final)
	if err != nil {
		logLine("size: " + err.Error())
		err = nil
	}
	return size, nil
}

// createBase fills the work volume from the recipe's base.
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
		desc := "debootstrap --variant=minbase " + p.base.Arg
		if len(p.recipe.Packages) > 0 {
			desc += " --include=" + strings.Join(p.recipe.Packages, ",")
		}
		step(desc)
		rootfs, err := vols.Create(work)
		if err != nil {
			return "", err
		}
		if err := m.debootstrap(ctx, rootfs, p.base.Arg, p.recipe.Packages, logLine); err != nil {
			return "", err
		}
		if err := cleanDebianRootfs(rootfs); err != nil {
			return "", err
		}
		// debootstrap copies the host's resolv.conf; the sandbox runtime
		// provides its own.
		return rootfs, os.WriteFile(filepath.Join(rootfs, "etc/resolv.conf"), []byte("# placeholder: replaced when a sandbox starts\n"), 0o644)
	case FromOCIArchive, FromOCILayout:
		step(fmt.Sprintf("import image %s (%d layers)", p.image.src, len(p.image.layers)))
		rootfs, err := vols.Create(work)
		if err != nil {
			return "", err
		}
		return rootfs, unpackImage(p.image, rootfs, logLine)
	}
	return "", fmt.Errorf("unknown base kind %q", p.base.Kind)
}

// customize installs apt packages and runs the recipe's steps.
func (m *Manager) customize(ctx context.Context, p *buildPlan, rootfs string, aptPackages []string, step func(string), logLine func(string)) error {
	if len(aptPackages) > 0 {
		step("apt-get install " + strings.Join(aptPackages, " "))
		if err := m.aptInstall(ctx, rootfs, aptPackages, p.env, logLine); err != nil {
			return fmt.Errorf("apt-get install: %w", err)
		}
		if err := cleanDebianRootfs(rootfs); err != nil {
			return err
		}
	}
	for i, script := range p.recipe.Run {
		step("run: " + summarize(script))
		if err := runInChroot(ctx, chrootStep{Rootfs: rootfs, Script: script, Env: p.env}, logLine); err != nil {
			return fmt.Errorf("run[%d] %q: %w", i, summarize(script), err)
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

// useHostResolvConf puts the host's /etc/resolv.conf into the rootfs so
// steps can resolve names, and returns a function restoring what was there
// (file, symlink or nothing).
func useHostResolvConf(rootfs string) (restore func() error, err error) {
	hostConf, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		hostConf = []byte("nameserver 1.1.1.1\n")
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, err
	}
	const name = "etc/resolv.conf"
	if err := root.MkdirAll("etc", 0o755); err != nil {
		root.Close()
		return nil, fmt.Errorf("create /etc: %w", err)
	}
	var (
		origLink    string
		origContent []byte
		origMode    fs.FileMode
		existed     bool
	)
	if info, err := root.Lstat(name); err == nil {
		existed = true
		if info.Mode()&fs.ModeSymlink != 0 {
			if origLink, err = root.Readlink(name); err != nil {
				root.Close()
				return nil, err
			}
		} else {
			origMode = info.Mode().Perm()
			if origContent, err = root.ReadFile(name); err != nil {
				root.Close()
				return nil, err
			}
		}
		if err := root.RemoveAll(name); err != nil {
			root.Close()
			return nil, err
		}
	}
	if err := root.WriteFile(name, hostConf, 0o644); err != nil {
		root.Close()
		return nil, fmt.Errorf("install host resolv.conf: %w", err)
	}
	return func() error {
		defer root.Close()
		if err := root.RemoveAll(name); err != nil {
			return err
		}
		switch {
		case !existed:
			return nil
		case origLink != "":
			return root.Symlink(origLink, name)
		default:
			if err := root.WriteFile(name, origContent, origMode); err != nil {
				return err
			}
			return root.Chmod(name, origMode)
		}
	}, nil
}

// copyFiles copies the recipe's host files into the rootfs, owned by root.
// Directories are copied recursively (symlinks as symlinks); mode, when
// given, applies to the top-level entry.
func copyFiles(rootfs string, files []FileCopy, baseDir string, logLine func(string)) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for i, f := range files {
		src, err := hostPath(f.Src, baseDir)
		if err != nil {
			return fmt.Errorf("files[%d]: %w", i, err)
		}
		dest := strings.TrimPrefix(path.Clean(f.Dest), "/")
		logLine(fmt.Sprintf("%s -> %s", f.Src, f.Dest))
		if err := root.MkdirAll(path.Dir(dest), 0o755); err != nil {
			return fmt.Errorf("files[%d]: create parent of %s: %w", i, f.Dest, err)
		}
		if err := copyTree(root, src, dest); err != nil {
			return fmt.Errorf("files[%d]: %w", i, err)
		}
		if f.Mode != "" {
			mode, _ := parseMode(f.Mode) // validated
			if err := root.Chmod(dest, unixMode(mode)); err != nil {
				return fmt.Errorf("files[%d]: chmod %s: %w", i, f.Dest, err)
			}
		}
	}
	return nil
}

// copyTree copies host path src to dest inside root.
func copyTree(root *os.Root, src, dest string) error {
	top, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !top.IsDir() {
		if info, err := root.Lstat(dest); err == nil && info.IsDir() {
			return fmt.Errorf("%s is a directory in the rootfs; give the full file path as dest", dest)
		}
		root.Remove(dest)
		return copyHostFile(root, src, dest, top.Mode().Perm())
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
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
			if err := root.MkdirAll(target, 0o755); err != nil {
				return err
			}
			if err := root.Lchown(target, 0, 0); err != nil {
				return err
			}
			return root.Chmod(target, info.Mode().Perm())
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			root.RemoveAll(target)
			if err := root.Symlink(link, target); err != nil {
				return err
			}
			return root.Lchown(target, 0, 0)
		case info.Mode().IsRegular():
			root.RemoveAll(target)
			return copyHostFile(root, p, target, info.Mode().Perm())
		default:
			return nil // sockets, devices: nothing sensible to copy
		}
	})
}

// unixMode converts permission bits including setuid/setgid/sticky.
func unixMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
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
