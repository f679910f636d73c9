"""The Java kernel of code-interpreter-v1: jshell (OpenJDK 17) behind
replkernel.py.

No Jupyter kernel for Java is packaged by Debian, and IJava's
distribution is not in Maven Central, so this one drives the JDK's own
REPL engine: SpaceJShell.java (next to this file) evaluates cells with the
jdk.jshell API, splitting them into snippets as jshell does, and marks its
results and failures in its output. An expression's value becomes the
cell's result (as with IJava), an exception or a rejected snippet the
cell's error. Declarations, imports and methods persist from cell to cell.

The JVM's environment is fixed when it starts: a context sees the
sandbox's variables as they were then, and per-execution env_vars are not
applied (docs/e2b.md).
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from replkernel import ReplKernel  # noqa: E402

_RESULT = re.compile(r"^@@R(.*)@@E$", re.S)
HERE = os.path.dirname(os.path.abspath(__file__))


class JavaKernel(ReplKernel):
    implementation = "space-java"
    language = "java"
    language_version = "17"
    language_info = {"name": "java", "mimetype": "text/x-java", "file_extension": ".java"}
    banner = "Java (jdk.jshell, space code interpreter)"

    def argv(self):
        # The source launcher compiles the evaluator at start (a second or
        # two), so the template ships source only.
        # Small heap and caches: a sandbox has 512 MiB by default, shared
        # by every kernel it runs.
        return ["java", "-Djava.awt.headless=true", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Xms8m", "-Xmx96m", "-XX:MaxMetaspaceSize=80m", "-XX:CompressedClassSpaceSize=32m",
                "-XX:ReservedCodeCacheSize=24m", "-Xss512k", "-XX:MaxDirectMemorySize=16m",
                os.path.join(HERE, "SpaceJShell.java")]

    def wrap(self, code, marker):
        return "%d %s\n%s" % (len(code.encode("utf-8")), marker, code)

    # stdout is handled line by line: the evaluator's @@ lines and "|  "
    # lines are results and errors, the rest is the program's output.
    def _reset(self):
        self._line = ""
        self._failure = None
        self._trace = []

    def emit(self, name, text, silent):
        if name != "stdout":
            self._stream(name, text, silent)
            return
        if not hasattr(self, "_line"):
            self._reset()
        self._line += text
        while "\n" in self._line:
            line, self._line = self._line.split("\n", 1)
            self._handle(line, silent)

    def _handle(self, line, silent):
        m = _RESULT.match(line)
        if m:
            if not silent:
                self.send_response(self.iopub_socket, "execute_result", {
                    "execution_count": self.execution_count,
                    "data": {"text/plain": m.group(1)},
                    "metadata": {},
                })
        elif line.startswith("@@X"):
            name, _, message = line[3:].partition("\t")
            self._failure = (name, message)
        elif line.startswith("@@C"):
            self._failure = ("CompilationError", line[3:])
        elif self._failure is not None and line.startswith("|"):
            self._trace.append(line)
        else:
            self._stream("stdout", line + "\n", silent)

    def flush(self, silent):
        if not hasattr(self, "_line"):
            self._reset()
        if self._line:
            self._stream("stdout", self._line, silent)
        self._cell_failure = (self._failure, self._trace)
        self._reset()

    def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False, *, cell_id=None):
        self._cell_failure = (None, [])
        reply = super().do_execute(code, silent, store_history, user_expressions, allow_stdin, cell_id=cell_id)
        failure, trace = self._cell_failure
        if reply.get("status") != "ok" or failure is None:
            return reply
        name, message = failure
        return self._error(name, message, silent, traceback="\n".join(["%s: %s" % (name, message)] + trace))


if __name__ == "__main__":
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(kernel_class=JavaKernel)
