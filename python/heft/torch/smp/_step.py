"""@smp.step: the decorated function runs once per micro-batch (its tensor arguments split
along their batch axis) and its returns come back as StepOutput. With partitions 1 the
micro-batches run in turn on the local model (DDP's gradient sync on the last); with
partitions > 1 on heft's Pipeline schedule: each micro-batch's function runs on the last
stage with model(...) giving the pipeline's output, the first stage feeding the input each
micro-batch's function passes to model(...) (read by running the function up to that call),
and its returns are broadcast to the other stages."""
import contextlib
import functools
import inspect

import torch
import torch.distributed as dist

from ._model import DistributedModel, _Captured
from ._state import state


class StepOutput:
    """One value of the step function's returns across the micro-batches."""

    def __init__(self, outputs):
        self.outputs = list(outputs)

    def __iter__(self):
        return iter(self.outputs)

    def __len__(self):
        return len(self.outputs)

    def __getitem__(self, i):
        return self.outputs[i]

    def reduce_mean(self):
        return torch.stack([torch.as_tensor(o) for o in self.outputs]).mean(dim=0)

    def reduce_sum(self):
        return torch.stack([torch.as_tensor(o) for o in self.outputs]).sum(dim=0)

    def concat(self):
        return torch.cat(self.outputs)

    def stack(self):
        return torch.stack(self.outputs)

    def __repr__(self):
        return f"StepOutput({self.outputs!r})"


def _split(value, count, m, axis, where):
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            return value
        n = value.shape[axis]
        if n % count:
            raise ValueError(f"smp.step: microbatches={count} does not divide the {n} samples "
                             f"of {where} (axis {axis}); pass it in non_split_inputs if it has "
                             "no batch axis")
        size = n // count
        return value.narrow(axis, m * size, size)
    if hasattr(value, "smp_slice"):
        return value.smp_slice(count, m, axis)
    if isinstance(value, (list, tuple)):
        parts = [_split(v, count, m, axis, f"{where}[{i}]") for i, v in enumerate(value)]
        return type(value)(parts) if not hasattr(value, "_fields") else type(value)(*parts)
    if isinstance(value, dict):
        return {k: _split(v, count, m, axis, f"{where}[{k!r}]") for k, v in value.items()}
    return value


def _gather(results):
    """The per-micro-batch returns as one structure, each tensor a StepOutput."""
    first = results[0]
    if isinstance(first, torch.Tensor):
        return StepOutput(results)
    if isinstance(first, (list, tuple)):
        parts = [_gather([r[i] for r in results]) for i in range(len(first))]
        return type(first)(parts) if not hasattr(first, "_fields") else type(first)(*parts)
    if isinstance(first, dict):
        return {k: _gather([r[k] for r in results]) for k in first}
    return StepOutput(results) if not isinstance(first, (type(None),)) else None


def _detach(value):
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        parts = [_detach(v) for v in value]
        return type(value)(parts) if not hasattr(value, "_fields") else type(value)(*parts)
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def _calls(model, call, backward):
    model.__dict__["_call"], model.__dict__["_backward"] = call, backward
    try:
        yield
    finally:
        model.__dict__.pop("_call", None)
        model.__dict__.pop("_backward", None)


class _Step:
    def __init__(self, func, non_split_inputs, input_split_axes, detach_outputs):
        self.func, self.detach = func, detach_outputs
        self.signature = inspect.signature(func)
        names = set(self.signature.parameters)
        for what, given in (("non_split_inputs", non_split_inputs or []),
                            ("input_split_axes", input_split_axes or {})):
            unknown = [n for n in given if n not in names]
            if unknown:
                raise ValueError(f"smp.step: {what} names {unknown}, which {func.__name__} does "
                                 f"not take (its arguments: {', '.join(names)})")
        self.non_split = set(non_split_inputs or [])
        self.axes = dict(input_split_axes or {})
        functools.update_wrapper(self, func)

    def microbatches(self, args, kwargs, count):
        bound = self.signature.bind(*args, **kwargs)
        model = None
        for value in bound.arguments.values():
            if isinstance(value, DistributedModel):
                model = value
        if model is None:
            raise TypeError(f"smp.step: {self.func.__name__} was not passed the "
                            "smp.DistributedModel (pass the model as an argument)")
        calls = []
        for m in range(count):
            b = self.signature.bind(*args, **kwargs)
            for name, value in b.arguments.items():
                if name not in self.non_split and not isinstance(value, DistributedModel):
                    b.arguments[name] = _split(value, count, m, self.axes.get(name, 0), name)
            calls.append((b.args, b.kwargs))
        return model, calls

    def __call__(self, *args, **kwargs):
        state.need("step")
        count = state.config["microbatches"]
        model, calls = self.microbatches(args, kwargs, count)
        run = _pipelined if model.pipelined else _local
        results = run(self.func, model, calls, count)
        if self.detach:
            results = [_detach(r) for r in results]
        return _gather(results)


def _local(func, model, calls, count):
    """Micro-batches in turn; DDP syncs gradients in the last one's backward."""
    results = []
    for m, (args, kwargs) in enumerate(calls):
        last = m == count - 1
        sync = (model._ddp.no_sync() if model._ddp is not None and not last
                else contextlib.nullcontext())

        def backward(loss):
            torch.autograd.backward(loss / count)

        with sync, _calls(model, None, backward):
            results.append(func(*args, **kwargs))
    return results


def _capture(func, model, args, kwargs):
    def call(a, k):
        raise _Captured(a, k)

    try:
        with torch.no_grad(), _calls(model, call, lambda loss: None):
            func(*args, **kwargs)
    except _Captured as c:
        if len(c.args) != 1 or c.kwargs or not isinstance(c.args[0], torch.Tensor):
            raise ValueError("smp.step: on heft's pipeline the model takes one tensor; "
                             f"{func.__name__} called it with {len(c.args)} positional and "
                             f"{len(c.kwargs)} keyword arguments") from None
        return c.args[0]
    raise RuntimeError(f"smp.step: {func.__name__} did not call the model")


def _pipelined(func, model, calls, count):
    inputs = [_capture(func, model, a, k) for a, k in calls]
    if model._pipe is None:
        model._build(inputs[0])
    pipe = model._pipe
    train = torch.is_grad_enabled()
    results = [None] * count

    def on_output(m, out):
        taken = []
        args, kwargs = calls[m]
        with _calls(model, lambda a, k: out, taken.append):
            results[m] = func(*args, **kwargs)
        if not train:
            return None
        if len(taken) != 1:
            raise RuntimeError(f"smp.step: {func.__name__} ran with gradients enabled and called"
                               f" model.backward {len(taken)} times; call it once per step "
                               "function (evaluate under torch.no_grad())")
        return taken[0] / count

    pipe.run_microbatches(inputs, on_output, train=train)
    box = [results if pipe.stage == pipe.stages - 1 else None]
    dist.broadcast_object_list(box, state.mesh.ranks("pipeline")[-1],
                               group=state.mesh.group("pipeline"))
    return box[0] if pipe.stage != pipe.stages - 1 else results


def step(func=None, *, non_split_inputs=None, input_split_axes=None, detach_outputs=True):
    """@smp.step or @smp.step(non_split_inputs=[...], input_split_axes={...},
    detach_outputs=True)."""
    if func is None:
        return lambda f: _Step(f, non_split_inputs, input_split_axes, detach_outputs)
    if not callable(func):
        raise TypeError(f"smp.step: expected a function, found {type(func).__name__}")
    return _Step(func, non_split_inputs, input_split_axes, detach_outputs)
