"""heft.torch.parallel.Pipeline: pipeline parallelism for the user's own model over heft's C++
schedules, simulator, partitioner and stage runtime (_c10d.parallel.pipeline,
pipeline_binding.cc). The action lists come from C++ make_schedule (checked by the C++
simulator) and C++ run_stage executes them; Python only supplies each chunk's forward, the
loss, and DDP's gradient synchronisation around the backward. See docs/pipeline.md."""
import torch
import torch.distributed as dist

from heft.torch import _c10d
from ..mesh import DeviceMesh
from ..sharded import ShardedDataParallel
from ..deferred import find, materialize_held
from . import _checkpoint
from . import _tensor as _tp
from ._plan import check_arguments, layers_of, plan
from ._trace import traced_layers  # noqa: F401  (smp, estimate_memory: any model as layers)

_pp = _c10d.parallel.pipeline
_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
           torch.bfloat16: "bfloat16"}


class Pipeline(torch.nn.Module):
    """The model's layers cut into mesh.size("pipeline") x virtual_stages chunks; this rank
    holds only its stage's chunks (chunk c of stage s is part c * stages + s), the other
    layers' parameters are freed. Arguments (after the model and the mesh, keyword only):

    microbatches        micro-batches per step (must divide the batch each rank passes)
    schedule            "simple" (GPipe: all forwards, then all backwards) or
                        "interleaved" (1F1B; with virtual_stages > 1, Megatron's interleaving)
    virtual_stages      model chunks per stage (interleaved only; microbatches a multiple of
                        the stages)
    partition           "auto" (profile every layer on world rank 0 with example_input, then
                        heft's partitioner) or the first layer of each chunk after the first
    memory_weight       the partitioner's weight of memory against time (0.2: speed)
    active_microbatches interleaved: the most micro-batches in flight on a stage (None:
                        stages + 2)
    activation_checkpointing  recompute each chunk's forward during its backward
    example_input       one micro-batch of the input, for partition="auto"
    data_parallel       over the mesh's data dimension (when its size > 1): "ddp" (torch's
                        DDP over the data group, gradients allreduced once per step) or
                        "sharded" (heft's ShardedDataParallel over the sharded and replicate
                        groups); None: "sharded" when the mesh was given a sharded degree
                        above 1, else "ddp"
    tensor_plan         with a mesh's tensor > 1: tensor_parallel's plan for the stages,
                        its patterns naming modules by the layer's index in the sequence
                        ("*.attn.qkv": "colwise"); activations between stages go 1/T per
                        tensor rank and are all-gathered by the next stage
    """

    def __init__(self, stages_or_sequential, mesh, *, microbatches, schedule="simple",
                 virtual_stages=1, partition="auto", memory_weight=0.2,
                 active_microbatches=None, activation_checkpointing=False,
                 example_input=None, data_parallel=None, tensor_plan=None):
        super().__init__()
        if not isinstance(mesh, DeviceMesh):
            raise TypeError("Pipeline: mesh must be a heft.torch.parallel.DeviceMesh, found "
                            f"{type(mesh).__name__}")
        layers = layers_of(stages_or_sequential)
        p = mesh.size("pipeline")
        check_arguments(layers, p, microbatches, schedule, virtual_stages, partition,
                        memory_weight, active_microbatches)
        self.mesh, self.stages, self.stage = mesh, p, mesh.coordinate("pipeline")
        self.microbatches, self.virtual_stages = microbatches, virtual_stages
        self.activation_checkpointing = bool(activation_checkpointing)
        self.schedule = _pp.make_schedule(schedule, p, microbatches, active_microbatches or 0,
                                          virtual_stages)
        sim = _pp.simulate(self.schedule)
        if not sim["ok"]:
            raise RuntimeError(f"Pipeline: heft's simulator refused the schedule: {sim['error']}")
        self._eval_schedule = (_pp.make_schedule("simple", p, microbatches) if virtual_stages == 1
                               else self.schedule).forward_only()
        chunks = p * virtual_stages
        first, text = plan(layers, chunks, partition, memory_weight, example_input)
        self.first, self.layers_total = first, len(layers)
        self.plan_text = text
        if dist.get_rank() == 0:
            print("Pipeline: " + text.rstrip(), flush=True)
        bounds = [(first[k], first[k + 1] if k + 1 < chunks else len(layers))
                  for k in range(chunks)]
        mine = [self.stage + c * p for c in range(virtual_stages)]
        _refuse_tied(layers, bounds)
        self.tensor_plan = _tp.check_plan(layers, tensor_plan, mesh, bounds)
        self.layer_ranges = [bounds[k] for k in mine]
        owned = {i for k in mine for i in range(*bounds[k])}
        self.deferred_peak_bytes = _materialize_deferred(layers, owned)
        _free([l for i, l in enumerate(layers) if i not in owned])
        modules = [_tp.chunk_module(layers, a, b) for a, b in self.layer_ranges]
        self.tensors = mesh.size("tensor") if self.tensor_plan else 1
        if self.tensor_plan:
            self.tensor_group = _c10d.parallel.Group(mesh.group("tensor"))
            modules = [_tp.split_chunk(m, self.tensor_plan, mesh, layers) for m in modules]
        self._scatter_out, self._gather_in = set(), set()  # chunks (this stage's index c)
        self.data_parallel = _data_parallel(mesh, data_parallel)
        self.chunks = torch.nn.ModuleList(self._wrap(m) for m in modules)
        self._backward_chunks = [a[3] for a in self.schedule.actions(self.stage) if a[0] == "B"]
        self._last_backward = {c: i for i, c in enumerate(self._backward_chunks)}
        self._receives = {name: [a[3] for a in s.actions(self.stage) if a[0] == "rA"]
                          for name, s in (("train", self.schedule), ("eval", self._eval_schedule))}
        self._shapes = {}
        self.counters = {}
        self.pg = _c10d.parallel.Group(mesh.group("pipeline"))

    # ---- construction ------------------------------------------------------------------
    def _wrap(self, module):
        if self.data_parallel == "ddp":
            from torch.nn.parallel import DistributedDataParallel
            return DistributedDataParallel(module, process_group=self.mesh.group("data"),
                                           broadcast_buffers=False)
        if self.data_parallel == "sharded":
            # memory_check=False: a chunk is part of a rank (estimate_memory prices the layout)
            return ShardedDataParallel(module, mesh=self.mesh, memory_check=False,
                                       activation_checkpointing=self.activation_checkpointing)
        return module

    def _run_chunk(self, c, x, received=False):
        if received and c in self._gather_in:
            x = _tp.gather(x, self.tensor_group)
        elif received and x.requires_grad:  # the runtime's leaf: a first layer that works in
            x = x.clone()  # place (nn.ReLU(inplace=True)) may not write a leaf needing grad
        y = self._run_chunk_module(c, x)
        return _tp.scatter(y, self.tensor_group) if c in self._scatter_out else y

    def _run_chunk_module(self, c, x):
        chunk = self.chunks[c]
        if self.data_parallel == "ddp":
            chunk = chunk.module  # DDP's reducer is prepared by hand (_around_backward)
        if (self.activation_checkpointing and self.data_parallel != "sharded"
                and torch.is_grad_enabled()):
            from torch.utils.checkpoint import checkpoint
            return checkpoint(chunk, x, use_reentrant=False)
        return chunk(x)

    # ---- shapes ------------------------------------------------------------------------------
    def _activation_shapes(self, first_input):
        """Every chunk's input shape and the activation dtype, for micro-batches shaped like
        first_input: each virtual stage in turn runs its chunk on zeros of its input shape
        (eval mode, no grad, the RNG kept) and broadcasts its output's shape over the
        pipeline group (with a tensor plan: 1/T of its last dimension, when T divides it,
        and whether it was split). Once per input shape."""
        key = tuple(first_input.shape)
        if key in self._shapes:
            shapes, dtype, self._scatter_out, self._gather_in = self._shapes[key]
            return shapes, dtype
        self._scatter_out, self._gather_in = set(), set()
        p, v = self.stages, self.virtual_stages
        ranks = self.mesh.ranks("pipeline")
        group = self.mesh.group("pipeline")
        shapes, dtypes, current = {}, set(), None
        modes = [m.training for m in self.modules()]
        rng = torch.get_rng_state()
        try:
            self.eval()
            for k in range(v * p - 1):
                s, c = k % p, k // p
                meta = torch.zeros(10, dtype=torch.long)
                if s == self.stage:
                    x = first_input if k == 0 else torch.zeros(current[0], dtype=current[1])
                    with torch.no_grad():
                        y = self._run_chunk_module(c, x)
                    if y.dtype not in _DTYPES:
                        raise TypeError(f"Pipeline: chunk {k} (layers {self.layer_ranges[c]}) "
                                        f"outputs {y.dtype}: activations between stages must "
                                        "be floating point")
                    meta[0], meta[1] = y.dim(), list(_DTYPES).index(y.dtype)
                    meta[2:2 + y.dim()] = torch.tensor(y.shape)
                    meta[9] = _tp.splits(y, self.tensors)
                dist.broadcast(meta, ranks[s], group=group)
                dims = meta[2:2 + int(meta[0])].tolist()
                current = (dims, list(_DTYPES)[int(meta[1])])
                dtypes.add(current[1])
                sent = dims[:-1] + [dims[-1] // self.tensors] if meta[9] else dims
                if meta[9] and s == self.stage:
                    self._scatter_out.add(c)
                if (k + 1) % p == self.stage:
                    shapes[(k + 1) // p] = sent
                    if meta[9]:
                        self._gather_in.add((k + 1) // p)
        finally:
            for m, mode in zip(self.modules(), modes):
                m.training = mode
            torch.set_rng_state(rng)
        if len(dtypes) > 1:
            raise TypeError(f"Pipeline: activations of different dtypes {sorted(map(str, dtypes))}"
                            ": every chunk must output one floating dtype")
        dtype = _DTYPES[dtypes.pop()] if dtypes else "float32"
        self._shapes[key] = (shapes, dtype, self._scatter_out, self._gather_in)
        return shapes, dtype

    def _split(self, argument, t):
        n = t.shape[0] if isinstance(t, torch.Tensor) and t.dim() > 0 else None
        if n is None:
            raise TypeError(f"Pipeline: {argument} must be a tensor with a batch dimension")
        if n % self.microbatches:
            raise ValueError(f"Pipeline: microbatches={self.microbatches} does not divide the "
                             f"batch of {n} samples in {argument}")
        return list(t.split(n // self.microbatches))

    def _received_shapes(self, name, shapes):
        """The shape of each activation this stage receives, in the order of its receives."""
        return [shapes[c] for c in self._receives[name]]

    # ---- training ----------------------------------------------------------------------------
    def step(self, inputs, targets, loss_fn):
        """One training step of every micro-batch through heft's action lists; gradients
        accumulate in this stage's parameters (scaled: as one process on the global batch,
        for a loss_fn that averages over its micro-batch). Returns the loss of the whole
        batch (over the data dimension too) on every rank."""
        xs, ys = self._split("inputs", inputs), self._split("targets", targets)
        losses = []

        def on_output(m, out):
            loss = loss_fn(out, ys[m])
            losses.append(loss.detach().double())
            return loss / self.microbatches

        self.run_microbatches(xs, on_output)
        total = torch.zeros(1, dtype=torch.float64)
        if losses:
            total += torch.stack(losses).sum() / self.microbatches
        return self._everywhere(total).item()

    def run_microbatches(self, inputs, on_output, train=True):
        """The engine under step and evaluate, for callers that compute the loss their own
        way (heft.torch.smp's smp.step): inputs holds one tensor per micro-batch (read on the
        first stage only; every rank passes tensors of the same shapes); on the last stage,
        on_output(m, output) is called with micro-batch m's output of the last chunk, in the
        schedule's order. train: heft's training schedule, and on_output returns the tensor
        whose backward the runtime runs (the loss scaled as the caller wants; gradients
        accumulate in this stage's parameters, reduced over the data dimension as in step);
        otherwise the forward-only schedule, on_output's value unused, the modules' modes and
        the grad mode as the caller set them. Collective over the world; returns the
        runtime's counters."""
        if len(inputs) != self.microbatches:
            raise ValueError(f"Pipeline: {len(inputs)} micro-batch inputs given, expected "
                             f"microbatches={self.microbatches}")
        shapes, dtype = self._activation_shapes(inputs[0])
        last_chunk = self.virtual_stages - 1 if self.stage == self.stages - 1 else None

        def forward(c, m, x):
            out = self._run_chunk(c, inputs[m] if x is None else x, x is not None)
            if c != last_chunk:
                return out
            value = on_output(m, out)
            return value if train else out

        name, schedule = ("train", self.schedule) if train else ("eval", self._eval_schedule)
        counters = self._run(schedule, forward, self._around_backward() if train else None,
                             self._received_shapes(name, shapes), dtype)
        if train:
            self.counters = counters  # the last training step's, as step leaves them
        return counters

    def _around_backward(self):
        """With DDP: arms its reducer for each chunk's last backward of the step (DDP reduces
        during it; the earlier ones accumulate, as under no_sync). Otherwise None: the C++
        runtime runs the backwards without calling into Python."""
        if self.data_parallel != "ddp":
            return None
        done = [0]

        def around_backward(m, last, run):
            k = done[0]
            done[0] += 1
            c = self._backward_chunks[k]
            if self._last_backward[c] == k:
                self.chunks[c].reducer.prepare_for_backward([])
            run()
        return around_backward

    def _run(self, schedule, forward, around_backward, shapes, dtype):
        try:
            return _pp.run_stage(schedule, self.pg, forward, around_backward, shapes, dtype)
        except _pp.PeerLost as e:
            message, peer = e.args
            rank = self.mesh.ranks("pipeline")[peer] if 0 <= peer < self.stages else peer
            raise RuntimeError(f"Pipeline: pipeline stage {peer} (world rank {rank}) was lost "
                               f"during the step on rank {dist.get_rank()} (stage "
                               f"{self.stage}): {message}") from e

    def _everywhere(self, total):
        """The last stage's value broadcast over the pipeline group, averaged over data."""
        ranks = self.mesh.ranks("pipeline")
        if self.stages > 1:
            dist.broadcast(total, ranks[-1], group=self.mesh.group("pipeline"))
        if self.mesh.size("data") > 1:
            dist.all_reduce(total, group=self.mesh.group("data"))
            total /= self.mesh.size("data")
        return total

    @torch.no_grad()
    def evaluate(self, inputs):
        """The model's output on inputs, forward only (eval mode), micro-batched through the
        forwards of heft's action lists; returned on every rank of the pipeline group."""
        xs = self._split("inputs", inputs)
        outs = {}

        def on_output(m, out):
            outs[m] = out

        modes = [m.training for m in self.modules()]
        self.eval()
        try:
            self.run_microbatches(xs, on_output, train=False)
        finally:
            for mod, mode in zip(self.modules(), modes):
                mod.training = mode
        return self._gather_output(outs)

    def _gather_output(self, outs):
        meta = torch.zeros(10, dtype=torch.long)
        out = None
        if outs:
            out = torch.cat([outs[m] for m in range(self.microbatches)])
            meta[0], meta[1] = out.dim(), list(_DTYPES).index(out.dtype)
            meta[2:2 + out.dim()] = torch.tensor(out.shape)
        if self.stages == 1:
            return out
        ranks, group = self.mesh.ranks("pipeline"), self.mesh.group("pipeline")
        dist.broadcast(meta, ranks[-1], group=group)
        if out is None:
            out = torch.empty(meta[2:2 + int(meta[0])].tolist(), dtype=list(_DTYPES)[int(meta[1])])
        dist.broadcast(out, ranks[-1], group=group)
        return out

    def forward(self, *args, **kwargs):
        raise RuntimeError("Pipeline: call step(inputs, targets, loss_fn) to train and "
                           "evaluate(inputs) for the output, not the module itself")

    # ---- checkpoints (_checkpoint.py) ------------------------------------------------------
    def save_checkpoint(self, directory, optimizer=None, step=None, meta=None, keep=2):
        """Collective over the world: this model (and optimizer) as one heft multi-writer
        checkpoint carrying its layout (layer -> stage, tensor slices); returns the step."""
        return _checkpoint.save(self, directory, optimizer, step, meta, keep)

    def load_checkpoint(self, directory, optimizer=None):
        """Loads the newest Pipeline checkpoint of directory, saved at any pipeline, tensor
        or data degree, into this rank's layers (and optimizer); returns (step, meta)."""
        return _checkpoint.load(self, directory, optimizer)

    @staticmethod
    def load_full_state_dict(directory):
        """The newest Pipeline checkpoint of directory as the whole model's state_dict (the
        nn.Sequential's keys, full tensors), in one process: no process group needed."""
        return _checkpoint.full_state(directory)[2]

    def print_schedule(self):
        """Prints (and returns) heft's simulated grid of the schedule with its bubble beside
        the theory (unit costs: forward 1, backward 2)."""
        text = _pp.simulate(self.schedule)["render"]
        print(text, flush=True)
        return text


def _data_parallel(mesh, choice):
    if mesh.size("data") == 1:
        return None
    if choice is None:
        choice = "sharded" if getattr(mesh, "sharded_given", False) and \
            mesh.size("sharded") > 1 else "ddp"
    if choice not in ("ddp", "sharded"):
        raise ValueError(f"Pipeline: data_parallel={choice!r}: expected 'ddp', 'sharded' or None")
    return choice


def _refuse_tied(layers, bounds):
    owner = {}
    for k, (a, b) in enumerate(bounds):
        for i in range(a, b):
            for p in layers[i].parameters():
                if owner.setdefault(id(p), (k, i))[0] != k:
                    raise ValueError(f"Pipeline: a parameter is shared by layer {owner[id(p)][1]}"
                                     f" and layer {i}, which fall in different chunks: tied "
                                     "weights across stages are not supported (untie them, or "
                                     "choose a partition that keeps them together)")


def _materialize_deferred(layers, owned):
    """A model built under deferred_init: this rank's layers (indices `owned`) replayed into
    real tensors, the values one process building the model after the same seed has, the
    other layers' parameters and buffers left empty (never allocated whole); returns the
    replay's peak bytes, or None when no layer is deferred."""
    record = find(torch.nn.ModuleList(layers))
    if record is None:
        return None
    mine = torch.nn.ModuleList(layers[i] for i in sorted(owned))
    _, peak = materialize_held(record, torch.nn.ModuleList(layers),
                               lambda p, full: full.clone(), within=mine)
    return peak


def _free(layers):
    """Drops the storage of layers this rank does not hold (the user may still refer to them)."""
    with torch.no_grad():
        for layer in layers:
            for t in list(layer.parameters()) + list(layer.buffers()):
                t.data = torch.empty(0, dtype=t.dtype)
