package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"github.com/space-platform/space/internal/testtier"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestE2BJSSDKs runs compat/e2b-js: the real E2B JavaScript SDKs from npm
// (e2b 2.20, 2.45 and 2.51, @e2b/code-interpreter 2.7 and 2.8) against this server's E2B
// API and sandbox proxy, on the base and code-interpreter-v1 templates. It
// installs the pinned packages with `npm ci` once per package-lock.json
// (cached in compat/e2b-js/node_modules) and skips only when npm or its
// registry is unreachable.
func TestE2BJSSDKs(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "installs npm packages and builds the base template")
	// Mostly waiting on the server and the sandboxes: alongside the
	// other parallel tests (each SDK suite has its own directory and
	// sandboxes). The group's longest test, it takes none of groupSlots,
	// so that it starts with the group.
	t.Parallel()
	dir := filepath.Join(env.repoRoot, "compat", "e2b-js")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the E2B JS compatibility suite needs Node.js ≥ 20")
	}
	installSDKs(t, dir)
	files := strings.Fields(os.Getenv("SPACE_E2B_JS_TESTS"))
	if len(files) == 0 {
		files = []string{"test/"}
	}
	if strings.Contains(strings.Join(files, " "), "code-interpreter") || files[0] == "test/" {
		buildCodeInterpreter(t) // base, and code-interpreter-v1 for test/code-interpreter*.test.mjs
	} else if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// SPACE_E2B_JS_TESTS (read above) narrows the run to some files
	// (space-separated, relative to compat/e2b-js), for work on one part
	// of the suite; code-interpreter-v1 is built only when one needs it.
	args := append([]string{"--test", "--test-concurrency=2", "--test-reporter=spec"}, files...)
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	cmd.Env = append(withoutE2BEnv(os.Environ()),
		"E2B_API_URL="+env.srv.E2BURL(),
		"E2B_SANDBOX_URL="+env.srv.ProxyURL(),
		"E2B_API_KEY="+env.srv.AdminKey,
		"E2B_TEMPLATE=base",
		// The native API, for the tests that build their own templates
		// (lib/life.mjs); same key.
		"SPACE_API_URL="+env.srv.URL,
	)
	cmd.Env = append(cmd.Env, netJSEnv(t)...) // the fake web, for test/net-*.test.mjs
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err = cmd.Run()
	t.Logf("node --test (%s):\n%s", time.Since(began).Round(time.Second), out.String())
	if err != nil {
		t.Fatalf("the E2B JS compatibility suite failed: %v", err)
	}
}

// withoutE2BEnv drops E2B settings of the caller's environment, so the
// suite cannot reach E2B's cloud by accident.
func withoutE2BEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "E2B_") {
			out = append(out, kv)
		}
	}
	return out
}

// npmUnreachable recognises npm's network failures.
var npmUnreachable = regexp.MustCompile(`ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network request .* failed`)

// installSDKs runs `npm ci` unless node_modules was installed from the
// current package-lock.json.
func installSDKs(t *testing.T, dir string) {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed; the E2B JS compatibility suite needs it")
	}
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatalf("compat/e2b-js/package-lock.json: %v", err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(dir, "node_modules", ".space-installed-lock")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		if npmUnreachable.Match(out) {
			t.Skipf("the npm registry is unreachable, so the E2B SDKs cannot be installed:\n%s", out)
		}
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
}
