package template

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// copyScratch is where a copy step's archive is unpacked in the build
// sandbox; the step removes it again.
const copyScratch = "/tmp/.space-copy"

// runOrderedStep carries out one of the recipe's ordered steps in the
// build sandbox. Everything it runs is a script of fixed shape with the
// step's values quoted into it; the archive of a copy is streamed into
// the sandbox and unpacked there, never on the host.
func (p *buildPlan) runOrderedStep(ctx context.Context, sb BuildSandbox, i int, st Step, logLine func(string)) error {
	user, workdir := st.User, st.Workdir
	if user == "" {
		user = p.stepUser
	}
	if user == "" {
		user = "root"
	}
	if workdir == "" {
		workdir = p.stepWorkdir
	}
	if workdir == "" {
		workdir = "/"
	}
	env := stepEnv(p.env)
	for k, v := range st.Env {
		env[k] = v
	}
	if st.Copy == nil {
		return runStep(ctx, sb, runAsScript(st.Run, user, workdir), env, logLine)
	}
	return p.copyStep(ctx, sb, i, st.Copy, user, workdir, logLine)
}

// lookupUser is shell that sets $u (name), $uid, $gid and $home of the
// user (a name or uid) or fails the step saying the user is missing.
func lookupUser(user string) string {
	name, _, _ := strings.Cut(user, ":")
	return fmt.Sprintf(`u=$(awk -F: -v u=%[1]s '$1==u||$3==u{print $1; exit}' /etc/passwd)
if [ -z "$u" ]; then echo %[2]s >&2; exit 1; fi
uid=$(id -u "$u"); gid=$(id -g "$u")
home=$(awk -F: -v u="$u" '$1==u{print $6; exit}' /etc/passwd)
`, shellQuote(name), shellQuote("user "+name+" does not exist in the template (create it in an earlier step)"))
}

// runAsScript runs script with /bin/sh in workdir (created when missing,
// as Docker's WORKDIR does) as user, with the user's HOME.
func runAsScript(script, user, workdir string) string {
	q := shellQuote
	var b strings.Builder
	// The wrapper stops at its first failure; the step's own script runs
	// in a shell of its own, without -e.
	b.WriteString("set -e\n")
	fmt.Fprintf(&b, "mkdir -p %[1]s\ncd %[1]s\n", q(workdir))
	if user == "root" || user == "0" {
		fmt.Fprintf(&b, "exec /bin/sh -c %s\n", q(script))
		return b.String()
	}
	b.WriteString(lookupUser(user))
	b.WriteString(`export HOME="${home:-/}" USER="$u" LOGNAME="$u"` + "\n")
	fmt.Fprintf(&b, "exec su -p -s /bin/sh \"$u\" -c %s\n", q(script))
	return b.String()
}

// copyStep streams the archive into the sandbox, unpacks it in a scratch
// directory there and copies the step's source to its destination, owned
// by user, with Docker COPY's rules: a file goes to dest (into it when
// dest ends in '/' or is a directory), a directory's contents into dest.
func (p *buildPlan) copyStep(ctx context.Context, sb BuildSandbox, i int, c *CopyStep, user, workdir string, logLine func(string)) error {
	loc := p.archives[c.Archive] // resolved in plan
	f, err := os.Open(loc)
	if err != nil {
		return fmt.Errorf("copy: uploaded files %s: %w", c.Archive, err)
	}
	defer f.Close()
	magic := make([]byte, 2)
	n, _ := io.ReadFull(f, magic)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("copy: uploaded files %s: %w", c.Archive, err)
	}
	zflag := ""
	if n == 2 && bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zflag = "z"
	}
	scratch := fmt.Sprintf("%s-%d", copyScratch, i)
	if err := runStep(ctx, sb, fmt.Sprintf("rm -rf %[1]s %[1]s.tar && mkdir -p %[1]s/unpack", scratch), nil, logLine); err != nil {
		return fmt.Errorf("copy: prepare: %w", err)
	}
	if err := sb.WriteFile(ctx, scratch+".tar", f); err != nil {
		return fmt.Errorf("copy: send the uploaded files: %w", err)
	}
	dest := c.Dest
	if !path.IsAbs(dest) {
		dest = path.Join(workdir, dest)
		if strings.HasSuffix(c.Dest, "/") || c.Dest == "." {
			dest += "/"
		}
	}
	src := path.Join(scratch, "unpack", staticPrefix(c.Src))
	q := shellQuote
	var b strings.Builder
	b.WriteString("set -e\n")
	fmt.Fprintf(&b, "tar -x%sf %s -C %s\n", zflag, q(scratch+".tar"), q(scratch+"/unpack"))
	fmt.Fprintf(&b, "src=%s\ndest=%s\n", q(src), q(dest))
	fmt.Fprintf(&b, "if [ ! -e \"$src\" ] && [ ! -L \"$src\" ]; then echo %s >&2; exit 1; fi\n",
		q("copy: "+c.Src+" is not among the uploaded files"))
	b.WriteString(lookupUser(user))
	b.WriteString("owner=\"$uid:$gid\"\n")
	mode := ""
	if c.Mode != "" {
		m, _ := parseMode(c.Mode) // validated
		mode = fmt.Sprintf("%o", m)
	}
	fmt.Fprintf(&b, "mode=%s\n", q(mode))
	b.WriteString(`if [ -d "$src" ] && [ ! -L "$src" ]; then
  chown -R "$owner" "$src"
  if [ -n "$mode" ]; then chmod -R "$mode" "$src"; fi
  mkdir -p "$dest"
  for e in "$src"/* "$src"/.[!.]* "$src"/..?*; do
    if [ -e "$e" ] || [ -L "$e" ]; then cp -a "$e" "$dest/"; fi
  done
else
  target="$dest"
  case "$dest" in */) mkdir -p "$dest"; target="$dest$(basename "$src")";; esac
  if [ -d "$target" ] && [ ! -L "$target" ]; then target="$target/$(basename "$src")"; fi
  mkdir -p "$(dirname "$target")"
  chown -h "$owner" "$src"
  if [ -n "$mode" ] && [ ! -L "$src" ]; then chmod "$mode" "$src"; fi
  rm -f "$target"
  cp -a "$src" "$target"
fi
`)
	fmt.Fprintf(&b, "rm -rf %[1]s %[1]s.tar\n", q(scratch))
	if err := runStep(ctx, sb, b.String(), nil, logLine); err != nil {
		return fmt.Errorf("copy %s -> %s: %w", c.Src, c.Dest, err)
	}
	return nil
}

// staticPrefix is the part of a source path before its first segment
// with a glob character; "." when that is the first.
func staticPrefix(src string) string {
	var keep []string
	for _, seg := range strings.Split(path.Clean(src), "/") {
		if strings.ContainsAny(seg, "*?[{") {
			break
		}
		keep = append(keep, seg)
	}
	if len(keep) == 0 {
		return "."
	}
	return path.Join(keep...)
}
