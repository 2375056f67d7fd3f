"""smp.DistributedModel and smp.DistributedOptimizer over heft's strategies: with partitions
> 1 the model becomes heft's Pipeline (its layers from _trace, cut by heft's partitioner or by
smp.partition blocks, each stage's chunks DDP over the data dimension); with partitions 1,
torch's DDP on backend heft. The pipeline is built at the first smp.step, when the first
micro-batch shows the input (the partitioner profiles the layers on it), as the library
partitions at its first step."""
import weakref

import torch
import torch.distributed as dist

from heft.torch.parallel import Pipeline
from heft.torch.parallel.pipeline import traced_layers
from ._state import state


def _state():
    return state  # DistributedOptimizer's own `state` is the optimizer's (torch's name)

_assigned = weakref.WeakKeyDictionary()  # module -> partition, from smp.partition / set_partition
_current = []  # the open smp.partition blocks' indices
_hook = []


def _on_register(parent, name, module):
    if _current and module is not None and module not in _assigned:
        _assigned[module] = _current[-1]
    return None


class partition:
    """`with smp.partition(i):` every module made and assigned as an attribute inside the block
    is placed on pipeline stage i (with auto_partition false); modules outside any block go
    to default_partition."""

    def __init__(self, index):
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"smp.partition({index!r}): expected a partition index >= 0")
        self.index = index

    def __enter__(self):
        if not _hook:
            _hook.append(torch.nn.modules.module.register_module_module_registration_hook(
                _on_register))
        _current.append(self.index)
        return self

    def __exit__(self, *exc):
        _current.pop()
        return False


def set_partition(module, index):
    """Places module (and what it holds) on pipeline stage index (auto_partition false)."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"smp.set_partition: index={index!r}: expected a partition index >= 0")
    _assigned[module] = index


class _Captured(Exception):
    def __init__(self, args, kwargs):
        super().__init__("model input captured")
        self.args, self.kwargs = args, kwargs


class DistributedModel(torch.nn.Module):
    """The library's model wrapper on heft. Call it inside an smp.step function, and call
    model.backward(loss) there. state_dict() is the whole model's (gathered over the
    pipeline), local_state_dict() this rank's partition; load_state_dict takes either (before
    the first step it waits for the partition)."""

    def __init__(self, module, trace_device="cpu", **unsupported):
        super().__init__()
        s = state.need("DistributedModel")
        if unsupported:
            raise TypeError("smp.DistributedModel: not supported on heft: "
                            + ", ".join(sorted(unsupported)))
        if trace_device not in ("cpu", "gpu"):
            raise ValueError(f"smp.DistributedModel: trace_device={trace_device!r}: expected "
                             "'cpu' or 'gpu'")
        self.module = module
        c = s.config
        self.microbatches = c["microbatches"]
        self.pipelined = s.mesh.size("pipeline") > 1
        d = self.__dict__
        d["_pipe"], d["_pending"], d["_mode"] = None, None, None
        d["_ddp"] = None
        if not self.pipelined:
            if s.mesh.size("data") > 1:
                from torch.nn.parallel import DistributedDataParallel
                d["_ddp"] = DistributedDataParallel(module, process_group=s.mesh.group("data"))
            return
        # Refuses an untraceable model now, not at step 1.
        self.layers = traced_layers(module, "smp.DistributedModel (partitions > 1)")
        d["_local_keys"] = None

    # ---- partition ------------------------------------------------------------------------
    def _boundaries(self, c):
        p, v = state.mesh.size("pipeline"), c["virtual_stages"]
        if c["auto_partition"]:
            return "auto"
        if c.get("partition_boundaries"):
            return list(c["partition_boundaries"])
        if v > 1:
            raise ValueError("smp.DistributedModel: auto_partition false with virtual_stages > "
                             "1 needs partition_boundaries (smp.partition places whole stages)")
        owners = []
        for layer, names in self.layers:
            owner = None
            for name in names:
                parts = name.split(".")
                for k in range(len(parts), 0, -1):
                    m = self.module.get_submodule(".".join(parts[:k]))
                    if m in _assigned:
                        owner = _assigned[m]
                        break
                if owner is not None:
                    break
            owners.append(c["default_partition"] if owner is None else owner)
        bad = [o for o in owners if o >= p]
        if bad:
            raise ValueError(f"smp.partition({bad[0]}): the model has {p} partitions (0 to "
                             f"{p - 1})")
        if owners != sorted(owners) or set(owners) != set(range(p)):
            shown = ", ".join(f"{names[0]}: {o}" for (_, names), o in zip(self.layers, owners))
            raise ValueError("smp.DistributedModel: with auto_partition false heft's pipeline "
                             "needs partitions 0, 1, ... in the order the forward calls the "
                             f"layers, each holding one at least; the layers' partitions: {shown}")
        return [owners.index(k) for k in range(1, p)]

    def _build(self, example):
        c = state.config
        schedule = c["pipeline"]
        pipe = Pipeline([layer for layer, _ in self.layers], state.mesh,
                        microbatches=self.microbatches, schedule=schedule,
                        virtual_stages=c["virtual_stages"] if schedule == "interleaved" else 1,
                        partition=self._boundaries(c), memory_weight=c["memory_weight"],
                        active_microbatches=c.get("active_microbatches") or None,
                        activation_checkpointing=c["activation_checkpointing"],
                        example_input=example)
        self.__dict__["_pipe"] = pipe
        keys = set()
        for chunk in pipe.chunks:
            inner = getattr(chunk, "module", chunk)
            for layer in inner.children():
                keys.update(layer.state_dict().keys())
        self.__dict__["_local_keys"] = keys
        if self._mode is not None:
            pipe.train(self._mode)
        if self._pending is not None:
            pending, strict = self._pending
            self.__dict__["_pending"] = None
            self.load_state_dict(pending, strict)

    @property
    def partitioned(self):
        return not self.pipelined or self._pipe is not None

    # ---- calls ----------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        run = getattr(self, "_call", None)
        if run is not None:
            return run(args, kwargs)
        if self.pipelined:
            raise RuntimeError("smp.DistributedModel: with partitions > 1 call the model inside "
                               "an @smp.step function")
        target = self._ddp if self._ddp is not None else self.module
        if state.config["activation_checkpointing"] and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint
            return checkpoint(target, *args, use_reentrant=False, **kwargs)
        return target(*args, **kwargs)

    def backward(self, tensors, grad_tensors=None):
        """Inside an smp.step function: the backward of this micro-batch's loss, scaled by
        1/microbatches so the step's gradients are the whole batch's mean loss's, as one
        process would compute them (and averaged over the data-parallel replicas)."""
        take = getattr(self, "_backward", None)
        if take is None:
            raise RuntimeError("smp.DistributedModel.backward: call it inside an @smp.step "
                               "function")
        if grad_tensors is not None:
            raise ValueError("smp.DistributedModel.backward: grad_tensors is not supported on "
                             "heft; pass the scalar loss")
        take(tensors)

    def train(self, mode=True):
        super().train(mode)
        self.__dict__["_mode"] = mode
        if self._pipe is not None:
            self._pipe.train(mode)
        return self

    # ---- state ----------------------------------------------------------------------------
    def local_state_dict(self):
        """This rank's partition's entries of the model's state_dict (the model's own keys)."""
        full = self.module.state_dict()
        if not self.pipelined:
            return full
        if self._pipe is None:
            raise RuntimeError("smp.DistributedModel.local_state_dict: the model is partitioned "
                               "at the first smp.step; run one first")
        return {k: v for k, v in full.items() if k in self._local_keys}

    def state_dict(self, *args, **kwargs):
        """The whole model's state_dict: every partition's entries gathered over the pipeline
        (collective over the ranks of this model replica)."""
        if not self.pipelined:
            return self.module.state_dict(*args, **kwargs)
        parts = [None] * state.mesh.size("pipeline")
        dist.all_gather_object(parts, self.local_state_dict(), group=state.mesh.group("pipeline"))
        merged = {}
        for part in parts:
            merged.update(part)
        return {k: merged[k] for k in self.module.state_dict() if k in merged}

    def load_state_dict(self, state_dict, strict=True):
        """A full or a partial (this partition's) state_dict; entries of other partitions are
        skipped. Before the first step it is kept and loaded once the model is partitioned."""
        if self.pipelined and self._pipe is None:
            self.__dict__["_pending"] = (dict(state_dict), strict)
            return None
        own = self.local_state_dict() if self.pipelined else self.module.state_dict()
        known = set(self.module.state_dict())
        unknown = sorted(set(state_dict) - known)
        missing = sorted(set(own) - set(state_dict))
        if strict and (unknown or missing):
            raise RuntimeError("smp.DistributedModel.load_state_dict: "
                               + (f"keys not in the model: {unknown[:5]}; " if unknown else "")
                               + (f"this partition's keys missing: {missing[:5]} (a checkpoint "
                                  "of another partitioning?)" if missing else ""))
        with torch.no_grad():
            for k, t in own.items():
                if k in state_dict:
                    t.copy_(state_dict[k])
        return None

    def local_parameters(self):
        keys = self._local_keys if self.pipelined and self._pipe is not None else None
        return [p for n, p in self.module.named_parameters() if keys is None or n in keys]


class DistributedOptimizer(torch.optim.Optimizer):
    """The library's optimizer wrapper: step, zero_grad and the state of the wrapped torch
    optimizer (made on model.parameters(); a partition's optimizer updates its own parameters:
    the others' receive no gradient). A torch Optimizer to the outside (its param_groups and
    state are the wrapped one's), so torch's LR schedulers take it. state_dict() gathers every
    partition's state."""

    def __init__(self, optimizer, **unsupported):  # pylint: disable=super-init-not-called
        _state().need("DistributedOptimizer")
        if unsupported:
            raise TypeError("smp.DistributedOptimizer: not supported on heft: "
                            + ", ".join(sorted(unsupported)))
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("smp.DistributedOptimizer: expected a torch.optim.Optimizer, found "
                            f"{type(optimizer).__name__}")
        self.__dict__["optimizer"] = optimizer

    def __getattr__(self, name):
        return getattr(self.__dict__["optimizer"], name)

    param_groups = property(lambda self: self.optimizer.param_groups)
    state = property(lambda self: self.optimizer.state)
    defaults = property(lambda self: self.optimizer.defaults)

    def __repr__(self):
        return f"smp.DistributedOptimizer({self.optimizer!r})"

    def step(self, *args, **kwargs):
        return self.optimizer.step(*args, **kwargs)

    def zero_grad(self, set_to_none=True):
        return self.optimizer.zero_grad(set_to_none=set_to_none)

    def local_state_dict(self):
        return self.optimizer.state_dict()

    def state_dict(self):
        """Every partition's optimizer state merged (collective over the pipeline)."""
        mine = self.optimizer.state_dict()
        if _state().mesh.size("pipeline") == 1:
            return mine
        mesh = _state().mesh
        parts = [None] * mesh.size("pipeline")
        dist.all_gather_object(parts, mine, group=mesh.group("pipeline"))
        merged = dict(mine, state={})
        for part in parts:
            merged["state"].update(part["state"])
        return merged

    def load_state_dict(self, state_dict):
        return self.optimizer.load_state_dict(state_dict)
