"""The heft command line, as the SDK uses it: where the binary is, one-shot commands with
their JSON, and `heft train` / `heft tune` started with their output streamed or kept.

Nothing here talks to a cloud: every fact the SDK reports comes from `heft describe --json`,
`heft jobs --json`, `heft metrics --format json` and `heft tunings --json` (the job database).
"""
import json
import os
import shutil
import subprocess
import sys
import threading

from . import _home
from .exceptions import HeftCommandError

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../heft


def heft_binary():
    """The `heft` executable: $HEFT_BIN, else the one beside the package in a build tree
    (build/python/heft -> build/heft), else an installed prefix's (P/lib/python3.X/
    dist-packages/heft -> P/bin/heft), else the first on PATH. FileNotFoundError otherwise."""
    explicit = os.environ.get("HEFT_BIN")
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise FileNotFoundError(f"HEFT_BIN={explicit}: not an executable file")
        return explicit
    python_dir = os.path.dirname(_PACKAGE_DIR)
    candidates = [os.path.join(os.path.dirname(python_dir), "heft"),
                  os.path.join(python_dir, "..", "..", "..", "bin", "heft")]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.normpath(c)
    found = shutil.which("heft")
    if found:
        return found
    raise FileNotFoundError(
        "heft.estimator: cannot find the heft executable (looked at $HEFT_BIN, "
        f"{', '.join(os.path.normpath(c) for c in candidates)} and PATH); build heft "
        "(./setup.sh) or set HEFT_BIN")


def environment(heft_home):
    env = dict(os.environ)
    if heft_home:
        env["HEFT_HOME"] = heft_home
    return env


def run(args, heft_home, check=True, timeout=120):
    """`heft ARGS`, output captured: the CompletedProcess. With `check`, a non-zero exit
    raises HeftCommandError carrying heft's stderr."""
    r = subprocess.run([heft_binary()] + list(args), capture_output=True, text=True,
                       env=environment(heft_home), timeout=timeout)
    if check and r.returncode != 0:
        raise HeftCommandError(args, r.returncode, r.stderr.strip())
    return r


def run_json(args, heft_home):
    return json.loads(run(list(args) + ["--json"], heft_home).stdout)


def describe(name, heft_home):
    """`heft describe NAME --json` as a dict (a training job or a tuning job)."""
    return run_json(["describe", name], heft_home)


def job_exists(name, heft_home):
    r = run(["describe", name, "--json"], heft_home, check=False)
    return r.returncode == 0


class Running:
    """A `heft train` or `heft tune` started in the background. Its stdout is copied to
    `sys.stdout` line by line when `show` is true (else dropped); its stderr to `sys.stderr`
    when `show`, and always kept (the last 200 lines) for the error message. With `log_path`
    both go to that file instead, and heft runs in its own session, so it outlives this
    Python (fit(wait=False) from a script that then exits); the file is private (mode 0600)
    and must lie inside heft's home (_home)."""

    def __init__(self, args, heft_home, cwd, show, log_path=None):
        self.args = list(args)
        self.stderr_lines = []
        self._show = show
        self._log_path = log_path
        self._threads = []
        command = [heft_binary()] + self.args
        if log_path:
            with _home.open_private(heft_home, log_path) as log:
                self.proc = subprocess.Popen(command, cwd=cwd, env=environment(heft_home),
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True)
            return
        self.proc = subprocess.Popen(command, cwd=cwd, env=environment(heft_home),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace",
                                     bufsize=1)
        self._threads = [threading.Thread(target=self._copy, args=(self.proc.stdout, False),
                                          daemon=True),
                         threading.Thread(target=self._copy, args=(self.proc.stderr, True),
                                          daemon=True)]
        for t in self._threads:
            t.start()

    def _copy(self, stream, is_err):
        for line in stream:
            if is_err:
                self.stderr_lines.append(line.rstrip("\n"))
                del self.stderr_lines[:-200]
            if self._show:
                out = sys.stderr if is_err else sys.stdout
                out.write(line)
                out.flush()
        stream.close()

    def poll(self):
        return self.proc.poll()

    def wait(self, timeout=None):
        rc = self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join()
        return rc

    def stderr_text(self):
        if self._log_path:
            with open(self._log_path, errors="replace") as f:
                return "".join(f.readlines()[-200:])
        return "\n".join(self.stderr_lines)

    def stop(self):
        """SIGTERM to heft (it stops the workers and records the job Stopped)."""
        if self.proc.poll() is None:
            self.proc.terminate()
