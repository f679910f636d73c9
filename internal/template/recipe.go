// Package template turns recipes into immutable, content-versioned template
// root filesystems.
//
// A recipe (YAML) names a base (minimal busybox, a Debian suite, an OCI
// image uploaded with the request or, for admins, on the host, or another
// template), then apt packages, shell steps, files and process defaults.
// Its canonical resolved form hashes to the template ID; the built rootfs
// is the read-only volume templates/<id>, so the same recipe never builds
// twice and a built template never changes.
//
// Recipes are untrusted: any API key may submit one. Package installs,
// run steps and file copies execute as root inside a gVisor build
// sandbox booted on the work volume (BuildSandboxes, implemented by the
// node), under the default egress policy of sandboxes. On the host runs
// only what takes no recipe input: the busybox copy of minimal, the
// Debian bootstrap stage (allow-listed suite, fixed package set), the
// unpacking of OCI layers in Go through os.Root, and volume snapshots.
// Host paths in a recipe (from: oci-layout:/oci-archive:, files: with host
// sources) need Source.HostPaths, which the API grants admin keys only.
package template

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/space-platform/space/internal/runtime"
)

// Recipe is the parsed form of a template recipe file.
type Recipe struct {
	// Name is the template name; the API/CLI may supply it instead.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// From is the base: "minimal", "debian:<suite>", "upload" (the OCI
	// archive uploaded with the recipe), "image:<reference>" (pulled from
	// its registry, e.g. image:docker.io/library/alpine:3), "oci-archive:<tar>",
	// "oci-layout:<dir>" (host paths: admins only) or "template:<name>".
	From string `yaml:"from" json:"from"`
	// Packages are apt packages (Debian-based bases only).
	Packages []string `yaml:"packages,omitempty" json:"packages,omitempty"`
	// Run are shell steps run in order with /bin/sh -c, as root, in /.
	Run []string `yaml:"run,omitempty" json:"run,omitempty"`
	// Env is the default environment of sandbox processes; run steps see it
	// too. It is merged over the base's.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// User is the default user of sandbox processes; it must exist in the
	// rootfs (the base or a run step creates it).
	User string `yaml:"user,omitempty" json:"user,omitempty"`
	// Workdir is the default working directory of sandbox processes.
	Workdir string `yaml:"workdir,omitempty" json:"workdir,omitempty"`
	// Files are copied into the rootfs after the run steps: built-in
	// sources, or host paths (admins only).
	Files []FileCopy `yaml:"files,omitempty" json:"files,omitempty"`
	// Steps are ordered build steps, carried out in the build sandbox
	// after Run and Files: commands as a given user in a given directory,
	// and copies out of archives uploaded with the recipe. They are what
	// E2B's template builder (Template() in its SDKs) translates into.
	Steps []Step `yaml:"steps,omitempty" json:"steps,omitempty"`
	// Start is an optional long-running command started in each sandbox.
	Start string `yaml:"start,omitempty" json:"start,omitempty"`
	// Ready is an optional check command; exit status 0 means ready.
	Ready string `yaml:"ready,omitempty" json:"ready,omitempty"`
	// MCP declares the template's MCP gateway, which E2B's `mcp` create
	// option needs (docs/e2b.md, MCP).
	MCP *MCPGateway `yaml:"mcp,omitempty" json:"mcp,omitempty"`
	// Runtime names the backends the template is built for: "gvisor",
	// "microvm", or a list of both (one recipe, both artifacts). The first
	// is the template's default, what a create that names none (and every
	// E2B create) runs on. Absent: gvisor.
	Runtime Runtimes `yaml:"runtime,omitempty" json:"runtime,omitempty"`
}

// Runtimes is a recipe's runtime field: one name, or a list of them.
type Runtimes []string

// UnmarshalYAML takes a single name as a list of one.
func (rs *Runtimes) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode {
		var name string
		if err := node.Decode(&name); err != nil {
			return err
		}
		*rs = Runtimes{name}
		return nil
	}
	var names []string
	if err := node.Decode(&names); err != nil {
		return fmt.Errorf("runtime: want a name or a list of names (%s)", strings.Join(runtime.Names(), ", "))
	}
	if names == nil {
		names = []string{}
	}
	*rs = names
	return nil
}

// validate checks each name, once each.
func (rs Runtimes) validate() error {
	if rs != nil && len(rs) == 0 {
		return fmt.Errorf("recipe: runtime: empty list (want one or more of %s)", strings.Join(runtime.Names(), ", "))
	}
	for i, name := range rs {
		if err := runtime.CheckName(name); err != nil {
			return fmt.Errorf("recipe: runtime: %w", err)
		}
		if slices.Contains(rs[:i], name) {
			return fmt.Errorf("recipe: runtime: %s named twice", name)
		}
	}
	return nil
}

// Names are the backends the recipe builds for, its default first.
func (rs Runtimes) Names() []string {
	if len(rs) == 0 {
		return []string{runtime.GVisor}
	}
	return slices.Clone(rs)
}

// resolved is the runtime list as the template ID hashes it: nil for
// gvisor alone, so that the ids of recipes without the field did not
// change when it came and `runtime: gvisor` builds the same template.
func (rs Runtimes) resolved() []string {
	if names := rs.Names(); !slices.Equal(names, []string{runtime.GVisor}) {
		return names
	}
	return nil
}

// MCPGateway is the MCP gateway a template provides. E2B's SDKs start it
// after create by running `mcp-gateway --config '<servers JSON>'` as root
// with GATEWAY_ACCESS_TOKEN set; it must then serve MCP on port 50005 at
// /mcp (checking that token as a bearer token), write the token to
// /etc/mcp-gateway/.token (what the SDKs read back on connect) and exit.
type MCPGateway struct {
	// Gateway is the absolute path of that command; the SDKs run it by
	// name, so it is named mcp-gateway in a directory of the default PATH.
	Gateway string `yaml:"gateway" json:"gateway"`
}

// mcpGatewayDirs are the directories of the default PATH a gateway may
// be installed in.
var mcpGatewayDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// validate checks where the gateway is installed.
func (g *MCPGateway) validate() error {
	if g.Gateway == "" {
		return errors.New("recipe: mcp.gateway: required (the path of the template's mcp-gateway command)")
	}
	if !path.IsAbs(g.Gateway) || path.Clean(g.Gateway) != g.Gateway || path.Base(g.Gateway) != "mcp-gateway" {
		return fmt.Errorf("recipe: mcp.gateway: %q must be an absolute, clean path named mcp-gateway: the SDKs run the gateway by that name", g.Gateway)
	}
	for _, d := range mcpGatewayDirs {
		if path.Dir(g.Gateway) == d {
			return nil
		}
	}
	return fmt.Errorf("recipe: mcp.gateway: %q is not in a directory of the default PATH (%s)", g.Gateway, strings.Join(mcpGatewayDirs, ":"))
}

// FileCopy copies a host file or directory into the rootfs.
type FileCopy struct {
	// Src is a host path, relative to the recipe file's directory, or
	// "builtin:<path>" for a file or directory shipped in the binary with
	// the built-in recipes (internal/template/recipes/<path>). Built-in
	// sources need no recipe directory, so they work in recipes sent over
	// the API too.
	Src string `yaml:"src" json:"src"`
	// Dest is an absolute path in the rootfs.
	Dest string `yaml:"dest" json:"dest"`
	// Mode optionally overrides the permission bits (octal, e.g. "0755");
	// for a directory it applies to the directory itself.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
}

// Step is one ordered build step: exactly one of Run and Copy.
type Step struct {
	// Run is a shell command run with /bin/sh -c.
	Run string `yaml:"run,omitempty" json:"run,omitempty"`
	// Copy copies files out of an uploaded archive.
	Copy *CopyStep `yaml:"copy,omitempty" json:"copy,omitempty"`
	// User runs the command (a name or uid), or owns the copied files
	// ("user" or "user:group"); empty: the base's default user.
	User string `yaml:"user,omitempty" json:"user,omitempty"`
	// Workdir is the command's directory and the base of a relative copy
	// destination; empty: the base's default working directory.
	Workdir string `yaml:"workdir,omitempty" json:"workdir,omitempty"`
	// Env is added to the environment of the command.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
}

// CopyStep copies a path out of an archive uploaded with the recipe.
type CopyStep struct {
	// Archive names the uploaded (optionally gzipped) tar, a key of
	// Source.Archives: E2B's files hash, 64 hex digits.
	Archive string `yaml:"archive" json:"archive"`
	// Src is the path inside the archive, relative; glob characters end
	// its static prefix (the archive holds only what the glob matched).
	// A file is copied to Dest (into it when Dest ends in '/'), a
	// directory's contents into Dest.
	Src string `yaml:"src" json:"src"`
	// Dest is absolute, or relative to the step's workdir.
	Dest string `yaml:"dest" json:"dest"`
	// Mode optionally sets the permission bits (octal) of what is copied.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
}

// Kinds of base, the part of From before the colon.
const (
	FromMinimal    = "minimal"
	FromDebian     = "debian"
	FromOCIArchive = "oci-archive"
	FromOCILayout  = "oci-layout"
	FromTemplate   = "template"
	FromUpload     = "upload"
	// FromImage pulls an OCI image from a registry by reference.
	FromImage = "image"
)

// Base is a parsed From value.
type Base struct {
	Kind string // one of the From* constants
	Arg  string // suite, path or template name; empty for minimal
}

var (
	namePattern    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	suitePattern   = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	packagePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$`)
	envKeyPattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userPattern    = regexp.MustCompile(`^([a-z_][a-z0-9_-]*\$?|[0-9]+)(:([a-z_][a-z0-9_-]*|[0-9]+))?$`)
	archivePattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidName reports whether s is usable as a template name: lowercase
// letters, digits, '.', '_' and '-', starting with a letter or digit, at
// most 63 characters.
func ValidName(s string) error {
	if !namePattern.MatchString(s) {
		return fmt.Errorf("invalid template name %q: use lowercase letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)", s)
	}
	return nil
}

// ParseRecipe parses and validates recipe YAML. Unknown fields are errors,
// so a typo cannot silently drop a step.
func ParseRecipe(data []byte) (*Recipe, error) {
	var r Recipe
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("recipe: empty document")
		}
		return nil, fmt.Errorf("recipe: %s", cleanYAMLError(err))
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// cleanYAMLError rewrites yaml.v3's Go-flavoured messages ("field fom not
// found in type template.Recipe") into recipe terms.
func cleanYAMLError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if i := strings.Index(l, " not found in type "); i >= 0 {
			l = strings.Replace(l[:i], "field ", "unknown field ", 1)
		}
		l = strings.ReplaceAll(l, "template.Recipe", "recipe")
		l = strings.ReplaceAll(l, "template.FileCopy", "file entry")
		l = strings.ReplaceAll(l, "!!seq", "a list")
		l = strings.ReplaceAll(l, "!!map", "a mapping")
		l = strings.ReplaceAll(l, "!!str", "a string")
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}

// Validate checks every field and names the bad one in its error.
func (r *Recipe) Validate() error {
	if r.Name != "" {
		if err := ValidName(r.Name); err != nil {
			return fmt.Errorf("recipe: name: %w", err)
		}
	}
	base, err := ParseFrom(r.From)
	if err != nil {
		return fmt.Errorf("recipe: from: %w", err)
	}
	for i, p := range r.Packages {
		if !packagePattern.MatchString(p) {
			return fmt.Errorf("recipe: packages[%d]: invalid Debian package name %q", i, p)
		}
	}
	if len(r.Packages) > 0 && base.Kind == FromMinimal {
		return errors.New("recipe: packages: apt packages need a Debian-based base (from: debian:<suite>, or an image or template that has apt-get); minimal has none")
	}
	for i, step := range r.Run {
		if strings.TrimSpace(step) == "" {
			return fmt.Errorf("recipe: run[%d]: empty step", i)
		}
	}
	for k := range r.Env {
		if !envKeyPattern.MatchString(k) {
			return fmt.Errorf("recipe: env: invalid variable name %q", k)
		}
	}
	if r.User != "" && !userPattern.MatchString(r.User) {
		return fmt.Errorf("recipe: user: invalid user %q (want a name, uid or user:group)", r.User)
	}
	if r.Workdir != "" && !path.IsAbs(r.Workdir) {
		return fmt.Errorf("recipe: workdir: %q is not an absolute path", r.Workdir)
	}
	if r.MCP != nil {
		if err := r.MCP.validate(); err != nil {
			return err
		}
	}
	if err := r.Runtime.validate(); err != nil {
		return err
	}
	for i, f := range r.Files {
		if f.Src == "" {
			return fmt.Errorf("recipe: files[%d].src: required", i)
		}
		if rel, ok := builtinSource(f.Src); ok {
			if err := checkBuiltinSource(rel); err != nil {
				return fmt.Errorf("recipe: files[%d].src: %w", i, err)
			}
		}
		if !path.IsAbs(f.Dest) {
			return fmt.Errorf("recipe: files[%d].dest: %q is not an absolute path", i, f.Dest)
		}
		if path.Clean(f.Dest) == "/" {
			return fmt.Errorf("recipe: files[%d].dest: cannot replace /", i)
		}
		if f.Mode != "" {
			if _, err := parseMode(f.Mode); err != nil {
				return fmt.Errorf("recipe: files[%d].mode: %w", i, err)
			}
		}
	}
	for i, st := range r.Steps {
		if err := st.validate(); err != nil {
			return fmt.Errorf("recipe: steps[%d]: %w", i, err)
		}
	}
	return nil
}

// maxStepBytes bounds one step's command; E2B's builder takes commands
// of a shell line's size, not programs.
const maxStepBytes = 64 << 10

func (st *Step) validate() error {
	switch {
	case st.Run != "" && st.Copy != nil:
		return errors.New("a step is either run or copy, not both")
	case st.Copy == nil && strings.TrimSpace(st.Run) == "":
		return errors.New("empty step: give run or copy")
	case len(st.Run) > maxStepBytes:
		return fmt.Errorf("run: command longer than %d bytes", maxStepBytes)
	case strings.ContainsRune(st.Run, 0):
		return errors.New("run: command contains a NUL byte")
	}
	if st.User != "" && !userPattern.MatchString(st.User) {
		return fmt.Errorf("user: invalid user %q (want a name, uid or user:group)", st.User)
	}
	if st.Workdir != "" && (!path.IsAbs(st.Workdir) || strings.ContainsRune(st.Workdir, 0)) {
		return fmt.Errorf("workdir: %q is not an absolute path", st.Workdir)
	}
	for k := range st.Env {
		if !envKeyPattern.MatchString(k) {
			return fmt.Errorf("env: invalid variable name %q", k)
		}
	}
	if c := st.Copy; c != nil {
		if !archivePattern.MatchString(c.Archive) {
			return fmt.Errorf("copy.archive: %q is not a files hash (64 hex digits)", c.Archive)
		}
		if c.Src == "" || path.IsAbs(c.Src) || strings.ContainsRune(c.Src, 0) {
			return fmt.Errorf("copy.src: %q must be a relative path", c.Src)
		}
		for _, seg := range strings.Split(c.Src, "/") {
			if seg == ".." {
				return fmt.Errorf("copy.src: %q leaves the archive", c.Src)
			}
		}
		if c.Dest == "" || strings.ContainsRune(c.Dest, 0) {
			return errors.New("copy.dest: required")
		}
		if c.Mode != "" {
			if _, err := parseMode(c.Mode); err != nil {
				return fmt.Errorf("copy.mode: %w", err)
			}
		}
	}
	return nil
}

// ParseFrom parses a recipe's from field.
func ParseFrom(from string) (Base, error) {
	if from == "" {
		return Base{}, errors.New("required (minimal, debian:<suite>, upload, image:<reference>, oci-archive:<tar>, oci-layout:<dir> or template:<name>)")
	}
	if from == FromMinimal || from == FromUpload {
		return Base{Kind: from}, nil
	}
	kind, arg, ok := strings.Cut(from, ":")
	if !ok || arg == "" {
		return Base{}, fmt.Errorf("unknown base %q (want minimal, debian:<suite>, upload, image:<reference>, oci-archive:<tar>, oci-layout:<dir> or template:<name>)", from)
	}
	switch kind {
	case FromDebian:
		if !suitePattern.MatchString(arg) {
			return Base{}, fmt.Errorf("invalid Debian suite %q", arg)
		}
		if _, ok := bootstrapSuites[arg]; !ok {
			return Base{}, fmt.Errorf("Debian suite %q is not offered (one of %s)", arg, strings.Join(allowedSuites(), ", "))
		}
	case FromOCIArchive, FromOCILayout:
	case FromImage:
		if _, err := parseImageRef(arg); err != nil {
			return Base{}, err
		}
	case FromTemplate:
		if err := ValidName(arg); err != nil && !idPattern.MatchString(arg) {
			return Base{}, err
		}
	default:
		return Base{}, fmt.Errorf("unknown base kind %q in %q (want minimal, debian, upload, image, oci-archive, oci-layout or template)", kind, from)
	}
	return Base{Kind: kind, Arg: arg}, nil
}

func parseMode(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, fmt.Errorf("invalid octal mode %q", s)
	}
	return uint32(v), nil
}
