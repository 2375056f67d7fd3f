"""heft.torch.parallel.tensor_parallel: tensor parallelism by plan over heft's C++ tensor
layers (being built: issue 28 item 2)."""


def tensor_parallel(module, plan, mesh):
    raise NotImplementedError("heft.torch.parallel.tensor_parallel is not built yet")


def vocab_parallel_cross_entropy(logits, target, mesh):
    raise NotImplementedError("heft.torch.parallel.vocab_parallel_cross_entropy is not built yet")
