"""The Bash kernel of code-interpreter-v1 (see replkernel.py).

One bash process per context keeps the shell's state (variables, cwd,
functions) from cell to cell. A cell is written to a file and sourced, with
stdin from /dev/null so that nothing it reads eats the next cell; an
interrupt returns from the sourced cell (the INT trap). A cell whose last
command fails is an error named ExitError whose value is the status, as
E2B's bash kernel reports it.
"""

import os
import shlex
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from replkernel import ReplKernel  # noqa: E402


class BashKernel(ReplKernel):
    implementation = "space-bash"
    language = "bash"
    language_version = "5"
    language_info = {"name": "bash", "mimetype": "text/x-sh", "file_extension": ".sh"}
    banner = "bash (space code interpreter)"

    def argv(self):
        return ["bash", "--noprofile", "--norc"]

    def prelude(self):
        # The interrupt ends the cell being sourced, not the shell.
        return "trap 'return 130 2>/dev/null' INT\n"

    def wrap(self, code, marker):
        fd, path = tempfile.mkstemp(prefix="space-bash-", suffix=".sh")
        with os.fdopen(fd, "w") as f:
            f.write(code)
            if not code.endswith("\n"):
                f.write("\n")
        p = shlex.quote(path)
        return ". %s </dev/null; __space_rc=$?; rm -f %s; printf '%%s%%s\\n' %s \"$__space_rc\"; printf '%%s\\n' %s >&2\n" % (
            p, p, shlex.quote(marker), shlex.quote(marker))

    def parse_status(self, payload):
        if payload and payload != "0":
            return ("ExitError", "exit status %s" % payload)
        return None


if __name__ == "__main__":
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(kernel_class=BashKernel)
