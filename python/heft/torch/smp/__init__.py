"""heft.torch.smp: the cloud model-parallel library's v1 PyTorch API
(``smdistributed.modelparallel.torch``, imported as ``smp``) on heft's strategies, for scripts
written for it (docs/porting.md, "Model-parallel scripts (v1)"):

    import smdistributed.modelparallel.torch as smp   # heft's stand-in, on the job's path
    smp.init()                                        # SM_HP_MP_PARAMETERS: partitions, ...
    model = smp.DistributedModel(Net())
    optimizer = smp.DistributedOptimizer(torch.optim.Adadelta(model.parameters(), lr=1.0))

    @smp.step
    def train_step(model, data, target):
        output = model(data)
        loss = F.nll_loss(output, target)
        model.backward(loss)
        return output, loss

    _, loss_mb = train_step(model, data, target)
    loss = loss_mb.reduce_mean()
    optimizer.step()

partitions > 1 runs heft's Pipeline (its C++ schedules, partitioner and stage runtime; the
layers traced with torch.fx), ``pipeline`` simple (GPipe) or interleaved (1F1B), the other
ranks data-parallel replicas over heft's collectives. What the v1 library has and heft does
not (tensor parallelism, its sharded data parallelism, fp16, offloading, ...) is refused by
name at smp.init or on use."""
from ._state import (CommGroup, RankType, allgather, barrier, broadcast, dp_rank, dp_size,
                     get_dp_group, get_dp_process_group, get_mp_group, get_mp_process_group,
                     get_pp_group, get_world_process_group, init, local_rank, local_size,
                     mp_rank, mp_size, pp_rank, pp_size, rank, rdp_rank, rdp_size, recv_from,
                     send, size, tp_rank, tp_size)
from ._model import DistributedModel, DistributedOptimizer, partition, set_partition
from ._step import StepOutput, step
from ._io import load, partial_path, save
from . import amp

WORLD, MP_GROUP, DP_GROUP = CommGroup.WORLD, CommGroup.MP_GROUP, CommGroup.DP_GROUP
WORLD_RANK, MP_RANK, DP_RANK = RankType.WORLD_RANK, RankType.MP_RANK, RankType.DP_RANK

# The library's names heft does not have, each refused with why on use.
_NOT_ON_HEFT = {
    "tensor_parallelism": "the v1 tensor parallelism is not on heft (use heft.torch.sagemaker)",
    "set_tensor_parallelism": "the v1 tensor parallelism is not on heft (use heft.torch.sagemaker)",
    "delay_param_initialization": "use heft.torch.parallel.ShardedDataParallel's deferred_init",
    "set_activation_checkpointing": "set activation_checkpointing: true in the parameters "
                                    "(every stage's chunks recompute their forward)",
    "save_checkpoint": "use smp.save(..., partial=True) with model.local_state_dict()",
    "resume_from_checkpoint": "use smp.load(..., partial=True) and model.load_state_dict()",
    "nn": "the library's distributed modules (DistributedTransformer, ...) are not on heft",
    "is_tracing": "heft traces with torch.fx when the model is wrapped, not at the step",
}


def __getattr__(name):
    if name in _NOT_ON_HEFT:
        raise AttributeError(f"smp.{name} is not supported on heft: {_NOT_ON_HEFT[name]}")
    raise AttributeError(f"module 'smp' (heft.torch.smp) has no attribute {name!r}")
