"""The code-interpreter server of space's code-interpreter-v1 template.

It speaks the protocol of E2B's code interpreter (the JS and Python
code-interpreter SDKs talk to it on port 49999; see docs/e2b.md):

  GET    /health                 200 once the default context is up
  POST   /execute                run code; 200 with an NDJSON stream
  POST   /contexts               new context {language?, cwd?} -> {id, language, cwd}
  GET    /contexts               [{id, language, cwd}]
  POST   /contexts/{id}/restart  restart its kernel (state is lost)
  DELETE /contexts/{id}          shut its kernel down

A context is one Jupyter kernel driven with jupyter_client; its state
lasts from one execution to the next. Languages (LANGUAGES below): python
(ipykernel, with E2B's chart and data formats from space_display.py), r
(IRkernel), javascript and typescript (Deno's kernel), bash and java (the
template's own kernels, kernels/). Each language has a default context,
made at its first execution without a context; the python one exists from
the start. Only the standard library and jupyter_client are used here
(Debian packages, no pip).

A client that goes away during an execution (the SDK's timeoutMs, an
abort) interrupts it: the kernel gets SIGINT, and if it has not finished
INTERRUPT_GRACE_SECONDS later it is killed (the next execution starts a
new one), so an abandoned execution never blocks the next.

Each /execute streams one JSON object per line: stdout, stderr, result,
error, number_of_executions, keepalive (while nothing else comes) and
end_of_execution, always last.

Environment: the sandbox's variables (those given at create) live in the
agent (envd, port 49983, GET /envs). The kernel was possibly started
before they were set (a sandbox restored from the template's pre-booted
image), so each context applies them at its first execution, asking the
agent with the caller's X-Access-Token as E2B's server does. An
execution's env_vars are set for that execution and reset afterwards.
"""

import argparse
import datetime
import json
import logging
import os
import queue
import re
import select
import shlex
import signal
import socket
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Finding the python3 kernel imports ipykernel and with it debugpy, which
# warns about frozen modules unless told not to (here and in kernels).
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")

from jupyter_client import KernelManager  # noqa: E402

log = logging.getLogger("code-interpreter")

ENVD_URL = "http://127.0.0.1:49983/envs"
# Rewritten by the agent whenever the sandbox gets a new identity (a new
# sandbox restored from the template's image, a fork): time to fetch the
# sandbox's environment again.
IDENTITY_FILE = "/run/space/identity.json"
# The agent's /envs includes its own environment (HOME=/root and the like);
# the kernel keeps the identity of the user it runs as.
IDENTITY_KEYS = ("HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD")
# What each kernel keeps of its own environment rather than take the
# agent's: matplotlib's backend is the inline one in kernels (the template
# sets Agg for scripts).
KERNEL_KEYS = ("MPLBACKEND",)
HERE = os.path.dirname(os.path.abspath(__file__))
KEEPALIVE_SECONDS = 5.0
# How often a waiting /execute checks that its client is still there.
CLIENT_POLL_SECONDS = 0.25
INTERRUPT_GRACE_SECONDS = 5.0
HEADERS_DELAY_SECONDS = 1.0
KERNEL_READY_SECONDS = 120.0
MAX_BODY_BYTES = 64 << 20

# Jupyter MIME types and the result keys the SDKs read them from.
MIME_KEYS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


class HTTPError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class ClientGone(Exception):
    """The client of an /execute closed its connection."""


class KernelGone(Exception):
    """The kernel process ended while it was being used."""


def timestamp(value):
    """Formats a Jupyter header date (datetime or string) as ISO 8601 UTC."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, str) and value:
        return value
    return datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def result_line(data, is_main):
    """Maps a display_data / execute_result MIME bundle to a result line."""
    out = {"type": "result", "is_main_result": is_main}
    extra = {}
    for mime, value in (data or {}).items():
        key = MIME_KEYS.get(mime)
        if mime.startswith("image/") and mime != "image/svg+xml" and isinstance(value, str):
            value = value.strip()  # IPython's base64 ends with a newline
        if key is None:
            extra[mime] = value
        else:
            out[key] = value
    text = out.get("text")
    # As E2B's server: a string result's repr loses its quotes.
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] == "'":
        out["text"] = text[1:-1]
    if extra:
        out["extra"] = extra
    return out


_env_warned = False


def fetch_sandbox_env(access_token):
    """The sandbox's environment from the agent, or None if unavailable."""
    req = urllib.request.Request(ENVD_URL)
    if access_token:
        req.add_header("X-Access-Token", access_token)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=5) as resp:
            envs = json.load(resp)
    except Exception as e:  # noqa: BLE001 - any failure means "not now"
        global _env_warned
        if not _env_warned:
            _env_warned = True
            log.warning("sandbox environment unavailable from the agent (retried at each execution): %s", e)
        return None
    if not isinstance(envs, dict):
        return None
    return {str(k): str(v) for k, v in envs.items() if k not in IDENTITY_KEYS and k not in KERNEL_KEYS}


def identity_stamp():
    try:
        st = os.stat(IDENTITY_FILE)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _py_set(env):
    return "__import__('os').environ.update(%r)" % (dict(env),)


def _py_reset(restore, remove):
    return "(lambda e: (e.update(%r), [e.pop(k, None) for k in %r]))(__import__('os').environ)" % (restore, remove)


def _r_args(env):
    return ", ".join("%s = %s" % (json.dumps(k), json.dumps(v)) for k, v in env.items())


def _r_set(env):
    return "invisible(Sys.setenv(%s))" % _r_args(env)


def _r_reset(restore, remove):
    parts = []
    if restore:
        parts.append("Sys.setenv(%s)" % _r_args(restore))
    if remove:
        parts.append("Sys.unsetenv(c(%s))" % ", ".join(json.dumps(k) for k in remove))
    return "invisible(list(%s))" % ", ".join(parts)


def _deno_set(env):
    return "".join("Deno.env.set(%s, %s);" % (json.dumps(k), json.dumps(v)) for k, v in env.items())


def _deno_reset(restore, remove):
    return _deno_set(restore) + "".join("Deno.env.delete(%s);" % json.dumps(k) for k in remove)


_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _bash_set(env):
    return "\n".join("export %s=%s" % (k, shlex.quote(v)) for k, v in env.items() if _SHELL_NAME.match(k))


def _bash_reset(restore, remove):
    return "\n".join([_bash_set(restore)] + ["unset %s" % k for k in remove if _SHELL_NAME.match(k)])


class Language:
    """How a language's contexts are run: the kernel spec, and the code
    that sets and resets environment variables inside the kernel (None: the
    kernel's environment is fixed at its start, as the JVM's)."""

    def __init__(self, name, kernel, set_env=None, reset_env=None, memory_mib=150):
        self.name = name
        self.kernel = kernel
        self.set_env = set_env
        self.reset_env = reset_env
        # About what a fresh kernel of the language takes (measured in a
        # sandbox, with its wrapper process): a kernel is not started
        # without that much memory available.
        self.memory_mib = memory_mib


LANGUAGES = {
    "python": Language("python", "python3", _py_set, _py_reset, memory_mib=130),
    "r": Language("r", "space-r", _r_set, _r_reset, memory_mib=220),
    "javascript": Language("javascript", "space-deno", _deno_set, _deno_reset, memory_mib=280),
    "typescript": Language("typescript", "space-deno", _deno_set, _deno_reset, memory_mib=280),
    "bash": Language("bash", "space-bash", _bash_set, _bash_reset, memory_mib=70),
    "java": Language("java", "space-java", memory_mib=280),
}
# Other names the SDKs and E2B's documentation use for them.
LANGUAGE_ALIASES = {
    "py": "python", "python3": "python",
    "js": "javascript", "node": "javascript", "nodejs": "javascript",
    "ts": "typescript", "deno": "typescript",
    "sh": "bash", "shell": "bash",
}


def env_reset(language, keys, base):
    """Code putting keys back to their base values (or removing them)."""
    restore = {k: base[k] for k in keys if k in base}
    remove = [k for k in keys if k not in base]
    return language.reset_env(restore, remove)


class Job:
    """One /execute request, as the context's thread runs it."""

    def __init__(self, code, env_vars, access_token):
        self.code = code
        self.env_vars = env_vars
        self.access_token = access_token
        self.out = queue.Queue()
        self.abandoned = threading.Event()
        self.done = threading.Event()


class Context:
    """One kernel and the thread that owns its client.

    jupyter_client's blocking client runs asyncio under the hood and its
    sockets belong to the thread that made them, so every kernel operation
    runs on this context's own thread, one at a time; HTTP handlers hand it
    jobs and read their output from queues.
    """

    END = object()

    def __init__(self, language, cwd, start_env=None):
        self.id = str(uuid.uuid4())
        self.lang = LANGUAGES[language]
        self.language = language
        self.cwd = cwd
        self.start_env = start_env  # the sandbox's environment, when known at the start
        self.kernel_env = {}
        self.km = None
        self.kc = None
        self.sandbox_env = None  # applied to the kernel once fetched
        self.identity = None  # identity_stamp() when sandbox_env was fetched
        self.busy = False
        self.running = None  # the Job being executed
        self.cancelled = None  # error name to report when the kernel is killed under an execution
        self._jobs = queue.Queue()
        self._closed = False
        self._jobs_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="context-" + self.id[:8], daemon=True)
        self._thread.start()

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    # -- running jobs on the context's thread --------------------------------

    def _loop(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()

    def submit(self, job):
        """Queues job for the context's thread; 404 once the context is gone."""
        with self._jobs_lock:
            if self._closed:
                raise HTTPError(404, "Context %s not found" % self.id)
            self._jobs.put(job)

    def call(self, fn, *args):
        """Runs fn on the context's thread and returns its result."""
        done = queue.Queue(maxsize=1)

        def job():
            try:
                done.put((True, fn(*args)))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                done.put((False, e))

        self.submit(job)
        ok, value = done.get()
        if not ok:
            raise value
        return value

    def stop_thread(self):
        """Ends the thread after the jobs queued so far."""
        with self._jobs_lock:
            if not self._closed:
                self._closed = True
                self._jobs.put(None)

    # -- kernel lifecycle (context thread) -------------------------------------

    def start(self):
        env = dict(os.environ)
        if self.start_env:
            env.update(self.start_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        extra = []
        if self.lang.kernel == "python3":
            extra = ["--HistoryManager.hist_file=:memory:", "--IPKernelApp.extensions=space_display"]
            # space_display and charts live next to this file; the
            # extension drops this again, so the user's subprocesses do not
            # inherit it.
            env["PYTHONPATH"] = HERE
            env["SPACE_DISPLAY_PATH"] = HERE
            env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        km = KernelManager(kernel_name=self.lang.kernel)
        km.start_kernel(cwd=self.cwd, env=env, extra_arguments=extra)
        self.kernel_env = env  # what the kernel process started with
        self.km = km
        self._connect()
        if self.start_env:
            self.sandbox_env, self.identity = self.start_env, identity_stamp()

    def _connect(self):
        kc = self.km.client()
        kc.start_channels(hb=False)
        try:
            kc.wait_for_ready(timeout=KERNEL_READY_SECONDS)
        except Exception:
            kc.stop_channels()
            raise
        self.kc = kc
        self.sandbox_env = None  # a new kernel process: apply it again

    def _disconnect(self):
        if self.kc is not None:
            try:
                self.kc.stop_channels()
            except Exception:  # noqa: BLE001
                pass
            self.kc = None

    def restart(self):
        self._disconnect()
        self.km.restart_kernel(now=True)
        self._connect()
        self.cancelled = None

    def shutdown(self):
        self._disconnect()
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception as e:  # noqa: BLE001
                log.warning("context %s: shutdown: %s", self.id, e)

    def kill_kernel(self, reason):
        """Kills the kernel process now (any thread), ending a running
        execution with an error named reason."""
        self.cancelled = reason
        km = self.km
        proc = getattr(getattr(km, "provisioner", None), "process", None) if km else None
        if proc is None or proc.poll() is not None:
            return
        try:
            pgid = os.getpgid(proc.pid)
            if pgid != os.getpgrp():  # the kernel leads its own session
                os.killpg(pgid, signal.SIGKILL)
                return
        except OSError:
            pass
        try:
            proc.kill()
        except OSError:
            pass

    def _alive(self):
        try:
            return self.km.is_alive()
        except Exception:  # noqa: BLE001
            return False

    def _ensure_alive(self):
        if self.kc is None or not self._alive():
            log.warning("context %s: kernel is not running; restarting it", self.id)
            self.restart()

    # -- executions (context thread) --------------------------------------------

    def _silent(self, code):
        """Sends code to run without output or history, and does not wait:
        the kernel runs requests in order, so setup code sent before an
        execution has run when the execution starts. (Waiting for its
        reply cost the first runCode of a sandbox a round trip to the
        kernel.) Its reply is skipped by _drain_reply."""
        self.kc.execute(code, silent=True, store_history=False, allow_stdin=False, stop_on_error=False)

    def _drain_reply(self, msg_id):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                reply = self.kc.get_shell_msg(timeout=0.5)
            except queue.Empty:
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return

    def execute(self, job):
        """Runs job's code, putting output lines (dicts) on job.out, then END."""
        if job.abandoned.is_set():  # its client left while it was queued
            job.out.put(Context.END)
            return
        self.busy = True
        self.running = job
        lang = self.lang
        try:
            self._ensure_alive()
            stamp = identity_stamp()
            if lang.set_env and (self.sandbox_env is None or stamp != self.identity):
                env = fetch_sandbox_env(job.access_token)
                if env is not None:
                    # Only what the kernel does not have already: a sandbox
                    # created without envs usually needs nothing.
                    base = self.sandbox_env if self.sandbox_env is not None else self.kernel_env
                    diff = {k: v for k, v in env.items() if base.get(k) != v}
                    if diff:
                        self._silent(lang.set_env(diff))
                    self.sandbox_env, self.identity = env, stamp
            env_vars = job.env_vars if lang.set_env else None
            if env_vars:
                self._silent(lang.set_env(env_vars))
            try:
                self._run(job.code, job.out)
            finally:
                if env_vars and self._alive():
                    self._silent(env_reset(lang, list(env_vars), self.sandbox_env or {}))
        except KernelGone:
            job.out.put(self._gone_error())
        except Exception as e:  # noqa: BLE001 - reported to the client
            log.exception("context %s: execution failed", self.id)
            job.out.put({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": ""})
        finally:
            self.running = None
            self.busy = False
            job.done.set()
            job.out.put(Context.END)

    def abandon(self, job):
        """The client of job went away (any thread): a queued job is
        skipped; a running one is interrupted, and its kernel killed if it
        does not stop within INTERRUPT_GRACE_SECONDS, so that the next
        execution runs."""
        job.abandoned.set()
        if self.running is not job:
            return
        log.info("context %s: client gone; interrupting the execution", self.id)
        self.interrupt()

        def watchdog():
            if not job.done.wait(INTERRUPT_GRACE_SECONDS) and self.running is job:
                log.warning("context %s: the kernel ignored the interrupt; killing it", self.id)
                self.kill_kernel("ExecutionInterrupted")

        threading.Thread(target=watchdog, daemon=True).start()

    def interrupt(self):
        """SIGINT to the kernel (any thread): jupyter's interrupt for
        kernels of interrupt_mode signal, which all of the template's are."""
        proc = getattr(getattr(self.km, "provisioner", None), "process", None) if self.km else None
        if proc is None or proc.poll() is not None:
            return
        try:
            pgid = os.getpgid(proc.pid)
            if pgid != os.getpgrp():
                os.killpg(pgid, signal.SIGINT)
                return
        except OSError:
            pass
        try:
            os.kill(proc.pid, signal.SIGINT)
        except OSError:
            pass

    def _gone_error(self):
        if self.cancelled == "ExecutionInterrupted":
            return {"type": "error", "name": self.cancelled, "traceback": "",
                    "value": "the execution's client went away and the kernel did not stop on an interrupt; it was killed, and the next execution starts a new one"}
        if self.cancelled:
            return {"type": "error", "name": self.cancelled, "value": "Context was restarted", "traceback": ""}
        code = None
        proc = getattr(getattr(self.km, "provisioner", None), "process", None)
        if proc is not None:
            code = proc.poll()
        return {
            "type": "error",
            "name": "KernelDied",
            "value": "the kernel process exited (exit status %s); the next execution starts a new one" % code,
            "traceback": "",
        }

    def _run(self, code, out):
        # stop_on_error=False: after an error (an interrupt's
        # KeyboardInterrupt too) ipykernel would otherwise abort requests
        # that arrive in the next moments, such as the client's next one.
        # Executions here are one at a time anyway.
        msg_id = self.kc.execute(code, silent=False, store_history=True, allow_stdin=False, stop_on_error=False)
        errored = False
        # IRkernel shows a cell's visible value as display_data, not as an
        # execute_result: for R the last display of an execution is its
        # main result (held back until the next message shows it is not).
        last_display = self.lang.name == "r"
        held = None
        # Deno's kernel sometimes publishes a cell's result after its idle
        # status: once idle and replied, iopub is read a little longer.
        late = 0.05 if self.lang.kernel == "space-deno" else 0.0
        idle = False
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=late if idle else 0.5)
            except queue.Empty:
                if idle:
                    break
                if not self._alive():
                    raise KernelGone()
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            content = msg["content"]
            if held is not None and kind in ("stream", "execute_result", "display_data", "error"):
                out.put(result_line(held, False))
                held = None
            if kind == "stream":
                name = content.get("name")
                if name in ("stdout", "stderr"):
                    out.put({"type": name, "text": content.get("text", ""), "timestamp": timestamp(msg["header"].get("date"))})
            elif kind == "execute_result":
                last_display = False
                out.put(result_line(content.get("data"), True))
            elif kind == "display_data":
                if last_display:
                    held = content.get("data")
                else:
                    out.put(result_line(content.get("data"), False))
            elif kind == "error":
                if not errored:
                    errored = True
                    out.put({
                        "type": "error",
                        "name": content.get("ename", ""),
                        "value": content.get("evalue", ""),
                        "traceback": "\n".join(content.get("traceback") or []),
                    })
            elif kind == "execute_input":
                out.put({"type": "number_of_executions", "execution_count": content.get("execution_count")})
            elif kind == "status" and content.get("execution_state") == "idle":
                self._drain_reply(msg_id)
                idle = True
                if not late:
                    break
        if held is not None:
            out.put(result_line(held, True))


def available_mib():
    """MemAvailable of the sandbox (its memory limit, under gVisor), or
    None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(language):
    """Refuses to start a kernel the sandbox has no memory for: past its
    limit the whole sandbox is killed, every context with it. A 503 with
    what to do instead."""
    need = LANGUAGES[language].memory_mib
    free = available_mib()
    if free is not None and free < need:
        raise HTTPError(503, (
            "not enough memory to start a %s kernel: %d MiB available, about %d MiB needed; "
            "remove contexts you no longer use (each is a kernel process) or give the sandbox more memory"
        ) % (language, free, need))


class Registry:
    """The contexts by id, and each language's default one."""

    def __init__(self, cwd):
        self.cwd = cwd
        self.lock = threading.Lock()
        self.contexts = {}
        self.default_ids = {}  # language -> context id
        # One creation of a language's default at a time (a JVM takes
        # seconds to start; two racing requests must not make two).
        self.default_locks = {name: threading.Lock() for name in LANGUAGES}

    def create(self, language, cwd, start_env=None):
        check_memory(language)
        ctx = Context(language, cwd, start_env)
        try:
            ctx.call(ctx.start)
        except Exception:
            ctx.call(ctx.shutdown)
            ctx.stop_thread()
            raise
        with self.lock:
            self.contexts[ctx.id] = ctx
        log.info("context %s (%s, %s) ready", ctx.id, language, cwd)
        return ctx

    def get(self, context_id):
        with self.lock:
            return self.contexts.get(context_id)

    def default(self, language="python", start_env=None):
        with self.default_locks[language]:
            with self.lock:
                ctx = self.contexts.get(self.default_ids.get(language))
            if ctx is not None:
                return ctx
            ctx = self.create(language, self.cwd, start_env)
            with self.lock:
                self.default_ids[language] = ctx.id
            return ctx

    def remove(self, context_id):
        with self.lock:
            ctx = self.contexts.pop(context_id, None)
        return ctx

    def list(self):
        with self.lock:
            return [c.describe() for c in self.contexts.values()]


def normalize_language(language):
    """The LANGUAGES key of a request's language (python when absent)."""
    if language is None or language == "":
        return "python"
    if not isinstance(language, str):
        raise HTTPError(400, "language must be a string")
    lang = language.strip().lower()
    lang = LANGUAGE_ALIASES.get(lang, lang)
    if lang not in LANGUAGES:
        raise HTTPError(400, "language %r is not supported by this template (one of %s)" % (
            language, ", ".join(sorted(LANGUAGES))))
    return lang


def check_cwd(cwd):
    """A context's working directory: an existing directory the kernel's
    user may enter (else 400, never a kernel that fails to start)."""
    if not isinstance(cwd, str) or not cwd:
        raise HTTPError(400, "cwd must be a non-empty string")
    if "\x00" in cwd or len(cwd) > 4096:
        raise HTTPError(400, "cwd is not a valid path")
    if not os.path.isabs(cwd):
        raise HTTPError(400, "cwd must be an absolute path")
    cwd = os.path.normpath(cwd)
    if not os.path.isdir(cwd):
        raise HTTPError(400, "cwd %s is not an existing directory" % cwd)
    if not os.access(cwd, os.R_OK | os.X_OK):
        raise HTTPError(400, "cwd %s is not accessible to the kernel's user" % cwd)
    return cwd


class Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 (chunked /execute streams), one request per connection.

    Every response closes its connection: the host proxy keeps idle
    connections to sandbox ports, and one kept across a pause of the
    sandbox is dead after the resume; the first request sent on it would
    hang. A connection per request costs little next to an execution.
    """

    protocol_version = "HTTP/1.1"
    server_version = "space-code-interpreter/1"
    registry = None  # set by main

    def end_headers(self):
        self.send_header("Connection", "close")
        self.close_connection = True
        super().end_headers()

    def log_message(self, fmt, *args):
        log.debug("%s %s", self.address_string(), fmt % args)

    # -- plumbing --------------------------------------------------------------

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks, total = [], 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY_BYTES:
                    raise HTTPError(413, "request body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise HTTPError(413, "request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _json_body(self):
        raw = self._read_body()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise HTTPError(400, "request body is not JSON: %s" % e)
        if not isinstance(body, dict):
            raise HTTPError(400, "request body must be a JSON object")
        return body

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else (json.dumps(body) if content_type == "application/json" else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, routes):
        path = self.path.split("?", 1)[0]
        try:
            for match, fn in routes:
                args = match(path)
                if args is not None:
                    return fn(*args)
            raise HTTPError(404, "no route %s %s" % (self.command, path))
        except HTTPError as e:
            self._send(e.status, e.message + "\n", "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001
            log.exception("%s %s", self.command, path)
            self._send(500, "%s: %s\n" % (type(e).__name__, e), "text/plain; charset=utf-8")

    def _context(self, context_id):
        ctx = self.registry.get(context_id)
        if ctx is None:
            raise HTTPError(404, "Context %s not found" % context_id)
        return ctx

    # -- routes ------------------------------------------------------------------

    def do_GET(self):
        self._handle([
            (exact("/health"), lambda: self._send(200, "OK")),
            (exact("/contexts"), lambda: self._send(200, self.registry.list())),
        ])

    def do_POST(self):
        self._handle([
            (exact("/execute"), self.execute),
            (exact("/contexts"), self.create_context),
            (context_route("/restart"), self.restart_context),
        ])

    def do_DELETE(self):
        self._handle([(context_route(""), self.remove_context)])

    def create_context(self):
        body = self._json_body()
        language = normalize_language(body.get("language"))
        cwd = body.get("cwd")
        cwd = self.registry.cwd if cwd is None or cwd == "" else check_cwd(cwd)
        # The kernel starts with the sandbox's environment when the agent
        # gives it now (the SDKs send no access token here; a secured
        # sandbox's is then applied at the first execution instead).
        env = fetch_sandbox_env(self.headers.get("X-Access-Token"))
        ctx = self.registry.create(language, cwd, env)
        self._send(200, ctx.describe())

    def restart_context(self, context_id):
        self._read_body()
        ctx = self._context(context_id)
        if ctx.busy:
            ctx.kill_kernel("ContextRestarting")
        ctx.call(ctx.restart)
        self._send(200, None)

    def remove_context(self, context_id):
        self._read_body()
        ctx = self.registry.remove(context_id)
        if ctx is None:
            raise HTTPError(404, "Context %s not found" % context_id)
        if ctx.busy:
            ctx.kill_kernel("ContextRestarting")
        ctx.call(ctx.shutdown)
        ctx.stop_thread()
        self._send(200, None)

    def execute(self):
        body = self._json_body()
        code = body.get("code")
        if not isinstance(code, str):
            raise HTTPError(400, "code must be a string")
        context_id = body.get("context_id")
        language = body.get("language")
        if context_id and language:
            raise HTTPError(400, "Only one of context_id or language can be provided")
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict):
            raise HTTPError(400, "env_vars must be an object")
        env_vars = {str(k): "" if v is None else str(v) for k, v in env_vars.items()}
        token = self.headers.get("X-Access-Token")
        if context_id:
            if not isinstance(context_id, str):
                raise HTTPError(400, "context_id must be a string")
            ctx = self._context(context_id)
        else:
            lang = normalize_language(language)
            ctx = self.registry.default(lang, fetch_sandbox_env(token) if lang != "python" else None)

        job = Job(code, env_vars, token)
        ctx.submit(lambda: ctx.execute(job))
        try:
            self._stream_job(ctx, job)
        except (BrokenPipeError, ConnectionResetError, ClientGone):
            ctx.abandon(job)
            self.close_connection = True

    def _client_gone(self):
        """Whether the client closed its end: the socket reads as EOF.
        (It sends nothing more after its request; data would be a
        pipelined request, which keeps it alive.)"""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _next(self, job, timeout):
        """The job's next output item within timeout, or None; raises
        ClientGone as soon as the client has left."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                return job.out.get(timeout=min(left, CLIENT_POLL_SECONDS))
            except queue.Empty:
                if self._client_gone():
                    raise ClientGone()

    def _stream_job(self, ctx, job):
        # The status line goes out with the first output line (the
        # execution's number, once the kernel has taken the code), or after
        # HEADERS_DELAY_SECONDS while the kernel is busy. Answering at once
        # races the host proxy (Go's httputil.ReverseProxy): its transport
        # may still be reading the request body to EOF when the headers
        # come back, and Go's server then discards and closes that body,
        # which fails the proxied request (about 1 execution in 100).
        item = self._next(job, HEADERS_DELAY_SECONDS)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()
        while True:
            if item is None:
                item = self._next(job, KEEPALIVE_SECONDS)
                if item is None:
                    item = {"type": "keepalive"}
            if item is Context.END:
                self._chunk({"type": "end_of_execution"})
                break
            self._chunk(item)
            item = None
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, obj):
        line = (json.dumps(obj, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()


def exact(path):
    return lambda p: () if p == path else None


def context_route(suffix):
    """Matches /contexts/{id}<suffix>."""

    def match(p):
        if not p.startswith("/contexts/") or not p.endswith(suffix):
            return None
        context_id = p[len("/contexts/"): len(p) - len(suffix)]
        if not context_id or "/" in context_id:
            return None
        return (context_id,)

    return match


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=49999)
    parser.add_argument("--cwd", default="/home/user", help="working directory of the default context")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="code-interpreter: %(levelname)s %(message)s",
    )
    for noisy in ("traitlets", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    registry = Registry(args.cwd)
    started = time.monotonic()
    registry.default()  # the kernel is up before the port opens
    log.info("default python context ready in %.1fs", time.monotonic() - started)

    Handler.registry = registry
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    log.info("listening on %s:%d", args.host, args.port)

    def stop(signum, _frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    finally:
        for c in list(registry.contexts.values()):
            try:
                c.kill_kernel("ServerStopped")
            except Exception:  # noqa: BLE001
                pass


if __name__ == "__main__":
    main()
