"""heft.torch.parallel.Pipeline: pipeline parallelism over heft's C++ schedules, simulator,
partitioner and stage runtime (being built: issue 28 item 3)."""


class Pipeline:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("heft.torch.parallel.Pipeline is not built yet")
