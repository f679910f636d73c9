package redteam

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
)

// The issue asks for at least 40 attempts over seven categories; every
// attempt must say what it expects and what getting through would mean.
func TestCatalogIsComplete(t *testing.T) {
	all := Catalog()
	if len(all) < 45 {
		t.Fatalf("catalog has %d attempts, want at least 45", len(all))
	}
	names := map[string]bool{}
	perCategory := map[Category]int{}
	for _, a := range all {
		if names[a.Name] {
			t.Errorf("duplicate attempt %q", a.Name)
		}
		names[a.Name] = true
		perCategory[a.Category]++
		if a.Expected == "" || a.Escape == "" || a.Run == nil {
			t.Errorf("attempt %q lacks an expectation, an escape or a body", a.Name)
		}
		if len(a.Runtimes) > 0 && a.NotOn == "" {
			t.Errorf("attempt %q is for %v only and does not say why", a.Name, a.Runtimes)
		}
		if _, err := ParseCategory(string(a.Category)); err != nil {
			t.Errorf("attempt %q: %v", a.Name, err)
		}
	}
	for _, c := range Categories {
		if perCategory[c] == 0 {
			t.Errorf("no attempt in category %s", c)
		}
	}
}

func TestSelect(t *testing.T) {
	all := Catalog()
	dns := Select(all, []Category{DNS}, nil)
	if len(dns) == 0 {
		t.Fatal("no dns attempts selected")
	}
	for _, a := range dns {
		if a.Category != DNS {
			t.Errorf("selected %q of %s", a.Name, a.Category)
		}
	}
	if got := Select(all, nil, []string{all[3].Name}); len(got) != 1 || got[0].Name != all[3].Name {
		t.Errorf("select by name: %v", got)
	}
	if _, err := ParseCategory("firmware"); err == nil {
		t.Error("unknown category accepted")
	}
}

// The shell and Python bodies are checked for syntax here, so that a typo
// shows up as a test failure rather than as an "error" outcome on a server.
func TestScriptPreludesParse(t *testing.T) {
	if _, err := exec.LookPath("python3"); err == nil {
		for name, src := range map[string]string{"prelude": pyPrelude, "probe": pyPrelude + probeAll, "dns": pyPrelude + dnsQuery, "syscall": pyPrelude + syscallProbe} {
			cmd := exec.Command("python3", "-c", "import ast,sys; ast.parse(sys.stdin.read())")
			cmd.Stdin = strings.NewReader(src)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s does not parse: %v\n%s", name, err, out)
			}
		}
	}
	cmd := exec.Command("bash", "-n", "-c", scriptPrelude)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("shell prelude: %v\n%s", err, out)
	}
}

func TestJudge(t *testing.T) {
	s := &Scene{}
	cases := []struct {
		out  string
		want Outcome
	}{
		{"noise\nBLOCKED: refused\n", Blocked},
		{"BLOCKED: one\nESCAPED: read the canary\n", Escaped},
		{"Traceback ...\n", Errored},
		{"", Errored},
		{"  ESCAPED: indented lines are not verdicts\n", Errored},
	}
	for _, c := range cases {
		if got := s.judge(&apiv1.ExecResult{Stdout: c.out}, nil); got.Outcome != c.want {
			t.Errorf("judge(%q) = %s, want %s", c.out, got.Outcome, c.want)
		}
	}
}

// The host checks are what makes a verdict more than the script's word:
// each one must notice the change it watches for.
func TestHostChecksNoticeTampering(t *testing.T) {
	h, err := plantHost(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if bad := h.check(); len(bad) != 0 {
		t.Fatalf("fresh host reports changes: %v", bad)
	}
	if leaks := h.leaks("listing: canary " + h.hiddenName + " more"); len(leaks) != 1 {
		t.Errorf("a listing of the canary directory is not a leak: %v", leaks)
	}
	if leaks := h.leaks(h.canaryPath + " " + h.dropPath); len(leaks) != 0 {
		t.Errorf("paths the sandbox is told about count as leaks: %v", leaks)
	}

	// A connection to the host listener.
	conn, err := dialLocal(h.port)
	if err != nil {
		t.Fatal(err)
	}
	greeting, _ := readAll(conn)
	if leaks := h.leaks(greeting); len(leaks) == 0 {
		t.Errorf("the listener's greeting %q is not a secret", greeting)
	}
	if bad := strings.Join(h.check(), ";"); !strings.Contains(bad, "listener") {
		t.Errorf("listener contact not reported: %q", bad)
	}

	// A file dropped next to the canary, then a rewritten canary.
	if err := os.WriteFile(h.dropPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if bad := strings.Join(h.check(), ";"); !strings.Contains(bad, "appeared") {
		t.Errorf("dropped file not reported: %q", bad)
	}
	os.Remove(h.dropPath)
	if err := os.WriteFile(h.canaryPath, []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if bad := strings.Join(h.check(), ";"); !strings.Contains(bad, "canary file") {
		t.Errorf("changed canary not reported: %q", bad)
	}

	// A watched host file.
	watched := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(watched, []byte("v1"), 0o755)
	h.watchFile("agent", watched)
	os.WriteFile(watched, []byte("v2"), 0o755)
	if bad := strings.Join(h.check(), ";"); !strings.Contains(bad, watched) {
		t.Errorf("changed watched file not reported: %q", bad)
	}
}

func TestSentinelStopIsNoticed(t *testing.T) {
	h, err := plantHost(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if h.sentinel == nil {
		t.Skip("no sentinel process: " + strings.Join(h.notes, "; "))
	}
	if err := h.sentinel.Process.Signal(stopSignal); err != nil {
		t.Fatal(err)
	}
	defer h.sentinel.Process.Signal(contSignal)
	var bad string
	for i := 0; i < 100 && !strings.Contains(bad, "sentinel"); i++ {
		bad = strings.Join(h.check(), ";")
		if !strings.Contains(bad, "sentinel") {
			waitBriefly()
		}
	}
	if !strings.Contains(bad, "sentinel") {
		t.Errorf("stopped sentinel not reported: %q", bad)
	}
}

func TestSecretFileEncodings(t *testing.T) {
	h := &host{secrets: map[string]string{}}
	p := filepath.Join(t.TempDir(), "key")
	raw := bytes.Repeat([]byte{0xfe, 0x01}, 16)
	os.WriteFile(p, raw, 0o600)
	h.secretFile("key", p)
	for _, enc := range []string{"key (hex)", "key (base64)"} {
		if h.secrets[enc] == "" {
			t.Errorf("no %s form of a binary key", enc)
		}
	}
}

// A sandbox without an attempt's tool makes the attempt skipped with the
// tool's name, never blocked or escaped, and the attempt does not run.
// The probe is a fake: the sandbox has bash and nothing else.
func TestMissingToolIsSkippedNotEscaped(t *testing.T) {
	var probed [][]string
	scene := &Scene{Attacker: "attacker", probe: func(_ context.Context, id string, tools []string) ([]string, error) {
		probed = append(probed, tools)
		var missing []string
		for _, tool := range tools {
			if tool != "bash" {
				missing = append(missing, tool)
			}
		}
		return missing, nil
	}}
	r := &runner{scene: scene, features: map[Feature]bool{}}
	ran := false
	res := r.play(context.Background(), Attempt{
		Name: "needs pgrep", Category: Process, Tools: []string{"pgrep", "bash", "ss"},
		Run: func(context.Context, *Scene) Verdict { ran = true; return escaped("pgrep found nothing") },
	})
	if res.Outcome != Skipped || !strings.Contains(res.Evidence, "pgrep, ss") || ran {
		t.Fatalf("attempt without its tools: %+v (ran: %v)", res, ran)
	}
	if res.Failed() {
		t.Fatal("a skipped attempt fails the suite")
	}

	// Scene.py checks for python3 before running anything (the API client
	// is nil: an exec would panic).
	if v := scene.py(context.Background(), "escaped('x')"); v.Outcome != Skipped || !strings.Contains(v.Evidence, "python3") {
		t.Fatalf("py without python3: %+v", v)
	}
	if len(probed) != 2 {
		t.Fatalf("probes: %v", probed)
	}
}

// Every tool an attempt declares is a plain command name, which the
// probe's `command -v` can look up.
func TestDeclaredToolsAreCommands(t *testing.T) {
	for _, a := range Catalog() {
		for _, tool := range a.Tools {
			if tool == "" || strings.ContainsAny(tool, " /;$'\"") {
				t.Errorf("attempt %q declares tool %q", a.Name, tool)
			}
		}
	}
}

// The shared release_agent script is POSIX sh: build steps run it under
// busybox.
func TestReleaseAgentScriptParses(t *testing.T) {
	for _, sh := range []string{"sh", "busybox"} {
		args := []string{"-n", "-c", releaseAgentScript}
		if sh == "busybox" {
			args = append([]string{"sh"}, args...)
		}
		if _, err := exec.LookPath(sh); err != nil {
			continue
		}
		if out, err := exec.Command(sh, args...).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", sh, err, out)
		}
	}
}
