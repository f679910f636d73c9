package agent

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// tokenFDEnvVar names the descriptor the agent reads its initial access
// token from once HideInitialToken re-executed it.
const tokenFDEnvVar = "SPACE_AGENT_TOKEN_FD"

// HideInitialToken re-executes the agent with its initial access token on
// an inherited pipe instead of in its environment, when the token came in
// the environment (SPACE_AGENT_TOKEN, as the node starts gVisor sandboxes).
// Unsetenv cannot hide it: the kernel keeps a process's first environment
// in its memory and shows it as /proc/<pid>/environ to every process of
// the same user, and a template build's steps run as root, as the agent
// does. Only a new program image starts from a new environment. It
// returns without doing anything when there is no token to hide, and only
// on failure otherwise (the token stays where it was then).
func HideInitialToken() error {
	tok, ok := os.LookupEnv(tokenEnvVar)
	if !ok {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("hide the initial token: find the agent's binary: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("hide the initial token: %w", err)
	}
	defer r.Close()
	// A token is far smaller than a pipe's buffer: the write does not wait
	// for the reader, which is the program this process becomes.
	_, err = io.WriteString(w, tok)
	w.Close()
	if err != nil {
		return fmt.Errorf("hide the initial token: %w", err)
	}
	fd := int(r.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil { // survive the exec
		return fmt.Errorf("hide the initial token: %w", err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, tokenEnvVar+"=") || strings.HasPrefix(kv, tokenFDEnvVar+"=")
	})
	env = append(env, tokenFDEnvVar+"="+strconv.Itoa(fd))
	err = syscall.Exec(exe, os.Args, env)
	return fmt.Errorf("hide the initial token: re-execute %s: %w", exe, err)
}

// initialToken takes the initial access token from the environment, or
// from the descriptor HideInitialToken left it on, and removes both from
// the environment that children inherit.
func initialToken() (string, bool, error) {
	if tok, ok := os.LookupEnv(tokenEnvVar); ok {
		if err := os.Unsetenv(tokenEnvVar); err != nil {
			return "", false, fmt.Errorf("unset %s: %w", tokenEnvVar, err)
		}
		return tok, true, nil
	}
	v, ok := os.LookupEnv(tokenFDEnvVar)
	if !ok {
		return "", false, nil
	}
	if err := os.Unsetenv(tokenFDEnvVar); err != nil {
		return "", false, fmt.Errorf("unset %s: %w", tokenFDEnvVar, err)
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return "", false, fmt.Errorf("%s: %q is no descriptor", tokenFDEnvVar, v)
	}
	f := os.NewFile(uintptr(fd), "initial token")
	defer f.Close()
	tok, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", false, fmt.Errorf("read the initial token: %w", err)
	}
	return string(tok), true, nil
}
