"""A Jupyter kernel around a line-oriented interpreter process.

Debian packages no Jupyter kernel for Bash or Java, so code-interpreter-v1
has its own: ipykernel's Kernel base class drives one long-lived child
(bash, jshell) over pipes. Each execution writes the cell to the child,
followed by a command that prints a per-execution marker with the cell's
status; stdout and stderr are streamed to the client as they come, and the
marker ends the execution.

An interrupt (SIGINT to the kernel, which is how jupyter_client interrupts
kernels of interrupt_mode "signal") is passed on to the child's process
group; if the child does not come back to its marker within a few seconds
it is killed and a fresh one started (its state is lost, and the error says
so). A child that exits (an `exit` in a cell) is restarted the same way.
"""

import codecs
import ctypes
import os
import queue
import signal
import subprocess
import threading
import time
import uuid

from ipykernel.kernelbase import Kernel

INTERRUPT_GRACE_SECONDS = 3.0


_PR_SET_PDEATHSIG = 1
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:
    _libc = None


def _child_setup():
    """In the child before exec: SIGINT back to its default, and death
    with this kernel. jupyter_client stops a kernel with SIGKILL (a
    context's removal or restart), which leaves no chance to stop the
    child; without this a JVM would live on, holding its memory."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _marker_prefix_at_end(text, token):
    """The length of the longest end of text that begins token."""
    for n in range(min(len(text), len(token) - 1), 0, -1):
        if token.startswith(text[-n:]):
            return n
    return 0


class ChildGone(Exception):
    pass


class ReplKernel(Kernel):
    """Subclasses set the language metadata and implement argv, prelude,
    wrap (the text written for one cell, ending with the marker command)
    and parse_status (the marker's payload to an error or None)."""

    implementation = "space-repl"
    implementation_version = "1"
    banner = ""

    def argv(self):
        raise NotImplementedError

    def prelude(self):
        """Text written once after the child starts."""
        return ""

    def wrap(self, code, marker):
        raise NotImplementedError

    def parse_status(self, payload):
        """(ename, evalue) for a failed cell, or None."""
        return None

    def emit(self, name, text, silent):
        """Handles a piece of the child's output of a cell; by default it
        is streamed as is."""
        self._stream(name, text, silent)

    def flush(self, silent):
        """Called when a cell's output is complete."""

    # -----------------------------------------------------------------

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._proc = None
        self._start_child()

    def _start_child(self):
        self._out = queue.Queue()
        self._proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own group: interrupts reach its children
            bufsize=0,
            # ipykernel ignores SIGINT outside handlers, and an ignored
            # signal stays ignored in children (bash cannot even trap it);
            # and the child must not outlive the kernel.
            preexec_fn=_child_setup,
        )
        for name, f in (("stdout", self._proc.stdout), ("stderr", self._proc.stderr)):
            threading.Thread(target=self._pump, args=(name, f, self._out), daemon=True).start()
        prelude = self.prelude()
        marker = "__space_%s__" % uuid.uuid4().hex
        # Whatever the start and the prelude print (banners, prompts) is
        # drained up to a first marker, so that cells see none of it.
        self._write(prelude + self.wrap("", marker))
        self._collect(marker, silent=True)

    @staticmethod
    def _pump(name, f, out):
        while True:
            try:
                data = os.read(f.fileno(), 65536)
            except OSError:
                data = b""
            if not data:
                out.put((name, None))
                return
            out.put((name, data))

    def _write(self, text):
        try:
            self._proc.stdin.write(text.encode("utf-8"))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ChildGone()

    def _kill_child(self):
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _restart_child(self):
        self._kill_child()
        self._start_child()

    def _stream(self, name, text, silent):
        if text and not silent:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def _error(self, ename, evalue, silent, traceback=None):
        tb = traceback if traceback is not None else evalue
        content = {"ename": ename, "evalue": evalue, "traceback": [tb] if tb else []}
        if not silent:
            self.send_response(self.iopub_socket, "error", content)
        return dict(content, status="error", execution_count=self.execution_count)

    def _collect(self, marker, silent, deadline=None):
        """Streams the child's output until the marker; returns the
        marker's payload. Raises ChildGone when the child exits first and
        TimeoutError past deadline."""
        decoders = {n: codecs.getincrementaldecoder("utf-8")("replace") for n in ("stdout", "stderr")}
        pending = {"stdout": "", "stderr": ""}
        seen = {"stdout": None, "stderr": None}  # payload after the marker
        token = marker
        while seen["stdout"] is None or seen["stderr"] is None:
            timeout = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
            try:
                name, data = self._out.get(timeout=timeout)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError()
                continue
            if data is None:
                for n in ("stdout", "stderr"):
                    self.emit(n, pending[n], silent)
                self.flush(silent)
                raise ChildGone()
            if seen[name] is not None:
                seen[name] += decoders[name].decode(data)
                continue
            text = pending[name] + decoders[name].decode(data)
            i = text.find(token)
            if i >= 0:
                self.emit(name, text[:i], silent)
                seen[name] = text[i + len(token):]
                pending[name] = ""
                continue
            # Hold back only a tail that could be the start of the marker,
            # so that output streams as it comes.
            keep = _marker_prefix_at_end(text, token)
            self.emit(name, text[:len(text) - keep], silent)
            pending[name] = text[len(text) - keep:]
        self.flush(silent)
        return seen["stdout"].split("\n", 1)[0].strip()

    def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False, *, cell_id=None):
        if self._proc is None or self._proc.poll() is not None:
            self._restart_child()
        marker = "__space_%s__" % uuid.uuid4().hex
        try:
            try:
                self._write(self.wrap(code, marker))
                payload = self._collect(marker, silent)
            except KeyboardInterrupt:
                try:
                    os.killpg(self._proc.pid, signal.SIGINT)
                except OSError:
                    pass
                try:
                    self._collect(marker, silent, deadline=time.monotonic() + INTERRUPT_GRACE_SECONDS)
                    return self._error("KeyboardInterrupt", "interrupted", silent)
                except (TimeoutError, ChildGone):
                    self._restart_child()
                    return self._error("KeyboardInterrupt", "interrupted; the %s process did not stop and was restarted (its state is lost)" % self.language, silent)
        except ChildGone:
            code_ = self._proc.poll()
            self._restart_child()
            return self._error("ProcessExited", "the %s process exited (status %s); a new one was started" % (self.language, code_), silent)
        failed = self.parse_status(payload)
        if failed:
            return self._error(failed[0], failed[1], silent)
        return {"status": "ok", "execution_count": self.execution_count, "payload": [], "user_expressions": {}}

    def do_shutdown(self, restart):
        self._kill_child()
        return {"status": "ok", "restart": restart}

    def do_is_complete(self, code):
        return {"status": "complete"}
