package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
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
// packages in the build sandbox, which the e2e server's fake DNS cannot
// serve: build them once in the data dir with the host's resolver
// (docs/e2b.md, "Code interpreter").
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
	if testing.Short() {
		t.Skip("builds the base and code-interpreter-v1 templates")
	}
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
