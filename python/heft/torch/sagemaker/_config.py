"""The model-parallel library v2's configuration, read and checked: where it comes from (a dict,
a JSON file's path, or SM_HP_MP_PARAMETERS as the vendor's containers deliver it) and what
heft does with each key (KEYS: honoured, or refused by name with the reason). Pure: no process
group, no torch; the degrees against the world are checked in __init__.py, which knows it.

Terms: tp = tensor_parallel_degree; dp = the data-parallel world, world / tp; the sharding
degree (hybrid_shard_degree, 0 meaning dp) splits dp into shard groups of that size and
replicas across them."""
import difflib
import json
import os

ENV = "SM_HP_MP_PARAMETERS"
MAX_CONFIG_BYTES = 1 << 20  # a config file or variable larger than this is refused unread

# Why a GPU-only key is refused: on CPUs there is no device memory to offload from or flush.
_GPU = ("needs a GPU: it moves activations between GPU and host memory, and heft runs on "
        "CPUs, where activations already live in host memory; remove the key")
_CACHE = ("needs a GPU: it warns about cache flushes of PyTorch's CUDA memory allocator, "
          "which CPU tensors do not use; remove the key")

# key -> (kind, what heft does). kind: "int" / "bool" / "checkpointing" for honoured keys,
# "refused" for keys refused whatever their value, ("refused unless", value) for keys whose
# only accepted value is the one meaning what heft already does.
KEYS = {
    "tensor_parallel_degree": ("int", "the tensor group size: tsm.transform splits layers "
                                      "over it with heft.torch.parallel.tensor_parallel"),
    "hybrid_shard_degree": ("int", "the shard group size inside the data-parallel world "
                                   "(0: all of it); replicas across the shard groups"),
    "random_seed": ("int", "torch.manual_seed(random_seed) on every rank at tsm.init"),
    "activation_checkpointing": ("checkpointing", "torch.utils.checkpoint around each "
                                                  "repeated block, applied by tsm.transform"),
    "sm_activation_offloading": ("refused", _GPU),
    "activation_loading_horizon": ("refused", _GPU),
    "fsdp_cache_flush_warnings": ("refused", _CACHE),
    "allow_empty_shards": (("refused unless", False),
                           "heft's tensor_parallel needs every split dimension divisible by "
                           "tensor_parallel_degree and says which layer is not; FSDP2 pads "
                           "uneven shards itself, so there is no empty shard to allow"),
    "context_parallel_degree": (("refused unless", 1),
                                "heft has no context parallelism (sequence split over ranks); "
                                "use tensor_parallel_degree, or 1"),
    "expert_parallel_degree": (("refused unless", 1),
                               "heft has no expert parallelism (mixture-of-experts layers split "
                               "over ranks); use tensor_parallel_degree, or 1"),
    "delayed_parameter_initialization": ("bool", (
        "the model is built under heft.torch.parallel.deferred_init(): tsm.transform replays "
        "it keeping this rank's slices of the split layers and the other layers whole, so no "
        "rank holds the whole model (with tensor_parallel_degree > 1)")),
}

# The library v1's keys (smdistributed.modelparallel): heft-train and heft.torch.smp run them
# (docs/jobs.md, docs/porting.md), not tsm.
V1_KEYS = ("partitions", "pipeline_parallel_degree", "microbatches", "pipeline", "optimize",
           "memory_weight", "placement_strategy", "auto_partition", "default_partition",
           "active_microbatches", "bf16", "ddp", "sharded_data_parallel_degree",
           "partition_boundaries", "virtual_stages", "ddp_port", "ddp_dist_backend", "horovod",
           "contiguous", "fp16", "fp16_params", "shard_optimizer_state", "prescaled_batch",
           "skip_tracing", "deterministic_server", "offload_activations")


def _read_json(text, where):
    if len(text) > MAX_CONFIG_BYTES:
        raise ValueError(f"tsm.init: {where} holds {len(text)} bytes, more than the limit of "
                         f"{MAX_CONFIG_BYTES}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"tsm.init: {where} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"tsm.init: {where} holds a JSON {type(value).__name__}, expected an "
                         "object of configuration keys")
    return value


def source(config):
    """The configuration dict and where it came from: `config` itself (a dict), the JSON file
    at `config` (a str or path), or, for None, the JSON object in SM_HP_MP_PARAMETERS (an
    empty dict when that is unset or empty)."""
    if isinstance(config, dict):
        return dict(config), "the config dict"
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        try:
            size = os.path.getsize(path)
            if size > MAX_CONFIG_BYTES:
                raise ValueError(f"tsm.init: config file {path!r} holds {size} bytes, more than "
                                 f"the limit of {MAX_CONFIG_BYTES}")
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"tsm.init: config file {path!r} cannot be read: {e.strerror}") \
                from None
        return _read_json(text, f"config file {path!r}"), f"config file {path!r}"
    if config is None:
        text = os.environ.get(ENV, "")
        return (_read_json(text, ENV), ENV) if text.strip() else ({}, ENV)
    raise TypeError(f"tsm.init: config={config!r}: expected a dict, the path of a JSON file, "
                    f"or None (then {ENV})")


def _integer(key, value, lowest):
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ValueError(f"tsm.init: {key}={value!r}: expected an integer >= {lowest}")
    return value


def _refusal(key, value, where):
    """The ValueError for a key heft refuses, or None when it accepts it (and ignores it)."""
    kind, why = KEYS[key]
    if kind != "refused" and value == kind[1] and type(value) is type(kind[1]):
        return None
    given = "" if kind == "refused" else f"={value!r}"
    return ValueError(f"tsm.init: {where}: {key}{given} is not supported: {why}")


def _unknown(key, where):
    if key in V1_KEYS:
        return ValueError(f"tsm.init: {where}: {key!r} is a key of the model-parallel library "
                          "v1 (smdistributed.modelparallel), which heft runs in heft-train "
                          "(docs/jobs.md) and, for a script, as heft.torch.smp (`import "
                          "smdistributed.modelparallel.torch as smp`, docs/porting.md); tsm "
                          "takes the v2 keys: " + ", ".join(sorted(KEYS)))
    near = difflib.get_close_matches(key, list(KEYS), n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else f"; the keys are {', '.join(sorted(KEYS))}"
    return ValueError(f"tsm.init: {where}: unknown key {key!r}{hint}")


def read(config):
    """{key: value} of the honoured keys (defaults filled in: tensor_parallel_degree 1,
    hybrid_shard_degree 0, random_seed None, activation_checkpointing False,
    delayed_parameter_initialization False), from `config`
    as `source` reads it. ValueError naming the first key heft refuses or does not know."""
    values, where = source(config)
    out = {"tensor_parallel_degree": 1, "hybrid_shard_degree": 0, "random_seed": None,
           "activation_checkpointing": False, "delayed_parameter_initialization": False}
    for key, value in values.items():
        if not isinstance(key, str) or key not in KEYS:
            raise _unknown(key, where)
        kind = KEYS[key][0]
        if kind == "int":
            lowest = {"tensor_parallel_degree": 1}.get(key, 0)
            out[key] = _integer(key, value, lowest)
        elif kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"tsm.init: {key}={value!r}: expected true or false")
            out[key] = value
        elif kind == "checkpointing":
            ok = isinstance(value, bool) or (isinstance(value, list) and value and all(
                isinstance(v, str) for v in value))
            if not ok:
                raise ValueError(f"tsm.init: activation_checkpointing={value!r}: expected true, "
                                 "false, or a list of module-name patterns (fnmatch)")
            out[key] = value
        else:
            refused = _refusal(key, value, where)
            if refused is not None:
                raise refused
    return out
