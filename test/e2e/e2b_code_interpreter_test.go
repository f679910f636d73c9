package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/space-platform/space/internal/testtier"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The code-interpreter-v1 template serves E2B's code-interpreter protocol
// on port 49999 (§4 of the E2B protocol reference). These tests speak it
// with raw HTTP through the sandbox proxy, as the SDKs do with
// E2B_SANDBOX_URL: E2b-Sandbox-Id and E2b-Sandbox-Port: 49999.

const codeInterpreterPort = "49999"

var buildCodeInterpreterOnce struct {
	sync.Once
	err error
}

// buildCodeInterpreter builds base, code-interpreter-v1-runtimes and
// code-interpreter-v1 (once per test binary; a no-op when they are
// already built) and logs how long that took. The runtimes download their
// packages in the build sandbox (about 4 minutes on two cores; the test
// server's DNS resolves the registries for it, registrydns_test.go): keep
// a data dir (SPACE_TEST_DATA_DIR) to build them once.
func buildCodeInterpreter(t *testing.T) {
	t.Helper()
	buildCodeInterpreterOnce.Do(func() {
		began := time.Now()
		if err := buildBuiltin("base"); err != nil {
			buildCodeInterpreterOnce.err = err
			return
		}
		baseDone := time.Now()
		if err := buildBuiltin("code-interpreter-v1-runtimes"); err != nil {
			buildCodeInterpreterOnce.err = err
			return
		}
		runtimesDone := time.Now()
		buildCodeInterpreterOnce.err = buildBuiltin("code-interpreter-v1")
		t.Logf("templates: base ready after %s, code-interpreter-v1-runtimes after %s more, code-interpreter-v1 after %s more",
			baseDone.Sub(began).Round(100*time.Millisecond), runtimesDone.Sub(baseDone).Round(100*time.Millisecond),
			time.Since(runtimesDone).Round(100*time.Millisecond))
	})
	if buildCodeInterpreterOnce.err != nil {
		t.Fatal(buildCodeInterpreterOnce.err)
	}
}

// ciLine is one line of an /execute stream.
type ciLine struct {
	Type           string         `json:"type"`
	Text           string         `json:"text"`
	Timestamp      string         `json:"timestamp"`
	IsMainResult   *bool          `json:"is_main_result"`
	HTML           string         `json:"html"`
	Name           string         `json:"name"`
	Value          string         `json:"value"`
	Traceback      string         `json:"traceback"`
	ExecutionCount *int           `json:"execution_count"`
	Extra          map[string]any `json:"extra"`
	PNG            string         `json:"png"`
	Chart          map[string]any `json:"chart"`
	Data           map[string]any `json:"data"`
	raw            map[string]any
}

// ciExecution is a parsed /execute stream.
type ciExecution struct {
	lines      []ciLine
	stdout     []string
	stderr     []string
	results    []ciLine
	errors     []ciLine
	keepalives int
	count      int
}

// mainText is the text of the main result, as the SDKs' Execution.text.
func (e ciExecution) mainText() string {
	for _, r := range e.results {
		if r.IsMainResult != nil && *r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

func ciHeaders(sb e2bSandbox, token bool) http.Header {
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", sb.SandboxID)
	h.Set("E2b-Sandbox-Port", codeInterpreterPort)
	if token {
		h.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	return h
}

// ciRequest sends a JSON request to the code interpreter (body verbatim
// when it is a string).
func ciRequest(t *testing.T, sb e2bSandbox, method, path string, body any, token bool) e2bResponse {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	contentType := ""
	if rd != nil {
		contentType = "application/json"
	}
	return proxyRequest(t, method, path, contentType, rd, ciHeaders(sb, token))
}

// ciExecute runs code through POST /execute and checks the stream's shape:
// 200, one JSON object per line, no blank lines, end_of_execution exactly
// once and last.
func ciExecute(t *testing.T, sb e2bSandbox, body map[string]any) ciExecution {
	t.Helper()
	resp := ciRequest(t, sb, http.MethodPost, "/execute", body, true)
	if resp.status != http.StatusOK {
		t.Fatalf("execute %v: status %d: %s", body["code"], resp.status, resp.body)
	}
	return parseExecution(t, resp.body)
}

func parseExecution(t *testing.T, body []byte) ciExecution {
	t.Helper()
	if len(body) == 0 || body[len(body)-1] != '\n' {
		t.Fatalf("stream does not end with a newline: %q", body)
	}
	var ex ciExecution
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		raw := sc.Bytes()
		if len(bytes.TrimSpace(raw)) == 0 {
			t.Fatalf("blank line in the stream:\n%s", body)
		}
		var l ciLine
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("line %q is not JSON: %v", raw, err)
		}
		if err := json.Unmarshal(raw, &l.raw); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", raw, err)
		}
		if len(ex.lines) > 0 && ex.lines[len(ex.lines)-1].Type == "end_of_execution" {
			t.Fatalf("line after end_of_execution:\n%s", body)
		}
		ex.lines = append(ex.lines, l)
		switch l.Type {
		case "stdout", "stderr":
			if _, err := time.Parse(time.RFC3339Nano, l.Timestamp); err != nil {
				t.Fatalf("%s line without an ISO 8601 timestamp: %s", l.Type, raw)
			}
			if l.Type == "stdout" {
				ex.stdout = append(ex.stdout, l.Text)
			} else {
				ex.stderr = append(ex.stderr, l.Text)
			}
		case "result":
			if l.IsMainResult == nil {
				t.Fatalf("result without is_main_result: %s", raw)
			}
			for k, v := range l.raw {
				if v == nil {
					t.Fatalf("result with a null %s (absent keys must be left out): %s", k, raw)
				}
			}
			ex.results = append(ex.results, l)
		case "error":
			for _, k := range []string{"name", "value", "traceback"} {
				if _, ok := l.raw[k].(string); !ok {
					t.Fatalf("error line without string %s: %s", k, raw)
				}
			}
			ex.errors = append(ex.errors, l)
		case "number_of_executions":
			if l.ExecutionCount == nil {
				t.Fatalf("number_of_executions without execution_count: %s", raw)
			}
			ex.count = *l.ExecutionCount
		case "keepalive":
			if len(l.raw) != 1 {
				t.Fatalf("keepalive with extra keys: %s", raw)
			}
			ex.keepalives++
		case "end_of_execution":
		default:
			t.Fatalf("unknown line type %q: %s", l.Type, raw)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ex.lines) == 0 || ex.lines[len(ex.lines)-1].Type != "end_of_execution" {
		t.Fatalf("stream does not end with end_of_execution:\n%s", body)
	}
	return ex
}

func TestE2BCodeInterpreter(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "builds the base and code-interpreter-v1 templates")
	buildCodeInterpreter(t)
	began := time.Now()
	sb := e2bCreate(t, "code-interpreter-v1", map[string]any{"envVars": map[string]string{"CI_FROM_CREATE": "created"}})
	t.Logf("code-interpreter-v1 sandbox running after %s", time.Since(began).Round(time.Millisecond))

	if resp := ciRequest(t, sb, http.MethodGet, "/health", nil, false); resp.status != http.StatusOK {
		t.Fatalf("health: %d %s", resp.status, resp.body)
	}

	t.Run("stdout, main result, state between calls", func(t *testing.T) {
		ex := ciExecute(t, sb, map[string]any{"code": "x = 6 * 7\nprint(\"hi\")\nx"})
		if strings.Join(ex.stdout, "") != "hi\n" || ex.mainText() != "42" || len(ex.errors) != 0 || ex.count < 1 {
			t.Fatalf("execution: %+v", ex.lines)
		}
		// The Python SDK sends absent options as explicit nulls.
		again := ciExecute(t, sb, map[string]any{"code": "x + 1", "context_id": nil, "language": nil, "env_vars": nil})
		if again.mainText() != "43" || again.count != ex.count+1 {
			t.Fatalf("second execution: %+v", again.lines)
		}
		// language python is the default context too.
		if py := ciExecute(t, sb, map[string]any{"code": "x + 2", "language": "python"}); py.mainText() != "44" {
			t.Fatalf("language python: %+v", py.lines)
		}
	})

	t.Run("rich results", func(t *testing.T) {
		ex := ciExecute(t, sb, map[string]any{"code": "from IPython.display import HTML, display\n" +
			"display(HTML('<b>shown</b>'))\nimport sys; print('warn', file=sys.stderr)\nHTML('<i>main</i>')"})
		if len(ex.results) != 2 {
			t.Fatalf("results: %+v", ex.lines)
		}
		shown, main := ex.results[0], ex.results[1]
		if *shown.IsMainResult || shown.HTML != "<b>shown</b>" || !*main.IsMainResult || main.HTML != "<i>main</i>" || main.Text == "" {
			t.Fatalf("results: %+v", ex.results)
		}
		if strings.Join(ex.stderr, "") != "warn\n" {
			t.Fatalf("stderr: %q", ex.stderr)
		}
		dict := ciExecute(t, sb, map[string]any{"code": "{'a': 1}"})
		if dict.mainText() != "{'a': 1}" {
			t.Fatalf("dict: %+v", dict.lines)
		}
		// A string's repr loses its quotes, as with E2B's server.
		if s := ciExecute(t, sb, map[string]any{"code": "'plain'"}); s.mainText() != "plain" {
			t.Fatalf("string: %+v", s.lines)
		}
	})

	t.Run("error", func(t *testing.T) {
		ex := ciExecute(t, sb, map[string]any{"code": "print('before')\n1/0"})
		if len(ex.errors) != 1 || ex.errors[0].Name != "ZeroDivisionError" || ex.errors[0].Value != "division by zero" ||
			!strings.Contains(ex.errors[0].Traceback, "ZeroDivisionError") || strings.Join(ex.stdout, "") != "before\n" {
			t.Fatalf("error execution: %+v", ex.lines)
		}
	})

	t.Run("environment", func(t *testing.T) {
		// The sandbox's envVars reach the kernel, although it was started
		// before the sandbox existed (restored from the template's image).
		ex := ciExecute(t, sb, map[string]any{"code": "import os\nos.environ.get('CI_FROM_CREATE', 'missing')"})
		if ex.mainText() != "created" {
			t.Fatalf("env from create: %+v", ex.lines)
		}
		ex = ciExecute(t, sb, map[string]any{
			"code":     "os.environ['CI_FROM_CREATE'] + '/' + os.environ['CI_PER_CALL']",
			"env_vars": map[string]string{"CI_PER_CALL": "call", "CI_FROM_CREATE": "overridden"},
		})
		if ex.mainText() != "overridden/call" {
			t.Fatalf("env_vars: %+v", ex.lines)
		}
		ex = ciExecute(t, sb, map[string]any{"code": "os.environ.get('CI_FROM_CREATE') + '/' + os.environ.get('CI_PER_CALL', 'unset')"})
		if ex.mainText() != "created/unset" {
			t.Fatalf("env_vars after the call: %+v", ex.lines)
		}
		ex = ciExecute(t, sb, map[string]any{"code": "import getpass; getpass.getuser() + ' ' + os.getcwd() + ' ' + os.environ['HOME']"})
		if ex.mainText() != "user /home/user /home/user" {
			t.Fatalf("user and directories: %+v", ex.lines)
		}
	})

	t.Run("keepalive while waiting", func(t *testing.T) {
		ex := ciExecute(t, sb, map[string]any{"code": "import time\ntime.sleep(7)\n'slept'"})
		if ex.keepalives == 0 || ex.mainText() != "slept" {
			t.Fatalf("7 s of silence without keepalive: %+v", ex.lines)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		cases := []struct {
			method, path string
			body         any
			status       int
		}{
			{http.MethodPost, "/execute", map[string]any{"code": "1", "context_id": "nope", "language": "python"}, http.StatusBadRequest},
			{http.MethodPost, "/execute", map[string]any{"code": "1", "context_id": "nope"}, http.StatusNotFound},
			{http.MethodPost, "/execute", `{"code":`, http.StatusBadRequest},
			{http.MethodPost, "/contexts/nope/restart", nil, http.StatusNotFound},
			{http.MethodDelete, "/contexts/nope", nil, http.StatusNotFound},
		}
		for _, c := range cases {
			if resp := ciRequest(t, sb, c.method, c.path, c.body, true); resp.status != c.status {
				t.Errorf("%s %s %v: status %d, want %d: %s", c.method, c.path, c.body, resp.status, c.status, resp.body)
			}
		}
	})

	t.Run("contexts", func(t *testing.T) {
		// JS 2.4 sends no X-Access-Token on context calls.
		resp := ciRequest(t, sb, http.MethodPost, "/contexts", map[string]any{"language": "python", "cwd": "/tmp"}, false)
		var ctx struct{ ID, Language, Cwd string }
		if resp.status != http.StatusOK {
			t.Fatalf("create context: %d %s", resp.status, resp.body)
		}
		resp.json(t, &ctx)
		if ctx.ID == "" || ctx.Language != "python" || ctx.Cwd != "/tmp" {
			t.Fatalf("context %s", resp.body)
		}
		list := ciRequest(t, sb, http.MethodGet, "/contexts", nil, false)
		var contexts []struct{ ID, Language, Cwd string }
		list.json(t, &contexts)
		found := false
		for _, c := range contexts {
			found = found || c == ctx
		}
		if list.status != http.StatusOK || !found || len(contexts) < 2 {
			t.Fatalf("contexts: %d %s", list.status, list.body)
		}

		ex := ciExecute(t, sb, map[string]any{"code": "import os\nmine = 1\nos.getcwd()", "context_id": ctx.ID})
		if ex.mainText() != "/tmp" {
			t.Fatalf("in the new context: %+v", ex.lines)
		}
		// Contexts do not share state.
		if ex := ciExecute(t, sb, map[string]any{"code": "mine"}); len(ex.errors) != 1 || ex.errors[0].Name != "NameError" {
			t.Fatalf("the default context sees another's variable: %+v", ex.lines)
		}
		if resp := ciRequest(t, sb, http.MethodPost, "/contexts/"+ctx.ID+"/restart", nil, false); resp.status != http.StatusOK {
			t.Fatalf("restart: %d %s", resp.status, resp.body)
		}
		if ex := ciExecute(t, sb, map[string]any{"code": "mine", "context_id": ctx.ID}); len(ex.errors) != 1 || ex.errors[0].Name != "NameError" {
			t.Fatalf("state survived a restart: %+v", ex.lines)
		}
		if ex := ciExecute(t, sb, map[string]any{"code": "os.getcwd() if 'os' in dir() else __import__('os').getcwd()", "context_id": ctx.ID}); ex.mainText() != "/tmp" {
			t.Fatalf("cwd after restart: %+v", ex.lines)
		}
		if resp := ciRequest(t, sb, http.MethodDelete, "/contexts/"+ctx.ID, nil, false); resp.status != http.StatusOK {
			t.Fatalf("remove: %d %s", resp.status, resp.body)
		}
		if resp := ciRequest(t, sb, http.MethodPost, "/execute", map[string]any{"code": "1", "context_id": ctx.ID}, true); resp.status != http.StatusNotFound {
			t.Fatalf("execute in a removed context: %d %s", resp.status, resp.body)
		}
		// The default context kept its state through all of it.
		if ex := ciExecute(t, sb, map[string]any{"code": "x"}); ex.mainText() != "42" {
			t.Fatalf("default context: %+v", ex.lines)
		}
	})

	t.Run("pause and connect keep the kernel", func(t *testing.T) {
		if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); resp.status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", resp.status, resp.body)
		}
		if resp := e2bRequest(t, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 300}, nil); resp.status != http.StatusCreated {
			t.Fatalf("connect: %d %s", resp.status, resp.body)
		}
		if ex := ciExecute(t, sb, map[string]any{"code": "x * 2"}); ex.mainText() != "84" {
			t.Fatalf("after resume: %+v", ex.lines)
		}
	})
}

// ciStream sends an /execute and reads its stream to the end, as far as
// ctx lets it: nil only for a stream that ended cleanly.
func ciStream(ctx context.Context, sb e2bSandbox, body map[string]any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.srv.ProxyURL()+"/execute", bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header = ciHeaders(sb, true)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// ciRemoveContexts removes the contexts of a language (its default one
// too: the next execution in the language makes a new one).
func ciRemoveContexts(t *testing.T, sb e2bSandbox, language string) {
	t.Helper()
	var contexts []struct{ ID, Language string }
	ciRequest(t, sb, http.MethodGet, "/contexts", nil, false).json(t, &contexts)
	for _, c := range contexts {
		if c.Language == language {
			if resp := ciRequest(t, sb, http.MethodDelete, "/contexts/"+c.ID, nil, false); resp.status != http.StatusOK {
				t.Fatalf("remove %s context: %d %s", language, resp.status, resp.body)
			}
		}
	}
}

// ciChart is the chart of the execution's first result with one, or nil.
func (e ciExecution) chart() map[string]any {
	for _, r := range e.results {
		if r.Chart != nil {
			return r.Chart
		}
	}
	return nil
}

// jsonPath digs into decoded JSON: keys for objects, ints for arrays.
func jsonPath(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The full template: matplotlib figures come back as PNG plus E2B's chart
// data, and each language has a kernel with its own contexts.
func TestE2BCodeInterpreterChartsAndLanguages(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "builds the code-interpreter templates")
	buildCodeInterpreter(t)
	sb := e2bCreate(t, "code-interpreter-v1", map[string]any{"envVars": map[string]string{"CI_FROM_CREATE": "created"}})

	// Each language through its default context (the execute's language),
	// seeing the sandbox's environment from the create.
	t.Run("languages", func(t *testing.T) {
		cases := []struct {
			language, code, stdout, result string
		}{
			{"r", "cat(Sys.getenv('CI_FROM_CREATE'))\n1 + 1", "created", "[1] 2"},
			{"javascript", "console.log(Deno.env.get('CI_FROM_CREATE'))\n1 + 1", "created\n", "2"},
			{"typescript", "const n: number = 21\nn * 2", "", "42"},
			{"bash", "echo $CI_FROM_CREATE; pwd", "created\n/home/user\n", ""},
			{"java", "System.out.println(System.getenv(\"CI_FROM_CREATE\"));\nint k = 6;\nk * 7", "created\n", "42"},
		}
		for _, c := range cases {
			ex := ciExecute(t, sb, map[string]any{"code": c.code, "language": c.language})
			if len(ex.errors) != 0 || strings.Join(ex.stdout, "") != c.stdout || ex.mainText() != c.result {
				t.Errorf("%s: stdout %q result %q, want %q %q: %+v", c.language, strings.Join(ex.stdout, ""), ex.mainText(), c.stdout, c.result, ex.lines)
			}
			// State persists in the language's default context.
			again := ciExecute(t, sb, map[string]any{"code": map[string]string{
				"r": "x <- 5", "javascript": "var x = 5", "typescript": "n", "bash": "X=5", "java": "k",
			}[c.language], "language": c.language})
			if len(again.errors) != 0 {
				t.Errorf("%s: %+v", c.language, again.lines)
			}
			// Every kernel running at once would not fit the sandbox's
			// 512 MiB: the language's default context goes again.
			ciRemoveContexts(t, sb, c.language)
		}
		// Errors come back named, as from the python kernel.
		for lang, code := range map[string]string{"r": "stop('boom')", "javascript": "throw new Error('boom')", "bash": "false", "java": "1/0"} {
			ex := ciExecute(t, sb, map[string]any{"code": code, "language": lang})
			if len(ex.errors) != 1 || ex.errors[0].Name == "" {
				t.Errorf("%s error: %+v", lang, ex.lines)
			}
			ciRemoveContexts(t, sb, lang)
		}
		if resp := ciRequest(t, sb, http.MethodPost, "/execute", map[string]any{"code": "1", "language": "cobol"}, true); resp.status != http.StatusBadRequest {
			t.Errorf("unknown language: %d %s", resp.status, resp.body)
		}
		// Removed contexts leave no process behind (the JVM under the java
		// kernel, the shell under bash's), or their memory would be lost.
		ps := ciExecute(t, sb, map[string]any{"code": "import subprocess\nprint(subprocess.run(['ps', '-eo', 'comm='], capture_output=True, text=True).stdout)"})
		for _, p := range strings.Fields(strings.Join(ps.stdout, "")) {
			if p == "java" || p == "deno" || p == "R" || p == "bash" {
				t.Errorf("a %s process outlived its context:\n%s", p, strings.Join(ps.stdout, ""))
			}
		}
	})

	// A context per language, with its cwd and per-execution env_vars.
	t.Run("contexts per language", func(t *testing.T) {
		cases := []struct {
			language, cwdCode, envCode, cwdWant, envWant string
		}{
			{"python", "import os\nos.getcwd()", "os.environ.get('CI_CALL', 'unset')", "/tmp", "call"},
			{"r", "getwd()", "Sys.getenv('CI_CALL', 'unset')", `[1] "/tmp"`, `[1] "call"`},
			{"javascript", "Deno.cwd()", "Deno.env.get('CI_CALL') ?? 'unset'", `"/tmp"`, `"call"`},
			{"bash", "pwd", "echo ${CI_CALL:-unset}", "/tmp\n", "call\n"},
		}
		for _, c := range cases {
			resp := ciRequest(t, sb, http.MethodPost, "/contexts", map[string]any{"language": c.language, "cwd": "/tmp"}, false)
			var ctx struct{ ID, Language, Cwd string }
			if resp.status != http.StatusOK {
				t.Fatalf("%s context: %d %s", c.language, resp.status, resp.body)
			}
			resp.json(t, &ctx)
			if ctx.Language != c.language || ctx.Cwd != "/tmp" {
				t.Fatalf("%s context: %s", c.language, resp.body)
			}
			out := func(ex ciExecution) string {
				if c.language == "bash" {
					return strings.Join(ex.stdout, "")
				}
				return ex.mainText()
			}
			if ex := ciExecute(t, sb, map[string]any{"code": c.cwdCode, "context_id": ctx.ID}); out(ex) != c.cwdWant {
				t.Errorf("%s cwd: %q, want %q: %+v", c.language, out(ex), c.cwdWant, ex.lines)
			}
			ex := ciExecute(t, sb, map[string]any{"code": c.envCode, "context_id": ctx.ID, "env_vars": map[string]string{"CI_CALL": "call"}})
			if out(ex) != c.envWant {
				t.Errorf("%s env_vars: %q, want %q: %+v", c.language, out(ex), c.envWant, ex.lines)
			}
			ex = ciExecute(t, sb, map[string]any{"code": c.envCode, "context_id": ctx.ID})
			if got := out(ex); !strings.Contains(got, "unset") {
				t.Errorf("%s env_vars outlived their execution: %q", c.language, got)
			}
			if resp := ciRequest(t, sb, http.MethodDelete, "/contexts/"+ctx.ID, nil, false); resp.status != http.StatusOK {
				t.Errorf("%s remove: %d %s", c.language, resp.status, resp.body)
			}
		}
	})

	// After the languages: figures and DataFrames grow the python kernel,
	// and each other language's kernel needs its share of the 512 MiB.
	t.Run("charts", func(t *testing.T) {
		cases := []struct {
			name, code string
			want       map[string]string // jsonPath (dot separated) -> JSON value
		}{
			{"bar", "import matplotlib.pyplot as plt\nplt.figure()\nplt.bar(['A', 'B', 'C'], [100, 200, 300], label='Sold')\n" +
				"plt.xlabel('Authors')\nplt.ylabel('Books (k)')\nplt.title('Sales')\nplt.show()",
				map[string]string{"type": `"bar"`, "title": `"Sales"`, "x_label": `"Authors"`, "y_unit": `"k"`,
					"elements": `[{"group":"Sold","label":"A","value":100},{"group":"Sold","label":"B","value":200},{"group":"Sold","label":"C","value":300}]`}},
			{"line", "import numpy as np, datetime\nimport matplotlib.pyplot as plt\nplt.figure()\n" +
				"d = [datetime.datetime(2023, 9, 1) + datetime.timedelta(seconds=i) for i in range(50)]\n" +
				"plt.plot(d, np.sin(np.linspace(0, 6, 50)), label='sin')\nplt.plot(d, np.cos(np.linspace(0, 6, 50)), label='cos')\n" +
				"plt.xlabel('Time (s)')\nplt.title('Waves')\nplt.show()",
				map[string]string{"type": `"line"`, "x_scale": `"datetime"`, "y_scale": `"linear"`, "x_unit": `"s"`,
					"elements.0.label": `"sin"`, "elements.1.label": `"cos"`, "elements.0.points.0.0": `"2023-09-01T00:00:00"`, "elements.0.points.0.1": `0`}},
			{"scatter", "import matplotlib.pyplot as plt\nplt.figure()\nplt.scatter([1, 2, 3], [4, 5, 6], label='pts')\nplt.title('S')\nplt.show()",
				map[string]string{"type": `"scatter"`, "elements": `[{"label":"pts","points":[[1,4],[2,5],[3,6]]}]`}},
			{"pie", "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.pie([90, 10], labels=['No', 'Yes'], startangle=90)\nplt.title('Pie')\nplt.show()",
				map[string]string{"type": `"pie"`, "title": `"Pie"`, "elements": `[{"angle":324,"label":"No","radius":1},{"angle":36,"label":"Yes","radius":1}]`}},
			{"box", "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.set_title('Scores')\n" +
				"ax.boxplot([[85, 90, 78, 92, 88], [95, 89, 76, 91, 84, 87]], labels=['A', 'B'], patch_artist=True)\nplt.show()",
				map[string]string{"type": `"box_and_whisker"`, "elements": `[{"first_quartile":85,"label":"A","max":92,"median":88,"min":78,"outliers":[],"third_quartile":90},` +
					`{"first_quartile":84.75,"label":"B","max":95,"median":88,"min":84,"outliers":[76],"third_quartile":90.5}]`}},
			{"superchart", "import matplotlib.pyplot as plt\nfig, axs = plt.subplots(1, 2)\nfig.suptitle('Both')\n" +
				"axs[0].plot([1, 2, 3], [1, 4, 9])\naxs[0].set_title('Line')\naxs[1].scatter([1, 2], [3, 4])\naxs[1].set_title('Dots')\nplt.show()",
				map[string]string{"type": `"superchart"`, "title": `"Both"`, "elements.0.type": `"line"`, "elements.0.title": `"Line"`,
					"elements.1.type": `"scatter"`, "elements.1.elements.0.points": `[[1,3],[2,4]]`}},
		}
		for _, c := range cases {
			ex := ciExecute(t, sb, map[string]any{"code": c.code})
			if len(ex.errors) != 0 || len(ex.results) != 1 {
				t.Fatalf("%s: %+v", c.name, ex.lines)
			}
			r := ex.results[0]
			if *r.IsMainResult || !strings.HasPrefix(r.PNG, "iVBORw0KGgo") || !strings.HasPrefix(r.Text, "<Figure") {
				t.Errorf("%s: want a display result with a PNG: text %q, png %.20q", c.name, r.Text, r.PNG)
			}
			for path, want := range c.want {
				var keys []any
				for _, k := range strings.Split(path, ".") {
					if n, err := strconv.Atoi(k); err == nil {
						keys = append(keys, n)
					} else {
						keys = append(keys, k)
					}
				}
				if got := jsonText(jsonPath(r.Chart, keys...)); got != want {
					t.Errorf("%s: chart.%s = %s, want %s\nchart: %s", c.name, path, got, want, jsonText(r.Chart))
				}
			}
		}
	})

	t.Run("data and images", func(t *testing.T) {
		ex := ciExecute(t, sb, map[string]any{"code": "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"})
		if ex.mainText() == "" || jsonText(ex.results[0].Data) != `{"a":{"0":1,"1":2},"b":{"0":"x","1":"y"}}` || ex.results[0].HTML == "" {
			t.Fatalf("DataFrame: %+v", ex.lines)
		}
		// A PNG displayed by hand (no figure, so no chart).
		ex = ciExecute(t, sb, map[string]any{"code": "import base64\nfrom IPython.display import Image, display\n" +
			"display(Image(data=base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')))"})
		if len(ex.results) != 1 || !strings.HasPrefix(ex.results[0].PNG, "iVBORw0KGgo") || ex.results[0].Chart != nil {
			t.Fatalf("image: %+v", ex.lines)
		}
	})

	t.Run("invalid cwd is a 400", func(t *testing.T) {
		for _, cwd := range []any{"/does/not/exist", "relative/dir", "/etc/passwd", "/root", "/tmp/\u0000x", 42, strings.Repeat("/a", 5000)} {
			resp := ciRequest(t, sb, http.MethodPost, "/contexts", map[string]any{"language": "python", "cwd": cwd}, false)
			if resp.status != http.StatusBadRequest || strings.Contains(string(resp.body), "Traceback") {
				t.Errorf("cwd %.40q: %d %s", cwd, resp.status, resp.body)
			}
		}
	})

	// A client that goes away mid-execution (the SDK's timeoutMs aborts
	// its fetch) interrupts the kernel: the next execution runs at once.
	t.Run("client gone interrupts", func(t *testing.T) {
		abandon := func(body map[string]any) {
			t.Helper()
			ctx, cancel := context.WithTimeout(testContext(t), 2*time.Second)
			defer cancel()
			if err := ciStream(ctx, sb, body); err == nil {
				t.Fatalf("the execution %q finished within 2 s", body["code"])
			}
		}
		for _, c := range []struct {
			language, long, next, want string
		}{
			{"python", "import time\ntime.sleep(120)", "1 + 1", "2"},
			// A kernel that ignores SIGINT is killed instead.
			{"python", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(120)", "2 + 2", "4"},
			{"bash", "sleep 120", "echo next", "next\n"},
		} {
			abandon(map[string]any{"code": c.long, "language": c.language})
			began := time.Now()
			ex := ciExecute(t, sb, map[string]any{"code": c.next, "language": c.language})
			got := ex.mainText()
			if c.language == "bash" {
				got = strings.Join(ex.stdout, "")
			}
			if got != c.want || time.Since(began) > 20*time.Second {
				t.Fatalf("after an abandoned %q: %q after %s: %+v", c.long, got, time.Since(began), ex.lines)
			}
		}
	})
}

// An execution on a sandbox killed meanwhile ends promptly, not at the
// client's timeout.
func TestE2BCodeInterpreterKilledSandbox(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "builds the code-interpreter templates")
	buildCodeInterpreter(t)
	sb := e2bCreate(t, "code-interpreter-v1", nil)
	done := make(chan error, 1)
	go func() {
		done <- ciStream(testContext(t), sb, map[string]any{"code": "import time\ntime.sleep(120)"})
	}()
	time.Sleep(2 * time.Second)
	if resp := e2bRequest(t, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil); resp.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", resp.status, resp.body)
	}
	killed := time.Now()
	select {
	case err := <-done:
		// The stream must not end as if the execution had finished.
		if err == nil {
			t.Fatal("the stream ended cleanly although its sandbox was killed")
		}
		t.Logf("%s after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	case <-time.After(15 * time.Second):
		t.Fatal("the execution still hangs 15 s after its sandbox was killed")
	}
}

// BenchmarkE2BCodeInterpreterRunCode is the code-interpreter SDKs'
// runCode('1+1') on a pooled code-interpreter-v1 sandbox, through the E2B
// API and the sandbox proxy as the SDKs go: each iteration takes a sandbox
// from a pool of one (POST /sandboxes), times its first /execute (the
// SDK's first runCode: the kernel is warm from the template's pre-booted
// image, the sandbox's environment still to fetch), then ten more, and
// deletes it. first-p50-ms and warm-p50-ms are the medians over all
// iterations; create-p50-ms is the pooled create.
func BenchmarkE2BCodeInterpreterRunCode(b *testing.B) {
	requireBenchServer(b)
	ctx := benchContext(b)
	for _, name := range []string{"base", "code-interpreter-v1-runtimes", "code-interpreter-v1"} {
		if err := buildBuiltin(name); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := env.client.SetTemplatePool(ctx, "code-interpreter-v1", 1); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = env.client.SetTemplatePool(context.Background(), "code-interpreter-v1", 0) })
	call := func(method, url string, header http.Header, body any) (int, []byte, error) {
		data, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(data))
		if err != nil {
			return 0, nil, err
		}
		req.Header = header.Clone()
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		return resp.StatusCode, out, err
	}
	api := http.Header{"X-Api-Key": {env.srv.AdminKey}}
	runCode := func(sb e2bSandbox) (time.Duration, error) {
		began := time.Now()
		status, out, err := call(http.MethodPost, env.srv.ProxyURL()+"/execute", ciHeaders(sb, true), map[string]any{"code": "1+1"})
		took := time.Since(began)
		if err == nil && (status != http.StatusOK || !bytes.Contains(out, []byte(`"text": "2"`))) {
			err = fmt.Errorf("execute: %d %s", status, out)
		}
		return took, err
	}
	var creates, firsts, warms []time.Duration
	for i := 0; i < b.N; i++ {
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			tpl, err := env.client.GetTemplate(ctx, "code-interpreter-v1")
			if err == nil && tpl.Pool != nil && tpl.Pool.Ready >= 1 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("pool did not fill: %+v, %v", tpl, err)
			}
		}
		began := time.Now()
		status, out, err := call(http.MethodPost, env.srv.E2BURL()+"/sandboxes", api, map[string]any{"templateID": "code-interpreter-v1", "timeout": 120})
		creates = append(creates, time.Since(began))
		if err != nil || status != http.StatusCreated {
			b.Fatalf("create: %d %s %v", status, out, err)
		}
		var sb e2bSandbox
		if err := json.Unmarshal(out, &sb); err != nil {
			b.Fatal(err)
		}
		first, err := runCode(sb)
		if err != nil {
			b.Fatal(err)
		}
		firsts = append(firsts, first)
		for j := 0; j < 10; j++ {
			d, err := runCode(sb)
			if err != nil {
				b.Fatal(err)
			}
			warms = append(warms, d)
		}
		if status, out, err := call(http.MethodDelete, env.srv.E2BURL()+"/sandboxes/"+sb.SandboxID, api, nil); err != nil || status != http.StatusNoContent {
			b.Fatalf("delete: %d %s %v", status, out, err)
		}
	}
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(creates), "create-p50-ms")
	b.ReportMetric(p50(firsts), "first-p50-ms")
	b.ReportMetric(p50(warms), "warm-p50-ms")
}
