package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// defaultPath is used when neither the agent's environment nor the request
// sets PATH (a sandbox's PID 1 usually starts with an empty environment).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// processEnv builds a child's environment. Precedence, lowest first: the
// agent's own environment, the user's identity (HOME, USER, LOGNAME, SHELL),
// /init envVars, the request's envs.
func (a *Agent) processEnv(u *userAccount, requested map[string]string) []string {
	env := make(map[string]string, len(a.baseEnv)+8)
	for k, v := range a.baseEnv {
		env[k] = v
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = defaultPath
	}
	env["HOME"] = u.Home
	env["USER"] = u.Name
	env["LOGNAME"] = u.Name
	shell := u.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	env["SHELL"] = shell
	for k, v := range a.settings.env() {
		env[k] = v
	}
	for k, v := range requested {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// processDir picks the working directory: the requested one (relative to
// home), else the default workdir if it exists, else home, else "/".
func (a *Agent) processDir(u *userAccount, requested *string) (string, error) {
	if requested != nil && *requested != "" {
		dir, err := resolvePath(*requested, u)
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("cwd %q is not an existing directory", dir)
		}
		return dir, nil
	}
	_, workdir := a.settings.defaults()
	for _, dir := range []string{workdir, u.Home} {
		if dir == "" {
			continue
		}
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir, nil
		}
	}
	return "/", nil
}

// lookPath resolves cmd against the child's PATH (not the agent's, which
// os/exec would use).
func lookPath(cmd string, env []string) (string, error) {
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		candidate := filepath.Join(dir, cmd)
		if fi, err := os.Stat(candidate); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("%q: %w", cmd, errExecutableNotFound)
}

var errExecutableNotFound = errors.New("executable file not found in $PATH")
