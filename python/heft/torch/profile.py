"""``heft.torch.profile``: step timings by phase for a Python training script, in the file
heft's supervisor collects (the format of src/heft/step_profiler/step_profiler.h, which
heft-train writes; docs/observability.md):

    profiler = heft.torch.profile.StepProfiler.from_env()   # $HEFT_PROFILE_DIR/rank-$RANK.steps
    profiler.activate()                                     # library code reports into it
    for step in ...:
        profiler.begin_step(step)
        with profiler.phase("data"): ...
        with profiler.phase("forward"): ...
        profiler.end_step()

A phase inside another (ShardedDataParallel's waits for its collectives, reported as
"communication" inside forward and backward) is taken out of the outer one, so a step's
phases add up to at most its time. Without HEFT_PROFILE_DIR every call is a no-op. One
training thread. (The extension does not link heft_step_profiler, so this writes the same
line itself: "<step> <end unix s> <total ms> <data> <forward> <backward> <communication>
<optimizer>".)"""
import contextlib
import os
import sys
import time

PHASES = ("data", "forward", "backward", "communication", "optimizer")
_active = None


class StepProfiler:
    def __init__(self, path=""):
        self.fd = -1
        if path:
            try:
                self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            except OSError as e:
                print(f"heft: step profiling off: cannot open {path}: {e.strerror}", file=sys.stderr)
        self.step, self.start, self.seconds, self.open = -1, 0.0, [0.0] * 5, []

    @classmethod
    def from_env(cls):
        d = os.environ.get("HEFT_PROFILE_DIR", "")
        return cls(os.path.join(d, f"rank-{os.environ.get('RANK') or '0'}.steps") if d else "")

    @property
    def enabled(self):
        return self.fd >= 0

    def activate(self):
        global _active
        _active = self
        return self

    def begin_step(self, step):
        self.step, self.start, self.seconds, self.open = step, time.monotonic(), [0.0] * 5, []

    def push(self, name):
        if self.enabled:
            self.open.append([PHASES.index(name), time.monotonic(), 0.0])

    def pop(self):
        if not self.enabled or not self.open:
            return
        index, start, inner = self.open.pop()
        wall = time.monotonic() - start
        self.seconds[index] += wall - inner
        if self.open:
            self.open[-1][2] += wall

    @contextlib.contextmanager
    def phase(self, name):
        self.push(name)
        try:
            yield
        finally:
            self.pop()

    def end_step(self):
        if not self.enabled or self.step < 0:
            return
        total = time.monotonic() - self.start
        line = "%d %.6f %.4f %s\n" % (self.step, time.time(), total * 1e3,
                                      " ".join("%.4f" % (s * 1e3) for s in self.seconds))
        try:
            os.write(self.fd, line.encode())
        except OSError:  # a full disk: stop profiling, keep training
            os.close(self.fd)
            self.fd = -1
        self.step = -1


def active():
    """The activated profiler, or None."""
    return _active if _active is not None and _active.enabled else None


@contextlib.contextmanager
def phase(name):
    """Times `name` into the active profiler (nothing without one)."""
    p = active()
    if p is None:
        yield
        return
    p.push(name)
    try:
        yield
    finally:
        p.pop()
