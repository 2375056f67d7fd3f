"""`heft plan --model FILE.py:FACTORY|MODULE:FUNCTION` (src/heft/cli/plan.cc runs
`python3 -m heft.torch.parallel.layout.plan_main MODEL RANKS MEMORY_LIMIT_GB GLOBAL_BATCH
OPTIMIZER`): FACTORY() returns (model_or_layers, example_batch[, tensor_plan]) (tensor_plan:
the plan tensor_parallel would apply; without one the tensor degree is 1);
heft.torch.parallel.auto_layout plans it for RANKS ranks and this prints what heft-train's
--print-plan prints (the inputs, the collective costs and whether they were measured, the
search's table, the `layout:` line).
Alone it uses the default collective costs; under `heft run -n RANKS` (heft plan --measure)
every rank joins the heft backend, the collectives are measured, rank 0 profiles and prints.
Exit 2 for bad input (the message names --model) or when no layout fits (naming the smallest
memory a layout needs), 1 when FACTORY raises."""
import importlib
import importlib.util
import os
import sys
import traceback

import torch

from heft.torch import _c10d
from heft.torch.parallel import layout


class BadModel(ValueError):
    pass


def load_factory(spec):
    """The callable FILE.py:FACTORY or MODULE:FUNCTION names; BadModel saying what is wrong."""
    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise BadModel("expected FILE.py:FACTORY or MODULE:FUNCTION")
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise BadModel(f"{target}: no such file")
        sys.path.insert(0, os.path.dirname(path))
        found = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            raise BadModel(f"no module {target} ({e})") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise BadModel(f"{target} has no function {name}")
    return factory


def made_model(spec):
    """(model_or_layers, example_batch, tensor_plan or None) from the factory, checked."""
    made = load_factory(spec)()
    if not (isinstance(made, tuple) and len(made) in (2, 3)):
        raise BadModel(f"the factory returned {type(made).__name__}, expected a tuple "
                       "(model_or_layers, example_batch[, tensor_plan])")
    if not isinstance(made[1], torch.Tensor):
        raise BadModel(f"the factory's example_batch is a {type(made[1]).__name__}, expected a "
                       "tensor whose first dimension is the batch")
    if len(made) == 3 and not isinstance(made[2], dict):
        raise BadModel(f"the factory's tensor_plan is a {type(made[2]).__name__}, expected a dict "
                       "of module-name patterns to 'colwise', 'rowwise', 'vocab' or 'heads' "
                       "(tensor_parallel's plan)")
    return made if len(made) == 3 else (*made, None)


def memory_limit(limit_gb, ranks):
    if limit_gb > 0:
        return int(limit_gb * 1e9), "--memory_limit_gb"
    available = layout._layout.available_host_memory()
    return max(1, available // ranks), f"this host's available memory / {ranks} ranks"


def fmt_bytes(b):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{int(b)} B"


def describe_inputs(plan, layers, profiled, limit, source, ranks):
    t = plan.inputs
    contention = max(1.0, (t["host_threads"] + t["host_load"]) / t["host_cores"])
    lines = [f"auto_layout: {layers} layers profiled on one rank at {profiled} samples (CPU seconds; "
             f"x {contention:.2f} with every rank busy: {t['host_threads']:.0f} ranks x threads + "
             f"load {t['host_load']:.1f} over {t['host_cores']:.0f} cores); runtime "
             f"{fmt_bytes(t['fixed_bytes'])} resident, a step's transient "
             f"{fmt_bytes(t['transient_bytes'])}, optimizer {t['optimizer_s'] * 1e3:.1f} ms; "
             f"memory limit {fmt_bytes(limit)} per rank ({source})"]
    if "host_compute_inflation" in t:
        lines.append(f"auto_layout: host terms measured on {ranks} ranks in {t['host_probe_s']:.2f} s "
                     "(CPU per unit of work, every rank busy over rank 0 alone: "
                     + layout._layout.describe_host_terms(
                         t["host_compute_inflation"], t["host_step_inflation"], t["host_sync"])
                     + "); the gradient collective hides behind the backward only on idle cores")
    if plan.comm_measured:
        lines.append(f"auto_layout: collective costs measured on {ranks} ranks (seconds = alpha + bytes / beta):")
        lines += [f"  {c:<14} g {g:<4} alpha {a * 1e6:8.1f} us  beta {b / 1e9:8.3f} GB/s"
                  for c, g, a, b in plan.comm]
    else:
        lines.append("auto_layout: collective costs are the defaults (50 us + bytes / 2 GB/s), not "
                     "measured: one process has no communicator to measure (heft plan --measure does)")
    return "\n".join(lines)


def layout_line(plan, limit):
    return (f"layout: data={plan.data} sharded={plan.sharded} tensor={plan.tensor} "
            f"pipeline={plan.pipeline} microbatches={plan.microbatches} "
            f"virtual_stages={plan.virtual_stages} checkpointing={int(plan.checkpointing)} "
            f"predicted_step_s={plan.step_s:.4f} predicted_memory_gb={plan.memory_bytes / 1e9:.3f} "
            f"memory_limit_gb={limit / 1e9:.3f}")


def plan(spec, ranks, limit_gb, global_batch, optimizer):
    """The exit code; prints on world rank 0 only."""
    import torch.distributed as dist
    joined = (_c10d.worker_contract()["store"] is not None
              and int(os.environ.get("WORLD_SIZE", "1")) > 1)
    if joined:
        import heft.torch  # noqa: F401  (registers the backend)
        dist.init_process_group("heft", init_method="env://")
    rank0 = not joined or dist.get_rank() == 0
    try:
        model, example, tensor_plan = made_model(spec)
    except BadModel as e:
        if rank0:
            print(f"heft plan: --model {spec}: {e}", file=sys.stderr)
        return 2
    except Exception:  # the user's code
        if rank0:
            traceback.print_exc()
            print(f"heft plan: --model {spec}: the factory raised (above)", file=sys.stderr)
        return 1
    limit, source = memory_limit(limit_gb, ranks)
    try:
        p = layout.auto_layout(model, example, world=ranks, memory_limit=limit,
                               global_batch=global_batch or None, optimizer=optimizer,
                               tensor_plan=tensor_plan)
    except (ValueError, TypeError) as e:
        if rank0:
            print("heft plan: " + str(e).removeprefix("auto_layout: ").removeprefix("Pipeline: "),
                  file=sys.stderr)
        return 2
    finally:
        if joined:
            dist.destroy_process_group()
    if rank0:
        layers = len(layout.layers_of(model))
        profiled = int(example.shape[0]) if example.dim() > 0 else 1
        print(describe_inputs(p, layers, profiled, limit, source, ranks))
        print(p.describe, end="" if p.describe.endswith("\n") else "\n")
        print(layout_line(p, limit), flush=True)
    return 0


def main(argv):
    spec, ranks, limit_gb, global_batch, optimizer = argv
    return plan(spec, int(ranks), float(limit_gb), int(global_batch), optimizer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
