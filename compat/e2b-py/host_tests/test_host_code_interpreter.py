"""e2b-code-interpreter by host routing: no E2B_SANDBOX_URL, so the SDK
reaches https://49983-<id>.<domain> (envd) and https://49999-<id>.<domain>
(the code interpreter) itself, through the test's wildcard TLS terminator
(E2B_DOMAIN, E2B_PY_PROXY, SSL_CERT_FILE: test/e2e/e2b_py_test.go). The
ground of compat/e2b-js/lib/code-interpreter-suite.mjs, sync and async,
plus every result kind the template's server emits."""

import os

import pytest
import pytest_asyncio
from e2b_code_interpreter import AsyncSandbox, Sandbox

from helpers import OPTS, eventually_async

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

if not os.environ.get("E2B_PY_PROXY") or os.environ.get("E2B_SANDBOX_URL"):
    pytest.skip("host routing needs E2B_PY_PROXY and E2B_DOMAIN without E2B_SANDBOX_URL", allow_module_level=True)


@pytest.fixture(scope="module")
def sbx():
    try:
        s = Sandbox.create(timeout=300, envs={"CI_GREETING": "hello"}, **OPTS)
    except Exception as err:  # noqa: BLE001
        if "not found" in str(err).lower():
            raise AssertionError(f"the code-interpreter-v1 template is not built on this server ({err})") from err
        raise
    assert s.get_info().template_id
    yield s
    s.kill()


def test_host_routing_reaches_envd(sbx):
    # The SDK's own URLs name the sandbox in the host: nothing in headers.
    assert sbx.get_host(49999) == f"49999-{sbx.sandbox_id}.{os.environ['E2B_DOMAIN']}"
    assert sbx.commands.run("echo $CI_GREETING").stdout == "hello\n"
    sbx.files.write("/home/user/host.txt", "by host")
    assert sbx.files.read("/home/user/host.txt") == "by host"


def test_run_code_stdout_and_state(sbx):
    seen = []
    out = sbx.run_code('x = 6 * 7\nprint("hi")\nx', on_stdout=lambda m: seen.append(m.line))
    assert out.logs.stdout == ["hi\n"]
    assert out.logs.stderr == []
    assert seen == ["hi\n"]
    assert out.text == "42"
    assert out.error is None
    assert out.execution_count >= 1
    kept = sbx.run_code("x + 1")
    assert kept.text == "43"
    assert kept.execution_count == out.execution_count + 1
    assert sbx.run_code("x + 2", language="python").text == "44"
    err = sbx.run_code('import sys\nprint("to stderr", file=sys.stderr)')
    assert err.logs.stderr == ["to stderr\n"]


def test_every_result_kind(sbx):
    results = []
    out = sbx.run_code(
        "from IPython.display import display, HTML, Markdown, Latex, JSON, Javascript, SVG\n"
        "display(HTML('<b>shown</b>'))\n"
        "display(Markdown('**md**'))\n"
        "display(Latex(r'$x^2$'))\n"
        "display(JSON({'k': [1, 2]}))\n"
        "display(Javascript('var a = 1'))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>'))\n"
        "display({'text/plain': 'bundle', 'image/png': 'iVBORw0KGgo=', 'image/jpeg': '/9j/4AAQ',"
        " 'application/pdf': 'JVBERi0=', 'application/x-space-test': 'extra data'}, raw=True)\n"
        "HTML('<b>main</b>')",
        on_result=results.append,
    )
    assert out.error is None, out.error
    assert len(out.results) == 8 and len(results) == 8, out.results
    html, md, latex, js_on, js, svg, bundle, main = out.results
    assert html.html == "<b>shown</b>" and not html.is_main_result
    assert md.markdown == "**md**"
    assert latex.latex == "$x^2$"
    assert js_on.json == {"k": [1, 2]}
    assert js.javascript == "var a = 1"
    assert "<svg" in svg.svg
    assert bundle.text == "bundle"
    assert bundle.png == "iVBORw0KGgo="
    assert bundle.jpeg == "/9j/4AAQ"
    assert bundle.pdf == "JVBERi0="
    assert bundle.extra == {"application/x-space-test": "extra data"}, bundle.extra
    assert set(bundle.formats()) >= {"text", "png", "jpeg", "pdf"}
    assert main.is_main_result and main.html == "<b>main</b>"
    assert "html" in main.formats()

    d = sbx.run_code('{"a": 1, "b": [2, 3]}')
    assert d.text == "{'a': 1, 'b': [2, 3]}"
    assert d.results[0].is_main_result


def test_error(sbx):
    errors = []
    failed = sbx.run_code('print("before")\n1/0', on_error=errors.append)
    assert failed.error.name == "ZeroDivisionError"
    assert failed.error.value == "division by zero"
    assert "ZeroDivisionError" in failed.error.traceback
    assert failed.logs.stdout == ["before\n"]
    assert len(errors) == 1
    assert failed.text is None
    assert sbx.run_code("x").text == "42"  # the kernel lives on


def test_envs(sbx):
    assert sbx.run_code('import os\nos.environ["CI_GREETING"]').text == "hello"
    call = sbx.run_code('os.environ["CI_GREETING"] + " " + os.environ["CI_CALL"]', envs={"CI_GREETING": "hi", "CI_CALL": "there"})
    assert call.text == "hi there"
    after = sbx.run_code('os.environ["CI_GREETING"] + " " + os.environ.get("CI_CALL", "unset")')
    assert after.text == "hello unset"


def test_contexts(sbx):
    ctx = sbx.create_code_context(language="python", cwd="/tmp")
    assert ctx.id and ctx.language == "python" and ctx.cwd == "/tmp"
    listed = sbx.list_code_contexts()
    assert any(c.id == ctx.id and c.cwd == "/tmp" for c in listed), listed
    assert len(listed) >= 2, "the default context is listed too"
    assert sbx.run_code("import os\nmine = 1\nos.getcwd()", context=ctx).text == "/tmp"
    assert sbx.run_code("mine + 1", context=ctx).text == "2"
    assert sbx.run_code("mine").error.name == "NameError"
    sbx.restart_code_context(ctx)
    assert sbx.run_code("mine", context=ctx).error.name == "NameError"
    sbx.remove_code_context(ctx.id)
    assert not any(c.id == ctx.id for c in sbx.list_code_contexts())
    with pytest.raises(Exception):
        sbx.run_code("1", context=ctx)


def test_run_code_timeout(sbx):
    with pytest.raises(Exception):
        sbx.run_code("import time\ntime.sleep(30)", timeout=2)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def asbx():
    s = await AsyncSandbox.create(timeout=300, **OPTS)
    yield s
    await s.kill()


@pytest.mark.asyncio(loop_scope="module")
async def test_async_run_code_and_contexts(asbx):
    lines = []
    out = await asbx.run_code('print("async")\n21 * 2', on_stdout=lambda m: lines.append(m.line))
    assert out.text == "42" and out.logs.stdout == ["async\n"] and lines == ["async\n"]
    ctx = await asbx.create_code_context(cwd="/home/user")
    assert (await asbx.run_code("import os; os.getcwd()", context=ctx)).text == "/home/user"
    assert any(c.id == ctx.id for c in await asbx.list_code_contexts())
    await asbx.remove_code_context(ctx)
    failed = await asbx.run_code("raise ValueError('nope')")
    assert failed.error.name == "ValueError" and failed.error.value == "nope"
    assert (await asbx.commands.run("echo async-envd")).stdout == "async-envd\n"
