"""The lockstep floor of bench/ddp_vs_torch.sh: loaded by Python at start-up (this folder
first on PYTHONPATH) in every process of a run, the ranks mp.spawn starts included.

With HEFT_BENCH_NULL_SYNC=1, torch.nn.parallel.DistributedDataParallel becomes a DDP whose
communication hook exchanges no gradient: one 4-byte all_reduce a step (so the ranks still
wait for each other every step), the bucket handed back as it is. The peer harness runs
unchanged; what it measures is then DDP with communication that costs nothing, the ranks
still in lockstep: the most any backend can reach on this machine.
"""
import os

if os.environ.get("HEFT_BENCH_NULL_SYNC") == "1":
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as _DDP

    class NullSyncDDP(_DDP):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            one = torch.zeros(1)

            def hook(state, bucket):
                if bucket.index() == 0:  # the first bucket of each step: one sync a step
                    dist.all_reduce(one)
                done = torch.futures.Future()
                done.set_result(bucket.buffer())
                return done

            self.register_comm_hook(None, hook)

    torch.nn.parallel.DistributedDataParallel = NullSyncDDP
