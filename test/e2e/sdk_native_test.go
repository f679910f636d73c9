package e2e

import (
	"bytes"
	"context"
	"github.com/space-platform/space/internal/testtier"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNativeSDKs runs the tests of space's own SDKs against this server's
// native API on the minimal template: sdk/python (space-sandbox, pytest in
// the virtualenv sdk/python/setup.sh installs from its hash-pinned
// lockfile) and sdk/typescript (@space-sandbox/sdk, compiled with the
// tsc of its package-lock, then `node --test`). Both include the check
// that every operation of docs/openapi.yaml has an SDK method.
//
// SPACE_SDK_NATIVE=python or =typescript runs only one of them;
// SPACE_SDK_NATIVE_TESTS narrows each to some files (space-separated,
// relative to the SDK's directory; a file of the other language is
// ignored). The fake web's names (SPACE_TEST_WEB_*) are passed for the
// network denial tests, and SPACE_SDK_LIVE=1, which makes a live test that
// finds no server fail instead of skipping. It skips only when PyPI or npm
// is unreachable.
func TestNativeSDKs(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "installs PyPI and npm packages")
	// Mostly waiting on the server and the sandboxes: alongside the
	// other parallel tests (each SDK suite has its own directory and
	// sandboxes).
	inParallelGroup(t)
	which := os.Getenv("SPACE_SDK_NATIVE")
	files := strings.Fields(os.Getenv("SPACE_SDK_NATIVE_TESTS"))
	environ := append(withoutE2BEnv(os.Environ()),
		"SPACE_URL="+env.srv.URL,
		"SPACE_API_KEY="+env.srv.AdminKey,
		"SPACE_TEMPLATE=minimal",
		"SPACE_SDK_LIVE=1",
		"PYTHONDONTWRITEBYTECODE=1",
	)
	environ = append(environ, netJSEnv(t)...) // the fake web, for the network denial tests
	if which == "" || which == "python" {
		t.Run("python", func(t *testing.T) {
			dir := filepath.Join(env.repoRoot, "sdk", "python")
			venv := installPySDKs(t, dir, "")
			runPytest(t, venv, dir, environ, pick(files, ".py", "tests/"))
		})
	}
	if which == "" || which == "typescript" {
		t.Run("typescript", func(t *testing.T) {
			dir := filepath.Join(env.repoRoot, "sdk", "typescript")
			if _, err := exec.LookPath("node"); err != nil {
				t.Skip("node is not installed; the TypeScript SDK needs Node.js ≥ 20")
			}
			installSDKs(t, dir) // npm ci, cached per package-lock.json
			runTestCommand(t, "npm run build", dir, environ, "npm", "run", "--silent", "build")
			args := []string{"--test", "--test-concurrency=1", "--test-reporter=spec"}
			args = append(args, pick(files, ".mjs", "test/")...)
			runTestCommand(t, "node --test", dir, environ, "node", args...)
		})
	}
}

// pick returns the files of one language, or all of them (def) when none
// was asked for in that language.
func pick(files []string, ext, def string) []string {
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, ext) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return []string{def}
	}
	return out
}

// runTestCommand runs a test runner in dir and fails the test, with the
// runner's output, when it fails.
func runTestCommand(t *testing.T, what, dir string, environ []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = environ
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err := cmd.Run()
	t.Logf("%s (%s):\n%s", what, time.Since(began).Round(time.Second), out.String())
	if err != nil {
		t.Fatalf("%s in %s failed: %v", what, dir, err)
	}
}
