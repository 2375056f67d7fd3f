"""``heft.torch.profile``: step timings by phase for a Python training script, in the file
heft's supervisor collects, written by heft's C++ step profiler
(src/heft/step_profiler/step_profiler.h, the one heft-train uses; docs/observability.md):

    profiler = heft.torch.profile.StepProfiler.from_env()   # $HEFT_PROFILE_DIR/rank-$RANK.steps
    profiler.activate()                                     # library code reports into it
    for step in ...:
        profiler.begin_step(step)
        with profiler.phase("data"): ...
        with profiler.phase("forward"): ...
        profiler.end_step()

A phase inside another (ShardedDataParallel's waits for its collectives, reported as
"communication" inside forward and backward) is taken out of the outer one, so a step's
phases add up to at most its time. Phases: PHASES; another name raises ValueError. Without
HEFT_PROFILE_DIR every call is a no-op. One training thread."""
import contextlib

from ._c10d import step_profiler as _cpp

PHASES = tuple(_cpp.PHASES)
_active = None


class StepProfiler:
    """Appends one line a step to `path` (empty: disabled); see the module's docstring."""

    def __init__(self, path=""):
        self._cpp = _cpp.StepProfiler(path)

    @classmethod
    def from_env(cls):
        profiler = cls.__new__(cls)
        profiler._cpp = _cpp.StepProfiler.from_env()
        return profiler

    @property
    def enabled(self):
        return self._cpp.enabled

    def activate(self):
        """Makes this the profiler phase() (and heft's C++ code) reports to; returns self."""
        global _active
        _active = self
        self._cpp.activate()
        return self

    def begin_step(self, step):
        self._cpp.begin_step(step)

    def push(self, name):
        self._cpp.push(name)

    def pop(self):
        self._cpp.pop()

    @contextlib.contextmanager
    def phase(self, name):
        self._cpp.push(name)
        try:
            yield
        finally:
            self._cpp.pop()

    def end_step(self):
        """Ends the step begun last and writes its line."""
        self._cpp.end_step()


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
    with p.phase(name):
        yield
